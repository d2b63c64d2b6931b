"""Data-parallel training on PyTorch's own engine: `torch.distributed` and `DistributedDataParallel`, one process per
device, launched by `torchrun` (`rosetta train --nproc-per-node N` runs its launcher in-process, `launch`: a failed
rank ends in its own line; for several machines the documented `torchrun --nnodes ...` line); gloo on CPUs, NCCL on
GPUs (`accelerators`: one a rank).

Every rank reads the same global batches and keeps its rows (`shard`), so N ranks see exactly what one process
sees: the loss is the mean over the GLOBAL batch's non-pad targets, each rank weighting its own mean by its share
of them (`token_share`; a plain mean of the ranks' means is another objective when their shares differ), DDP
averages the gradients, and the clipping then sees the global gradient and its norm. Rank 0 alone writes files.
A single process (no `WORLD_SIZE` above 1) is today's training, unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist

from shared import failures

ROWS = ("src", "src_len", "tgt_in", "tgt_out")  # the batch arrays split by row


def accelerators() -> int:
    """The GPUs ranks here train on (NCCL: one a rank); 0 on a CPU, where gloo's ranks share its cores."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def launch(ranks: int, argv: list[str]) -> int:
    """`python -m shared.train.runner *argv` as `ranks` ranks of torchrun's launcher on this machine (`--standalone`),
    run in this process so that a failing rank ends in its own one line (the runner's) and the exit code: torchrun
    would add its logs and a ChildFailedError trace listing every rank. Under --debug, torchrun's own report."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = torchrun.parse_args(["--standalone", f"--nproc-per-node={ranks}", "-m", "shared.train.runner", *argv])
    if os.environ.get(failures.DEBUG_VARIABLE) == "1":
        torchrun.run(args)
        return 0
    handlers = {code: signal.getsignal(code) for code in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    logging.disable(logging.CRITICAL)  # the launcher's warnings and its error log of each failed rank
    try:
        torchrun.run(args)
    except ChildFailedError as error:
        return _failed(error.failures, ranks)
    except SignalException as error:
        if error.sigval == signal.SIGINT:
            return failures.EXIT_INTERRUPTED  # Ctrl-C: the launcher passed it on, each rank says it in its line
        raise
    finally:
        logging.disable(logging.NOTSET)
        for code, handler in handlers.items():
            signal.signal(code, handler)
    return 0


def _failed(ranks_failed: dict, ranks: int) -> int:
    """The exit code of a launch whose ranks failed; a line for each rank that ended without saying why (a signal: the
    out-of-memory killer, a crash), the others having said it in their own line."""
    said = (failures.EXIT_FAILED, failures.EXIT_INTERRUPTED)
    stopped = -signal.SIGTERM if any(failure.exitcode != -signal.SIGTERM for failure in ranks_failed.values()) else None
    for rank, failure in sorted(ranks_failed.items()):
        if failure.exitcode not in (*said, stopped):  # SIGTERM beside another rank's failure: the launcher stopped it
            how = f"by signal {failure.signal_name()}" if failure.exitcode < 0 else f"with exit code {failure.exitcode}"
            print(f"rosetta train (torch): rank {rank} of {ranks} ended {how} (--debug: torchrun's report)", file=sys.stderr)
    codes = {failure.exitcode for failure in ranks_failed.values()}
    return failures.EXIT_INTERRUPTED if codes == {failures.EXIT_INTERRUPTED} else failures.EXIT_FAILED


def world() -> tuple[int, int]:
    """(rank, number of ranks) from torchrun's environment; (0, 1) in a single process."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def start() -> str | None:
    """Join torchrun's process group (NCCL where this rank has a GPU, else gloo); None in a single process."""
    rank, size = world()
    if size == 1:
        return None
    if not dist.is_initialized():
        on_gpu = torch.cuda.is_available()
        if on_gpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend="nccl" if on_gpu else "gloo")
    return dist.get_backend()


def stop() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def gather(value) -> list:
    """Every rank's `value` (a picklable object), in rank order; `[value]` in a single process."""
    if not dist.is_initialized():
        return [value]
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def shard(arrays: dict, rank: int, size: int) -> dict:
    """Rank `rank`'s rows of a global batch (contiguous, as even as possible); a batch with fewer rows than ranks
    is refused."""
    rows = len(arrays["tgt_in"])
    if rows < size:
        raise ValueError(f"a batch of {rows} rows cannot be split over {size} ranks: use a batch of at least {size}")
    kept = np.array_split(np.arange(rows), size)[rank]
    return {key: (value[kept] if key in ROWS else value) for key, value in arrays.items()}


def token_share(part: dict, whole: dict, pad_id: int) -> float:
    """The share of the global batch's non-pad targets that `part` holds."""
    return float((part["tgt_out"] != pad_id).sum()) / float((whole["tgt_out"] != pad_id).sum())


def all_sum(value: torch.Tensor) -> torch.Tensor:
    """The sum of `value` over the ranks (every rank gets it)."""
    if dist.is_initialized():
        value = value.clone()
        dist.all_reduce(value)
    return value


class LossModule(torch.nn.Module):
    """What DDP wraps: the model (its parameters) and the forward that computes the loss, so DDP's hooks average
    the gradients of the backward after it."""

    def __init__(self, model: torch.nn.Module, forward_loss):
        super().__init__()
        self.model = model
        self.forward_loss = forward_loss

    def forward(self, tensors: dict, forced):
        return self.forward_loss(tensors, forced)


def data_parallel(model: torch.nn.Module, forward_loss):
    """`forward_loss(tensors, forced)` through `DistributedDataParallel` over `model`'s parameters (broadcast from
    rank 0 as DDP starts: every rank begins from rank 0's weights)."""
    device = next(model.parameters()).device
    return torch.nn.parallel.DistributedDataParallel(
        LossModule(model, forward_loss), device_ids=[device.index] if device.type == "cuda" else None
    )


def ranks() -> tuple[int, int]:
    """(rank, number of ranks): this process's place among torchrun's (torch_impl.distributed), its process group
    joined; (0, 1) in a single process."""
    start()
    return world()


def on_devices(devices: int):
    """A context for training on `devices` devices in this process: torch trains data-parallel as torchrun's ranks
    (`--nproc-per-node`), one device a process, so only 1 is taken (ValueError otherwise)."""
    if devices != 1:
        raise ValueError(f"torch trains data-parallel as torchrun's ranks, one device each: pass --nproc-per-node {devices}, "
                         "not --devices")  # fmt: skip
    return contextlib.nullcontext()


def gather_ranks(value) -> list:
    """Every rank's `value`, in rank order (`[value]` alone)."""
    return gather(value)


def wait_for_ranks() -> None:
    """Until every rank gets here (nothing alone)."""
    barrier()


def leave_ranks() -> None:
    """Leave torchrun's process group (nothing alone)."""
    stop()


def place(model: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """The model on the GPU when one is present (the contract follows the model's device); its device name."""
    if not torch.cuda.is_available():
        return model, "cpu"
    return model.cuda(), f"cuda ({torch.cuda.get_device_name()})"
