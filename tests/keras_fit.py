"""`fit` as a Keras user writes it, on the fixture batches of shared.verify.training: for tests/cross/test_fit.py (TensorFlow)
and tests/keras/test_backends.py (JAX, torch). No TensorFlow import: Keras's other backends run it too."""

from __future__ import annotations

import keras
import numpy as np

import tf_impl
from shared import catalogue
from shared.verify import fixtures, training
from shared.verify.training import EQUALITY_SPEC
from tf_impl import fitting
from tf_impl.keras_compat.optim import TorchAdam


class StepLosses(keras.callbacks.Callback):
    """Each step's own loss: Keras's logs hold the epoch's running mean unless the metrics reset before a step.

    `self.model`, not a model captured in a closure: on JAX, `fit` holds the metrics' state outside the model
    mid-epoch, and only a callback's `model` property syncs it back (a closure's reset_metrics is lost there)."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_begin(self, batch, logs=None):
        self.model.reset_metrics()

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def torch_adam() -> TorchAdam:
    return TorchAdam(EQUALITY_SPEC.lr, clip_grad_norm=EQUALITY_SPEC.clip_norm)


def fixture_model(name: str, dtype: str):
    config = {**catalogue.get(name).fixture_config}
    config.update({"dropout": 0.0} if "dropout" in config else {})  # dropout masks cannot match across stacks
    model = tf_impl.build(name, dtype, **config)
    tf_impl.set_weights(model, fixtures.load_golden(name).weights)
    return model


def fixture_arrays(name: str, steps: int) -> tuple[dict, np.ndarray, int]:
    """The fixture batches of shared.verify.training, joined into the arrays a Keras user hands `fit` (each step's
    teacher-forcing schedule repeated on its rows), the targets, and the batch size that splits them back."""
    batches = list(training.fixture_batches(name, steps))
    schedules = training.step_schedules(name, EQUALITY_SPEC, batches)
    inputs = [
        fitting.keras_batch(catalogue.get(name), batch, schedule) for batch, schedule in zip(batches, schedules, strict=True)
    ]
    x = {key: np.concatenate([x[key] for x, _ in inputs]) for key in inputs[0][0]}
    return x, np.concatenate([y for _, y in inputs]), len(batches[0]["src"])


def fit_fixture(name: str, dtype: str, optimizer, steps: int, as_tuple: bool = False) -> tuple[np.ndarray, dict]:
    """`fit` as a user writes it: compile with `optimizer` and the masked loss, one epoch over numpy arrays;
    each step's loss and the trained weights."""
    model = fixture_model(name, dtype)
    model.compile(optimizer=optimizer, loss=fitting.loss_for(model))
    x, y, batch_size = fixture_arrays(name, steps)
    if as_tuple:
        x = tuple(x[key] for key in fitting.INPUT_KEYS if key in x)
    losses = StepLosses()
    model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0, callbacks=[losses])
    return np.array(losses.losses), tf_impl.get_weights(model)
