"""Training in Keras, following shared.verify.training.TrainSpec: `TorchAdam` (PyTorch's Adam rule) and torch's
global-norm clipping (tf_impl/keras_compat/optim.py). Stock Keras Adam, per-variable `clipnorm` and `global_clipnorm`
are options, to show their drift.

Mirrors torch_impl/train.py: the same `Trainer`, and checkpoints in the stack's own
format (`.weights.h5`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import keras
import numpy as np

from shared import catalogue
from shared.core.optimizer_state import MOMENTS, check_optimizer_state
from shared.core.validation import prepare
from shared.io import atomic
from shared.specs import TrainSpec
from tf_impl import fitting
from tf_impl.keras_compat import backends, distributed
from tf_impl.keras_compat.optim import TorchAdam, make_optimizer
from tf_impl.weights import assign_through_rules, get_grads, get_weights, leaves, set_weights

NATIVE_SUFFIX = ".weights.h5"
KERAS_SUFFIX = ".keras"  # the whole model: config, weights, optimizer
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
        return adam_state(self.model, self.optimizer)

    def load_optimizer_state(self, state: Mapping) -> None:
        """Continue from another Trainer's `optimizer_state` (either stack): moments and step counter."""
        load_adam_state(self.model, self.optimizer, state)

    def save_checkpoint(self, path, state: Mapping | None = None) -> None:
        """The model and Adam's state in the stack's own file (`.weights.h5` or `.keras`), as `rosetta port
        --with-optimizer` reads it: written by the model compiled with this Trainer's optimizer (compiling
        again would end a `fit` under way; `state`, the canonical one, serves only document 000's bare layer)."""
        path, whole = Path(path), str(path).endswith(KERAS_SUFFIX)
        if self.keras_model is not self.model:  # document 000's bare layer: its own holder, compiled for the file
            return (save_keras if whole else save_native)(self.model, path, state or self.optimizer_state())
        if not whole and not path.name.endswith(NATIVE_SUFFIX):
            raise ValueError(f"{path}: a Keras checkpoint ends with {NATIVE_SUFFIX} or {KERAS_SUFFIX}")
        write = (
            (lambda t: keras.saving.save_model(self.model, t))
            if whole
            else (lambda t: self.model.save_weights(t, overwrite=True))
        )
        atomic.write_with(write, path)

    def load_checkpoint(self, path) -> None:
        """Continue from a checkpoint file of this stack (weights, Adam's moments and step counter)."""
        if str(path).endswith(KERAS_SUFFIX):
            model, state = load_keras(path, with_optimizer=True)
            set_weights(self.model, get_weights(model))
            return self.load_optimizer_state(state)
        if self.keras_model is not self.model:
            return self.load_optimizer_state(load_native(self.model, path, with_optimizer=True))
        if not _has_optimizer_state(path):
            raise ValueError(f"{path}: holds no optimizer state (a compiled model's save_weights writes it)")
        _load_weights(self.model, path)  # compiled with this Trainer's optimizer: its slots load too


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


def ranks() -> tuple[int, int]:
    """(0, 1): Keras trains data-parallel in one process over several devices, not as torchrun's ranks."""
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        raise ValueError("Keras trains data-parallel in one process over its devices, not under torchrun: "
                         "rosetta train --stack tf --devices N")  # fmt: skip
    return 0, 1


@contextlib.contextmanager
def on_devices(devices: int) -> Iterator[None]:
    """Inside, `tf_impl.build` and `Trainer` train data-parallel on `devices` devices through `fit`
    (keras_compat/distributed.data_parallel): the GPUs, or on a CPU-only machine the host split into `devices`
    devices (TensorFlow: logical CPUs, made here, before its first op; JAX: XLA's host devices, which the process
    must have been started with: shared.stacks.host_devices_environment). 1: this process as it is."""
    if devices == 1:
        yield
        return
    if not distributed.accelerators():
        distributed.split_cpu(devices)
    with distributed.data_parallel(devices):
        yield


def gather_ranks(value) -> list:
    """`[value]`: one process."""
    return [value]


def wait_for_ranks() -> None:
    """Nothing to wait for: one process."""


def leave_ranks() -> None:
    """Nothing to leave: one process."""


def backend() -> str:
    """Keras's backend (KERAS_BACKEND): tensorflow, jax or torch."""
    return backends.name()


def place(model) -> tuple[object, str]:
    """Keras's backend places arrays on the GPU by itself when one is visible; the model and that device's name."""
    return model, backends.device()


def _slot(optimizer, variable, moment: int):
    """Adam's `momentum` (moment 0) or `velocity` (1) of `variable`: Keras Adam's slots, and TorchAdam's."""
    return (optimizer._momentums, optimizer._velocities)[moment][optimizer._get_variable_index(variable)]


def adam_state(model, optimizer) -> dict:
    """`optimizer`'s state over `model` in canonical layout: `step` (Keras's `iterations`), `exp_avg` and
    `exp_avg_sq` (its `momentum` and `velocity`, through the weights' leaf rules), `lr`, `betas`, `eps`."""
    moments = {
        name: get_grads(model, lambda variable, i=i: np.array(_slot(optimizer, variable, i).numpy()))
        for i, name in enumerate(MOMENTS)
    }
    hyper = {"lr": _learning_rate(optimizer), "betas": (float(optimizer.beta_1), float(optimizer.beta_2))}
    return {"step": int(optimizer.iterations.numpy()), **moments, **hyper, "eps": float(optimizer.epsilon)}


def _learning_rate(optimizer) -> float:
    """The learning rate as torch keeps it, a Python float: TorchAdam's own where its `learning_rate` variable
    holds it, else the variable's float32 value to 7 significant digits (what a float32 carries)."""
    stored = float(optimizer.learning_rate.numpy())
    exact = getattr(optimizer, "torch_lr", None)
    return exact if exact is not None and np.float32(exact) == np.float32(stored) else float(f"{stored:.7g}")


