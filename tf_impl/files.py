"""Every file Keras's side reads and writes: Keras `.weights.h5` files and whole `.keras` models (safe mode: no code
runs), Adam's state in them in canonical layout, TensorFlow checkpoints and SavedModels (read by path through
tf_impl/checkpoints.py), the arrays a `.keras` archive holds (read from its index, nothing loaded), and a user's own
model as `.keras` or `.weights.h5` (`rosetta port --keras-model`).

Mirrors torch_impl/files.py; shared/port/formats.py registers each format and calls these functions.
"""

from __future__ import annotations

import importlib
import zipfile
from collections.abc import Mapping
from pathlib import Path

import keras
import numpy as np

from shared import catalogue
from shared.core.optimizer_state import MOMENTS, check_optimizer_state
from shared.io import atomic
from shared.io.sources import KERAS_WEIGHTS
from tf_impl.keras_compat.backends import all_layers
from tf_impl.keras_compat.optim import TorchAdam
from tf_impl.weights import assign_through_rules, get_grads

NATIVE_SUFFIX = ".weights.h5"
KERAS_SUFFIX = ".keras"  # the whole model: config, weights, optimizer


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
    owner = weights_owner(model)
    if optimizer_state is not None:
        _compile_with_adam(owner, model, optimizer_state)
    atomic.write_with(lambda temporary: owner.save_weights(temporary, overwrite=True), path)


def load_native(model, path: str | Path, with_optimizer: bool = False) -> dict | None:
    """Load a Keras `.weights.h5` file into `model` (built by `tf_impl.build` with the same config); with
    `with_optimizer`, also its Adam variables, returned in canonical layout (`betas` and `eps` None: Keras
    keeps them in a model's config, which a weights file does not hold)."""
    owner, optimizer = weights_owner(model), None
    if with_optimizer:
        if not has_optimizer_state(path):
            raise ValueError(f"{path}: holds no optimizer state (a compiled model's save_weights writes it)")
        optimizer = _compile_with_adam(owner, model)
    load_weights(owner, path)
    return None if optimizer is None else {**adam_state(model, optimizer), "betas": None, "eps": None}


def load_weights(owner, path) -> None:
    """Keras's `load_weights` of `path` into `owner` (a model compiled with its optimizer loads the slots too);
    one line naming the file where it does not fit."""
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


def has_optimizer_state(path: str | Path) -> bool:
    """Whether a Keras `.weights.h5` file holds optimizer variables (h5py reads the index, not the arrays)."""
    import h5py

    try:
        with h5py.File(path, "r") as store:
            return "optimizer" in store and len(store["optimizer"].get("vars", {})) > 0
    except OSError:
        return False


def weights_owner(model):
    """`model`, or for a bare layer (document 000's attention) a Model holding it: only Models save weights."""
    if hasattr(model, "save_weights"):
        return model

    holder = keras.Model()
    holder.layer = model
    holder.built = True
    return holder


# ---- what a `.keras` archive holds, read from its index ----


def archive_arrays(path: str | Path) -> dict[str, tuple]:
    """The shapes of the arrays a `.keras` archive holds (its model.weights.h5's index: no array read), its
    optimizer's left out; zipfile's, h5py's or the OS's own error where it holds no readable weights file."""
    with zipfile.ZipFile(path) as archive, archive.open(KERAS_WEIGHTS) as stream:
        return h5_shapes(stream)


def h5_shapes(source) -> dict[str, tuple]:
    """A Keras weights file's datasets (path -> shape; a path or an open file), its optimizer's left out."""
    h5py = importlib.import_module("h5py")
    found = {}
    with h5py.File(source, "r") as store:
        store.visititems(lambda key, item: found.update({key: item.shape}) if isinstance(item, h5py.Dataset) else None)
    return {key: shape for key, shape in found.items() if not key.startswith("optimizer/")}


def write_shapes(path: Path, shapes: Mapping[str, tuple]) -> None:
    """An HDF5 file of empty datasets of `shapes`: HDF5 allocates a dataset's storage at its first write, so none."""
    with importlib.import_module("h5py").File(path, "w") as store:
        for key, shape in shapes.items():
            store.create_dataset(key, shape=shape, dtype="f4")


# ---- the user's own model (rosetta port --keras-model) ----


def load_own_keras(path: str | Path):
    """A user's `.keras` file's model (safe mode: no code runs)."""
    try:
        with atomic.contained_temporaries():  # a refused archive (a zip bomb) leaves Keras's temporary folder behind
            return keras.saving.load_model(path, safe_mode=True)
    except Exception as error:  # noqa: BLE001 (Keras raises many kinds for a bad or unknown file)
        raise ValueError(f"{path}: not a loadable Keras model ({type(error).__name__}: {error}); is the module "
                         "defining its classes imported by --keras-model?") from None  # fmt: skip


def save_own_keras(model, path: str | Path) -> None:
    """A user's model as a `.keras` file, atomically: its config must serialize, and no Lambda layer's bytecode."""
    code = [layer.name for layer in all_layers(model) if isinstance(layer, keras.layers.Lambda)]
    if code:
        raise ValueError(f"your Keras model holds Lambda layers ({', '.join(code)}): a .keras file would keep their Python "
                         "bytecode, which Keras loads only with safe_mode=False; write .weights.h5 instead")  # fmt: skip
    try:
        save_keras(model, path)
    except (TypeError, NotImplementedError) as error:
        raise ValueError(f"your Keras model cannot be saved whole as .keras ({error}); write .weights.h5 instead") from None
