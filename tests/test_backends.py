"""The tf_impl models on Keras 3's other backends (tox envs keras-jax and keras-torch; KERAS_BACKEND names the
backend): the same code as on TensorFlow, proven against torch_impl. Those envs also run test_cross's
`test_stacks_agree` (outputs, attention, gradients, greedy decoding) and test_training's 200-step curves.
"""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import tf_impl
import torch_impl
from shared import catalogue, fixtures, training
from shared.training import EQUALITY_SPEC
from tf_impl import backends, fitting
from tf_impl.optim import TorchAdam

BACKEND = backends.name()


def test_keras_runs_on_the_backend_the_env_names():
    """A backend env that silently ran TensorFlow would prove nothing."""
    assert BACKEND == os.environ.get("KERAS_BACKEND", "tensorflow")


@pytest.mark.parametrize("name", ["luong_general", "bahdanau_bigru", "reverse_bahdanau"])
def test_fit_follows_torchs_training_loop_on_this_backend(name):
    """200 `fit` steps on a dict of numpy arrays, TorchAdam with torch's clipping, float64 (JAX with x64)."""
    dtype, steps = "float64", training.EQUALITY_STEPS
    config = {**catalogue.get(name).fixture_config}
    config.update({"dropout": 0.0} if "dropout" in config else {})
    model = tf_impl.build(name, dtype, **config)
    tf_impl.set_weights(model, fixtures.load_golden(name).weights)
    model.compile(optimizer=TorchAdam(EQUALITY_SPEC.lr, clip_grad_norm=EQUALITY_SPEC.clip_norm), loss=fitting.loss_for(model))
    batches = list(training.fixture_batches(name, steps))
    schedules = training.step_schedules(name, EQUALITY_SPEC, batches)
    pairs = [fitting.keras_batch(catalogue.get(name), b, s) for b, s in zip(batches, schedules, strict=True)]
    x = {key: np.concatenate([inputs[key] for inputs, _ in pairs]) for key in pairs[0][0]}
    y = np.concatenate([targets for _, targets in pairs])
    losses = []
    step_losses = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: model.reset_metrics(),
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])),
    )
    model.fit(x, y, batch_size=len(batches[0]["src"]), shuffle=False, verbose=0, callbacks=[step_losses])
    reference = training.train_fixture(torch_impl, name, dtype, steps, EQUALITY_SPEC)
    candidate = {"curve": np.array(losses), "weights": tf_impl.get_weights(model)}
    training.assert_trained_alike(name, dtype, reference, candidate, steps)


def test_negative_control_kerass_own_promotion_computes_float64_in_float32():
    """Keras 3.15's type promotion, as it ships, demotes float64 to float32 here (keras-team/keras#23704): what
    backends.check_dtype undoes for float64 models, so that the float64 comparisons above can hold."""
    from keras.src.backend.common import dtypes

    table = dtypes.BIT64_TO_BIT32_DTYPE
    kept, table["float64"] = table["float64"], "float32"  # as Keras ships it on JAX and torch
    try:
        a = keras.ops.convert_to_tensor(np.full((2, 2), 1 / 3), "float64")
        demoted = keras.ops.convert_to_numpy(keras.ops.tanh(keras.ops.matmul(a, a)))
    finally:
        table["float64"] = kept
    exact = np.tanh(np.full((2, 2), 2 / 9))
    assert np.abs(demoted - exact).max() > 1e-10  # float32's rounding, not float64's
    tf_impl.build("reverse_rnn", "float64")  # check_dtype keeps float64 again
    assert keras.ops.convert_to_numpy(keras.ops.tanh(keras.ops.matmul(a, a))).dtype == np.float64


@pytest.mark.skipif(BACKEND != "jax", reason="only JAX computes float64 in float32 unless told (x64)")
def test_float64_without_jax_x64_is_refused():
    code = "import tf_impl; tf_impl.build('reverse_rnn', 'float64')"
    env = {**os.environ, "JAX_ENABLE_X64": "0"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "set JAX_ENABLE_X64=1" in result.stderr
