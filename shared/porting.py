"""`rosetta port`: a trained model from one stack's file to the other's, verified component by component.

Formats, read from the file name (`--from` / `--to` name them otherwise): a PyTorch `.pt` state_dict or
checkpoint `{"model", "optimizer"}` (read with `weights_only=True`: a file holding pickled code is refused,
never run), canonical `.safetensors` (the state_dict layout, no code), Keras `.weights.h5`, a whole Keras
model `.keras` (safe mode), and a TensorFlow checkpoint (`tf.train.Checkpoint`: its prefix, `.index` file,
or folder). A source may come in parts (`encoder=PATH,decoder=PATH`, the TF tutorial's separate files).

Another project's layout is a key map (shared.layouts: renames and transforms onto the catalogue model's
canonical weights; the presets are the tutorials our documents follow). The config comes from the
catalogue, the layout's options, the sizes the file's shapes show, then `--set`.

A port reads the source into canonical arrays, writes the destination through its stack (and layout) into a
temporary folder beside it, reads that back through the same readers, and verifies (shared.verification):
the mapping in float64, float32 measured beside it, and the user's own model where one can run. Only a port
that verifies is moved into place: a failed or refused port leaves nothing behind; the source is only read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
from pathlib import Path

import numpy as np

from shared import atomic, catalogue, layouts, references, safetensors_io, stacks, training
from shared.conversion import convert, verify  # your own model: the public converter (shared/conversion.py)
from shared.fixtures import synthetic_batch
from shared.layouts import KeyMap
from shared.specs import Sizes
from shared.verification import (
    SCALED_BOUND,
    Check,
    Component,
    against_reference,
    bounds,
    compare_components,
    compare_optimizer_states,
    render_check,
)

__all__ = ["FORMATS", "Component", "PortReport", "convert", "port", "read", "render", "verification_batch", "verify"]


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
VERIFY_SIZES = Sizes(batch=3, src_len=7, tgt_len=6)  # the fixture sentences of a port's verification


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A source or destination: its path (for parts, `{part: path}` too), format and layout."""

    path: Path
    format: Format
    layout: KeyMap = layouts.IDENTITY
    parts: dict[str, Path] | None = None

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
    if named in FORMATS:
        fmt = FORMATS[named]
    elif named is not None:
        if named not in layouts.presets():
            known = ", ".join([*FORMATS, *layouts.presets()])
            raise ValueError(f"{'--to' if destination else '--from'} {named!r} is neither a format nor a preset; known: {known}")
        layout = layouts.preset(named)
    if key_map is not None:
        if layout.name:
            raise ValueError(f"pass a preset (--from {layout.name}) or --key-map, not both")
        layout = layouts.load(key_map)
    fmt = fmt or (FORMATS[layout.format] if layout.format else None) or _detect(path, destination)
    if parts and fmt.name not in ("tf_checkpoint", "keras_weights"):
        raise ValueError(f"{text}: a source in parts is read from TensorFlow checkpoints or Keras .weights.h5 files")
    return Endpoint(path, fmt, layout, parts)


def source_parts(text: str) -> dict[str, Path] | None:
    """`encoder=PATH,decoder=PATH` as {part: path}; None for a plain path."""
    if "=" not in text:
        return None
    pairs = [item.partition("=") for item in text.split(",")]
    if not all(sep and part and path for part, sep, path in pairs):
        raise ValueError(f"{text}: a source in parts reads PART=PATH,PART=PATH (e.g. encoder=enc,decoder=dec)")
    return {part: Path(path) for part, _, path in pairs}


def _detect(path: Path, destination: bool) -> Format:
    """The format `path`'s name (or, for a TF checkpoint, what lies there) shows."""
    for fmt in FORMATS.values():
        if path.name.endswith(fmt.suffix):
            return fmt
    if not destination and ((path / "checkpoint").is_file() or Path(f"{path}.index").is_file()):
        return FORMATS["tf_checkpoint"]
    known = ", ".join(f"{fmt.suffix} ({fmt.description})" for fmt in FORMATS.values())
    flag = "--to" if destination else "--from"
    raise ValueError(f"{path}: cannot tell the format from the file name; name it {known}, or pass {flag}")


