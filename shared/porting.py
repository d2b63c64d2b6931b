"""`rosetta port`: a trained model's weights from one stack's file to the other's, verified.

Formats, read from the file name (`--to` overrides): a PyTorch state_dict `.pt` (read with
`weights_only=True`: a file holding pickled code is refused, never run), canonical `.safetensors`
(the state_dict layout, no code), Keras `.weights.h5`. Every format passes through the canonical
weights and the leaf rules of shared.canonical, so a state_dict saved from a document's own torch
class (same attribute names) ports as it is.

A port builds the source stack's model from SRC, writes DST through the destination stack into a
temporary folder beside DST, reads that file back into a fresh model, and compares the two on fixture
inputs (and on `--inputs`) component by component. Only a port that verifies is moved into place:
a failed or refused port leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import shutil
import tempfile
from pathlib import Path

import numpy as np

from shared import catalogue, safetensors_io
from shared.bench import Sizes, synthetic_batch
from shared.equality import output_bounds


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    suffix: str
    stack: str | None  # the stack that reads and writes it; None: either (canonical safetensors)
    description: str


FORMATS = {
    "torch": Format("torch", ".pt", "torch", "PyTorch state_dict"),
    "safetensors": Format("safetensors", ".safetensors", None, "canonical safetensors"),
    "keras_weights": Format("keras_weights", ".weights.h5", "tf", "Keras weights"),
}
STACK_MODULES = {"torch": "torch_impl", "tf": "tf_impl"}
VERIFY_SIZES = Sizes(batch=3, src_len=7, tgt_len=6)  # the fixture sentences of a port's verification


def format_of(path, override: str | None = None) -> Format:
    """The format named by `override`, else the one `path`'s name ends with."""
    if override is not None:
        if override not in FORMATS:
            raise ValueError(f"unknown format {override!r}; known: {', '.join(FORMATS)}")
        return FORMATS[override]
    for fmt in FORMATS.values():
        if str(path).endswith(fmt.suffix):
            return fmt
    known = ", ".join(f"{fmt.suffix} ({fmt.description})" for fmt in FORMATS.values())
    raise ValueError(f"{path}: cannot tell the format from the file name; name it {known}, or pass --to")


def import_stacks(*names: str) -> dict:
    """The contract modules of `names`, torch imported before TensorFlow (one process holds both)."""
    return {name: importlib.import_module(STACK_MODULES[name]) for name in ("torch", "tf") if name in names}


@dataclasses.dataclass
class Component:
    name: str
    max_abs: float | None  # None: compared for equality (token ids)
    ok: bool

    def value(self) -> str:
        if self.max_abs is None:
            return "ids equal" if self.ok else "ids differ"
        return f"max |diff| {self.max_abs:.1e}"


@dataclasses.dataclass
class PortReport:
    source: Path
    destination: Path
    model: str
    source_format: Format
    destination_format: Format
    weights: int
    values: int
    components: list[Component]

    @property
    def ok(self) -> bool:
        return all(component.ok for component in self.components)

    @property
    def first_failure(self) -> Component | None:
        return next((component for component in self.components if not component.ok), None)


