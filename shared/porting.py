"""`rosetta port`: a trained model from one stack's file to the other's, verified component by component.

Formats, read from the file name (`--to` overrides): a PyTorch `.pt` state_dict or checkpoint
`{"model", "optimizer"}` (read with `weights_only=True`: a file holding pickled code is refused, never
run), canonical `.safetensors` (the state_dict layout, no code), Keras `.weights.h5`, and a whole Keras
model `.keras` (safe mode). Every format passes through the canonical weights and the leaf rules of
shared.canonical, so a state_dict saved from a document's own torch class (same attribute names) ports
as it is; with `with_optimizer`, Adam's moments pass the same rules.

A port builds the source stack's model from SRC, writes DST through the destination stack into a
temporary folder beside DST, reads that file back into a fresh model, and compares the two on seeded
sentences with ragged lengths (and on `--inputs`) component by component: the components both stacks
tap (shared.taps), the attention weights, the logits, greedy ids, and Adam's state. Only a port that
verifies is moved into place: a failed or refused port leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import shutil
import tempfile
from pathlib import Path

import numpy as np

from shared import catalogue, safetensors_io, training
from shared.bench import Sizes, synthetic_batch
from shared.equality import output_bounds
from shared.taps import (
    ATTENTION_SCORES,
    CONTEXT_VECTORS,
    ENCODER_OUTPUTS,
    ENCODER_STATE,
    SOURCE_EMBEDDINGS,
    TARGET_EMBEDDINGS,
)

ATTENTION_WEIGHTS = "attention weights"  # the contract's `attention` output
COMPARED = (
    SOURCE_EMBEDDINGS,
    ENCODER_OUTPUTS,
    ENCODER_STATE,
    TARGET_EMBEDDINGS,
    ATTENTION_SCORES,
    ATTENTION_WEIGHTS,
    CONTEXT_VECTORS,
)
PER_STEP = (ATTENTION_SCORES, ATTENTION_WEIGHTS, CONTEXT_VECTORS)
INPUTS_LABEL = " (--inputs)"


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
    "keras": Format("keras", ".keras", "tf", "Keras model"),
}
STACK_MODULES = {"torch": "torch_impl", "tf": "tf_impl"}
VERIFY_SIZES = Sizes(batch=3, src_len=7, tgt_len=6)  # the fixture sentences of a port's verification
GREEDY_STEPS = 12  # greedy decoding compared for this many tokens (random weights seldom stop earlier)


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
    """One compared component: its largest |reference - candidate| (None: token ids, compared for
    equality), whether it is within the bound, and for a per-step component the maximum of each step."""

    name: str
    max_abs: float | None
    ok: bool
    steps: tuple[float, ...] = ()
    first_bad_step: int | None = None
    problem: str = ""  # why it could not be compared (a missing component, a shape mismatch)

    def value(self) -> str:
        if self.problem:
            return self.problem
        if self.max_abs is None:
            return "equal" if self.ok else "differ"
        return f"max |diff| {self.max_abs:.1e}"

    def where(self) -> str:
        """The component's name, with the first failing decoder step for a per-step one."""
        return self.name if self.first_bad_step is None else f"{self.name}, decoder step {self.first_bad_step}"


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


