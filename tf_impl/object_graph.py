"""A TensorFlow `tf.train.Checkpoint`'s object graph, read: which checkpoint a path names, and its variables by
their paths from the root (tf_impl/checkpoints.py matches them to a model's). Names are normalised: a variable's own
name (the last component of its path) loses its leading underscores (Keras 3 keeps `kernel` and `embeddings` as
`_kernel`, `_embeddings` behind properties). A variable reachable by several paths keeps its first, breadth first in
the children's order (the order TensorFlow names checkpoint keys in); optimizers and the root's `save_counter` are
not model paths."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from shared.io.sources import is_saved_model

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VARIABLE_VALUE = "VARIABLE_VALUE"
OBJECT_CONFIG = "OBJECT_CONFIG_JSON"  # Keras 2's layer configs beside their variables: descriptions, no values
STEP_NAMES = ("iter", "_iterations")  # an optimizer's step counter: Keras 2 (TF <= 2.10); Keras 2 (TF >= 2.11) and 3


# ---- finding the checkpoint ----


SAVED_MODEL_VARIABLES = ("variables", "variables")  # a SavedModel's objects: the checkpoint `variables/variables`


def resolve(source) -> str:
    """The checkpoint prefix `source` names: a prefix (`ckpt-3`), its `.index` file, a folder holding a
    `checkpoint` file (its latest checkpoint, `tf.train.latest_checkpoint`), or a SavedModel folder (its
    `variables/variables`, the checkpoint of its objects). ValueError otherwise."""
    path = Path(source)
    if is_saved_model(path):
        prefix = path.joinpath(*SAVED_MODEL_VARIABLES)
        if not Path(f"{prefix}.index").is_file():
            raise ValueError(f"{source}: a SavedModel without {prefix.relative_to(path)}.index (saved holding no variables?)")
        return str(prefix)
    if path.is_dir():
        return _latest(path)
    prefix = str(path)[: -len(".index")] if path.name.endswith(".index") else str(path)
    if not Path(f"{prefix}.index").is_file():
        raise ValueError(f"{source}: nothing there (no checkpoint prefix, .index file or folder)")
    return prefix


def _latest(folder: Path) -> str:
    if not (folder / "checkpoint").is_file():
        raise ValueError(f"{folder}: a folder without a `checkpoint` file (pass a checkpoint prefix, e.g. {folder}/ckpt-1)")
    try:
        latest = tf.train.latest_checkpoint(str(folder))
    except Exception as error:  # a garbled `checkpoint` text file
        raise ValueError(f"{folder}: unreadable `checkpoint` file ({first_line(error)})") from None
    if latest is None:
        raise ValueError(f"{folder}: its `checkpoint` file names no checkpoint that exists")
    return latest


def first_line(error: Exception) -> str:
    """`Type: the first line of its message`, for one-line errors about a file TensorFlow could not read."""
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"


# ---- the object graph ----


class Stored:
    """A TensorFlow checkpoint's object graph and reader; its variables by normalised path from the root.

    Attributes:
        source: the path as the caller gave it (for messages); prefix: the checkpoint it names.
        graph: the TrackableObjectGraph proto; `nodes[i].children`, `.attributes`, `.slot_variables`.
        optimizers: the ids of optimizer nodes (holding slot variables or a step counter).
        variables: normalised path -> node id, the model's variables (no optimizer state, no save_counter).
    """

    def __init__(self, source):
        self.source, self.prefix = str(source), resolve(source)
        self.reader, self.graph = _open(self.prefix)
        self.shapes = self.reader.get_variable_to_shape_map()  # checkpoint key -> shape
        self.optimizers = _optimizer_nodes(self.graph)
        self.variables = self._variable_paths(0)

    def reroot(self, name: str) -> None:
        """Take the root's child `name` as the root (`tf.train.Checkpoint(model=model)` holds the model there)."""
        self.variables = self._variable_paths(self.child(0, name))

    def _variable_paths(self, root: int) -> dict[str, int]:
        found = {}
        for node_id, path in _paths(self.graph, root, self.optimizers).items():
            if self.key(node_id) is None or not path:
                continue
            name = normalise(path)
            if name in found:
                raise ValueError(f"{self.source}: two variables normalise to the path {name}")
            found[name] = node_id
        return found

    def other_objects(self) -> dict[str, str]:
        """The objects that hold saved values but no variable, by path from the file's root, each with what it
        holds (a TextVectorization's lookup table: `table-keys [9] string, table-values [9] int64`): what
        reading the variables leaves out."""
        found = {}
        for node_id, path in _paths(self.graph, 0, self.optimizers).items():
            held = [a for a in self.graph.nodes[node_id].attributes if a.name not in (VARIABLE_VALUE, OBJECT_CONFIG)]
            if held and path:
                found["/".join(path)] = ", ".join(self._described(a.checkpoint_key) or a.name for a in held)
        return found

    def _described(self, key: str) -> str:
        """The tensors saved under an attribute's key (a table's `key-keys` and `key-values`), with shapes and dtypes."""
        dtypes = self.reader.get_variable_to_dtype_map()
        held = sorted(name for name in self.shapes if name == key or name.startswith(f"{key}-"))
        return ", ".join(f"{name.rsplit('/', 1)[-1]} {list(self.shapes[name])} {dtypes[name].name}" for name in held)

    def key(self, node_id: int) -> str | None:
        """The checkpoint key of a variable node, None for other nodes."""
        keys = [a.checkpoint_key for a in self.graph.nodes[node_id].attributes if a.name == VARIABLE_VALUE]
        return keys[0] if keys else None

    def shape(self, node_id: int) -> tuple:
        return tuple(self.shapes[self.key(node_id)])

    def array(self, node_id: int) -> np.ndarray:
        """A variable's value; ValueError for a truncated or corrupt data file."""
        try:
            return np.asarray(self.reader.get_tensor(self.key(node_id)))
        except Exception as error:
            raise ValueError(f"{self.prefix}: cannot read {self.key(node_id)} ({first_line(error)})") from None

    def child(self, node_id: int, *names: str) -> int | None:
        """The id of `node_id`'s child by the first of `names` it has, else None."""
        children = {c.local_name: c.node_id for c in self.graph.nodes[node_id].children}
        return next((children[name] for name in names if name in children), None)


