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
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from shared import catalogue, stacks
from shared.core import optimizer_state, validation
from shared.failures import clip, shown
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
            flag = "--to" if destination else "--from"
            raise ValueError(f"{flag} {shown(named)} is neither a format nor a preset; known: {known}")
        layout = layouts.preset(named)
    if key_map is not None:
        if layout.name:
            raise ValueError(f"pass a preset (--from {layout.name}) or --key-map, not both")
        layout = layouts.load(key_map)
    if layout.format is not None and layout.format not in FORMATS:
        raise ValueError(f'{layout.where}: "format" {shown(layout.format)} is not one of {", ".join(FORMATS)}')
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


METADATA_MODEL = 'its metadata\'s "model"'  # the fields a file names its model and config in, as errors name them
METADATA_CONFIG = 'its metadata\'s "config"'
KERAS_MODEL = 'its config.json\'s "rosetta_model"'
KERAS_CONFIG = 'its config.json\'s "rosetta_config"'
KERAS_WEIGHTS = "model.weights.h5"  # the arrays in a `.keras` archive
CONFIG_LIMIT = 2**20  # bytes of a `.keras` file's config.json read: a catalogue model's is a few KB (no zip bomb unpacked)


def named_model(end: Endpoint) -> str | None:
    """The catalogue model a source file names itself, read without a framework: a `.keras` file's config
    (`config.json` in its zip), a canonical safetensors file's metadata; None for a file that names none (or is
    no such file: its reader says why). A name that is no catalogue model's raises, naming the file and field."""
    if end.parts or not end.path.is_file():
        return None
    if end.format.name == "safetensors" and end.layout.identity:
        value, field = safetensors_io.read_metadata(end.path).get("model"), METADATA_MODEL
    elif end.format.name == "keras":
        value, field = (_keras_config(end.path) or {}).get("rosetta_model"), KERAS_MODEL
    else:
        return None
    if value is not None and not (isinstance(value, str) and value in catalogue.CATALOGUE):
        raise ValueError(f"{end.path}: {field} is {shown(value)}, no catalogue model's name (rosetta models lists them); "
                         "name the model with --model")  # fmt: skip
    return value


def _keras_config(path: Path) -> dict | None:
    """The config of the model a `.keras` file holds (its config.json's "config"), read within CONFIG_LIMIT; None for
    a file that is no zip or holds no config.json (Keras's reader says why); one line where it is not JSON."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open("config.json") as stream:
            text = stream.read(CONFIG_LIMIT + 1)
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    if len(text) > CONFIG_LIMIT:
        raise ValueError(f"{path}: its config.json is over {CONFIG_LIMIT:,} bytes; a catalogue model's is a few KB")
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path}: its config.json is not JSON ({clip(str(error))})") from None
    inner = config.get("config") if isinstance(config, dict) else None
    return inner if isinstance(inner, dict) else {}


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
        weights = _cast(end.layout.to_catalogue(arrays, end.text), dtype)  # a preset that does not fit names the file
        state = _map_state(state, lambda arrays: _cast(end.layout.to_catalogue(arrays), dtype))
        shapes = {key: np.shape(value) for key, value in weights.items()}
        inferred = {k: v for k, v in catalogue.sizes_from_weights(spec, shapes).items() if k not in overrides}
        config = catalogue.resolve_config(spec, dtype, {**inferred, **end.layout.config, **overrides})
        if saved is not None and end.layout.identity:
            config = _saved_config(end.path, saved, name, config, overrides, shapes)
        return Read(weights, state, config, inferred, dtype, raw)
    inferred = _checkpoint_sizes(end, stack, name, overrides) if end.format.name in CHECKPOINT_READER else {}
    config = catalogue.resolve_config(spec, dtype or "float32", {**inferred, **end.layout.config, **overrides})
    model, state = read(stack, end.parts or end.path, end.format, name, config, dtype or "float32", with_optimizer)
    left_out = {}
    if end.format.name in CHECKPOINT_READER:  # e.g. the text processors a SavedModel keeps beside the model
        left_out = importlib.import_module("tf_impl.checkpoints").left_out(end.parts or end.path)
    dtype = dtype or str(np.dtype(next(iter(stack.get_weights(model).values())).dtype))
    if end.format.name == "keras":
        saved = model.rosetta_config
        differ = [f"{key}={shown(saved.get(key))}" for key in overrides if saved.get(key) != config[key]]
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
    config a safetensors file's metadata names (a port's, a training run's; else None)."""
    if fmt.name == "torch":
        return (*importlib.import_module("torch_impl.train").read_arrays(path, with_optimizer), None)
    tensors, metadata = safetensors_io.load(path)
    weights = optimizer_state.weights_without_optimizer(tensors)
    saved = {key: metadata[key] for key in ("model", "config") if key in metadata} or None
    if not with_optimizer:
        return weights, None, saved
    state = optimizer_state.optimizer_from_tensors(tensors, metadata, str(path))
    if state is None:
        raise ValueError(f"{path}: holds no optimizer state (exp_avg/<key>, exp_avg_sq/<key>, optimizer_step)")
    return weights, state, saved