def read(stack, path, fmt: Format, name: str, config: dict, dtype: str, with_optimizer: bool = False):
    """A model of `stack` built at `config` holding the weights of `path` (strict: one error names every
    missing, unexpected and mis-shaped key), and with `with_optimizer` the Adam state the file holds, in
    canonical layout (else None)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if fmt.name == "keras":
        return _read_keras(stack, path, name, config, with_optimizer)
    model = stack.build(name, dtype, **config)
    if fmt.name != "safetensors":
        return model, importlib.import_module(f"{stack.__name__}.train").load_native(model, path, with_optimizer)
    tensors, metadata = safetensors_io.load(path)
    stack.set_weights(model, training.weights_without_optimizer(tensors))
    if not with_optimizer:
        return model, None
    state = training.optimizer_from_tensors(tensors, metadata)
    if state is None:
        raise ValueError(f"{path}: holds no optimizer state (exp_avg/<key>, exp_avg_sq/<key>, optimizer_step)")
    return model, state


def _read_keras(stack, path: Path, name: str, config: dict, with_optimizer: bool):
    """A `.keras` file names its model and config: they must be the ones asked for."""
    model, state = importlib.import_module(f"{stack.__name__}.train").load_keras(path, with_optimizer)
    if model.rosetta_name != name:
        raise ValueError(f"{path}: holds model {model.rosetta_name!r}, not {name!r}")
    differ = [f"{key}={value!r}" for key, value in model.rosetta_config.items() if config.get(key) != value]
    if differ:
        raise ValueError(f"{path}: saved with {', '.join(differ)}; pass --set for each to port it")
    return model, state


def write(stack, model, path: Path, fmt: Format, name: str, optimizer_state: dict | None = None) -> None:
    """`model`'s weights (and `optimizer_state`, canonical) to `path` in `fmt`: canonical arrays for
    safetensors, the stack's own file otherwise."""
    if fmt.name == "safetensors":
        metadata = {"model": name, "document": catalogue.get(name).document, "written_by": stack.__name__}
        tensors = stack.get_weights(model)
        if optimizer_state is not None:
            moments, optimizer_metadata = training.optimizer_tensors(optimizer_state)
            tensors, metadata = {**tensors, **moments}, {**metadata, **optimizer_metadata}
        safetensors_io.save(path, tensors, metadata)
        return
    train = importlib.import_module(f"{stack.__name__}.train")
    (train.save_keras if fmt.name == "keras" else train.save_native)(model, path, optimizer_state)


def port(source, destination, model: str, to: str | None = None, force: bool = False, overrides: dict | None = None,
         inputs=None, dtype: str = "float32", with_optimizer: bool = False) -> PortReport:  # fmt: skip
    """Port `source` to `destination` for catalogue model `model`; verify; move into place if it verifies.

    `with_optimizer` ports Adam's moments and step counter too (torch `exp_avg`/`exp_avg_sq`/`step`,
    Keras `momentum`/`velocity`/`iterations`), read back from the written file and compared exactly.

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
    reference, state = read(source_stack, source, source_format, model, config, dtype, with_optimizer)
    batches = [verification_batch(model, config)] + ([_load_inputs(inputs)] if inputs else [])
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        staged = staging / destination.name
        weights = source_stack.get_weights(reference)
        target = destination_stack.build(model, dtype, **config)
        destination_stack.set_weights(target, weights)
        write(destination_stack, target, staged, destination_format, model, state)
        candidate, state_back = read(destination_stack, staged, destination_format, model, config, dtype, with_optimizer)
        components = verify(model, dtype, source_stack, reference, destination_stack, candidate, batches)
        components += [] if state is None else compare_optimizer_states(state, state_back)
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
    """Max |reference - candidate| per component on every batch, in the order the forward pass computes
    them (COMPARED: embeddings, encoder outputs and state, then per decoder step the attention scores,
    weights and context vectors), the logits (the context, for the attention layer), and whether greedy
    decoding gives the same ids."""
    spec = catalogue.get(model)
    atol, rtol = output_bounds(spec.tolerance, dtype)
    output = "context" if spec.interface == "attention" else "logits"
    components = []
    for index, batch in enumerate(batches):
        label = "" if index == 0 else INPUTS_LABEL
        expected, actual = (_traced(stack, weights, model, batch) for stack, weights in
                            ((reference_stack, reference), (candidate_stack, candidate)))  # fmt: skip
        names = [name for name in COMPARED if name in expected or name in actual] + [output]
        for name in names:
            components.append(_close(name + label, actual.get(name), expected.get(name), atol, rtol, name in PER_STEP))
        if spec.variable_length:
            source = {key: batch[key] for key in ("src", "src_len") if key in batch}
            same = np.array_equal(reference_stack.greedy(reference, model, source, GREEDY_STEPS)["tokens"],
                                  candidate_stack.greedy(candidate, model, source, GREEDY_STEPS)["tokens"])  # fmt: skip
            components.append(Component(f"greedy ids{label}", None, same))
    return components


def compare_optimizer_states(expected: dict, actual: dict) -> list[Component]:
    """Adam's moments (max |diff| over every weight; a port must give them back exactly) and step counter."""
    components = []
    for moment in training.MOMENTS:
        same_keys = expected[moment].keys() == actual[moment].keys()
        errors = [np.abs(np.asarray(actual[moment][key], np.float64) - np.asarray(value, np.float64)).max(initial=0.0)
                  for key, value in expected[moment].items() if same_keys]  # fmt: skip
        problem = "" if same_keys else "keys differ"
        worst = float(max(errors, default=0.0)) if same_keys else float("inf")
        components.append(Component(f"Adam {moment}", worst, same_keys and worst == 0.0, problem=problem))
    same_step = int(expected["step"]) == int(actual["step"])
    problem = "" if same_step else f"step {actual['step']} != {expected['step']}"
    components.append(Component("Adam step", None, same_step, problem=problem))
    return components


