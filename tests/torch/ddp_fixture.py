"""Run by tests/torch/test_distributed.py under torchrun: the fixture training of shared.verify.training on this
rank's rows of each global batch; rank 0 writes the loss curve, the gradient norms and the weights to OUT (npz).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/ddp_fixture.py OUT NAME DTYPE STEPS [naive]
"""

from __future__ import annotations

import sys

import numpy as np

import torch_impl
from shared.verify import training
from torch_impl import distributed


def main(out: str, name: str, dtype: str, steps: int, naive: bool) -> None:
    distributed.start()
    trainer = training.fixture_trainer(torch_impl, name, dtype, training.EQUALITY_SPEC, naive_shards=naive)
    curve = training._train_steps(trainer, name, training.EQUALITY_SPEC, 0, steps)
    if trainer.rank == 0:
        weights = {f"weights/{key}": value for key, value in torch_impl.get_weights(trainer.model).items()}
        np.savez(out, curve=np.array(curve), grad_norms=np.array(trainer.grad_norms), ranks=trainer.ranks, **weights)
    distributed.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), len(sys.argv) > 5 and sys.argv[5] == "naive")