def _saved_config(path: Path, saved: dict, name: str, config: dict, overrides: dict, shapes: dict) -> dict:
    """The config a safetensors file names (as a `.keras` file does), checked against its arrays' `shapes` before
    any model is built: the model must be `name`, the config `name`'s options at the arrays' sizes, every `--set`
    must agree with it. A file whose metadata names this model and no config must hold its arrays; one naming
    another model and no config holds another tool's metadata (--model decides)."""
    spec = catalogue.get(name)
    if "config" not in saved:
        if saved.get("model") == name:
            validation.check_config_fits(spec, {}, shapes, f"{path}: {METADATA_MODEL}")
        return config
    if saved.get("model") != name:
        raise ValueError(f"{path}: holds model {shown(saved.get('model'))}, not {name!r} ({METADATA_MODEL})")
    text = saved["config"]
    try:
        stored = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        stored = None
    if stored is None:
        raise ValueError(f"{path}: {METADATA_CONFIG} is not JSON text of {name}'s options, got {shown(text)}")
    where = f"{path}: {METADATA_CONFIG}"
    validation.check_config_fits(spec, _options(where, spec, stored), shapes, where)
    resolved = catalogue.resolve_config(spec, "float32", stored)
    differ = [f"{key}={shown(resolved[key])}" for key in overrides if resolved[key] != config[key]]
    if differ:
        raise ValueError(f"{path}: saved with {', '.join(differ)}; drop those --set")
    return {**config, **stored}


def _options(where: str, spec: catalogue.ModelSpec, options) -> dict:
    """`options`, a config a file names (`where`: the file and field): an object of `spec`'s options, each of its
    type; one line naming the file, the field and the option where not."""
    if not isinstance(options, dict):
        raise ValueError(f"{where} must be an object of {spec.name}'s options, got {shown(options)}")
    unknown = [shown(key) for key in options if key not in spec.config]
    if unknown:
        listed = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        raise ValueError(f"{where} names {listed}, which model {spec.name} does not take; it takes: {', '.join(spec.config)}")
    try:
        catalogue.resolve_config(spec, "float32", options)
    except ValueError as error:  # its type or range, the value echoed: clipped
        raise ValueError(f"{where}: {clip(str(error), 2 * len(spec.name) + 200)}") from None
    return options


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
    """A `.keras` file names its model and config: the model must be the one asked for; its config is the file's,
    checked against its arrays before Keras builds the model from it."""
    _check_keras_config(stack, path, name)
    model, state = importlib.import_module(f"{stack.__name__}.train").load_keras(path, with_optimizer)
    if model.rosetta_name != name:
        raise ValueError(f"{path}: holds model {shown(model.rosetta_name)}, not {name!r}")
    return model, state


