"""TensorFlow `tf.train.Checkpoint` files <-> catalogue Keras models, strictly, through the object graph.

TensorFlow's NMT-with-attention tutorial (document 004) saves `tf.train.Checkpoint(optimizer=optimizer,
encoder=encoder, decoder=decoder)`, or each model alone with `encoder.save_weights(...)`. Such a file names
its variables by their paths in an *object graph* (its `_CHECKPOINTABLE_OBJECT_GRAPH` entry: nodes, their
children by local name, their variables' checkpoint keys, an optimizer's slot variables), not by Keras
variable names. `read` takes each variable's path from the root, matches it to the path of a variable of
our model (our layers carry the tutorial's attribute names: `encoder/gru/cell/kernel`), and loads only if
every path matches: every model variable restored, every stored variable used once, shapes equal;
otherwise one ValueError lists the missing, unexpected and mis-shaped paths, and nothing is changed.

The names (TF 2.21; Keras 2 is tf_keras 2.21 under TF_USE_LEGACY_KERAS=1):
    layer       Keras 2                                  Keras 3
    Embedding   embedding/embeddings                     embedding/_embeddings
    Dense       fc/kernel, fc/bias                       fc/_kernel, fc/bias
    GRU         gru/cell/kernel|recurrent_kernel|bias    the same (Keras 2 adds an empty `gru/state_spec` node)
Paths are normalised and found as tf_impl/object_graph.py says (Keras 3's `fc/_kernel` is Keras 2's `fc/kernel`).

Adam's state, three layouts (`read(..., with_optimizer=True)` returns it canonical, as tf_impl.files.adam_state does):
    Keras 2, TF <= 2.10 (later `tf.keras.optimizers.legacy.Adam`): `optimizer/iter`, `beta_1`, `beta_2`,
        `decay`, `learning_rate`, and the moments as *slot variables* `m` and `v` of each model variable:
        the graph pairs them.
    Keras 3: `optimizer/_iterations`, `_learning_rate`, and lists `_momentums/i`, `_velocities/i`,
        `_trainable_variables/i` whose entries are the model's own variable nodes: moment i belongs to
        variable i (Keras builds both lists in one order): the graph pairs them.
    Keras 2, TF 2.11-2.15 (`tf.keras.optimizers.Adam` there): `_iterations`, `_momentums/i`, `_velocities/i`,
        but the variable -> index map (`_index_dict`) is not saved: pairing would be a guess by order or
        shape (W1 and W2 share theirs), so `with_optimizer` refuses it; the weights load.

Keras 3 `.weights.h5` files (`encoder.save_weights('encoder.weights.h5')`) are read too: a part into its
sublayer, a whole model as tf_impl.files.load_native does, after the same strict check of their datasets. SavedModel
folders (`tf.saved_model.save(obj, folder)`: `saved_model.pb`, `variables/`) are read through their
checkpoint `variables/variables`, whose object graph is `obj`'s: the model at the root, or under one name
(TensorFlow's 2022 NMT tutorial exports `Export(model)`: `model/encoder/...`). What such a file keeps beside
variables (the tutorial's TextVectorization layers keep lookup tables: `table-keys`, `table-values`) is no
weight of the model: `read` leaves it, and `left_out` names it for the port's report. A variable that is not the
model's (a layer beside it) is an unexpected path, refused as in any checkpoint.
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Mapping
from pathlib import Path

import h5py
import keras
import numpy as np
import tensorflow as tf

from shared.core import moved
from shared.core.canonical import RULES, join_key
from shared.core.optimizer_state import MOMENTS, check_optimizer_state
from shared.io import atomic
from tf_impl.files import NATIVE_SUFFIX, h5_shapes, load_adam_state, load_native, save_native, weights_owner, write_shapes
from tf_impl.object_graph import STEP_NAMES, Stored, first_line, normalise
from tf_impl.weights import get_grads, leaves

__getattr__ = moved.getattr_for(__name__)  # the object graph's names that moved to object_graph.py warn

PREFIX = "ckpt"  # write(): `folder/ckpt-1`, as the tutorial's `checkpoint.save(file_prefix=.../ckpt)`


# ---- the model's side ----


def variable_paths(model) -> dict[str, object]:
    """`model`'s variables by normalised object-graph path, as `tf.train.Checkpoint(**parts)` names them
    (`encoder/gru/cell/kernel`); optimizers (a compiled model's) are skipped."""
    found, seen, queue = {}, {id(model)}, deque([(model, ())])
    while queue:
        parent, path = queue.popleft()
        for name, child in tf.train.TrackableView.children(parent).items():
            if id(child) in seen or isinstance(child, keras.optimizers.Optimizer):
                continue
            seen.add(id(child))
            if isinstance(child, (keras.Variable, tf.Variable)):
                found[normalise((*path, name))] = child
            else:
                queue.append((child, (*path, name)))
    return found


def parts(model) -> dict[str, object]:
    """The model's top-level children that hold variables (tf_tutorial: `encoder`, `decoder`), in order."""
    names = dict.fromkeys(path.split("/")[0] for path in variable_paths(model))
    children = tf.train.TrackableView.children(model)
    return {name: children[name] for name in names}


def _model_name(model) -> str:
    return getattr(model, "rosetta_name", type(model).__name__)


def _misfit(expected: Mapping[str, tuple], given: Mapping[str, tuple], what: str = "paths") -> list[str]:
    """The problems of `given` (path -> shape) against `expected`: missing, unexpected, mis-shaped."""
    missing = [p for p in expected if p not in given]
    unexpected = [p for p in given if p not in expected]
    common = [p for p in expected if p in given and tuple(expected[p]) != tuple(given[p])]
    misshaped = [f"{p} (model {tuple(expected[p])}, file {tuple(given[p])})" for p in common]
    found = [(f"missing {what}", missing), (f"unexpected {what}", unexpected), (f"mis-shaped {what}", misshaped)]
    return [f"{label}: {', '.join(items)}" for label, items in found if items]


def _refuse(problems: list[str], source: str, model) -> None:
    if problems:
        raise ValueError(f"{source} does not fit {_model_name(model)}: " + " | ".join(problems))


# ---- reading ----


def read(source, model, with_optimizer: bool = False) -> dict | None:
    """Load a checkpoint into `model` (from `tf_impl.build`), strictly; Adam's state with `with_optimizer`.

    Args:
        source: a TensorFlow checkpoint (prefix, `.index` file, or folder with a `checkpoint` file) whose root
            holds the model's parts (`tf.train.Checkpoint(encoder=..., decoder=...)`, the tutorial's) or the
            model under one name (`tf.train.Checkpoint(model=model)`); a Keras 3 `.weights.h5` file of the
            whole model; or a mapping part -> file, e.g. `{"encoder": "enc", "decoder": "dec"}` for the
            tutorial's separate `save_weights` files (TF format, or Keras 3 `.weights.h5`).
        with_optimizer: also read Adam's state; without it optimizer entries are ignored.
    Returns:
        None, or Adam's state in canonical layout: `step`, `exp_avg`, `exp_avg_sq` (keyed like the canonical
        weights), `lr`, `betas` (None where the file keeps none), `eps` (None: no file keeps it).
    Raises:
        ValueError (one line): no or a corrupt file; a file of another model or of one part only (naming
        the part); missing, unexpected or mis-shaped paths (all listed); `with_optimizer` on a file without
        Adam's state, or whose moments cannot be paired with their variables.
    """
    if isinstance(source, Mapping):
        return _read_parts(source, model, with_optimizer)
    if _is_h5(source):
        return _read_h5(source, model, with_optimizer)
    stored = Stored(source)
    found = _model_relative(stored, model)
    _refuse(_misfit(_shapes(variable_paths(model)), {p: stored.shape(n) for p, n in found.items()}), stored.source, model)
    state = _optimizer_state(stored, found, model) if with_optimizer else None
    _assign(model, {path: stored.array(node) for path, node in found.items()})
    return state


def _shapes(variables: Mapping[str, object]) -> dict[str, tuple]:
    return {path: tuple(variable.shape) for path, variable in variables.items()}


def _model_relative(stored: Stored, model) -> dict[str, int]:
    """The stored variables by path relative to the model: the root holds the model's parts, or the model
    under one name (then stripped). A file holding one part only is refused, naming it."""
    names, own = _top_names(stored.variables), parts(model)
    if len(names) == 1 and names[0] not in own:
        stored.reroot(names[0])  # tf.train.Checkpoint(model=model)
        names = _top_names(stored.variables)
    if not set(names) & set(own):
        _refuse_one_part(stored.source, list(stored.variables), model, variable_paths)
    return stored.variables


def _top_names(paths) -> list[str]:
    return list(dict.fromkeys(path.split("/")[0] for path in paths))


def _refuse_one_part(source: str, paths: list[str], model, layout) -> None:
    """ValueError when `paths` are exactly those `layout(part)` gives for one of the model's parts (the part's
    own file); `layout` is variable_paths (TF checkpoints) or _h5_layout (Keras 3 .weights.h5 files)."""
    own = parts(model)
    for part, layer in own.items():
        if isinstance(layer, keras.layers.Layer) and set(paths) == set(layout(layer)):  # a bare variable is no part
            missing = [name for name in own if name != part]
            verb = "is" if len(missing) == 1 else "are"
            passed = ",".join(f"{name}={source if name == part else 'PATH'}" for name in own)
            raise ValueError(
                f"{source}: holds the {part} of {_model_name(model)} ({', '.join(_top_names(paths))}); "
                f"the {', '.join(missing)} {verb} missing: pass {passed}"
            )


def _assign(model, arrays: Mapping[str, np.ndarray]) -> None:
    """Assign checked arrays to the model's variables by path (cast to each variable's dtype)."""
    variables = variable_paths(model)
    for path, array in arrays.items():
        variable = variables[path]
        variable.assign(array.astype(keras.backend.standardize_dtype(variable.dtype)))


def canonical_shapes(source, model) -> dict[str, tuple]:
    """The canonical weight shapes (torch's names and layouts) a TF checkpoint, a SavedModel or a whole model's
    Keras 3 `.weights.h5` file holds, read through the structure of `model` (built at any sizes): what
    `rosetta port` reads a file's sizes from. Part files in `.weights.h5` give none. A leaf whose arrays do
    not fit together (another model's file) gives none either: the strict read names what does not fit."""
    if isinstance(source, Mapping):
        if any(_is_h5(part) for part in source.values()):
            return {}
        stored = {name: Stored(part) for name, part in source.items()}
        found = {f"{name}/{path}": part.shape(node) for name, part in stored.items() for path, node in part.variables.items()}
        path_of = {id(variable): path for path, variable in variable_paths(model).items()}
    elif _is_h5(source):
        found, path_of = _h5_datasets(source), _h5_names(model)
    else:
        stored = Stored(source)
        found = {path: stored.shape(node) for path, node in _model_relative(stored, model).items()}
        path_of = {id(variable): path for path, variable in variable_paths(model).items()}
    shapes = {}
    for prefix, kind, variables in leaves(model):
        paths = {name: path_of.get(id(variable)) for name, variable in variables.items()}
        if all(path in found for path in paths.values()):
            zeros = {name: np.broadcast_to(np.float32(0), found[path]) for name, path in paths.items()}
            try:
                canonical = RULES[kind].from_keras(zeros)
            except ValueError:  # e.g. attention projections of other widths: not this model's leaf
                continue
            shapes.update({join_key(prefix, sfx): value.shape for sfx, value in canonical.items()})
    return shapes


def structure_shapes(held: Mapping[str, tuple], structure) -> tuple[dict[str, tuple], list[str]]:
    """The canonical shapes of arrays of `held` shapes (Keras weights paths) read into `structure`, a model built at
    fixture sizes, and the paths in `held` or in `structure`'s own weights file but not both. The shapes are written
    to an empty `.weights.h5` file (HDF5 allocates a dataset at its first write: nothing is), which
    tf_impl.checkpoints reads as that model's weights file."""
    prefix = "" if hasattr(structure, "save_weights") else "layer/"  # a bare layer's weights file nests it in a Model
    held = {prefix + key: shape for key, shape in held.items()}
    with tempfile.TemporaryDirectory() as folder:
        skeleton, own = Path(folder) / "shapes.weights.h5", Path(folder) / "own.weights.h5"
        save_native(structure, own)
        write_shapes(skeleton, held)
        shapes = canonical_shapes(skeleton, structure)
        differ = sorted(set(held) ^ set(h5_shapes(own)))
    return shapes, differ


def _h5_names(model) -> dict[int, str]:
    """id(variable) -> the dataset a whole model's `.weights.h5` file keeps it in (`decoder/rnn/cell/vars/1`):
    Keras names datasets by position, so each floating-point variable is saved holding its own number, and
    found again by it (the values are put back after)."""
    owner = weights_owner(model)
    variables = [v for v in owner.weights if np.dtype(keras.backend.standardize_dtype(v.dtype)).kind == "f" and np.prod(v.shape)]
    kept = [np.asarray(variable.numpy()) for variable in variables]
    try:
        for number, variable in enumerate(variables, start=1):
            variable.assign(np.full(tuple(variable.shape), number, kept[number - 1].dtype))
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, f"layout{NATIVE_SUFFIX}")
            _as_built(owner, lambda: keras.saving.save_weights(owner, path))
            with h5py.File(path, "r") as store:
                numbers = {}
                store.visititems(lambda name, item: numbers.update({name: item[()].flat[0]} if isinstance(item, h5py.Dataset)
                                                                   and item.size and item.dtype.kind == "f" else {}))  # fmt: skip
    finally:
        for variable, value in zip(variables, kept, strict=True):
            variable.assign(value)
    return {id(variables[int(number) - 1]): name for name, number in numbers.items() if 1 <= number <= len(variables)}


