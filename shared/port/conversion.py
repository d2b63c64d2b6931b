"""Port your own model: weights between a torch `nn.Module` and a Keras model built from standard layers.

`convert(source, target)` walks both models' layers by attribute path (torch_impl.conversion and
tf_impl.conversion name each weight-owning *leaf*, shared.core.leaves.Leaf, and read and write it in the canonical
layout, through the leaf rules of shared.core.canonical), pairs the leaves of the two models (shared.port.pairing),
and copies the weights across:

1. pairs the key map names (`{"source path": "target path"}`, or a shared.port.layouts key map whose renames
   turn source paths into target paths; every entry must pair something);
2. then leaves of the same path and kind (a model and its mirrored twin; a layer reachable by several
   paths, such as through a `hparams` dict, is named by its shortest), then of the same last path component,
   kind and shapes where that singles one out (`attention_1.scale` and `attention.scale`);
3. then the rest by kind and shapes: a leaf with one candidate of its kind and shapes pairs with it
   (`kind and shape`); two or more same-kind, same-shape candidates pair in order (`order`: a Keras
   `Sequential` names its layers `lstm`, `lstm_1`, ...). A pair made by order is a guess: `convert` settles
   it by running both models on `inputs` (refused, naming those pairs, where the outputs differ, and the
   target left as it was), or refuses without `inputs`, with the key map that would settle it.

Strict: every source weight is used once and every target weight filled; otherwise one ValueError lists
the target leaves left empty, the source leaves left over, the pairs whose shapes or configuration differ,
and proposes a key map pairing the leftovers by shape. A leaf's configuration is the options of its kind
(shared.port.pairing.OPTIONS: an epsilon, a head count, a score mode, a direction, ...) that change its function
where its weights cannot show it; a pair stating two values of one is refused, naming the pair, the option and both
values. Where a model's own code can do what the option does around the layer (pairing.AROUND_THE_LAYER: a torch
model reverses its sequence with `flip`, sums a bidirectional layer's halves), the pair is settled by running both
models on `inputs`, as a pair made by order is. A stacked recurrent layer is one leaf per layer
(`rnn[0]`, `rnn[1]`), so torch's `nn.LSTM(num_layers=2, bidirectional=True)` pairs with two Keras
`Bidirectional(LSTM)` layers.

A composite layer, Keras's MultiHeadAttention, is one leaf against torch's `nn.MultiheadAttention`; against a model
with none it reads as its projections (pairing.split_composites: `attention.query`, `.key`, `.value`, `.output` as
Dense layers, or `.qkv` packed and `.output`), which pair with the user's nn.Linear layers as any linear leaf does.
The heads, their split and the scores are then the user's own code, so those pairs are always settled by running
both models on `inputs` (HEADS_REMEDY says what to check where they differ).

Stock Keras `LSTM` and `SimpleRNN` hold one bias where torch holds two: torch to Keras sums them (the
forward pass is equal; training is not, see shared.core.canonical) and says so in `Conversion.notes`;
Keras to torch puts the bias in `b_ih` and zeros `b_hh`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from collections.abc import Mapping

import numpy as np

from shared import stacks
from shared.core import moved
from shared.port import pairing, references

SUMMED_NOTE = (
    "{targets}: a stock Keras {layer} holds one bias, so b_ih + b_hh were summed into it: the forward pass is "
    "equal, training is not (torch gives each of its two biases the gradient, the sum moves twice as far); "
    "for training equal to torch build it with tf_impl.keras_compat.layers.TorchLSTMCell / TorchRNNCell / TorchLSTM"
)
HEADS_REMEDY = (
    "check the attention's code against Keras's MultiHeadAttention: the query scores the key (q k^T / sqrt(head_dim)), the "
    "heads as many and split head-major (head h holds features h*D .. h*D + D-1: `view(B, T, heads, D)`), a packed "
    "projection's features q, k, v in that order"
)
ZEROED_NOTE = "{targets}: the Keras {layer}'s one bias went to b_ih, b_hh is zeros (the forward pass is equal)"


@dataclasses.dataclass
class Conversion:
    """What `convert` did: every pair of leaves and how it was made, and what the user should know."""

    source_stack: str
    target_stack: str
    pairs: list[pairing.Pair]
    notes: list[str]
    weights: int  # arrays copied
    values: int  # numbers copied

    def render(self) -> str:
        lines = [f"{len(self.pairs)} layers paired ({self.weights} arrays, {self.values:,} values), "
                 f"{self.source_stack} -> {self.target_stack}:"]  # fmt: skip
        width = max((len(pair.source.describe()) for pair in self.pairs), default=0)
        lines += [f"  {pair.source.describe():{width}s} -> {pair.target.describe()}  [{pair.how}]" for pair in self.pairs]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def stack_of(model) -> str:
    """ "torch" for an nn.Module, "tf" for a Keras layer or model; ValueError otherwise."""
    stack = references.stack_of(model)
    if stack is None or isinstance(model, (tuple, list, dict)):
        raise ValueError(f"not a torch nn.Module or a Keras model: {type(model).__name__}")
    return stack


def walker(stack: str):
    return stacks.import_module(stack, "conversion")


def convert(source, target, key_map=None, rules=None, inputs=None) -> Conversion:
    """Copy the weights of `source` (a torch nn.Module or a Keras model) into `target` (the other stack's).

    Args:
        key_map: `{source path: target path}` for the pairs the walk cannot find, a shared.port.layouts KeyMap
            (its renames turn source paths into target paths), or the path of a JSON file of either.
        rules: the leaf rule table (shared.core.canonical.RULES); tests pass a wrong one to prove it is caught.
        inputs: a batch both models are run on (as `verify` takes it) to settle pairs made by order.
    Raises ValueError naming every leaf that could not be paired or filled, and the pairs made by order
    where no `inputs` settle them (nothing is written then).
    """
    source_stack, target_stack = stack_of(source), stack_of(target)
    if source_stack == target_stack:
        raise ValueError(f"both models are {source_stack} models: convert ports between torch and Keras")
    source_leaves = walker(source_stack).leaves(source, rules)
    target_leaves = walker(target_stack).leaves(target, rules)
    pairs = pairing.pair_leaves(source_leaves, target_leaves, pairing.named_pairs(key_map))
    guessed = [pair for pair in pairs if pair.how == pairing.GUESSED]
    parts = [pair for pair in pairs if pair.source.part_of or pair.target.part_of]
    alone = [pair for pair in guessed if pair not in parts]
    undecided = "; ".join(filter(None, [alone and _guess_text(alone), _parts_text(parts), _around_text(pairs)]))
    if undecided and inputs is None:
        named = f", or a key map naming the pairs, e.g. {_key_map_of(guessed)}" if guessed else ""
        raise ValueError(f"{undecided}: pass inputs= (a batch both models run on) to settle them{named}")
    before = [pair.target.read() for pair in pairs] if undecided else []
    for pair in pairs:
        pair.target.write(pair.source.read())
    if undecided:
        _settle(source, target, inputs, pairs, guessed or parts, undecided, before)
    notes = _notes(pairs) + ([(f"{undecided}; running both models on the inputs settled them", False)] if undecided else [])
    for note in (note for note, drifts in notes if drifts):  # said also where a notebook ignores the report
        warnings.warn(note, stacklevel=2)
    return Conversion(source_stack, target_stack, pairs, [note for note, _ in notes], sum(len(p.source.shapes) for p in pairs),
                      sum(math.prod(shape) for p in pairs for shape in p.source.shapes.values()))  # fmt: skip


def _notes(pairs: list[pairing.Pair]) -> list[tuple[str, bool]]:
    """One note per kind of summed-bias layer: torch to Keras summed (training drifts), or Keras to torch."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for pair in pairs:
        if pair.target.summed or pair.source.summed:
            template, layer = (SUMMED_NOTE, pair.target.layer) if pair.target.summed else (ZEROED_NOTE, pair.source.layer)
            grouped.setdefault((template, layer), []).append(pair.target.path)
    return [(template.format(targets=", ".join(paths), layer=layer), template is SUMMED_NOTE)
            for (template, layer), paths in grouped.items()]  # fmt: skip


def _guess_text(guessed: list[pairing.Pair]) -> str:
    listed = "; ".join(f"{pair.source.describe()} -> {pair.target.path}" for pair in guessed)
    return f"{len(guessed)} pairs were made by order among layers of the same kind and shapes ({listed})"


def _key_map_of(pairs: list[pairing.Pair]) -> str:
    return json.dumps({pair.source.path: pair.target.path for pair in pairs})


def _parts_text(parts: list[pairing.Pair]) -> str:
    """The pairs made with the projections of a composite layer (pairing.split_composites), or ""."""
    if not parts:
        return ""
    wholes = ", ".join(dict.fromkeys(pair.source.part_of or pair.target.part_of for pair in parts))
    listed = "; ".join(f"{pair.source.path} -> {pair.target.path}" for pair in parts)
    return (f"{len(parts)} layers were paired with the projections of {wholes}, whose heads and scores the other model "
            f"computes in its own code ({listed})")  # fmt: skip


def _around_text(pairs: list[pairing.Pair]) -> str:
    """The pairs differing in options a model's own code may do around the layer (pairing.AROUND_THE_LAYER), or ""."""
    listed = "; ".join(pairing.fact_lines(pairs, around=True))
    return f"configuration differs in what a model's own code may do around the layer ({listed})" if listed else ""


def _settle(
    source, target, inputs, pairs: list[pairing.Pair], guessed: list[pairing.Pair], undecided: str, before: list[dict]
) -> None:
    """Both models run on `inputs`: equal outputs settle the pairs made by order and the options done around
    a layer; otherwise the target gets its weights back and one error names them."""
    check = verify(source, target, inputs)
    if check.ok:
        return
    for pair, arrays in zip(pairs, before, strict=True):
        pair.target.write(arrays)
    worst = max((c for c in check.components if c.max_abs is not None), key=lambda c: c.max_abs, default=None)
    differs = f"{worst.name} differs by {worst.max_abs:.1e}" if worst is not None else "the outputs differ"
    remedies = [HEADS_REMEDY] if any(pair.source.part_of or pair.target.part_of for pair in pairs) else []
    remedies += [f"name the pairs in a key map (this one is the order tried: {_key_map_of(guessed)})"] if guessed else []
    remedies += ["build the two layers with the same options"] if _around_text(pairs) else []
    raise ValueError(f"{undecided}, and with them the models' outputs differ on the inputs ({differs}): "
                     f"{'; '.join(remedies)}; the target keeps its weights")  # fmt: skip


# ---- verification: the two models' outputs side by side ----


def outputs(model_or_fn, inputs) -> dict[str, np.ndarray]:
    """The outputs of a model (run by its stack in inference mode, floats cast to its dtype) or of a plain
    callable `fn(inputs)`, flattened: `output`, or `output[0]`, `output[1][0]`, ... and dict keys by name."""
    try:
        stack = walker(stack_of(model_or_fn))
    except ValueError:
        if not callable(model_or_fn):
            raise ValueError(f"verify takes models or callables, got {type(model_or_fn).__name__}") from None
        return _flatten(model_or_fn(inputs), "output", np.asarray)
    return _flatten(stack.run(model_or_fn, inputs), "output", stack.numpy)


def _flatten(value, name: str, to_numpy) -> dict[str, np.ndarray]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {key: array for name, item in value.items() for key, array in _flatten(item, str(name), to_numpy).items()}
    if isinstance(value, (tuple, list)):
        found = {}
        for index, item in enumerate(value):
            found.update(_flatten(item, f"{name}[{index}]", to_numpy))
        return found
    return {name: np.asarray(to_numpy(value))}


def verify(source_fn, target_fn, inputs, measured: tuple | None = None):
    """The outputs of `source_fn` and `target_fn` on `inputs`, side by side: max |diff| per output.

    Each of the two is a torch `nn.Module`, a Keras model or a plain callable `fn(inputs)`; `inputs` is a
    numpy array, a tuple or a dict of them (a model is given a tuple spread over its arguments, a dict by
    name; floats are cast to the model's dtype). Where both compute in float64 the bound is the equality
    policy's float64 port bound (scaled to each output's largest |value|), else its float32 output bound.
    `measured`: another (source, target) pair, typically the float32 models beside float64 ones, compared
    on the same inputs and printed beside, never deciding. Returns a shared.port.verification.Check.
    """
    from shared.catalogue import Tolerance
    from shared.port.verification import SCALED_BOUND, Check, bounds, close

    def compare(source, target) -> tuple[str, tuple[float, float], list]:
        expected, actual = outputs(source, inputs), outputs(target, inputs)
        dtype = "float64" if all(a.dtype == np.float64 for a in (*expected.values(), *actual.values())) else "float32"
        atol, rtol = bounds(Tolerance(), dtype)
        if len(expected) != len(actual):
            raise ValueError(f"the source gives {len(expected)} outputs ({', '.join(expected)}), the target {len(actual)} "
                             f"({', '.join(actual)}): they cannot be compared")  # fmt: skip
        rows = [close(name, got, expected[name], atol, rtol, scaled=dtype == "float64")
                for name, got in zip(expected, actual.values(), strict=True)]  # fmt: skip
        return dtype, (atol, rtol), rows

    dtype, (atol, rtol), components = compare(source_fn, target_fn)
    bound = SCALED_BOUND.format(atol=atol) if dtype == "float64" else f"{atol:g} abs + {rtol:g} rel"
    count = f"{len(components)} output{'' if len(components) == 1 else 's'}"
    check = Check(f"the target against the source, {count}", dtype, bound, components)
    if measured is not None:
        check.measured_dtype, _, rows = compare(*measured)
        check.measured = {row.name: row for row in rows}
    return check


__getattr__ = moved.getattr_for(__name__)  # the leaves' and the pairing's names, moved to shared.core.leaves and pairing.py, warn
