"""Training in Keras, following shared.verify.training.TrainSpec: `TorchAdam` (PyTorch's Adam rule) and torch's
global-norm clipping (tf_impl/keras_compat/optim.py). Stock Keras Adam, per-variable `clipnorm` and `global_clipnorm`
are options, to show their drift.

Mirrors torch_impl/train.py: the same `Trainer`, and checkpoints in the stack's own
format (`.weights.h5`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import keras
import numpy as np

from shared.core import moved
from shared.core.validation import prepare
from shared.io import atomic
from shared.specs import TrainSpec
from tf_impl import files, fitting
from tf_impl.keras_compat import backends, distributed
from tf_impl.keras_compat.optim import make_optimizer
from tf_impl.weights import get_weights, leaves, set_weights

MODES = ("eager", "function", "xla")  # Keras's training step eagerly, as a tf.function, compiled by XLA


class Trainer:
    """One optimiser over a catalogue model, through Keras's own training step (`compile`, then
    `train_on_batch`: the step `fit` runs); `step` returns the loss before the update.

    Mode "function" (the default) runs Keras's step as a tf.function, "xla" compiles it with XLA
    (`jit_compile=True`), "eager" runs it eagerly (`run_eagerly=True`).

    Args:
        model, name: a model from `tf_impl.build` and its catalogue name.
        loss: a Keras loss replacing the spec's (tests pass naive ones).
        mode: one of MODES.
    Attributes:
        keras_model: what Keras trains: the model, or for document 000's bare layer a Model holding it.
        grad_norms: the global gradient norm of every step, before clipping.
    """

    def __init__(self, model, name: str, spec: TrainSpec, loss=None, mode: str = "function"):
        if mode not in MODES:
            raise ValueError(f"tf trains in mode {' or '.join(MODES)}, got {mode!r}")
        distributed.check_mode(mode)
        self.model, self.name, self.spec, self.mode = model, name, spec, mode
        self.keras_model = model if hasattr(model, "train_on_batch") else fitting.AttentionTrainer(model)
        self.loss = loss or self.keras_model.default_loss()
        self.variables = [variable for _, _, found in leaves(model) for variable in found.values()]
        self.optimizer = make_optimizer(spec)
        # JAX's compiled step is jit (XLA) itself; TensorFlow's is a tf.function, XLA on request; torch's, torch.compile
        jit = mode == "xla" or (mode == "function" and backends.name() == "jax")
        self.keras_model.compile(optimizer=self.optimizer, loss=self.loss, run_eagerly=mode == "eager", jit_compile=jit)
        self.optimizer.build(self.keras_model.trainable_variables)
        self.grad_norms: list[float] = []

    def step(self, batch: Mapping, teacher_forcing=None) -> float:
        """One update on `batch` (checked as `run` checks it) with the step's teacher-forcing schedule. Under
        TensorFlow's MirroredStrategy (keras_compat/distributed.py) through `fit`: Keras's `train_on_batch` hands
        every replica the whole batch (the same update, computed once per replica)."""
        if backends.name() == "tensorflow" and self.keras_model.distribute_strategy.num_replicas_in_sync > 1:
            losses: list[float] = []
            self.train_epoch([(batch, teacher_forcing)], lambda loss: losses.append(loss) or True)
            return losses[0]
        inputs, targets = fitting.keras_batch(*self._prepare(batch, teacher_forcing))
        loss = self.keras_model.train_on_batch(inputs, targets)
        self.grad_norms.append(self.optimizer.grad_norm)
        return float(loss)

    def train_epoch(self, steps: Iterable[tuple[Mapping, object]], after_step: Callable[[float], bool]) -> None:
        """One `fit` epoch over `steps`, (batch, teacher-forcing schedule) pairs, each checked as `step` checks
        it; `after_step(loss)` after each update (its norm in `grad_norms[-1]`) ends the epoch by returning False."""
        keras_batches = fitting.epoch_input([fitting.keras_batch(*self._prepare(batch, schedule)) for batch, schedule in steps])
        self.keras_model.fit(
            keras_batches,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[fitting.AfterStep(self.optimizer, self.grad_norms, after_step)],
        )

    def _prepare(self, batch: Mapping, schedule) -> tuple:
        return prepare(self.name, self.model.rosetta_config, batch, schedule, with_targets=True)

    def optimizer_state(self) -> dict:
        """Adam's state in canonical layout: `step`, and `exp_avg`, `exp_avg_sq` keyed like the weights
        (torch's names; the moments pass the weights' leaf rules, as gradients do). Stock Keras Adam keeps
        the same moments: its state ports too, though its update rule is not torch's."""
        return files.adam_state(self.model, self.optimizer)

    def load_optimizer_state(self, state: Mapping) -> None:
        """Continue from another Trainer's `optimizer_state` (either stack): moments and step counter."""
        files.load_adam_state(self.model, self.optimizer, state)

    def save_checkpoint(self, path, state: Mapping | None = None) -> None:
        """The model and Adam's state in the stack's own file (`.weights.h5` or `.keras`), as `rosetta port
        --with-optimizer` reads it: written by the model compiled with this Trainer's optimizer (compiling
        again would end a `fit` under way; `state`, the canonical one, serves only document 000's bare layer)."""
        path, whole = Path(path), str(path).endswith(files.KERAS_SUFFIX)
        if self.keras_model is not self.model:  # document 000's bare layer: its own holder, compiled for the file
            return (files.save_keras if whole else files.save_native)(self.model, path, state or self.optimizer_state())
        if not whole and not path.name.endswith(files.NATIVE_SUFFIX):
            raise ValueError(f"{path}: a Keras checkpoint ends with {files.NATIVE_SUFFIX} or {files.KERAS_SUFFIX}")
        write = (
            (lambda t: keras.saving.save_model(self.model, t))
            if whole
            else (lambda t: self.model.save_weights(t, overwrite=True))
        )
        atomic.write_with(write, path)

    def load_checkpoint(self, path) -> None:
        """Continue from a checkpoint file of this stack (weights, Adam's moments and step counter)."""
        if str(path).endswith(files.KERAS_SUFFIX):
            model, state = files.load_keras(path, with_optimizer=True)
            set_weights(self.model, get_weights(model))
            return self.load_optimizer_state(state)
        if self.keras_model is not self.model:
            return self.load_optimizer_state(files.load_native(self.model, path, with_optimizer=True))
        if not files.has_optimizer_state(path):
            raise ValueError(f"{path}: holds no optimizer state (a compiled model's save_weights writes it)")
        files.load_weights(self.model, path)  # compiled with this Trainer's optimizer: its slots load too


