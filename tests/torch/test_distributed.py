"""Data-parallel training on PyTorch's own engine (torch_impl.distributed: torchrun, gloo on this CPU, DDP) equals
one process: 2 ranks, each holding its rows of every global batch, follow the 1-process loss curve and end at its
weights. The fixture batches hold rows of different lengths, so the ranks hold different numbers of targets: the
negative control, a plain mean of the ranks' means, is another objective and is caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import torch_impl
from shared import catalogue
from shared.verify import fixtures, training
from tests.interrupted_runner import losses, rosetta_train, small_run, start
from torch_impl import distributed

NAME, STEPS = "luong_general", 50  # dropout 0 (fixture_trainer), teacher forcing 0.5 (one schedule per global batch)


def _two_ranks(tmp_path: Path, dtype: str, naive: bool = False) -> dict:
    out = tmp_path / f"ranks-{dtype}{'-naive' if naive else ''}.npz"
    script = Path(__file__).with_name("ddp_fixture.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
               str(out), NAME, dtype, str(STEPS), *(["naive"] if naive else [])]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as saved:
        return {key: saved[key] for key in saved.files}


def _one_process(dtype: str) -> dict:
    result = training.train_fixture(torch_impl, NAME, dtype, STEPS, training.EQUALITY_SPEC)
    return {
        "curve": result["curve"],
        "grad_norms": result["grad_norms"],
        **{f"weights/{k}": v for k, v in result["weights"].items()},
    }


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_two_ranks_follow_the_one_process_curve_to_its_weights(tmp_path, dtype):
    """float64: curve and gradient norms to 1e-12, every weight to 1e-10 (relative to each array's largest entry, at
    least 1): the ranks' gradients are summed in another order, and Adam divides each weight's step by the root of its
    second moment, which magnifies a rounding difference where a weight's gradient is small (1.6e-12 on
    `decoder.attention.w.bias` after 50 steps on an Intel Xeon host, under 1e-12 on an AMD EPYC one); float32: the
    equality policy of two stacks (shared.verify.training.assert_trained_alike)."""
    alone, ranks = _one_process(dtype), _two_ranks(tmp_path, dtype)
    assert int(ranks["ranks"]) == 2
    batch = fixtures.make_batch(catalogue.get(NAME))
    parts = [distributed.shard(batch, rank, 2) for rank in (0, 1)]
    assert len({int((part["tgt_out"] != 1).sum()) for part in parts}) == 2  # the ranks hold different target counts
    if dtype == "float32":
        training.assert_trained_alike(NAME, dtype, _as_run(alone), _as_run(ranks), STEPS)
        return
    for key in alone:
        error = np.abs(ranks[key] - alone[key]).max()
        bound = 1e-10 if key.startswith("weights/") else 1e-12
        assert error <= bound * max(1.0, np.abs(alone[key]).max()), (key, error)


def _as_run(saved: dict) -> dict:
    weights = {key.removeprefix("weights/"): value for key, value in saved.items() if key.startswith("weights/")}
    return {"curve": saved["curve"], "grad_norms": saved["grad_norms"], "weights": weights}


def test_a_mean_of_the_ranks_means_is_another_objective(tmp_path):
    alone, naive = _one_process("float64"), _two_ranks(tmp_path, "float64", naive=True)
    assert np.abs(naive["curve"] - alone["curve"]).max() > 1e-3


def test_a_batch_smaller_than_the_ranks_is_refused():
    batch = fixtures.make_batch(catalogue.get(NAME))
    with pytest.raises(ValueError, match="a batch of 3 rows cannot be split over 4 ranks"):
        distributed.shard(batch, 0, 4)


# ---- rosetta train with ranks: the run folder, resumed with another number of ranks ----


def test_rosetta_train_with_two_ranks_resumed_alone_follows_one_process(tmp_path):
    """2 ranks interrupted after step 3 (checkpoint at step 2), resumed by 1 process: the loss log and the final
    metrics are those of one uninterrupted process (float64, no dropout), every file written by rank 0 alone."""
    alone, ranked = small_run(tmp_path / "alone"), small_run(tmp_path / "ranked")
    assert start(alone, "torch").returncode == 0
    stopped = start(ranked, "torch", ranks=2, stop_after=3)
    assert stopped.returncode != 0 and "interrupted" in stopped.stderr.lower() + stopped.stdout.lower()
    assert len(losses(ranked, "torch")) == 2  # the log as of the last checkpoint
    resumed = start(ranked, "torch", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert np.abs(losses(ranked, "torch") - losses(alone, "torch")).max() <= 1e-12 and len(losses(alone, "torch")) == 8
    metrics = [json.loads((run / "torch" / "eval.json").read_text()) for run in (alone, ranked)]
    assert abs(metrics[0]["loss"] - metrics[1]["loss"]) <= 1e-12
    assert sorted(p.name for p in (ranked / "torch").iterdir()) == sorted(p.name for p in (alone / "torch").iterdir())


def test_the_command_line_trains_with_ranks(tmp_path):
    """`rosetta train --stack torch --nproc-per-node 2` (torchrun's launcher, gloo): the one-process curve."""
    alone = small_run(tmp_path / "alone")
    assert start(alone, "torch").returncode == 0
    done = rosetta_train(tmp_path / "cli", "--stack=torch", "--nproc-per-node=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert np.abs(losses(tmp_path / "cli", "torch") - losses(alone, "torch")).max() <= 1e-12
    assert json.loads((tmp_path / "cli" / "torch" / "eval.json").read_text())["ranks"] == 2


def test_ranks_are_for_torch(capsys):
    from shared.cli import main as rosetta

    assert rosetta(["train", "reverse_bahdanau", "--stack", "tf", "--nproc-per-node", "2"]) != 0
    assert "--nproc-per-node starts torchrun's ranks: pass --stack torch (Keras: --devices)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="pass --nproc-per-node 2, not --devices"):
        torch_impl.distributed.on_devices(2)
