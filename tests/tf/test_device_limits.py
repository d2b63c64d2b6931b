"""`python -m shared.train.runner RUN tf --devices N` (the process `rosetta train --stack tf --devices N` starts)
refuses devices this machine cannot serve before Keras makes any: at most its CPU cores where Keras sees no GPU
(`--oversubscribe` lifts that), at most its GPUs where it sees some. Negative control: without the check, the runner
goes on to split the CPU into 64 devices (replaced here by a recorder: TensorFlow's devices stay unmade)."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from shared.train import runner
from tests.interrupted_runner import small_run
from tf_impl.keras_compat import distributed


def test_keras_sees_no_gpu_on_this_cpu():
    assert distributed.accelerators() == len(tf.config.list_physical_devices("GPU"))


def test_devices_beyond_the_cores_are_refused_before_the_cpu_is_split(tmp_path, capsys, monkeypatch):
    if distributed.accelerators():
        pytest.skip("Keras sees a GPU here: the limit is the GPUs (tests/shared/test_cli_limits.py)")
    splits = []

    def split_cpu(devices: int) -> None:
        splits.append(devices)
        raise ValueError(f"split_cpu({devices}) reached")

    monkeypatch.setattr(distributed, "split_cpu", split_cpu)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # the runner sets JAX's host devices
    run, cores = small_run(tmp_path / "run"), runner.usable_cores()
    assert runner.main([str(run), "tf", f"--devices={cores + 1}", "--quiet"]) == 2
    said = capsys.readouterr().err
    assert f"rosetta train (tf): --devices {cores + 1}: this process may use {cores} CPU core(s)" in said and not splits
    monkeypatch.setattr(runner, "check_parallel", lambda *args, **kwargs: None)
    assert runner.main([str(run), "tf", "--devices=64", "--quiet"]) == 2
    assert "split_cpu(64) reached" in capsys.readouterr().err and splits == [64]