def load_adam_state(model, optimizer, state: Mapping) -> None:
    """Set `optimizer`'s moments and `iterations` from a canonical state (strict on keys and shapes)."""
    step = check_optimizer_state(state)
    for i, name in enumerate(MOMENTS):
        assign_through_rules(model, state[name], lambda variable, i=i: _slot(optimizer, variable, i))
    optimizer.iterations.assign(step)


def _compile_with_adam(owner, model, state: Mapping | None = None):
    """Compile `owner` (`model`, or the Model that saves a bare layer) with a TorchAdam built over its trainable
    variables, holding `state` when given, so Keras's own files carry it (`optimizer/vars`); the optimizer."""
    state = state or {}
    beta_1, beta_2 = state.get("betas") or (0.9, 0.999)
    optimizer = TorchAdam(state.get("lr") or 1e-3, beta_1=beta_1, beta_2=beta_2, epsilon=state.get("eps") or 1e-8)
    owner.compile(optimizer=optimizer)
    optimizer.build(owner.trainable_variables)
    if state:
        load_adam_state(model, optimizer, state)
    return optimizer


def save_native(model, path: str | Path, optimizer_state: Mapping | None = None) -> None:
    """The model's weights as a Keras `.weights.h5` file, written atomically (temporary file, then rename);
    with a canonical `optimizer_state`, also Adam's variables, as a compiled model's `save_weights` writes
    them (the model stays compiled with that optimizer, as after a Keras user's `model.compile`)."""
    path = Path(path)
    if not path.name.endswith(NATIVE_SUFFIX):
        raise ValueError(f"{path}: a Keras weights file must end with {NATIVE_SUFFIX}")
    owner = _weights_owner(model)
    if optimizer_state is not None:
        _compile_with_adam(owner, model, optimizer_state)
    atomic.write_with(lambda temporary: owner.save_weights(temporary, overwrite=True), path)


def load_native(model, path: str | Path, with_optimizer: bool = False) -> dict | None:
    """Load a Keras `.weights.h5` file into `model` (built by `tf_impl.build` with the same config); with
    `with_optimizer`, also its Adam variables, returned in canonical layout (`betas` and `eps` None: Keras
    keeps them in a model's config, which a weights file does not hold)."""
    owner, optimizer = _weights_owner(model), None
    if with_optimizer:
        if not _has_optimizer_state(path):
            raise ValueError(f"{path}: holds no optimizer state (a compiled model's save_weights writes it)")
        optimizer = _compile_with_adam(owner, model)
    _load_weights(owner, path)
    return None if optimizer is None else {**adam_state(model, optimizer), "betas": None, "eps": None}


def _load_weights(owner, path) -> None:
    try:
        owner.load_weights(str(path))
    except Exception as error:  # h5py and Keras raise OSError, ValueError, KeyError, ... for bad files
        raise ValueError(f"{path}: not loadable Keras weights for this model ({type(error).__name__}: {error})") from None


def save_keras(model, path: str | Path, optimizer_state: Mapping | None = None) -> None:
    """The whole model as a Keras `.keras` file (its catalogue config and weights), written atomically; with a
    canonical `optimizer_state`, compiled with a TorchAdam holding it, which the file then carries."""
    path = Path(path)
    if not path.name.endswith(KERAS_SUFFIX):
        raise ValueError(f"{path}: a Keras model file must end with {KERAS_SUFFIX}")
    if optimizer_state is not None:
        if not hasattr(model, "compile"):
            raise ValueError(f"{path}: a .keras file of a bare layer ({type(model).__name__}) holds no optimizer")
        _compile_with_adam(model, model, optimizer_state)
    atomic.write_with(lambda temporary: keras.saving.save_model(model, temporary), path)


def load_keras(path: str | Path, with_optimizer: bool = False) -> tuple[object, dict | None]:
    """A catalogue model from a `.keras` file (safe mode: no code is run), and with `with_optimizer` its
    optimizer's state in canonical layout."""
    from tf_impl.keras_compat.serializable import CatalogueModel

    for spec in catalogue.CATALOGUE.values():  # each model class registers itself with Keras on import
        importlib.import_module(f"tf_impl.models.{spec.module}")
    try:
        with atomic.contained_temporaries():  # a refused archive (a zip bomb) leaves Keras's temporary folder behind
            model = keras.saving.load_model(path, compile=with_optimizer, safe_mode=True)
    except Exception as error:  # zipfile, h5py, json and Keras raise many kinds for a bad file
        raise ValueError(f"{path}: not a loadable .keras file of a catalogue model ({type(error).__name__}: {error})") from None
    if not isinstance(model, CatalogueModel):
        raise ValueError(f"{path}: holds a {type(model).__name__}, not a catalogue model")
    if not with_optimizer:
        return model, None
    if getattr(model, "optimizer", None) is None:  # Keras restores the optimizer of a model saved compiled
        raise ValueError(f"{path}: holds no optimizer state (a compiled model's .keras file does)")
    return model, adam_state(model, model.optimizer)


def _has_optimizer_state(path: str | Path) -> bool:
    """Whether a Keras `.weights.h5` file holds optimizer variables (h5py reads the index, not the arrays)."""
    import h5py

    try:
        with h5py.File(path, "r") as store:
            return "optimizer" in store and len(store["optimizer"].get("vars", {})) > 0
    except OSError:
        return False


def _weights_owner(model):
    """`model`, or for a bare layer (document 000's attention) a Model holding it: only Models save weights."""
    if hasattr(model, "save_weights"):
        return model

    holder = keras.Model()
    holder.layer = model
    holder.built = True
    return holder
