"""What `rosetta port` reads and writes: the file formats, the two ends of a port (a path, its format, its
layout; a source may come in parts), reading a file into canonical arrays (and Adam's state) and writing them
in a format and layout, and the staged destination that only a verified port moves into place."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import re
import zipfile
from pathlib import Path

import numpy as np

from shared import catalogue, stacks
from shared.core import optimizer_state
from shared.io import atomic, safetensors_io
from shared.port import layouts
from shared.port.layouts import KeyMap


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    suffix: str
    stack: str | None  # the stack that reads and writes it; None: either (canonical safetensors)
    description: str
    keyed: bool  # its arrays come keyed by the file's own names (renamed by a key map), not read into a model


FORMATS = {
    "torch": Format("torch", ".pt", "torch", "PyTorch state_dict", True),
    "safetensors": Format("safetensors", ".safetensors", None, "canonical safetensors", True),
    "keras_weights": Format("keras_weights", ".weights.h5", "tf", "Keras weights", False),
    "keras": Format("keras", ".keras", "tf", "Keras model", False),
    "tf_checkpoint": Format("tf_checkpoint", ".index", "tf", "TensorFlow checkpoint", False),
}
# read, never written: a folder `tf.saved_model.save` leaves (`saved_model.pb`, `variables/`), told by what it holds;
# its weights are the checkpoint `variables/variables`, read as a TF checkpoint is (tf_impl/checkpoints.py)
SAVED_MODEL = Format("saved_model", "/", "tf", "TensorFlow SavedModel", False)
READ_ONLY = {"saved_model": SAVED_MODEL}
CHECKPOINT_READER = ("keras_weights", "tf_checkpoint", "saved_model")  # read by tf_impl.checkpoints.read, by path


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A source or destination: its path (for parts, `{part: path}` too), format and layout; `named`: the user
    named the layout (`--from FORMAT` for the catalogue's own, `--from PRESET`, `--key-map`)."""

    path: Path
    format: Format
    layout: KeyMap = layouts.IDENTITY
    parts: dict[str, Path] | None = None
    named: bool = False

    def describe(self) -> str:
        layout = f", layout {self.layout.name}" if self.layout.name else ""
        return f"{self.text} ({self.format.description}{layout})"

    @property
    def text(self) -> str:
        return ",".join(f"{part}={path}" for part, path in self.parts.items()) if self.parts else str(self.path)


def import_stacks(*names: str) -> dict:
    """The contract modules of `names`, torch imported before TensorFlow (one process holds both)."""
    return {name: stacks.import_stack(name) for name in stacks.STACKS if name in names}


def endpoint(text, named: str | None = None, key_map: str | None = None, destination: bool = False) -> Endpoint:
    """The endpoint `text` names; `named` is --from/--to (a format or a preset), `key_map` a key-map file."""
    parts = source_parts(str(text)) if not destination else None
    path = Path(next(iter(parts.values()))) if parts else Path(text)
    layout, fmt = layouts.IDENTITY, None
    if named in FORMATS or named in READ_ONLY:
        fmt = {**FORMATS, **READ_ONLY}[named]
    elif named is not None:
        if named not in layouts.presets():
            known = ", ".join([*FORMATS, *READ_ONLY, *layouts.presets()])
            raise ValueError(f"{'--to' if destination else '--from'} {named!r} is neither a format nor a preset; known: {known}")
        layout = layouts.preset(named)
    if key_map is not None:
        if layout.name:
            raise ValueError(f"pass a preset (--from {layout.name}) or --key-map, not both")
        layout = layouts.load(key_map)
    if layout.format is not None and layout.format not in FORMATS:
        raise ValueError(f'{layout.where}: "format" {layout.format!r} is not one of {", ".join(FORMATS)}')
    fmt = fmt or (FORMATS[layout.format] if layout.format else None) or _detect(path, destination)
    if fmt.name in CHECKPOINT_READER and is_saved_model(path):
        fmt = SAVED_MODEL  # a layout of Keras files reads the SavedModel of the same model: its variables, by path
    if destination and fmt.name in READ_ONLY:
        raise ValueError(_refuse_saved_model(path))
    if parts and fmt.name not in ("tf_checkpoint", "keras_weights"):
        raise ValueError(f"{text}: a source in parts is read from TensorFlow checkpoints or Keras .weights.h5 files")
    flag = "--to" if destination else "--from"
    _check_format_fits_name(parts or {"": path}, fmt, f"{flag} {named}" if named else f"--key-map {layout.where}", destination)
    if layout.renames and not fmt.keyed:
        raise ValueError(f"{layout.where}: renames act on the keys of torch and safetensors files; a {fmt.description} "
                         "is read by attribute path, in the catalogue's names already")  # fmt: skip
    return Endpoint(path, fmt, layout, parts, named=named is not None or key_map is not None)


