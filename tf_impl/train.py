"""Training in Keras, following shared.training.TrainSpec: `TorchAdam` (PyTorch's Adam rule) and torch's
global-norm clipping (tf_impl/optim.py). Stock Keras Adam, per-variable `clipnorm` and `global_clipnorm`
are options, to show their drift.

Mirrors torch_impl/train.py: the same `Trainer`, and checkpoints in the stack's own
format (`.weights.h5`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import tensorflow as tf

from shared import catalogue
from shared.training import MOMENTS, TrainSpec, check_optimizer_state
from shared.validation import prepare
from tf_impl.contract import _loss, _outputs, _tensors
from tf_impl.optim import clip_grad_norm, make_optimizer
from tf_impl.weights import assign_through_rules, get_grads, leaves

NATIVE_SUFFIX = ".weights.h5"
MODES = ("eager", "function", "xla")  # function: one tf.function per update; xla: compiled with jit_compile=True


class Trainer:
    """One optimiser over a catalogue model; `step` returns the loss before the update.

    In mode "function" (the default) the update runs as one tf.function, traced once per batch shape (a
    teacher-forcing schedule is a tensor, so new schedules do not retrace); "xla" compiles it with XLA.

    Args:
        model, name: a model from `tf_impl.build` and its catalogue name.
        loss: replaces the spec's loss `(spec, outputs, tensors) -> scalar` (tests pass naive ones).
        mode: one of MODES.
    Attributes:
        grad_norms: the global gradient norm of every step, before clipping.
    """

    def __init__(self, model, name: str, spec: TrainSpec, loss=None, mode: str = "function"):
        if mode not in MODES:
            raise ValueError(f"tf trains in mode {' or '.join(MODES)}, got {mode!r}")
        self.model, self.name, self.spec, self.mode = model, name, spec, mode
        self.loss = loss or _loss
        self.variables = [variable for _, _, found in leaves(model) for variable in found.values()]
        self.optimizer = make_optimizer(spec)
        self.optimizer.build(self.variables)
        self.grad_norms: list[float] = []
        self._update = self._update_step if mode == "eager" else tf.function(self._update_step, jit_compile=mode == "xla")
        self._forward = self._forward_loss  # compiled as part of `_update`

    def step(self, batch: Mapping, teacher_forcing=None) -> float:
        spec, arrays, schedule = prepare(self.name, self.model.rosetta_config, batch, teacher_forcing, with_targets=True)
        forced = None if schedule is None else tf.constant(schedule)
        loss, norm = self._update(_tensors(self.model, arrays), forced)
        self.grad_norms.append(float(norm))
        return float(loss)

    def _update_step(self, tensors: dict, forced):
        """Forward with training=True (dropout on), gradients densified, clipped by the global norm, applied."""
        with tf.GradientTape() as tape:
            loss = self._forward(tensors, forced)
        # densify: an Embedding's IndexedSlices hold one slice per occurrence, and Keras's ops square each
        # slice before repeats are summed (wrong Adam second moments, wrong clipping norm)
        gradients = [None if g is None else tf.convert_to_tensor(g) for g in tape.gradient(loss, self.variables)]
        torch_clip = self.spec.clip_norm if self.spec.clipping == "global" else None
        gradients, norm = clip_grad_norm(gradients, torch_clip)
        self.optimizer.apply_gradients([(g, v) for g, v in zip(gradients, self.variables, strict=True) if g is not None])
        return loss, norm

    def optimizer_state(self) -> dict:
        """Adam's state in canonical layout: `step`, and `exp_avg`, `exp_avg_sq` keyed like the weights
        (torch's names; the moments pass the weights' leaf rules, as gradients do)."""
        self._check_torch_adam()
        slots = self._slots()
        moments = {
            name: get_grads(self.model, lambda variable, i=i: np.array(slots[id(variable)][i].numpy()))
            for i, name in enumerate(MOMENTS)
        }
        return {"step": int(self.optimizer.iterations.numpy()), **moments}

    def load_optimizer_state(self, state: Mapping) -> None:
        """Continue from another Trainer's `optimizer_state` (either stack): moments and step counter."""
        self._check_torch_adam()
        step = check_optimizer_state(state)
        slots = self._slots()
        for i, name in enumerate(MOMENTS):
            assign_through_rules(self.model, state[name], lambda variable, i=i: slots[id(variable)][i])
        self.optimizer.iterations.assign(step)

    def _slots(self) -> dict:
        pairs = zip(self.optimizer._exp_avgs, self.optimizer._exp_avg_sqs, strict=True)
        return {id(variable): pair for variable, pair in zip(self.variables, pairs, strict=True)}

    def _check_torch_adam(self) -> None:
        if self.spec.optimizer != "torch_adam":
            raise ValueError(f"optimizer state ports for torch_adam only; this Trainer runs {self.spec.optimizer}")

    def _forward_loss(self, tensors: dict, forced):
        spec = catalogue.get(self.name)
        return self.loss(spec, _outputs(self.model, spec, tensors, forced, training=True), tensors)


def set_seed(seed: int) -> None:
    """Seed Keras's generators: the initial weights `build` draws and the dropout masks of training."""
    import keras

    keras.utils.set_random_seed(seed)


def place(model) -> tuple[object, str]:
    """TensorFlow places ops on the GPU by itself when one is visible; the model and that device's name."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return model, "cpu"
    return model, f"gpu ({tf.config.experimental.get_device_details(gpus[0]).get('device_name', gpus[0].name)})"


def save_native(model, path: str | Path) -> None:
    """The model's weights as a Keras `.weights.h5` file, written atomically (temporary file, then rename)."""
    path = Path(path)
    if not path.name.endswith(NATIVE_SUFFIX):
        raise ValueError(f"{path}: a Keras weights file must end with {NATIVE_SUFFIX}")
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=NATIVE_SUFFIX)
    os.close(handle)
    try:
        _weights_owner(model).save_weights(temporary, overwrite=True)
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; a checkpoint is world-readable like every written file
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_native(model, path: str | Path) -> None:
    """Load a Keras `.weights.h5` file into `model` (built by `tf_impl.build` with the same config)."""
    try:
        _weights_owner(model).load_weights(str(path))
    except Exception as error:  # h5py and Keras raise OSError, ValueError, KeyError, ... for bad files
        raise ValueError(f"{path}: not loadable Keras weights for this model ({type(error).__name__}: {error})") from None


def _weights_owner(model):
    """`model`, or for a bare layer (document 000's attention) a Model holding it: only Models save weights."""
    if hasattr(model, "save_weights"):
        return model
    import keras

    holder = keras.Model()
    holder.layer = model
    holder.built = True
    return holder
