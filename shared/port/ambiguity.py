"""A file that fits more than one layout: which others a port's source fits, and what `rosetta port` says.

Two layouts can read one file with every name and shape fitting and still give models that compute
different functions: TensorFlow's NMT tutorial wrote `W1` and `W2` under the same names in 2020 and 2021 and
applied them to different inputs. Nothing in the file tells them apart; only the user's own model can. So a
port reads its source with every other layout of the same model and format (the presets, the catalogue's
own) and, where one fits and gives other arrays or another config, says so: refused unless the user named
the layout (then accepted with a line saying what else the file fits) or ran their own model on it
(`--reference`, a `.keras` source), which decides. A file read through a preset that does not give the model's
keys is not that layout, and is said so (check_preset_fits), not met with renames to add to a key map.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shared.port import layouts
from shared.port.endpoints import Endpoint
from shared.port.formats import FORMATS
from shared.port.layouts import KeyMap
from shared.port.stages import Read, read_endpoint


@dataclasses.dataclass(frozen=True)
class Fit:
    """Other layouts the file fits, reading it alike: their names, and what their model differs in."""

    layouts: tuple[str, ...]
    difference: str

    @property
    def names(self) -> str:
        return " and ".join(self.layouts)

    def __str__(self) -> str:
        return f"{self.names} ({self.difference})"


def candidates(src: Endpoint, name: str) -> list[KeyMap]:
    """The layouts other than the source's that read model `name` from a file of the source's format; one that
    maps the file as the source's does (a preset of the catalogue's own layout, tf-nmt-2022) reads it alike."""
    presets = layouts.presets().values()
    known = [layouts.IDENTITY, *(p for p in presets if p.model == name and FORMATS.get(p.format) is src.format)]
    return [layout for layout in known if layout.title != src.layout.title and _mapping(layout) != _mapping(src.layout)]


def _mapping(layout: KeyMap) -> tuple:
    return layout.renames, layout.transforms, dict(layout.config)


def other_layouts(src: Endpoint, stack, name: str, overrides: dict, found: Read) -> list[Fit]:
    """Each other layout that reads the source into a model computing another function than `found`'s; a
    layout that does not fit the file, or gives the same arrays and config, is none."""
    check_preset_fits(src, stack, name, found)
    if src.format.whole_model:  # a whole model names its own config and weights
        return []
    others: list[tuple[Fit, Read]] = []
    for layout in candidates(src, name):
        try:
            read = read_endpoint(dataclasses.replace(src, layout=layout), stack, name, found.dtype, overrides, False, found.raw)
        except ValueError:  # a rename, a transform or a checkpoint path that does not fit: not this layout's file
            continue
        if _same_function(read, found) or not _fits(stack, name, read, found, src.format.keyed):
            continue
        twin = next((index for index, (_, other) in enumerate(others) if _same_function(read, other)), None)
        if twin is None:
            others.append((Fit((layout.title,), difference(read, found)), read))
        else:  # two layouts that read the file alike are one alternative
            fit, other = others[twin]
            others[twin] = (dataclasses.replace(fit, layouts=(*fit.layouts, layout.title)), other)
    if others and src.format.keyed and not _model_holds(stack, name, found):
        return []  # the file does not fit its own layout either: the port's strict read says so
    return [fit for fit, _ in others]


def check_preset_fits(src: Endpoint, stack, name: str, found: Read) -> None:
    """A torch or safetensors file read through a preset must give the keys of the model it builds, else one error
    says the file is not that layout, naming the keys it lacks and those it holds beyond them, in its own names."""
    if not (src.layout.preset and src.format.keyed):
        return
    expected = stack.get_weights(stack.build(name, found.dtype, **found.config))
    lacking = [src.layout.file_key(key) for key in expected if key not in found.weights]
    extra = [src.layout.file_key(key) for key in found.weights if key not in expected]
    if lacking or extra:
        raise ValueError(src.layout.not_this_layout(src.text, lacking, extra, extra=True))


def _same_function(read: Read, found: Read) -> bool:
    return (
        read.config == found.config
        and read.weights.keys() == found.weights.keys()
        and all(np.array_equal(value, found.weights[key]) for key, value in read.weights.items())
    )


def _fits(stack, name: str, read: Read, found: Read, keyed: bool) -> bool:
    """Whether the catalogue model built at `read`'s config takes `read`'s arrays (a Keras or checkpoint
    format was read into that model already: it does)."""
    if not keyed:
        return True
    if read.config == found.config:
        return _shapes(read) == _shapes(found)
    return _model_holds(stack, name, read)


def _shapes(read: Read) -> dict:
    return {key: np.shape(value) for key, value in read.weights.items()}


def _model_holds(stack, name: str, read: Read) -> bool:
    model = stack.build(name, read.dtype, **read.config)
    try:
        stack.set_weights(model, read.weights)
    except ValueError:
        return False
    return True


def difference(read: Read, found: Read) -> str:
    """What a layout's reading changes against `found`: options, and the leaves that hold other arrays."""
    options = [f"{key}={read.config[key]!r}" for key in read.config if read.config[key] != found.config.get(key)]
    leaves = sorted({key.rsplit(".", 1)[0] for key, value in read.weights.items()
                     if key not in found.weights or not np.array_equal(value, found.weights[key])})  # fmt: skip
    parts = [f"built with {', '.join(options)}"] if options else []
    return "; ".join(parts + ([f"other arrays in {', '.join(leaves)}"] if leaves else []))


def _how_to_name(src: Endpoint, also_fits: list[Fit]) -> str:
    names = [src.layout.title] + [title for fit in also_fits for title in fit.layouts]
    flags = [f"--from {src.format.name} for {n}" if n == layouts.IDENTITY.title else f"--from {n}" for n in names]
    return ", ".join(flags)


def refusal(src: Endpoint, also_fits: list[Fit]) -> str:
    """The error of an ambiguous source whose layout the user did not name."""
    others = "; ".join(map(str, also_fits))
    return (f"{src.text}: the file fits {len(also_fits) + 1} layouts whose models compute different functions, and its "
            f"names and shapes cannot tell which one wrote it: {src.layout.title}, and {others}. Name the layout that wrote "
            f"it ({_how_to_name(src, also_fits)}), and check the port against your own model with "
            "--reference MODULE:CALLABLE")  # fmt: skip


def notes(src: Endpoint, also_fits: list[Fit], user_model_ran: bool) -> list[str]:
    """The report's lines on the other layouts the source fits."""
    if not also_fits:
        return []
    decided = ("your own model was run on it and decides (below)" if user_model_ran
               else "only your own model can tell them apart (--reference MODULE:CALLABLE)")  # fmt: skip
    others = "; ".join(map(str, also_fits))
    return [f"the file also fits {others}: names and shapes cannot tell these from {src.layout.title}; {decided}"]


def verdict(src: Endpoint, also_fits: list[Fit], user_model_ran: bool) -> str:
    """The last word of a port that verified: a bare `ported.` only where nothing else fits or the user's
    model decided."""
    if not also_fits or user_model_ran:
        return "ported."
    others = ", ".join(fit.names for fit in also_fits)
    return (f"ported as {src.layout.title}, the layout you named (the file fits {others} as well; only --reference "
            "with your own model tells them apart).")  # fmt: skip