def left_out(source) -> dict[str, str]:
    """What a TF checkpoint or SavedModel holds beside variables, by path (`model/encoder/text_processor/...`):
    the objects that keep values but no variable, such as the lookup tables of the tutorial's TextVectorization
    layers (their vocabulary counts). `read` matches variables only: these are no weights of the model, and a
    port leaves them out (saying so). Keras `.weights.h5` files and parts give none."""
    if isinstance(source, Mapping) or _is_h5(source):
        return {}
    return Stored(source).other_objects()


# ---- Adam's state ----


def _optimizer_state(stored: Stored, found: Mapping[str, int], model) -> dict:
    """Adam's state of the checkpoint in canonical layout (exact arrays), its moments paired by the graph."""
    if not stored.optimizers:
        raise ValueError(f"{stored.source}: holds no optimizer state (with_optimizer needs one saved with its optimizer)")
    if len(stored.optimizers) > 1:
        raise ValueError(f"{stored.source}: holds {len(stored.optimizers)} optimizers; which one is Adam's is unclear")
    node = min(stored.optimizers)
    pairs = _slot_moments(stored, node) if stored.graph.nodes[node].slot_variables else _list_moments(stored, node)
    unpaired = [path for path, variable_node in found.items() if variable_node not in pairs]
    if unpaired:
        raise ValueError(f"{stored.source}: the optimizer holds no Adam moments for {', '.join(unpaired)}")
    by_path = {path: [stored.array(n) for n in pairs[variable_node]] for path, variable_node in found.items()}
    return _canonical_state(stored, node, model, by_path)


