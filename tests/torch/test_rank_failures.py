"""A failing rank of `rosetta train --nproc-per-node N` ends in one line (torch_impl.distributed.launch): its own, or
for a rank that could not say why (a signal) the launcher's, never torchrun's ChildFailedError trace of every rank.
Negative control: torchrun's own launcher on the same run prints that trace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from shared import failures
from shared.train import runs
from tests.interrupted_runner import rosetta_train
from torch_impl import distributed

SHORT = "--data-option=train_size=17"  # batches of 16 leave a last batch of 1: 2 ranks cannot share it


def _one_line(stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return len(lines) == 1 and "Traceback" not in stderr


def test_ranks_refusing_their_run_end_in_one_line_not_torchruns_trace(tmp_path):
    done = rosetta_train(tmp_path / "run", "--stack=torch", "--nproc-per-node=2", SHORT)
    assert done.returncode == failures.EXIT_FAILED
    assert _one_line(done.stderr), done.stderr[-3000:]
    assert "--nproc-per-node 2: the last batch of each pass over the 17 training examples holds 1" in done.stderr
    assert not (tmp_path / "run" / "torch").exists()  # refused before any rank trained
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    naive = subprocess.run([*launcher, "shared.train.runner", str(tmp_path / "run"), "torch", "--quiet"], env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert naive.returncode != 0 and "ChildFailedError" in naive.stderr and not _one_line(naive.stderr)
    assert (tmp_path / "run" / runs.RUN_FILE).is_file()


def _failure(exitcode: int) -> SimpleNamespace:
    """What torchrun records of a failed rank (ProcessFailure): its exit code, negative for a signal."""
    return SimpleNamespace(exitcode=exitcode, signal_name=lambda: signal.Signals(-exitcode).name)


@pytest.mark.parametrize(
    ("codes", "lines", "code"),
    [
        ({0: 2, 1: -signal.SIGTERM}, [], 2),  # rank 0 said why, rank 1 stopped by the launcher
        ({0: -signal.SIGTERM, 1: -signal.SIGKILL}, ["rank 1 of 2 ended by signal SIGKILL"], 2),  # the OOM killer
        ({0: -signal.SIGTERM, 1: -signal.SIGTERM}, ["rank 0 of 2 ended by signal SIGTERM", "rank 1 of 2 ended"], 2),
        ({0: 130, 1: 130}, [], 130),  # Ctrl-C: each rank's own line
        ({1: 1}, ["rank 1 of 2 ended with exit code 1"], 2),
    ],
)
def test_a_failed_rank_that_said_nothing_gets_one_line(capsys, codes, lines, code):
    assert distributed._failed({rank: _failure(exitcode) for rank, exitcode in codes.items()}, 2) == code
    said = capsys.readouterr().err.splitlines()
    assert len(said) == len(lines) and all(line in text for line, text in zip(lines, said, strict=True)), said


def test_the_gpus_ranks_train_on():
    import torch

    assert distributed.accelerators() == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