def read(stack, path, fmt: Format, name: str, config: dict, dtype: str):
    """A model of `stack` built at `config` holding the weights of `path` (strict: one error names every
    missing, unexpected and mis-shaped key)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    model = stack.build(name, dtype, **config)
    if fmt.name == "safetensors":
        stack.set_weights(model, safetensors_io.load(path)[0])  # strict: set_weights lists every bad key
    else:
        importlib.import_module(f"{stack.__name__}.train").load_native(model, path)
    return model


def write(stack, model, path: Path, fmt: Format, name: str) -> None:
    """`model`'s weights to `path` in `fmt` (canonical arrays for safetensors, the stack's own file otherwise)."""
    if fmt.name == "safetensors":
        metadata = {"model": name, "document": catalogue.get(name).document, "written_by": stack.__name__}
        safetensors_io.save(path, stack.get_weights(model), metadata)
    else:
        importlib.import_module(f"{stack.__name__}.train").save_native(model, path)


def port(source, destination, model: str, to: str | None = None, force: bool = False, overrides: dict | None = None,
         inputs=None, dtype: str = "float32") -> PortReport:  # fmt: skip
    """Port `source` to `destination` for catalogue model `model`; verify; move into place if it verifies.

    Raises ValueError for a request that cannot be carried out (unknown model or format, a file of
    another model, an unreadable file, an existing destination without `force`).
    """
    spec = catalogue.get(model)
    source, destination = Path(source), Path(destination)
    source_format, destination_format = format_of(source), format_of(destination, to)
    if not destination.parent.is_dir():
        raise ValueError(f"{destination.parent} is not a folder: create it first")
    if destination.exists() and not force:
        raise ValueError(f"{destination} exists: pass --force to replace it")
    if destination.resolve() == source.resolve():
        raise ValueError(f"{destination} is the source file")
    config = catalogue.resolve_config(spec, dtype, overrides or {})
    names = _stacks_for(source_format, destination_format)  # (source's, destination's): may be the same
    stacks = import_stacks(*names)
    source_stack, destination_stack = (stacks[name] for name in names)
    reference = read(source_stack, source, source_format, model, config, dtype)
    batches = [synthetic_batch(model, VERIFY_SIZES, config=config)] + ([_load_inputs(inputs)] if inputs else [])
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        staged = staging / destination.name
        weights = source_stack.get_weights(reference)
        target = destination_stack.build(model, dtype, **config)
        destination_stack.set_weights(target, weights)
        write(destination_stack, target, staged, destination_format, model)
        candidate = read(destination_stack, staged, destination_format, model, config, dtype)
        components = verify(model, dtype, source_stack, reference, destination_stack, candidate, batches)
        report = PortReport(source, destination, model, source_format, destination_format, len(weights),
                            sum(array.size for array in weights.values()), components)  # fmt: skip
        if report.ok:
            staged.replace(destination)
        return report
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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


def _load_inputs(path) -> dict[str, np.ndarray]:
    """A batch from an `.npz` file: `src` [B, S] (and `src_len` [B], `tgt_in` [B, T]); the contract checks it."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable .npz batch ({error})") from None


def verify(
    model: str, dtype: str, reference_stack, reference, candidate_stack, candidate, batches: list[dict]
) -> list[Component]:
    """Max |reference - candidate| per component on every batch: the attention weights of each decoder
    step, the logits (context for the attention layer), and whether greedy decoding gives the same ids."""
    spec = catalogue.get(model)
    atol, rtol = output_bounds(spec.tolerance, dtype)
    components = []
    for index, batch in enumerate(batches):
        label = "" if index == 0 else " (--inputs)"
        expected = reference_stack.run(reference, model, batch)
        actual = candidate_stack.run(candidate, model, batch)
        if "attention" in expected:
            for step in range(expected["attention"].shape[1]):
                components.append(_close(f"attention weights, step {step}{label}", actual["attention"][:, step],
                                         expected["attention"][:, step], atol, rtol))  # fmt: skip
        output = "context" if spec.interface == "attention" else "logits"
        components.append(_close(output + label, actual[output], expected[output], atol, rtol))
        if spec.variable_length:
            source = {key: batch[key] for key in ("src", "src_len") if key in batch}
            same = np.array_equal(reference_stack.greedy(reference, model, source)["tokens"],
                                  candidate_stack.greedy(candidate, model, source)["tokens"])  # fmt: skip
            components.append(Component(f"greedy ids{label}", None, same))
    return components


def _close(name: str, actual, expected, atol: float, rtol: float) -> Component:
    error = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    ok = bool((error <= atol + rtol * np.abs(np.asarray(expected, np.float64))).all() and np.isfinite(actual).all())
    return Component(name, float(error.max(initial=0.0)), ok)


def render(report: PortReport, dtype: str) -> str:
    """What `rosetta port` prints: the port, then one line per component."""
    spec = catalogue.get(report.model)
    atol, rtol = output_bounds(spec.tolerance, dtype)
    lines = [
        f"{report.source} ({report.source_format.description}) -> {report.destination} "
        f"({report.destination_format.description}): model {report.model}, {report.weights} weights, {report.values:,} values",
        f"verification ({dtype}; bound {atol:g} abs + {rtol:g} rel):",
    ]
    for component in report.components:
        lines.append(f"  {component.name:34s} {component.value():22s} {'ok' if component.ok else 'FAILED'}")
    failure = report.first_failure
    lines.append("ported." if failure is None else f"not ported: {failure.name} differs (nothing written)")
    return "\n".join(lines)
