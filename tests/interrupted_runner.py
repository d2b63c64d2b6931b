"""`python -m shared.train.runner` (as torchrun starts it, or with Keras's --devices), for the data-parallel tests
(tests/torch/test_distributed.py, tests/tf/test_data_parallel.py): with STOP_AFTER=k in the environment the run is
interrupted (KeyboardInterrupt, as Ctrl-C) after step k, its last checkpoint left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from shared.train import runner, runs

SMALL = {"embedding_dim": 8, "hidden_size": 12, "attention_size": 10}
REVERSE_DATA = {"train_size": 64, "val_size": 16, "test_size": 16}
SETTINGS = {"batch_size": 16, "epochs": 2, "checkpoint_every": 2, "dtype": "float64"}  # 8 steps, checkpoints at 2, 4, ...
CLI_FLAGS = [*(f"--set={key}={value}" for key, value in SMALL.items()),
             *(f"--data-option={key}={value}" for key, value in REVERSE_DATA.items()),
             "--batch-size=16", "--epochs=2", "--checkpoint-every=2", "--dtype=float64", "--quiet"]  # fmt: skip


def small_run(folder: Path, **settings) -> Path:
    """A prepared run folder of a small reverse_bahdanau (the `rosetta train` of CLI_FLAGS; `settings` added), float64."""
    runs.create_run(folder, "reverse_bahdanau", overrides=SMALL, corpus_options=REVERSE_DATA, **SETTINGS, **settings)
    return folder


def start(run_dir: Path, stack: str, *flags: str, ranks: int = 1, stop_after: int = 0) -> subprocess.CompletedProcess:
    """This script on `run_dir` in a process of its own (under torchrun's launcher with `ranks` > 1)."""
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks > 1 else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[1]), "STOP_AFTER": str(stop_after)}
    # as a module: run as a file, its folder (tests/, which holds a keras/ package) would come first on sys.path
    command = [sys.executable, *launcher, "-m", "tests.interrupted_runner", str(run_dir), stack, "--quiet", *flags]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def rosetta_train(run_dir: Path, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`rosetta train` of the small run (CLI_FLAGS) into `run_dir`, in a process of its own."""
    command = [sys.executable, "-m", "shared.cli", "train", "reverse_bahdanau", "--run-dir", str(run_dir), *CLI_FLAGS, *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[1]), **(env or {})}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def losses(run_dir: Path, stack: str) -> np.ndarray:
    """The run's loss log of `stack`."""
    return np.array([record["loss"] for record in runs.read_json_lines(run_dir / stack / runs.LOSS_LOG)])


if __name__ == "__main__":
    stop_after = int(os.environ.get("STOP_AFTER", 0))
    if stop_after:
        after_step = runner._Steps.after_step

        def interrupted(self, loss):
            going_on = after_step(self, loss)
            if self.step == stop_after:
                raise KeyboardInterrupt
            return going_on

        runner._Steps.after_step = interrupted
    raise SystemExit(runner.main(sys.argv[1:]))
