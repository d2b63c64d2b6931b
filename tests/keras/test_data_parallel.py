"""Data-parallel training on Keras's JAX backend (tf_impl/keras_compat/distributed.py): `Trainer` through Keras's
`fit` under `keras.distribution.DataParallel` on 2 CPU devices (XLA's host device count, in a process of its own:
JAX reads it when imported) trains as one device does. Keras jits one global step over the sharded batch, so its
own loss is the global mean there (measured: the trap of TensorFlow's replicas, tests/tf/test_data_parallel.py, is
absent). On Keras's torch backend data_parallel is refused. Also: TorchClipping's `grad_norm` on every backend.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import tf_impl
import torch_impl
from shared.train import runner
from shared.verify import training
from shared.verify.equality import assert_close
from shared.verify.training import EQUALITY_SPEC
from tests import keras_data_parallel
from tests.interrupted_runner import losses, rosetta_train, small_run
from tf_impl import distributed as tf_ranks
from tf_impl.keras_compat import backends, distributed, optim

BACKEND = backends.name()
on_jax = pytest.mark.skipif(BACKEND != "jax", reason="Keras's data parallelism is JAX's (and TensorFlow's: tests/tf)")


@on_jax
def test_50_fit_steps_on_2_devices_give_one_devices_training():
    """Loss curve, TorchClipping's gradient norms (before the clip, which engages) and weights of 50 `fit` steps on
    2 devices equal one device's, float64 to 1e-12 (float32 within policy is proved on TensorFlow's replicas,
    tests/tf/test_data_parallel.py: here it would repeat this run at 38 s), on padded batches whose halves hold 11 and 4,
    11 and 7 targets (the 3-row batches padded to 4: JAX refuses a batch 2 devices cannot split evenly)."""
    result = keras_data_parallel.run("jax", "proof", dtype="float64")
    assert result["devices"] == ["cpu:0", "cpu:1"]
    assert result["placed"] == ["cpu:0", "cpu:1"]  # the weights on both devices (replicated)
    keras_data_parallel.assert_proof(result, "float64")


@on_jax
def test_kerass_own_loss_is_the_global_mean_on_jax():
    """Measured, not assumed: Keras's `SparseCategoricalCrossentropy(ignore_class=pad)` under DataParallel gives one
    device's loss and gradient norm on a batch where a per-device mean would be 0.034 off."""
    controls = keras_data_parallel.run("jax", "controls")
    reference, stock = controls["reference"], controls["stock_loss"]
    assert_close(reference["numpy_loss"], reference["loss"], 1e-12, what="the loss from the logits in numpy")
    assert abs(reference["mean_of_halves"] - reference["loss"]) > 0.01  # the batch shows the trap
    assert_close(stock["loss"], reference["loss"], 1e-12, what="Keras's loss on 2 JAX devices")
    assert_close(stock["grad_norm"], reference["grad_norm"], 1e-12, what="its gradient norm")


@on_jax
def test_more_devices_than_visible_are_refused_with_the_way_to_make_them():
    import jax

    if len(jax.devices()) >= 2:
        pytest.skip("this process has several JAX devices")
    with pytest.raises(ValueError, match="data_parallel\\(2\\) on jax: 1 device\\(s\\) visible .*xla_force_host_platform"):
        with distributed.data_parallel(2):
            pass


@on_jax
def test_rosetta_train_with_devices_on_jax_follows_one_device(tmp_path):
    """`rosetta train --stack tf --devices 2` on JAX (its runner process started with XLA's 2 host devices): the
    loss log and final metrics of one device's run in this process (float64, no dropout; 3 steps: each run's time is
    XLA compiling its train step and evaluation, about 2 s a program)."""
    alone = small_run(tmp_path / "alone", max_steps=3)
    runner.train(alone, "tf", progress=False)
    done = rosetta_train(tmp_path / "cli", "--stack=tf", "--devices=2", "--max-steps=3")
    assert done.returncode == 0, done.stderr[-2000:]
    assert np.abs(losses(tmp_path / "cli", "tf") - losses(alone, "tf")).max() <= 1e-12 and len(losses(alone, "tf")) == 3
    metrics = [json.loads((run / "tf" / "eval.json").read_text()) for run in (alone, tmp_path / "cli")]
    assert abs(metrics[0]["loss"] - metrics[1]["loss"]) <= 1e-12 and metrics[1]["devices"] == 2


@pytest.mark.skipif(BACKEND != "torch", reason="Keras's torch backend only")
def test_data_parallel_is_refused_on_kerass_torch_backend():
    with pytest.raises(ValueError, match="not 'torch': Keras's torch backend has no data-parallel fit"):
        with distributed.data_parallel(2):
            pass
    with pytest.raises(ValueError, match="not 'torch'"):
        with tf_ranks.on_devices(2):
            pass


# ---- TorchClipping's grad_norm: JAX's compiled step returns the optimizer's `variables` alone ----


@pytest.mark.parametrize("through", ["step", "fit"])
def test_grad_norms_are_torchs_on_this_backend(through):
    """`Trainer.grad_norms` (what `rosetta train` logs) are torch's `clip_grad_norm_` values: on JAX the norm is one
    of the optimizer's `variables` there (before, it stayed 0.0 on JAX)."""
    name, steps = "reverse_rnn", 3
    expected = training.train_fixture(torch_impl, name, "float64", steps, EQUALITY_SPEC)["grad_norms"]
    trainer = training.fixture_trainer(tf_impl, name, "float64", EQUALITY_SPEC)
    batches = list(training.fixture_batches(name, steps))
    schedules = training.step_schedules(name, EQUALITY_SPEC, batches)
    if through == "step":
        for batch, schedule in zip(batches, schedules, strict=True):
            trainer.step(batch, schedule)
    else:
        trainer.train_epoch(zip(batches, schedules, strict=True), lambda loss: True)
    assert_close(np.array(trainer.grad_norms), expected, 1e-12, what=f"gradient norms through {through}")


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's stateless step only")
def test_negative_control_a_norm_outside_the_optimizers_variables_stays_zero_on_jax(monkeypatch):
    monkeypatch.setattr(optim.TorchClipping, "variables", property(lambda self: self._variables[:]))
    trainer = training.fixture_trainer(tf_impl, "reverse_rnn", "float64", EQUALITY_SPEC)
    trainer.step(next(training.fixture_batches("reverse_rnn", 1)))
    assert trainer.grad_norms == [0.0]


def test_checkpoints_hold_adams_variables_alone(tmp_path):
    """The norm carried on JAX stays out of Keras's files: the same optimizer entries on every backend, and they load."""
    trainer = training.fixture_trainer(tf_impl, "reverse_rnn", "float64", EQUALITY_SPEC)
    trainer.step(next(training.fixture_batches("reverse_rnn", 1)))
    trainer.save_checkpoint(tmp_path / "model.weights.h5")
    with h5py.File(tmp_path / "model.weights.h5", "r") as store:
        saved = len(store["optimizer"]["vars"])
    assert saved == 2 + 2 * len(trainer.keras_model.trainable_variables)  # iterations, learning rate, 2 moments each
    again = training.fixture_trainer(tf_impl, "reverse_rnn", "float64", EQUALITY_SPEC)
    again.load_checkpoint(tmp_path / "model.weights.h5")
    assert again.optimizer_state()["step"] == 1
