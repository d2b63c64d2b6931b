"""`rosetta port`: a trained model from one stack's file to the other's, verified component by component.

Formats (shared/port/formats.py, one class each), read from the file name (`--from` / `--to` name them otherwise):
a PyTorch `.pt` state_dict or checkpoint `{"model", "optimizer"}` (read with `weights_only=True`: a file holding
pickled code is refused, never run), canonical `.safetensors` (the state_dict layout, no code), Keras `.weights.h5`,
a whole Keras model `.keras` (safe mode), and a TensorFlow checkpoint (`tf.train.Checkpoint`: its prefix, `.index`
file, or folder). A source may come in parts (`encoder=PATH,decoder=PATH`, the TF tutorial's separate files), or be a
SavedModel folder (read only: its variables; a layout of Keras files reads the SavedModel of its model too).

Another project's layout is a key map (shared.port.layouts: renames and transforms onto the catalogue model's
canonical weights; the presets are the tutorials our documents follow). The config comes from the
catalogue, the layout's options, the sizes the file's shapes show, then `--set`.

A port reads the source into canonical arrays, writes the destination through its stack (and layout) into a
temporary folder beside it, reads that back through the same readers, and verifies (shared.port.verification):
the mapping in float64, float32 measured beside it, and the user's own model where one can run. Only a port
that verifies is moved into place: a failed or refused port leaves nothing behind; the source is only read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import numpy as np

from shared import catalogue, stacks
from shared.core import optimizer_state
from shared.failures import shown
from shared.io import atomic
from shared.port import ambiguity, loading, pretrained, references
from shared.port.conversion import convert, verify  # your own model: the public converter (shared/port/conversion.py)
from shared.port.endpoints import Endpoint, check_destination, endpoint, move_into_place, named_model, staged_beside
from shared.port.formats import FORMATS, Format
from shared.port.layouts import KeyMap
from shared.port.stages import Read, import_stacks, read, read_endpoint, write_endpoint
from shared.port.verification import (
    SCALED_BOUND,
    Check,
    Component,
    against_reference,
    bounds,
    compare_components,
    compare_optimizer_states,
    render_check,
)
from shared.specs import Sizes
from shared.verify.fixtures import synthetic_batch

__all__ = ["FORMATS", "Component", "PortReport", "convert", "port", "read", "render", "verification_batch", "verify"]


VERIFY_SIZES = Sizes(batch=3, src_len=7, tgt_len=6)  # the fixture sentences of a port's verification


@dataclasses.dataclass
class PortReport:
    """What a port did. `also_fits`: the other layouts the source file fits, each with what differs from the
    one read (their functions differ); `user_model_ran`: the user's own model was compared (--reference, a
    `.keras` source); `load`: the Python line that loads the written file into the model it computes."""

    source: Endpoint
    destination: Endpoint
    model: str
    config: dict
    inferred: dict
    weights: int
    values: int
    checks: list[Check]
    also_fits: list[ambiguity.Fit] = dataclasses.field(default_factory=list)
    user_model_ran: bool = False
    load: str = ""
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)  # the source's objects that are no weights

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


# ---- the port ----


def port(source, destination, model: str | None = None, to: str | None = None, force: bool = False,
         overrides: dict | None = None, inputs=None, dtype: str | None = None, with_optimizer: bool = False,
         source_format: str | None = None, key_map: str | None = None, reference: str | None = None,
         config: str | None = None, tokenizer: str | None = None) -> PortReport | pretrained.PretrainedReport:  # fmt: skip
    """Port `source` to `destination` for catalogue model `model` (or the layout's); verify; move into place
    if it verifies. The stages: parse the two ends (shared.port.endpoints) -> read the source through its format
    and map it through its layout onto canonical arrays (shared.port.stages, shared.port.formats) -> map them into
    the destination's layout and write its format, staged beside it -> read that back -> verify
    (shared.port.verification) -> place.

    Args:
        to, source_format: the destination's and the source's format or preset (`--to`, `--from`).
        key_map: a key-map file for the source's layout (shared.port.layouts).
        reference: `MODULE:CALLABLE`, the user's model to verify against (shared.port.references).
        dtype: the precision of the written file (default: the source's).
        with_optimizer: port Adam's moments and step counter too, compared exactly after reading back.
        config, tokenizer: a Hugging Face model's config.json and tokenizer folder (shared.port.pretrained: a HF
            folder at either end, or a `.keras` file of one of its families, is ported by that pipeline).

    Raises ValueError for a request that cannot be carried out (unknown model, format or layout, a file of
    another model, an unreadable file, an existing destination without `force`).
    """
    src, dst = endpoint(source, source_format, key_map), endpoint(destination, to, destination=True)  # parse
    if pretrained.is_pretrained(src, dst, config):
        _check_pretrained_flags(model=model, key_map=key_map, reference=reference, inputs=inputs, overrides=overrides,
                                with_optimizer=with_optimizer)  # fmt: skip
        return pretrained.port(source, destination, to, source_format, force, dtype, config, tokenizer)
    if tokenizer is not None:
        raise ValueError("--tokenizer names the tokenizer a Hugging Face folder carries: write one with --to hf")
    name = _model_name(model, src, src.layout, dst.layout)
    check_destination(src, dst, force)
    names = _stacks_for(src.format, dst.format)  # (source's, destination's): may be the same
    modules = import_stacks(*names)
    source_stack, destination_stack = (modules[stack] for stack in names)
    found = read_endpoint(src, source_stack, name, dtype, overrides or {}, with_optimizer)  # read -> map
    user_model_ran = reference is not None or src.format.whole_model
    also_fits = ambiguity.other_layouts(src, source_stack, name, overrides or {}, found)
    if also_fits and not (src.named or user_model_ran):
        raise ValueError(ambiguity.refusal(src, also_fits))
    dtype, config = found.dtype, _destination_config(dst.layout, found.config)
    state_copies = 3 if found.state else 1  # the weights, and Adam's two moments of each
    atomic.check_free_space(dst.path.parent, state_copies * sum(np.asarray(a).nbytes for a in found.weights.values()))
    models = Models(name, {"source": (source_stack, found)}, {"source": src.text, "destination": str(dst.path)})
    models.get("source", dtype)  # arrays another model's are refused naming the file, before anything is written
    with staged_beside(dst.path) as staged:
        write_endpoint(dst, staged, destination_stack, name, config, dtype, found.weights, found.state)  # map -> write
        written = dataclasses.replace(dst, path=staged)
        back = read_endpoint(written, destination_stack, name, dtype, config, with_optimizer)  # read back
        models.sides["destination"] = (destination_stack, back)
        checks = _checks(models, dtype, found, back, inputs) + _reference_checks(models, src, written, reference)  # verify
        report = PortReport(src, dst, name, config, found.inferred, len(found.weights),
                            sum(np.size(array) for array in found.weights.values()), checks, also_fits, user_model_ran,
                            loading.load_line(dst, name, config, dtype, found.state is not None), found.left_out)  # fmt: skip
        if report.ok:
            move_into_place(staged, dst.path, force)  # place
        return report


def _check_pretrained_flags(**flags) -> None:
    """A Hugging Face model names its own architecture: the catalogue's flags do not apply to it."""
    given = [f"--{name.replace('_', '-').replace('overrides', 'set')}" for name, value in flags.items() if value]
    if given:
        raise ValueError(f"{', '.join(given)}: for the catalogue's models; a Hugging Face model's config.json names its "
                         "architecture (--config for a file that names none)")  # fmt: skip


def _model_name(model: str | None, src: Endpoint, *ends: KeyMap) -> str:
    """`--model`, or the model the layouts name, or the one the source file names (a `.keras` file, a
    canonical safetensors file; read only where neither names one); the layouts and --model must agree (the
    file is checked when it is read)."""
    named = {end.model for end in ends if end.model}
    chosen = model or (sorted(named)[0] if named else named_model(src))
    if chosen is None:
        raise ValueError("name the catalogue model: --model NAME (rosetta models lists them), or a preset with --from/--to")
    catalogue.get(chosen)  # an unknown name fails first, listing the known ones
    if named - {chosen}:
        raise ValueError(f"the layouts port model {' and '.join(sorted(named))}, not {shown(chosen)}")
    return chosen


def _destination_config(layout: KeyMap, config: dict) -> dict:
    """The destination layout's options must be the source's: a port keeps the function."""
    differ = [f"{key}={shown(value)}" for key, value in layout.config.items() if config.get(key) != value]
    if differ:
        have = ", ".join(f"{key}={shown(config.get(key))}" for key in layout.config)
        hint = " ".join(f"--set {key}={json.dumps(value)}" for key, value in layout.config.items())
        raise ValueError(f"layout {layout.title} writes the model built with {', '.join(differ)}; the source has {have} "
                         f"(a .pt file names no options: if its model was built so, pass {hint})")  # fmt: skip
    return config


class Models:
    """The port's two sides as models, built once per precision: the source read (`source`) and the written
    file read back (`destination`), each in its stack, holding its canonical weights (widened exactly to
    float64 where asked); a side's file (`files`) is named in the error of arrays its model does not take."""

    def __init__(self, name: str, sides: dict, files: dict[str, str]):
        self.name, self.sides, self.files, self._built = name, sides, files, {}

    def stack(self, side: str):
        return self.sides[side][0]

    def get(self, side: str, dtype: str):
        if (side, dtype) not in self._built:
            stack, found = self.sides[side]
            model = stack.build(self.name, dtype, **found.config)
            try:
                stack.set_weights(model, found.weights)
            except ValueError as error:  # the strict load lists the keys; the file is the user's to find
                raise ValueError(f"{self.files[side]}: {error}") from None
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
        moments = compare_optimizer_states(found.state, back.state, optimizer_state.MOMENTS)
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
    if src.format.whole_model:
        return stacks.import_module(src.format.stack, "references").keras_file_reference(src.path, name)
    return _own_reference(src)


def _own_reference(end: Endpoint, shown: str | None = None):
    """The layout's own model (a preset's transcription of the tutorial's classes) holding `end`'s file."""
    if end.layout.reference is None:
        return None
    made = references.make(end.layout.reference, end.layout.runner, end.text, shipped=True)
    made.title = f"{end.layout.name or end.layout.where}'s own model ({end.layout.reference}) holding {shown or end.text}"
    return made


def _stacks_for(source_format: Format, destination_format: Format) -> tuple[str, str]:
    """The stacks that read the source and write the destination: a format's own; for canonical
    safetensors the other end's other stack where it is installed, so the port is checked across stacks."""
    installed = [name for name in stacks.STACKS if importlib.util.find_spec(stacks.FRAMEWORKS[name])]
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


def render(report: PortReport | pretrained.PretrainedReport) -> str:
    """What `rosetta port` prints: the port, its layouts and config, each check (one line per component), the
    verdict, and the line that loads the written file into the model it computes."""
    if isinstance(report, pretrained.PretrainedReport):
        return report.render()
    lines = [
        f"{report.source.describe()} -> {report.destination.describe()}: model {report.model}, "
        f"{report.weights} weights, {report.values:,} values",
    ]
    if report.inferred:
        lines.append("sizes read from the file: " + ", ".join(f"{key}={value}" for key, value in report.inferred.items()))
    lines += [f"layout {end.layout.title}: {end.layout.describe()}" for end in (report.source, report.destination)
              if end.layout.describe()]  # fmt: skip
    lines += ambiguity.notes(report.source, report.also_fits, report.user_model_ran)
    if report.left_out:
        held = "; ".join(f"{path} ({what})" for path, what in report.left_out.items())
        lines.append(f"left out, no weights of the model: {held}: values kept beside its variables (a TextVectorization's "
                     "lookup tables); the port carries the model's weights: keep your text processing")  # fmt: skip
    for check in report.checks:
        lines += render_check(check)
    failure = report.first_failure
    if failure is not None:
        lines.append(f"not ported: {failure[1].where()} differs (nothing written)")
        return "\n".join(lines)
    lines.append(ambiguity.verdict(report.source, report.also_fits, report.user_model_ran))
    lines.append(f"load it: {report.load}")
    return "\n".join(lines)