def _slot_moments(stored: Stored, node: int) -> dict[int, tuple[int, int]]:
    """Keras 2 (TF <= 2.10): variable node -> (its slot `m`, its slot `v`)."""
    slots: dict[int, dict[str, int]] = {}
    for slot in stored.graph.nodes[node].slot_variables:
        slots.setdefault(slot.original_variable_node_id, {})[slot.slot_name] = slot.slot_variable_node_id
    return {variable: (s["m"], s["v"]) for variable, s in slots.items() if {"m", "v"} <= set(s)}


def _list_moments(stored: Stored, node: int) -> dict[int, tuple[int, int]]:
    """Keras 3: variable node -> (momentum, velocity), entry i of `_momentums`/`_velocities` belonging to
    entry i of `_trainable_variables` (the model's variable node itself)."""
    lists = {name: stored.child(node, name) for name in ("_trainable_variables", "_momentums", "_velocities")}
    if lists["_momentums"] is None or lists["_velocities"] is None:
        raise ValueError(f"{stored.source}: the optimizer holds no Adam moments (_momentums, _velocities)")
    if lists["_trainable_variables"] is None:
        raise ValueError(
            f"{stored.source}: Adam's moments written by Keras 2's optimizer of TF 2.11-2.15 do not say which variable each "
            "belongs to (its _index_dict is not saved): they cannot be paired reliably; read without with_optimizer"
        )
    entries = {name: {c.local_name: c.node_id for c in stored.graph.nodes[i].children} for name, i in lists.items()}
    variables, momentums, velocities = entries["_trainable_variables"], entries["_momentums"], entries["_velocities"]
    return {variable: (momentums[i], velocities[i]) for i, variable in variables.items() if i in momentums and i in velocities}