@dataclasses.dataclass
class PortReport:
    source: Endpoint
    destination: Endpoint
    model: str
    config: dict
    inferred: dict
    weights: int
    values: int
    checks: list[Check]

    @property
    def components(self) -> list[Component]:
        """Every component that decides, in check order."""
        return [component for check in self.checks for component in check.components]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def first_failure(self) -> tuple[Check, Component] | None:
        return next(((check, c) for check in self.checks for c in check.components if not c.ok), None)


# ---- reading and writing ----


@dataclasses.dataclass
class Read:
    """A file's weights in catalogue names and canonical layout, Adam's state (or None), and the config."""

    weights: dict[str, np.ndarray]
    state: dict | None
    config: dict
    inferred: dict
    dtype: str


def read_endpoint(end: Endpoint, stack, name: str, dtype: str | None, overrides: dict, with_optimizer: bool) -> Read:
    """Read `end` into canonical arrays through its layout, in `dtype` (None: the file's own); the config from
    the catalogue, the layout's options, the sizes the arrays' shapes show (keyed formats), the file's own
    (.keras), and `overrides`."""
    spec = catalogue.get(name)
    _check_exists(end)
    if end.format.keyed:
        raw, state = _read_keyed(end.path, end.format, with_optimizer)
        dtype = dtype or ("float64" if any(np.asarray(a).dtype == np.float64 for a in raw.values()) else "float32")
        weights = _cast(end.layout.to_catalogue(raw), dtype)
        state = _map_state(state, lambda arrays: _cast(end.layout.to_catalogue(arrays), dtype))
        shapes = {key: np.shape(value) for key, value in weights.items()}
        inferred = {k: v for k, v in catalogue.sizes_from_weights(spec, shapes).items() if k not in overrides}
        config = catalogue.resolve_config(spec, dtype, {**inferred, **end.layout.config, **overrides})
        return Read(weights, state, config, inferred, dtype)
    inferred = _checkpoint_sizes(end, stack, name, overrides) if end.format.name == "tf_checkpoint" else {}
    config = catalogue.resolve_config(spec, dtype or "float32", {**inferred, **end.layout.config, **overrides})
    model, state = read(stack, end.parts or end.path, end.format, name, config, dtype or "float32", with_optimizer)
    dtype = dtype or str(np.dtype(next(iter(stack.get_weights(model).values())).dtype))
    if end.format.name == "keras":
        differ = [f"{key}={model.rosetta_config.get(key)!r}" for key in overrides if model.rosetta_config.get(key) != config[key]]
        if differ:
            raise ValueError(f"{end.path}: saved with {', '.join(differ)}; drop those --set")
        config = model.rosetta_config
    weights = _cast(end.layout.to_catalogue(stack.get_weights(model)), dtype)
    return Read(weights, _map_state(state, end.layout.to_catalogue), config, inferred, dtype)


def _checkpoint_sizes(end: Endpoint, stack, name: str, overrides: dict) -> dict:
    """The sizes a TF checkpoint's shapes show, read through a model of the same structure at fixture sizes."""
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


def _read_keyed(path: Path, fmt: Format, with_optimizer: bool) -> tuple[dict, dict | None]:
    """A torch or safetensors file's arrays and Adam state, keyed by the file's own names."""
    if fmt.name == "torch":
        return importlib.import_module("torch_impl.train").read_arrays(path, with_optimizer)
    tensors, metadata = safetensors_io.load(path)
    weights = training.weights_without_optimizer(tensors)
    if not with_optimizer:
        return weights, None
    state = training.optimizer_from_tensors(tensors, metadata)
    if state is None:
        raise ValueError(f"{path}: holds no optimizer state (exp_avg/<key>, exp_avg_sq/<key>, optimizer_step)")
    return weights, state