def named_model(end: Endpoint) -> str | None:
    """The catalogue model a source file names itself, read without a framework: a `.keras` file's config
    (`config.json` in its zip), a canonical safetensors file's metadata; None for a file that names none (or
    is unreadable: its reader says why)."""
    if end.parts or not end.path.is_file():
        return None
    if end.format.name == "safetensors" and end.layout.identity:
        return safetensors_io.read_metadata(end.path).get("model")
    if end.format.name == "keras":
        try:
            with zipfile.ZipFile(end.path) as archive:
                config = json.loads(archive.read("config.json")).get("config", {})
        except (OSError, KeyError, ValueError, AttributeError, zipfile.BadZipFile):
            return None
        return config.get("rosetta_model") if isinstance(config, dict) else None
    return None


def is_saved_model(path) -> bool:
    """Whether `path` is a SavedModel folder (`tf.saved_model.save`): `saved_model.pb` and a `variables/` folder."""
    path = Path(path)
    return (path / "saved_model.pb").is_file() and (path / "variables").is_dir()


def _refuse_saved_model(path: Path) -> str:
    return (f"{path}: rosetta port reads a TensorFlow SavedModel but does not write one (it holds the traced functions "
            "of the code that saved it, which no weights carry); write a Keras .weights.h5 file (`--to tf-nmt-2022` for "
            "TensorFlow's 2022 NMT tutorial), which the model's `load_weights` loads, then tf.saved_model.save that "
            "model as the tutorial's export does")  # fmt: skip


def _check_format_fits_name(paths: dict, fmt: Format, named: str, destination: bool) -> None:
    """A file whose name shows another format than the one named (`--from tf-nmt-2020` on `model.pt`): one
    error saying both, not a reader's confusion about what it did not find."""
    for path in paths.values():
        shown = next((other for other in FORMATS.values() if path.name.endswith(other.suffix)), None)
        if shown is None or shown.name == fmt.name or not (destination or path.is_file()):
            continue
        if not destination and {shown.name, fmt.name} == {"keras_weights", "tf_checkpoint"}:
            continue  # one reader takes both (a tutorial's parts saved as .weights.h5: --from tf-nmt-2020)
        verb = "writes" if destination else "reads"
        raise ValueError(f"{path}: its name says {shown.description} ({shown.suffix}), but {named} {verb} "
                         f"{fmt.description} files; name the format the file has")  # fmt: skip


def source_parts(text: str) -> dict[str, Path] | None:
    """`encoder=PATH,decoder=PATH` as {part: path}; None for a plain path."""
    if "=" not in text:
        return None
    pairs = [item.partition("=") for item in text.split(",")]
    if not all(sep and part and path for part, sep, path in pairs):
        raise ValueError(f"{text}: a source in parts reads PART=PATH,PART=PATH (e.g. encoder=enc,decoder=dec)")
    return {part: Path(path) for part, _, path in pairs}


def _detect(path: Path, destination: bool) -> Format:
    """The format `path`'s name (or, for a TF checkpoint or SavedModel folder, what lies there) shows."""
    if is_saved_model(path):
        return SAVED_MODEL
    for fmt in FORMATS.values():
        if path.name.endswith(fmt.suffix):
            return fmt
    if not destination and ((path / "checkpoint").is_file() or Path(f"{path}.index").is_file()):
        return FORMATS["tf_checkpoint"]
    known = ", ".join(f"{fmt.suffix} ({fmt.description})" for fmt in FORMATS.values())
    known += "" if destination else ", or pass a SavedModel folder (saved_model.pb, variables/)"
    flag = "--to" if destination else "--from"
    raise ValueError(f"{path}: cannot tell the format from the file name; name it {known}, or pass {flag}")


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