def set_seed(seed: int) -> None:
    """Seed Keras's generators: the initial weights `build` draws and the dropout masks of training."""
    keras.utils.set_random_seed(seed)


def rng_state(model) -> dict:
    """The generators dropout draws from (each Dropout layer's Keras SeedGenerator, in the model's order; their
    variables' names are numbered process-wide, so not a key), as JSON-able lists."""
    return {"seed_generators": [np.asarray(variable.numpy()).ravel().tolist() for variable in _seed_states(model)]}


def load_rng_state(model, state: Mapping) -> None:
    """Restore `rng_state`'s generators."""
    found, saved = _seed_states(model), state.get("seed_generators", [])
    if len(found) != len(saved):
        raise ValueError(f"the checkpoint holds {len(saved)} dropout generators, this model has {len(found)}")
    for variable, values in zip(found, saved, strict=True):
        variable.assign(np.asarray(values, dtype=keras.backend.standardize_dtype(variable.dtype)))


def _seed_states(model) -> list:
    return [variable for variable in model.variables if variable.path.endswith("seed_generator_state")]


def backend() -> str:
    """Keras's backend (KERAS_BACKEND): tensorflow, jax or torch."""
    return backends.name()


__getattr__ = moved.getattr_for(__name__)  # files and ranks moved to files.py and distributed.py: they warn