def _map_state(state: dict | None, mapping) -> dict | None:
    """Adam's moments through the same key map as the weights (they are weight-shaped; every transform is linear)."""
    if state is None:
        return None
    return {**state, **{moment: mapping(state[moment]) for moment in training.MOMENTS}}


def read(stack, path, fmt: Format, name: str, config: dict, dtype: str, with_optimizer: bool = False):
    """A model of `stack` built at `config` holding the weights of `path` (strict: one error names every
    missing, unexpected and mis-shaped key), and with `with_optimizer` the Adam state the file holds, in
    canonical layout (else None). `path` is {part: path} for a source in parts."""
    if fmt.name == "keras":
        return _read_keras(stack, Path(path), name, config, with_optimizer)
    if fmt.keyed:
        weights, state = _read_keyed(Path(path), fmt, with_optimizer)
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
        if file_state is not None:
            moments, optimizer_metadata = training.optimizer_tensors(file_state)
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


# ---- the port ----


def port(source, destination, model: str | None = None, to: str | None = None, force: bool = False,
         overrides: dict | None = None, inputs=None, dtype: str | None = None, with_optimizer: bool = False,
         source_format: str | None = None, key_map: str | None = None, reference: str | None = None) -> PortReport:  # fmt: skip
    """Port `source` to `destination` for catalogue model `model` (or the layout's); verify; move into place
    if it verifies.

    Args:
        to, source_format: the destination's and the source's format or preset (`--to`, `--from`).
        key_map: a key-map file for the source's layout (shared.layouts).
        reference: `MODULE:CALLABLE`, the user's model to verify against (shared.references).
        dtype: the precision of the written file (default: the source's).
        with_optimizer: port Adam's moments and step counter too, compared exactly after reading back.

    Raises ValueError for a request that cannot be carried out (unknown model, format or layout, a file of
    another model, an unreadable file, an existing destination without `force`).
    """
    src = endpoint(source, source_format, key_map)
    dst = endpoint(destination, to, destination=True)
    name = _model_name(model, src.layout, dst.layout)
    check_destination(src, dst, force)
    names = _stacks_for(src.format, dst.format)  # (source's, destination's): may be the same
    stacks = import_stacks(*names)
    source_stack, destination_stack = (stacks[stack] for stack in names)
    found = read_endpoint(src, source_stack, name, dtype, overrides or {}, with_optimizer)
    dtype = found.dtype
    config = _destination_config(dst.layout, found.config)
    state_copies = 3 if found.state else 1  # the weights, and Adam's two moments of each
    atomic.check_free_space(dst.path.parent, state_copies * sum(np.asarray(a).nbytes for a in found.weights.values()))
    with staged_beside(dst.path) as staged:
        write_endpoint(dst, staged, destination_stack, name, config, dtype, found.weights, found.state)
        back = read_endpoint(dataclasses.replace(dst, path=staged), destination_stack, name, dtype, config, with_optimizer)
        models = Models(name, {"source": (source_stack, found), "destination": (destination_stack, back)})
        checks = _checks(models, dtype, found, back, inputs)
        checks += _reference_checks(models, src, dataclasses.replace(dst, path=staged), reference)
        report = PortReport(src, dst, name, config, found.inferred, len(found.weights),
                            sum(np.size(array) for array in found.weights.values()), checks)  # fmt: skip
        if report.ok:
            move_into_place(staged, dst.path, force)
        return report


@contextlib.contextmanager
def staged_beside(path: Path):
    """A path of `path`'s name in a hidden temporary folder beside it, removed on the way out (whatever
    was not moved into place with `move_into_place` goes with it)."""
    with atomic.staged(path, folder=True) as staging:
        yield staging / path.name


def move_into_place(staged: Path, path: Path, force: bool = True) -> None:
    """A verified file (or checkpoint folder) renamed over `path` (a folder there removed first); without
    `force`, only if `path` is still free (of two racing ports one fails cleanly)."""
    atomic.place(staged, path, replace=force)