def read_endpoint(end: Endpoint, stack, name: str, dtype: str | None, overrides: dict, with_optimizer: bool,
                  raw: tuple | None = None) -> Read:  # fmt: skip
    """Read `end` into canonical arrays through its layout, in `dtype` (None: the file's own); the config from
    the catalogue, the layout's options, the sizes the arrays' shapes show (keyed formats), the file's own
    (.keras), and `overrides`. `raw`: a keyed file's contents read before (`Read.raw`), not read again."""
    spec = catalogue.get(name)
    _check_exists(end)
    if end.format.keyed:
        raw = raw or _read_keyed(end.path, end.format, with_optimizer)
        arrays, state, saved = raw
        dtype = dtype or ("float64" if any(np.asarray(a).dtype == np.float64 for a in arrays.values()) else "float32")
        weights = _cast(end.layout.to_catalogue(arrays), dtype)
        state = _map_state(state, lambda arrays: _cast(end.layout.to_catalogue(arrays), dtype))
        shapes = {key: np.shape(value) for key, value in weights.items()}
        inferred = {k: v for k, v in catalogue.sizes_from_weights(spec, shapes).items() if k not in overrides}
        config = catalogue.resolve_config(spec, dtype, {**inferred, **end.layout.config, **overrides})
        if saved is not None and end.layout.identity:
            config = _saved_config(end.path, saved, name, config, overrides)
        return Read(weights, state, config, inferred, dtype, raw)
    inferred = _checkpoint_sizes(end, stack, name, overrides) if end.format.name in CHECKPOINT_READER else {}
    config = catalogue.resolve_config(spec, dtype or "float32", {**inferred, **end.layout.config, **overrides})
    model, state = read(stack, end.parts or end.path, end.format, name, config, dtype or "float32", with_optimizer)
    left_out = {}
    if end.format.name in CHECKPOINT_READER:  # e.g. the text processors a SavedModel keeps beside the model
        left_out = importlib.import_module("tf_impl.checkpoints").left_out(end.parts or end.path)
    dtype = dtype or str(np.dtype(next(iter(stack.get_weights(model).values())).dtype))
    if end.format.name == "keras":
        differ = [f"{key}={model.rosetta_config.get(key)!r}" for key in overrides if model.rosetta_config.get(key) != config[key]]
        if differ:
            raise ValueError(f"{end.path}: saved with {', '.join(differ)}; drop those --set")
        config = model.rosetta_config
    weights = _cast(end.layout.to_catalogue(stack.get_weights(model)), dtype)
    return Read(weights, _map_state(state, end.layout.to_catalogue), config, inferred, dtype, left_out=left_out)


def _checkpoint_sizes(end: Endpoint, stack, name: str, overrides: dict) -> dict:
    """The sizes a TF checkpoint's, a SavedModel's or a `.weights.h5` file's shapes show, read through a model of the
    same structure at fixture sizes."""
    spec = catalogue.get(name)
    structure = stack.build(name, "float32", **{**spec.fixture_config, **end.layout.config})
    shapes = importlib.import_module("tf_impl.checkpoints").canonical_shapes(end.parts or end.path, structure)
    return {key: value for key, value in catalogue.sizes_from_weights(spec, shapes).items() if key not in overrides}


def _cast(arrays: dict, dtype: str) -> dict:
    """Floating-point arrays in `dtype` (a float64 file ported as float32 is rounded here, as asked)."""
    return {key: np.asarray(value, dtype) if np.asarray(value).dtype.kind == "f" else value for key, value in arrays.items()}


def _check_exists(end: Endpoint) -> None:
    for path in (end.parts or {"": end.path}).values():
        if not (path.exists() or Path(f"{path}.index").is_file()):
            raise ValueError(f"{path}: no such file")