def _canonical_state(stored: Stored, node: int, model, by_path: Mapping[str, list]) -> dict:
    """`step`, `exp_avg`, `exp_avg_sq` (through the weights' leaf rules), `lr`, `betas`, `eps` (None)."""
    variables = variable_paths(model)
    misshaped = [path for path, pair in by_path.items() if any(m.shape != tuple(variables[path].shape) for m in pair)]
    if misshaped:
        raise ValueError(f"{stored.source}: Adam's moments of {', '.join(misshaped)} are not shaped like their variables")
    paths = {id(variable): path for path, variable in variables.items()}
    moments = {name: get_grads(model, lambda variable, i=i: by_path[paths[id(variable)]][i]) for i, name in enumerate(MOMENTS)}
    betas = [stored.child(node, name) for name in ("beta_1", "beta_2")]  # Keras 2 (TF <= 2.10) only
    return {
        "step": int(stored.array(stored.child(node, *STEP_NAMES))),
        **moments,
        "lr": _scalar(stored, stored.child(node, "learning_rate", "_learning_rate")),
        "betas": None if None in betas else tuple(_scalar(stored, beta) for beta in betas),
        "eps": None,  # neither Keras saves epsilon
    }


def _scalar(stored: Stored, node: int | None) -> float | None:
    """A float32 hyperparameter as torch keeps it, a Python float to the 7 digits float32 carries."""
    return None if node is None or stored.key(node) is None else float(f"{float(stored.array(node)):.7g}")