def _model_name(model: str | None, *ends: KeyMap) -> str:
    """`--model`, or the model the layouts name; they must agree."""
    named = {end.model for end in ends if end.model}
    if model is None and not named:
        raise ValueError("name the catalogue model: --model NAME (rosetta models lists them), or a preset with --from/--to")
    chosen = model or sorted(named)[0]
    catalogue.get(chosen)  # an unknown name fails first, listing the known ones
    if named - {chosen}:
        raise ValueError(f"the layouts port model {' and '.join(sorted(named))}, not {chosen!r}")
    return chosen


def check_destination(src: Endpoint, dst: Endpoint, force: bool) -> None:
    if not dst.path.parent.is_dir():
        raise ValueError(f"{dst.path.parent} is not a folder: create it first")
    if dst.path.is_dir() and dst.format.name != "tf_checkpoint":
        raise ValueError(f"{dst.path} is a folder: a {dst.format.description} is a file; name one (--force replaces files only)")
    if dst.path.exists() and not force:
        raise ValueError(f"{dst.path} exists: pass --force to replace it")
    if any(dst.path.resolve() == path.resolve() for path in (src.parts or {"": src.path}).values()):
        raise ValueError(f"{dst.path} is the source file")


def _destination_config(layout: KeyMap, config: dict) -> dict:
    """The destination layout's options must be the source's: a port keeps the function."""
    differ = [f"{key}={value!r}" for key, value in layout.config.items() if config.get(key) != value]
    if differ:
        have = ", ".join(f"{key}={config.get(key)!r}" for key in layout.config)
        hint = " ".join(f"--set {key}={json.dumps(value)}" for key, value in layout.config.items())
        raise ValueError(f"layout {layout.name} needs {', '.join(differ)}; the source has {have} (a weights file "
                         f"names no options: if its model was built so, pass {hint})")  # fmt: skip
    return config


class Models:
    """The port's two sides as models, built once per precision: the source read (`source`) and the written
    file read back (`destination`), each in its stack, holding its canonical weights (widened exactly to
    float64 where asked)."""

    def __init__(self, name: str, sides: dict):
        self.name, self.sides, self._built = name, sides, {}

    def stack(self, side: str):
        return self.sides[side][0]

    def get(self, side: str, dtype: str):
        if (side, dtype) not in self._built:
            stack, found = self.sides[side]
            model = stack.build(self.name, dtype, **found.config)
            stack.set_weights(model, found.weights)
            self._built[side, dtype] = model
        return self._built[side, dtype]

    def pair(self, dtype: str) -> tuple:
        """(source stack, source model, destination stack, destination model) in `dtype`: verify's arguments."""
        return self.stack("source"), self.get("source", dtype), self.stack("destination"), self.get("destination", dtype)


def _checks(models: Models, dtype: str, found: Read, back: Read, inputs) -> list[Check]:
    """The mapping, in float64 (deciding), float32 measured beside it; Adam's state (exact)."""
    name = models.name
    batches = [verification_batch(name, found.config)] + ([load_inputs(inputs)] if inputs else [])
    decided = compare_components(name, "float64", *models.pair("float64"), batches)
    atol, _ = bounds(catalogue.get(name).tolerance, "float64")
    check = Check("the mapping: source model vs the written file read back", "float64", SCALED_BOUND.format(atol=atol), decided)
    if dtype != "float64":
        measured = compare_components(name, dtype, *models.pair(dtype), batches)
        check.measured, check.measured_dtype = {component.name: component for component in measured}, dtype
    checks = [check]
    if found.state is not None:
        moments = compare_optimizer_states(found.state, back.state, training.MOMENTS)
        checks.append(Check("Adam's state: source vs read back", "exact", "0", moments))
    return checks


def _reference_checks(models: Models, src: Endpoint, written: Endpoint, reference_text: str | None) -> list[Check]:
    """The user's model against the port: the source's own model (--reference, the source layout's preset,
    a .keras source) against the destination read back; the destination layout's own model, holding the
    written file, against the source."""
    name, found = models.name, models.sides["source"][1]
    batch = reference_batch(name, found.config)
    checks = []
    own = _own_reference(written, shown=f"the written file ({written.path.name})")
    for made, side in ((_source_reference(src, reference_text, name), "destination"), (own, "source")):
        if made is not None:
            candidates = {precision: models.get(side, precision) for precision in ("float64", "float32")}
            checks.append(against_reference(name, made, candidates, models.stack(side), batch))
    return checks