def _read_keyed(path: Path, fmt: Format, with_optimizer: bool) -> tuple[dict, dict | None, dict | None]:
    """A torch or safetensors file's arrays and Adam state, keyed by the file's own names, and the model and
    config a port wrote into a safetensors file's metadata (else None)."""
    if fmt.name == "torch":
        return (*importlib.import_module("torch_impl.train").read_arrays(path, with_optimizer), None)
    tensors, metadata = safetensors_io.load(path)
    weights = optimizer_state.weights_without_optimizer(tensors)
    saved = {key: metadata[key] for key in ("model", "config") if key in metadata} if "config" in metadata else None
    if not with_optimizer:
        return weights, None, saved
    state = optimizer_state.optimizer_from_tensors(tensors, metadata)
    if state is None:
        raise ValueError(f"{path}: holds no optimizer state (exp_avg/<key>, exp_avg_sq/<key>, optimizer_step)")
    return weights, state, saved


def _saved_config(path: Path, saved: dict, name: str, config: dict, overrides: dict) -> dict:
    """The config a safetensors file names (as a `.keras` file does): the model must be `name`, every
    `--set` must agree with it."""
    try:
        stored = json.loads(saved["config"])
    except json.JSONDecodeError:
        raise ValueError(f"{path}: its metadata's config is not JSON") from None
    if saved.get("model") != name:
        raise ValueError(f"{path}: holds model {saved.get('model')!r}, not {name!r}")
    stored = catalogue.resolve_config(catalogue.get(name), "float32", stored) if isinstance(stored, dict) else None
    if stored is None:
        raise ValueError(f"{path}: its metadata's config is not an object of {name}'s options")
    differ = [f"{key}={stored[key]!r}" for key in overrides if stored[key] != config[key]]
    if differ:
        raise ValueError(f"{path}: saved with {', '.join(differ)}; drop those --set")
    return {**config, **stored}


def read_weights(path) -> dict[str, np.ndarray]:
    """The canonical arrays of a `.pt` or `.safetensors` file (its optimizer state left out), for
    `stack.set_weights(model, read_weights(path))`."""
    path = Path(path)
    fmt = _detect(path, destination=False)
    if not fmt.keyed:
        raise ValueError(f"{path}: read_weights reads .pt and .safetensors files; load a {fmt.description} with its stack")
    return _read_keyed(path, fmt, with_optimizer=False)[0]


def _map_state(state: dict | None, mapping) -> dict | None:
    """Adam's moments through the same key map as the weights (they are weight-shaped; every transform is linear)."""
    if state is None:
        return None
    return {**state, **{moment: mapping(state[moment]) for moment in optimizer_state.MOMENTS}}


def read(stack, path, fmt: Format, name: str, config: dict, dtype: str, with_optimizer: bool = False):
    """A model of `stack` built at `config` holding the weights of `path` (strict: one error names every
    missing, unexpected and mis-shaped key), and with `with_optimizer` the Adam state the file holds, in
    canonical layout (else None). `path` is {part: path} for a source in parts."""
    if fmt.name == "keras":
        return _read_keras(stack, Path(path), name, config, with_optimizer)
    if fmt.keyed:
        weights, state, _ = _read_keyed(Path(path), fmt, with_optimizer)
        model = stack.build(name, dtype, **config)
        stack.set_weights(model, weights)
        return model, state
    model = stack.build(name, dtype, **config)  # a Keras format: checked path by path, a part file named as such
    return model, importlib.import_module("tf_impl.checkpoints").read(path, model, with_optimizer)


def _read_keras(stack, path: Path, name: str, config: dict, with_optimizer: bool):
    """A `.keras` file names its model and config: the model must be the one asked for; its config is the file's."""
    model, state = importlib.import_module(f"{stack.__name__}.train").load_keras(path, with_optimizer)
    if model.rosetta_name != name:
        raise ValueError(f"{path}: holds model {model.rosetta_name!r}, not {name!r}")
    return model, state


def write_endpoint(end: Endpoint, path: Path, stack, name: str, config: dict, dtype: str, weights: dict, state) -> None:
    """Canonical `weights` (and Adam's `state`) to `path` in `end`'s format and layout."""
    file_weights = end.layout.from_catalogue(weights)
    file_state = _map_state(state, end.layout.from_catalogue)
    if end.format.name == "torch":
        importlib.import_module("torch_impl.train").write_arrays(path, file_weights, file_state)
    elif end.format.name == "safetensors":
        metadata = {"model": name, "document": catalogue.get(name).document, "written_by": "rosetta port"}
        if end.layout.identity:  # the catalogue model's file names its config, as a .keras file does
            metadata["config"] = json.dumps(config, sort_keys=True)
        if file_state is not None:
            moments, optimizer_metadata = optimizer_state.optimizer_tensors(file_state)
            file_weights, metadata = {**file_weights, **moments}, {**metadata, **optimizer_metadata}
        safetensors_io.save(path, file_weights, metadata)
    else:
        model = stack.build(name, dtype, **config)
        stack.set_weights(model, file_weights)
        write(stack, model, path, end.format, name, file_state)