# ---- parts and Keras 3 .weights.h5 files ----


def _read_parts(sources: Mapping, model, with_optimizer: bool) -> None:
    """Each part from its own file, all checked before any is loaded; one ValueError lists every problem."""
    own = parts(model)
    if set(sources) != set(own):
        raise ValueError(f"parts {', '.join(map(str, sources))}: {_model_name(model)} has the parts {', '.join(own)}")
    if with_optimizer:
        raise ValueError("part files (the tutorial's encoder.save_weights, decoder.save_weights) hold no optimizer state")
    problems, loads = [], []
    for name, source in sources.items():
        found, load = (_h5_part if _is_h5(source) else _checkpoint_part)(own[name], source)
        problems += [f"{name} ({source}): {problem}" for problem in found]
        loads.append(load)
    _refuse(problems, "parts", model)
    for load in loads:
        load()


def _checkpoint_part(part, source) -> tuple[list[str], object]:
    """A TF-format part (Keras 2 `encoder.save_weights('enc')`: its root is the part): problems, loader."""
    stored = Stored(source)
    problems = _misfit(_shapes(variable_paths(part)), {p: stored.shape(n) for p, n in stored.variables.items()})
    return problems, lambda: _assign(part, {path: stored.array(node) for path, node in stored.variables.items()})


def _h5_part(part, source) -> tuple[list[str], object]:
    """A Keras 3 part file (`encoder.save_weights('encoder.weights.h5')`): problems, loader."""
    problems = _misfit(_h5_layout(part), _h5_datasets(source), "datasets")
    return problems, lambda: _as_built(part, lambda: keras.saving.load_weights(part, str(source)))


def _as_built(layer, action):
    """`action()` with `layer.built` True: Keras saves and loads only built layers, and a sublayer our models call
    by method (the Decoder's `features`) has every variable but is never marked built."""
    built, layer.built = layer.built, True
    try:
        return action()
    finally:
        layer.built = built