def _check_keras_config(stack, path: Path, name: str) -> None:
    """A catalogue model's `.keras` file (its config.json names "rosetta_model"): the model must be `name`, its dtype
    one of ours, its "rosetta_config" `name`'s options at the sizes of the arrays the archive holds. A file of no
    catalogue model is left to Keras's reader, which says what it holds."""
    held = _keras_config(path)
    if held is None or "rosetta_model" not in held:
        return
    if held["rosetta_model"] != name:
        raise ValueError(f"{path}: holds model {shown(held['rosetta_model'])}, not {name!r} ({KERAS_MODEL})")
    if held.get("rosetta_dtype") not in catalogue.DTYPES:
        dtype = shown(held.get("rosetta_dtype"))
        raise ValueError(f'{path}: its config.json\'s "rosetta_dtype" is {dtype}, not one of {", ".join(catalogue.DTYPES)}')
    where, spec = f"{path}: {KERAS_CONFIG}", catalogue.get(name)
    options = _options(where, spec, held.get("rosetta_config"))
    validation.check_config_fits(spec, options, _keras_shapes(stack, path, spec, options, where), where)


def _keras_shapes(stack, path: Path, spec: catalogue.ModelSpec, options: dict, where: str) -> dict[str, tuple]:
    """The canonical shapes of the arrays a `.keras` archive holds, from its model.weights.h5's index (no array
    read), through a model of its structure (`options`) at fixture sizes: its arrays' shapes written to an empty
    `.weights.h5` file (nothing allocated), which tf_impl.checkpoints reads as a model's weights file. The archive
    must hold that structure's arrays, no fewer (another n_layers) and no more (Keras would skip those unread)."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open(KERAS_WEIGHTS) as stream:
            held = _h5_shapes(stream)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path}: its {KERAS_WEIGHTS} is not a readable weights file ({clip(str(error))})") from None
    if options.get("n_layers", 0) > len(held):  # a layer holds arrays: bounded before a structure of it is built
        raise ValueError(f"{where}: n_layers is {options['n_layers']}, but the file holds {len(held)} arrays in all")
    sizes = {key: spec.fixture_config[key] for key in spec.weight_sizes}
    try:
        structure = stack.build(spec.name, "float32", **{**options, **sizes})
    except (ValueError, TypeError) as error:
        raise ValueError(f"{where}: {clip(str(error), 200)}") from None
    prefix = "" if hasattr(structure, "save_weights") else "layer/"  # a bare layer's weights file nests it in a Model
    held = {prefix + key: shape for key, shape in held.items()}
    with tempfile.TemporaryDirectory() as folder:
        skeleton, own = Path(folder) / "shapes.weights.h5", Path(folder) / "own.weights.h5"
        importlib.import_module(f"{stack.__name__}.train").save_native(structure, own)
        _write_shapes(skeleton, held)
        shapes = importlib.import_module("tf_impl.checkpoints").canonical_shapes(skeleton, structure)
        differ = sorted(set(held) ^ set(_h5_shapes(own)))
    if differ:
        built = ", ".join(f"{key}={shown(value)}" for key, value in options.items() if key not in sizes) or "its defaults"
        listed = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
        raise ValueError(f"{where}: the archive's arrays are not those of model {spec.name} built with {built} ({listed} "
                         "differ)")  # fmt: skip
    return shapes


def _h5_shapes(source) -> dict[str, tuple]:
    """A Keras weights file's datasets (path -> shape; a path or an open file), its optimizer's left out."""
    h5py = importlib.import_module("h5py")
    found = {}
    with h5py.File(source, "r") as store:
        store.visititems(lambda key, item: found.update({key: item.shape}) if isinstance(item, h5py.Dataset) else None)
    return {key: shape for key, shape in found.items() if not key.startswith("optimizer/")}


def _write_shapes(path: Path, shapes: dict[str, tuple]) -> None:
    """An HDF5 file of empty datasets of `shapes`: HDF5 allocates a dataset's storage at its first write, so none."""
    with importlib.import_module("h5py").File(path, "w") as store:
        for key, shape in shapes.items():
            store.create_dataset(key, shape=shape, dtype="f4")


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