def write(stack, model, path: Path, fmt: Format, name: str, optimizer_state: dict | None = None) -> None:
    """`model`'s weights (and `optimizer_state`, canonical) to `path` in a Keras format of `stack`."""
    if fmt.name == "tf_checkpoint":
        importlib.import_module("tf_impl.checkpoints").write(model, path, optimizer_state)
        return
    train = importlib.import_module(f"{stack.__name__}.train")
    (train.save_keras if fmt.name == "keras" else train.save_native)(model, path, optimizer_state)


@contextlib.contextmanager
def staged_beside(path: Path):
    """A path of `path`'s name in a hidden temporary folder beside it, removed on the way out (whatever
    was not moved into place with `move_into_place` goes with it). An error that names the hidden path is
    raised naming `path`, the file the user asked for."""
    with atomic.staged(path, folder=True) as staging:
        try:
            yield staging / path.name
        except (ValueError, OSError) as error:
            text = str(error)
            if str(staging) not in text:
                raise
            raise ValueError(text.replace(str(staging / path.name), str(path)).replace(str(staging), str(path.parent))) from None


def move_into_place(staged: Path, path: Path, force: bool = True) -> None:
    """A verified file (or checkpoint folder) renamed over `path` (a folder there, holding one TF checkpoint
    and nothing else, removed first); without `force`, only if `path` is still free (of two racing ports one
    fails cleanly)."""
    if path.is_dir() and not path.is_symlink():
        _check_replaceable_folder(path)  # again: a file may have been put there since the port began
    atomic.place(staged, path, replace=force)


CHECKPOINT_FILE = re.compile(r"(?P<prefix>.+)\.(index|data-\d+-of-\d+)")


def _check_replaceable_folder(path: Path) -> None:
    """`--force` replaces a folder only where it holds one TF checkpoint (`checkpoint`, one prefix's `.index`
    and `.data-*` files) and nothing else: never the user's other files, nor their other checkpoints."""
    entries = sorted(path.iterdir())
    files = {
        entry.name: CHECKPOINT_FILE.fullmatch(entry.name) for entry in entries if entry.is_file() and entry.name != "checkpoint"
    }
    foreign = [entry.name for entry in entries if not entry.is_file()] + [name for name, match in files.items() if not match]
    prefixes = sorted({match["prefix"] for match in files.values() if match})
    if foreign or len(prefixes) > 1:
        held = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "") if foreign else f"{len(prefixes)} checkpoints"
        raise ValueError(f"{path} is a folder holding {held}: --force replaces a file, or a folder holding one TF "
                         "checkpoint and nothing else, never other files; name a new folder")  # fmt: skip


def check_destination(src: Endpoint, dst: Endpoint, force: bool) -> None:
    if not dst.path.parent.is_dir():
        raise ValueError(f"{dst.path.parent} is not a folder: create it first")
    if dst.path.is_dir() and dst.format.name != "tf_checkpoint":
        raise ValueError(f"{dst.path} is a folder: a {dst.format.description} is a file; name one (--force replaces files only)")
    if dst.path.is_file() and dst.format.name == "tf_checkpoint":
        raise ValueError(f"{dst.path} is a file: a TensorFlow checkpoint is a folder; name a new one (--force never turns a file "
                         "into a folder)")  # fmt: skip
    if dst.path.exists() and not force:
        raise ValueError(f"{dst.path} exists: pass --force to replace it")
    if dst.path.is_dir() and not dst.path.is_symlink():
        _check_replaceable_folder(dst.path)
    if any(dst.path.resolve() == path.resolve() for path in (src.parts or {"": src.path}).values()):
        raise ValueError(f"{dst.path} is the source file")
