"""The stages of a port over one endpoint: read a file through its format (shared/port/formats.py) and map it
through its layout onto the catalogue model's canonical arrays, with the config the file and the flags give; and
back: map canonical arrays into a layout and write them in a format. `port()` (shared/port/porting.py) runs
read -> map -> write (staged) -> read back -> verify -> place."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from shared import catalogue, stacks
from shared.core import optimizer_state
from shared.failures import shown
from shared.port import file_metadata
from shared.port.endpoints import Endpoint, check_exists
from shared.port.formats import detect


@dataclasses.dataclass
class Read:
    """A file's weights in catalogue names and canonical layout, Adam's state (or None), and the config."""

    weights: dict[str, np.ndarray]
    state: dict | None
    config: dict
    inferred: dict
    dtype: str
    raw: tuple | None = None  # a keyed file's (arrays, Adam state, saved metadata) as read: other layouts map them again
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)  # objects the file holds beside its weights


def import_stacks(*names: str) -> dict:
    """The contract modules of `names`, torch imported before TensorFlow (one process holds both)."""
    return {name: stacks.import_stack(name) for name in stacks.STACKS if name in names}


def read_endpoint(end: Endpoint, stack, name: str, dtype: str | None, overrides: dict, with_optimizer: bool,
                  raw: tuple | None = None) -> Read:  # fmt: skip
    """Read `end` into canonical arrays through its layout, in `dtype` (None: the file's own); the config from
    the catalogue, the layout's options, the sizes the arrays' shapes show (keyed formats), the file's own
    (.keras), and `overrides`. `raw`: a keyed file's contents read before (`Read.raw`), not read again."""
    check_exists(end)
    if end.format.keyed:
        return _read_keyed(end, name, dtype, overrides, raw or end.format.read_keyed(end.path, with_optimizer))
    spec = catalogue.get(name)
    inferred = _checkpoint_sizes(end, stack, name, overrides) if end.format.by_path else {}
    config = catalogue.resolve_config(spec, dtype or "float32", {**inferred, **end.layout.config, **overrides})
    source = end.parts or end.path
    model, state = end.format.read_model(stack, source, name, config, dtype or "float32", with_optimizer)
    left_out = stacks.import_module("tf", "checkpoints").left_out(source) if end.format.by_path else {}  # e.g. lookup tables
    dtype = dtype or str(np.dtype(next(iter(stack.get_weights(model).values())).dtype))
    if end.format.whole_model:
        saved = model.rosetta_config
        differ = [f"{key}={shown(saved.get(key))}" for key in overrides if saved.get(key) != config[key]]
        if differ:
            raise ValueError(f"{end.path}: saved with {', '.join(differ)}; drop those --set")
        config = model.rosetta_config
    weights = _cast(end.layout.to_catalogue(stack.get_weights(model)), dtype)
    return Read(weights, _map_state(state, end.layout.to_catalogue), config, inferred, dtype, left_out=left_out)


def _read_keyed(end: Endpoint, name: str, dtype: str | None, overrides: dict, raw: tuple) -> Read:
    """A keyed file's arrays (`raw`) mapped through its layout; sizes from their shapes; a safetensors file's own
    config where it names one."""
    spec, (arrays, state, saved) = catalogue.get(name), raw
    dtype = dtype or ("float64" if any(np.asarray(a).dtype == np.float64 for a in arrays.values()) else "float32")
    weights = _cast(end.layout.to_catalogue(arrays, end.text), dtype)  # a preset that does not fit names the file
    state = _map_state(state, lambda arrays: _cast(end.layout.to_catalogue(arrays), dtype))
    shapes = {key: np.shape(value) for key, value in weights.items()}
    inferred = {k: v for k, v in catalogue.sizes_from_weights(spec, shapes).items() if k not in overrides}
    config = catalogue.resolve_config(spec, dtype, {**inferred, **end.layout.config, **overrides})
    if saved is not None and end.layout.identity:
        config = file_metadata.saved_config(end.path, saved, name, config, overrides, shapes)
    return Read(weights, state, config, inferred, dtype, raw)


def _checkpoint_sizes(end: Endpoint, stack, name: str, overrides: dict) -> dict:
    """The sizes a TF checkpoint's, a SavedModel's or a `.weights.h5` file's shapes show, read through a model of the
    same structure at fixture sizes."""
    spec = catalogue.get(name)
    structure = stack.build(name, "float32", **{**spec.fixture_config, **end.layout.config})
    shapes = stacks.import_module("tf", "checkpoints").canonical_shapes(end.parts or end.path, structure)
    return {key: value for key, value in catalogue.sizes_from_weights(spec, shapes).items() if key not in overrides}


def _cast(arrays: dict, dtype: str) -> dict:
    """Floating-point arrays in `dtype` (a float64 file ported as float32 is rounded here, as asked)."""
    return {key: np.asarray(value, dtype) if np.asarray(value).dtype.kind == "f" else value for key, value in arrays.items()}


def _map_state(state: dict | None, mapping) -> dict | None:
    """Adam's moments through the same key map as the weights (they are weight-shaped; every transform is linear)."""
    if state is None:
        return None
    return {**state, **{moment: mapping(state[moment]) for moment in optimizer_state.MOMENTS}}


def read(stack, path, fmt, name: str, config: dict, dtype: str, with_optimizer: bool = False):
    """A model of `stack` built at `config` holding the weights of `path` (strict: one error names every
    missing, unexpected and mis-shaped key), and with `with_optimizer` the Adam state the file holds, in
    canonical layout (else None). `path` is {part: path} for a source in parts."""
    return fmt.read_model(stack, path, name, config, dtype, with_optimizer)


def read_weights(path) -> dict[str, np.ndarray]:
    """The canonical arrays of a `.pt` or `.safetensors` file (its optimizer state left out), for
    `stack.set_weights(model, read_weights(path))`."""
    path = Path(path)
    fmt = detect(path, destination=False)
    if not fmt.keyed:
        raise ValueError(f"{path}: read_weights reads .pt and .safetensors files; load a {fmt.description} with its stack")
    return fmt.read_keyed(path, with_optimizer=False)[0]


def write_endpoint(end: Endpoint, path: Path, stack, name: str, config: dict, dtype: str, weights: dict, state) -> None:
    """Canonical `weights` (and Adam's `state`) mapped into `end`'s layout and written to `path` in its format."""
    file_weights = end.layout.from_catalogue(weights)
    file_state = _map_state(state, end.layout.from_catalogue)
    end.format.write(path, stack, name, config, dtype, file_weights, file_state, end.layout.identity)
