"""Keras's GPUs as the runner counts them before it makes any device (tf_impl.keras_compat.distributed.accelerators):
JAX's devices other than the CPU's; on Keras's torch backend, which has no data-parallel fit, the refusal itself, said
by `python -m shared.train.runner RUN tf --devices 2` before training starts."""

from __future__ import annotations

import os

import pytest

from shared.train import runner
from tests.interrupted_runner import small_run
from tf_impl.keras_compat import backends, distributed


def test_the_gpus_keras_trains_on_or_the_refusal_of_its_torch_backend(tmp_path, capsys, monkeypatch):
    if backends.name() == "jax":
        import jax

        assert distributed.accelerators() == sum(device.platform != "cpu" for device in jax.devices())
        return
    with pytest.raises(ValueError, match="Keras's torch backend has no data-parallel fit of its own"):
        distributed.accelerators()
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # the runner sets JAX's host devices
    monkeypatch.setattr(runner, "train", lambda *args: pytest.fail("trained"))
    assert runner.main([str(small_run(tmp_path / "run")), "tf", "--devices=2", "--quiet"]) == 2
    assert "rosetta train (tf): data_parallel runs on Keras's jax or tensorflow backend" in capsys.readouterr().err