def _traced(stack, model, name: str, batch: dict) -> dict[str, np.ndarray]:
    """The stack's traced components, its `attention` output named as the others."""
    traced = stack.trace(model, name, batch)
    if "attention" in traced:
        traced[ATTENTION_WEIGHTS] = traced.pop("attention")
    return traced


def _close(name: str, actual, expected, atol: float, rtol: float, per_step: bool = False) -> Component:
    """Compare one component; per step, the maximum of each decoder step (axis 1) too."""
    if actual is None or expected is None:
        return Component(name, float("inf"), False, problem=f"only in the {'source' if actual is None else 'port'}")
    if actual.shape != expected.shape:
        return Component(name, float("inf"), False, problem=f"shape {actual.shape} != {expected.shape}")
    expected = np.asarray(expected, np.float64)
    error = np.abs(np.asarray(actual, np.float64) - expected)
    within = (error <= atol + rtol * np.abs(expected)) & np.isfinite(actual)
    if not per_step:
        return Component(name, float(error.max(initial=0.0)), bool(within.all()))
    step_error = error.reshape(error.shape[0], error.shape[1], -1).max(axis=(0, 2), initial=0.0)  # [T]
    step_ok = within.reshape(within.shape[0], within.shape[1], -1).all(axis=(0, 2))  # [T]
    bad = np.flatnonzero(~step_ok)
    return Component(name, float(step_error.max(initial=0.0)), bool(step_ok.all()), tuple(map(float, step_error)),
                     int(bad[0]) if bad.size else None)  # fmt: skip


def render(report: PortReport, dtype: str) -> str:
    """What `rosetta port` prints: the port, then one line per component (per step: each step's maximum)."""
    spec = catalogue.get(report.model)
    atol, rtol = output_bounds(spec.tolerance, dtype)
    lines = [
        f"{report.source} ({report.source_format.description}) -> {report.destination} "
        f"({report.destination_format.description}): model {report.model}, {report.weights} weights, {report.values:,} values",
        f"verification ({dtype}; bound {atol:g} abs + {rtol:g} rel; per step: decoder steps 0, 1, ...):",
    ]
    for component in report.components:
        steps = f"  per step {' '.join(f'{error:.0e}' for error in component.steps)}" if component.steps else ""
        lines.append(f"  {component.name:30s} {component.value():20s} {'ok' if component.ok else 'FAILED'}{steps}")
    failure = report.first_failure
    lines.append("ported." if failure is None else f"not ported: {failure.where()} differs (nothing written)")
    return "\n".join(lines)