def _open(prefix: str):
    """(CheckpointReader, TrackableObjectGraph) of a checkpoint prefix; ValueError if it is not one."""
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as error:  # tf.errors.OpError: truncated, corrupt, or no checkpoint at all
        raise ValueError(f"{prefix}: not a readable TensorFlow checkpoint ({first_line(error)})") from None
    if not reader.has_tensor(GRAPH_KEY):
        raise ValueError(f"{prefix}: holds no object graph (a name-based TF1 checkpoint?)")
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    try:  # a truncated data file fails here, its graph being one of its entries
        graph.ParseFromString(reader.get_tensor(GRAPH_KEY))
    except Exception as error:
        raise ValueError(f"{prefix}: cannot read its object graph ({first_line(error)})") from None
    return reader, graph


def _optimizer_nodes(graph) -> set[int]:
    """Nodes that are optimizers: they hold slot variables or a step counter."""
    return {i for i, node in enumerate(graph.nodes) if node.slot_variables or _child_names(node) & set(STEP_NAMES)}


def _child_names(node) -> set[str]:
    return {child.local_name for child in node.children}


def _paths(graph, root: int, skip: set[int]) -> dict[int, tuple[str, ...]]:
    """Each node's first path from `root`, breadth first in the children's order, never entering `skip`
    nor the root checkpoint's `save_counter`."""
    paths, queue = {root: ()}, deque([root])
    while queue:
        parent = queue.popleft()
        for child in graph.nodes[parent].children:
            if child.node_id in paths or child.node_id in skip or (parent == 0 and child.local_name == "save_counter"):
                continue
            paths[child.node_id] = (*paths[parent], child.local_name)
            queue.append(child.node_id)
    return paths


def normalise(path) -> str:
    """`a/b/c` with the variable's own name (last component) stripped of leading underscores: Keras 3's
    `fc/_kernel` and Keras 2's `fc/kernel` are both `fc/kernel`."""
    return "/".join((*path[:-1], path[-1].lstrip("_")))
