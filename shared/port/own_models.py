"""`rosetta port SRC DST --torch-model MODULE:FACTORY --keras-model MODULE:FACTORY`: a checkpoint of the
user's own model classes, ported between torch and Keras by shared.port.conversion and verified on their models.

FACTORY() returns the user's model, untrained (a torch `nn.Module`; a Keras model, built here on the
`--inputs` batch where it has no weights yet). The source file is loaded into the source side's model (a
`.keras` source is its own model and needs no factory), the weights are converted into a fresh target model
(strict: see shared.port.conversion), and the two models' outputs are compared on the `--inputs` batch: in
float64 where both can be built in float64 (the factory called under a float64 default, the weights
widened exactly and converted again), float32 measured beside it. The written file is read back into a
fresh model and must give the same outputs bit for bit. Nothing is written unless all of that holds.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from shared import stacks
from shared.port import endpoints, porting, references
from shared.port.conversion import Conversion, convert, outputs, verify
from shared.port.formats import FORMATS, Format
from shared.port.verification import Check, close, render_check

FLAGS = {"torch": "--torch-model", "tf": "--keras-model"}


@dataclasses.dataclass
class OwnPort:
    """What a port of the user's own model did; `load`: the line that loads the written file into their model."""

    source: endpoints.Endpoint
    destination: endpoints.Endpoint
    conversion: Conversion
    checks: list[Check]
    load: str = ""

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def render(self) -> str:
        lines = [f"{self.source.describe()} -> {self.destination.describe()}", self.conversion.render()]
        for check in self.checks:
            lines += render_check(check)
        failed = next((c.name for check in self.checks for c in check.components if not c.ok), None)
        lines.append("ported." if failed is None else f"not ported: {failed} differs (nothing written)")
        return "\n".join(lines + ([f"load it: {self.load}"] if failed is None and self.load else []))


def port_own(source, destination, torch_model: str | None = None, keras_model: str | None = None, inputs=None,
             key_map=None, force: bool = False, to: str | None = None, source_format: str | None = None) -> OwnPort:  # fmt: skip
    """Port `source` to `destination` through the user's own model classes; see the module docstring.

    Args:
        torch_model, keras_model: `MODULE:FACTORY` of each side (the `.keras` source's side may omit it).
        inputs: an `.npz` batch the models are run on (arrays `arr_0`, `arr_1`, ... as a tuple; else by name).
        key_map: pairs the walk cannot find (shared.port.conversion.convert).
    """
    src = endpoints.endpoint(source, source_format)
    dst = endpoints.endpoint(destination, to, destination=True)
    sides = (_stack(src.format, source), _stack(dst.format, destination))
    if sides[0] == sides[1]:
        raise ValueError(f"{src.text} and {dst.text} are both {sides[0]} files: port between a torch and a Keras file")
    endpoints.check_destination(src, dst, force)
    factories = _factories(torch_model, keras_model, needed={sides[1]} | ({sides[0]} - _self_contained(src)))
    batch = load_batch(inputs)
    source_stack, target_stack = (stacks.import_module(side, "conversion") for side in sides)
    model = None if src.format.whole_model else source_stack.build(factories[sides[0]], "float32", batch)
    source32 = src.format.read_own(model, src.path)
    target32 = target_stack.build(factories[sides[1]], "float32", batch)
    with warnings.catch_warnings():  # its notes are printed with the report
        warnings.simplefilter("ignore")
        conversion = convert(source32, target32, key_map, inputs=batch)
    check = _verify_in_float64(source_stack, source32, target_stack, target32, factories, sides, batch, key_map)
    with endpoints.staged_beside(dst.path) as staged:
        dst.format.write_own(target32, staged)
        fresh = None if dst.format.whole_model else target_stack.build(factories[sides[1]], "float32", batch)
        back = dst.format.read_own(fresh, staged)
        load = _load_line(dst, {"torch": torch_model, "tf": keras_model}[sides[1]], _made_built(factories[sides[1]]), inputs)
        report = OwnPort(src, dst, conversion, [check, _read_back(target32, back, batch)], load)
        if report.ok:
            endpoints.move_into_place(staged, dst.path, force)
        return report


def _load_line(dst: endpoints.Endpoint, factory: str, built: bool, inputs) -> str:
    """The line that loads the written file into the user's model, as their factory makes it."""
    module, _, name = factory.partition(":")
    return dst.format.own_load_line(repr(str(dst.path)), module, f"import {module}; model = {module}.{name}()", built, inputs)


def _made_built(factory) -> bool:
    """Whether the factory's model has its weights as made (a torch module; a Keras model given an Input)."""
    made = factory()
    return not hasattr(made, "built") or bool(made.weights)


def _stack(fmt: Format, text) -> str:
    if fmt.own_stack is None:
        known = ", ".join(own.suffix for own in FORMATS.values() if own.own_stack)
        raise ValueError(f"{text}: your own models port between {known} files, not a {fmt.description}")
    return fmt.own_stack


def _self_contained(src: endpoints.Endpoint) -> set[str]:
    """The sides whose model the source file holds whole (a `.keras` file)."""
    return {src.format.own_stack} if src.format.whole_model else set()


def _factories(torch_model: str | None, keras_model: str | None, needed: set[str]) -> dict:
    import torch  # noqa: F401  (torch before tensorflow in one process)

    given = {"torch": torch_model, "tf": keras_model}
    missing = [FLAGS[side] for side in ("torch", "tf") if side in needed and given[side] is None]
    if missing:
        raise ValueError(f"name your model's factory with {' and '.join(missing)} MODULE:FACTORY (FACTORY() returns the model)")
    return {side: references.load_callable(text, FLAGS[side]) for side, text in given.items() if text is not None}


def load_batch(path) -> tuple | dict:
    """The `--inputs` batch: positional arrays (`np.savez(path, x, lengths)`) as a tuple, named ones as a dict."""
    if path is None:
        raise ValueError("--inputs BATCH.npz is needed to verify your models: the arrays your models are called on "
                         "(np.savez('batch.npz', x) for model(x); several arrays go in order, named ones by name)")  # fmt: skip
    arrays = porting.load_inputs(path)
    if arrays and all(key == f"arr_{index}" for index, key in enumerate(arrays)):
        values = tuple(arrays.values())
        return values[0] if len(values) == 1 else values
    return arrays


def _verify_in_float64(source_stack, source32, target_stack, target32, factories, sides, batch, key_map) -> Check:
    """The float64 twins converted and compared, the float32 pair beside; float32 alone where a side cannot
    be built in float64 (a Keras model fixing its own dtype)."""
    source64 = source_stack.float64_twin(source32, factories.get(sides[0]), batch)
    target64 = target_stack.build(factories[sides[1]], "float64", batch)
    if source64 is None or target64 is None:
        check = verify(source32, target32, batch)
        check.title += " (float64: the Keras model cannot be built in float64)"
        return check
    with warnings.catch_warnings():  # the float32 conversion has said it
        warnings.simplefilter("ignore")
        convert(source64, target64, key_map, inputs=batch)
    return verify(source64, target64, batch, measured=(source32, target32))


def _read_back(written, back, batch) -> Check:
    """The file as written, read into a fresh model: its outputs must equal the ported model's bit for bit."""
    expected, actual = outputs(written, batch), outputs(back, batch)
    components = [close(name, actual.get(name), value, 0.0, 0.0) for name, value in expected.items()]
    dtype = str(np.result_type(*expected.values())) if expected else "float32"
    return Check("the written file read back into a fresh model", dtype, "bit for bit", components)