def _source_reference(src: Endpoint, reference_text: str | None, name: str):
    """The source's own model: --reference, else the preset's shipped reference, else a .keras file's model."""
    if reference_text is not None:
        return references.make(reference_text, src.layout.runner, src.text)
    if src.format.name == "keras":
        return importlib.import_module("tf_impl.references").keras_file_reference(src.path, name)
    return _own_reference(src)


def _own_reference(end: Endpoint, shown: str | None = None):
    """The layout's own model (a preset's transcription of the tutorial's classes) holding `end`'s file."""
    if end.layout.reference is None:
        return None
    made = references.make(end.layout.reference, end.layout.runner, end.text)
    made.title = f"{end.layout.name or end.layout.where}'s own model ({end.layout.reference}) holding {shown or end.text}"
    return made


def _stacks_for(source_format: Format, destination_format: Format) -> tuple[str, str]:
    """The stacks that read the source and write the destination: a format's own; for canonical
    safetensors the other end's other stack where it is installed, so the port is checked across stacks."""
    installed = [name for name, package in (("torch", "torch"), ("tf", "tensorflow")) if importlib.util.find_spec(package)]
    if not installed:
        raise ValueError("porting needs torch or TensorFlow installed (pip install 'seq2seq-rosetta[torch,tf]')")

    def pick(fmt: Format, other: str | None) -> str:
        if fmt.stack is not None:
            if fmt.stack not in installed:
                raise ValueError(f"{fmt.description} files need the {fmt.stack} stack, which is not installed")
            return fmt.stack
        preferred = [name for name in installed if name != other] or installed
        return preferred[0]

    source = pick(source_format, destination_format.stack)
    return source, pick(destination_format, source)


def verification_batch(model: str, config: dict) -> dict[str, np.ndarray]:
    """Random sentences of VERIFY_SIZES; with ragged source lengths (full, two thirds, one third, padded)
    where the model masks padding, so the masks are checked too."""
    batch = synthetic_batch(model, VERIFY_SIZES, config=config)
    spec = catalogue.get(model)
    if spec.variable_length:
        lengths = np.maximum(1, VERIFY_SIZES.src_len * (VERIFY_SIZES.batch - np.arange(VERIFY_SIZES.batch)) // VERIFY_SIZES.batch)
        batch["src_len"] = lengths  # [B]: 7, 4, 2
        batch["src"] = np.where(np.arange(VERIFY_SIZES.src_len) < lengths[:, None], batch["src"], spec.pad_id)  # [B, S]
    return batch


def reference_batch(model: str, config: dict) -> dict[str, np.ndarray]:
    """The sentences a reference sees: full length, no `src_len` (the tutorials' models do not mask padding)."""
    batch = synthetic_batch(model, VERIFY_SIZES, seed=1, config=config)
    return {key: value for key, value in batch.items() if key in ("src", "tgt_in", "query", "values")}


def load_inputs(path) -> dict[str, np.ndarray]:
    """A batch from an `.npz` file: `src` [B, S] (and `src_len` [B], `tgt_in` [B, T]); the contract checks it."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable .npz batch ({error})") from None


def render(report: PortReport) -> str:
    """What `rosetta port` prints: the port and its config, then each check, one line per component."""
    lines = [
        f"{report.source.describe()} -> {report.destination.describe()}: model {report.model}, "
        f"{report.weights} weights, {report.values:,} values",
    ]
    if report.inferred:
        lines.append("sizes read from the file: " + ", ".join(f"{key}={value}" for key, value in report.inferred.items()))
    for check in report.checks:
        lines += render_check(check)
    failure = report.first_failure
    lines.append("ported." if failure is None else f"not ported: {failure[1].where()} differs (nothing written)")
    return "\n".join(lines)