def _is_h5(source) -> bool:
    return str(source).endswith(NATIVE_SUFFIX) or (Path(source).is_file() and h5py.is_hdf5(source))


def _h5_datasets(source) -> dict[str, tuple]:
    """A Keras 3 weights file's datasets (`gru/cell/vars/0` -> shape), optimizer groups left out."""
    found = {}
    try:
        with h5py.File(source, "r") as store:
            if "layer_names" in store.attrs or "model_weights" in store:
                raise ValueError(f"{source}: a Keras 2 .h5 weights file; TensorFlow checkpoints and Keras 3 .weights.h5 are read")
            store.visititems(lambda name, item: found.update({name: item.shape} if isinstance(item, h5py.Dataset) else {}))
    except OSError as error:
        raise ValueError(f"{source}: not a readable Keras weights file ({first_line(error)})") from None
    return {name: shape for name, shape in found.items() if not name.startswith("optimizer/")}


def _h5_layout(layer) -> dict[str, tuple]:
    """The datasets Keras 3 writes for `layer` (its own `save_weights` layout), optimizer groups left out."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"layout{NATIVE_SUFFIX}")
        _as_built(layer, lambda: keras.saving.save_weights(layer, path))
        return _h5_datasets(path)


def _read_h5(source, model, with_optimizer: bool) -> dict | None:
    """A whole model's `.weights.h5` file (loaded by tf_impl.files.load_native), or refused naming the part it holds."""
    datasets = _h5_datasets(source)
    if not set(_top_names(datasets)) & set(parts(model)):
        _refuse_one_part(str(source), list(datasets), model, _h5_layout)
    _refuse(_misfit(_h5_layout(weights_owner(model)), datasets, "datasets"), str(source), model)
    return load_native(model, source, with_optimizer)


# ---- writing ----


def write(model, folder, optimizer_state: Mapping | None = None) -> str:
    """`model` as the tutorial's `checkpoint.save` leaves it: `folder/ckpt-1.index`, `.data-00000-of-00001` and
    `checkpoint`; the root's children are the model's parts (`encoder`, `decoder`), and `optimizer` (a Keras
    Adam holding the canonical `optimizer_state`) when one is given. Written into a temporary folder beside
    `folder` and renamed into place: nothing partial is left on failure. Returns the checkpoint prefix.

    Raises:
        ValueError: `folder` exists and is not an empty folder, its parent does not exist, or the
            optimizer state does not fit the model.
    """
    folder = Path(folder)
    if folder.exists() and not (folder.is_dir() and not any(folder.iterdir())):
        raise ValueError(f"{folder}: exists and is not an empty folder")
    if not folder.parent.is_dir():
        raise ValueError(f"{folder}: its parent folder does not exist")
    unseen = len({id(v) for v in model.weights} - {id(v) for v in variable_paths(model).values()})
    if unseen:
        raise ValueError(
            f"{_model_name(model)}: {unseen} of its variables are not in TensorFlow's object graph (layers kept in a list?)"
        )
    if optimizer_state is not None:
        check_optimizer_state(optimizer_state)
    with atomic.staged(folder, folder=True) as temporary:
        objects = dict(parts(model))
        if optimizer_state is not None:
            objects["optimizer"] = _adam_holding(model, objects, optimizer_state)
        tf.train.Checkpoint(**objects).save(str(temporary / PREFIX))
        atomic.place(temporary, folder)
    return str(folder / f"{PREFIX}-1")


def _adam_holding(model, model_parts: Mapping, state: Mapping):
    """A stock Keras Adam (the tutorial's) built over the parts' trainable variables in the tutorial's order
    (`encoder.trainable_variables + decoder.trainable_variables`), holding `state`'s moments and step."""
    beta_1, beta_2 = state.get("betas") or (0.9, 0.999)
    optimizer = keras.optimizers.Adam(state.get("lr") or 1e-3, beta_1=beta_1, beta_2=beta_2, epsilon=state.get("eps") or 1e-7)
    optimizer.build([variable for part in model_parts.values() for variable in part.trainable_variables])
    load_adam_state(model, optimizer, state)
    return optimizer
