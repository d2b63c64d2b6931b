"""Port your own model: weights between a torch `nn.Module` and a Keras model built from standard layers.

`convert(source, target)` walks both models' layers by attribute path (torch_impl.conversion and
tf_impl.conversion name each weight-owning *leaf* and read and write it in the canonical layout, through the
leaf rules of shared.core.canonical), pairs the leaves of the two models, and copies the weights across:

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
(OPTIONS: an epsilon, a head count, a score mode, a direction, ...) that change its function where its weights
cannot show it; a pair stating two values of one is refused, naming the pair, the option and both values.
Where a model's own code can do what the option does around the layer (AROUND_THE_LAYER: a torch model reverses
its sequence with `flip`, sums a bidirectional layer's halves), the pair is settled by running both models on
`inputs`, as a pair made by order is. A stacked recurrent layer is one leaf per layer
(`rnn[0]`, `rnn[1]`), so torch's `nn.LSTM(num_layers=2, bidirectional=True)` pairs with two Keras
`Bidirectional(LSTM)` layers.

Stock Keras `LSTM` and `SimpleRNN` hold one bias where torch holds two: torch to Keras sums them (the
forward pass is equal; training is not, see shared.core.canonical) and says so in `Conversion.notes`;
Keras to torch puts the bias in `b_ih` and zeros `b_hh`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from shared import stacks
from shared.port import layouts, references

SUMMED_NOTE = (
    "{targets}: a stock Keras {layer} holds one bias, so b_ih + b_hh were summed into it: the forward pass is "
    "equal, training is not (torch gives each of its two biases the gradient, the sum moves twice as far); "
    "for training equal to torch build it with tf_impl.keras_compat.layers.TorchLSTMCell / TorchRNNCell / TorchLSTM"
)
ZEROED_NOTE = "{targets}: the Keras {layer}'s one bias went to b_ih, b_hh is zeros (the forward pass is equal)"

_RECURRENT = ("activation", "recurrent activation", "bias", "bidirectional", "go backwards", "merge mode")
# The options of each kind of leaf that change its function where its weights cannot show it: each stack's walk
# states those its layer fixes (Leaf.facts; a cell fixes no direction, a bare weight of your own module nothing), and
# a pair stating two values of one does not pair. Not here, as a torch model's forward does them as a rule: a Dense's
# or Conv1D's activation, return_sequences / return_state, mask_zero, stateful, batch_first, causal masks (arguments
# of a call in both frameworks); dropout acts in training only.
OPTIONS: dict[str, tuple[str, ...]] = {
    "linear": ("bias",),
    "embedding": ("max norm",),
    "rnn": tuple(option for option in _RECURRENT if option != "recurrent activation"),
    "gru": _RECURRENT,
    "lstm": _RECURRENT,
    "layer_norm": ("eps", "normalized axes", "rms scaling"),
    "conv1d": ("stride", "dilation", "groups", "padding", "bias"),
    "multi_head_attention": ("heads", "bias", "norm first", "activation"),  # a Transformer block's, on its self_attn
    "parameter": ("score mode", "use scale"),  # Keras's Attention / AdditiveAttention and their torch twins
}
# Options a model's own code can do around the layer: torch's layers read forwards and concatenate a bidirectional
# layer's halves, and a torch model may flip the sequence or sum the halves itself (tests/zoo/tf_nmt_2022_torch.py).
# A pair differing in one is settled by running both models on `inputs`, refused without them.
AROUND_THE_LAYER = frozenset({"go backwards", "merge mode"})


@dataclasses.dataclass
class Leaf:
    """One weight-owning layer of a model, as a stack's walk sees it.

    Args:
        path: attribute path (`encoder.rnn`; `rnn[1]` for layer 1 of a stacked recurrent layer; a Keras
            functional or Sequential model's layer by its name).
        kind: the leaf rule's kind: linear, embedding, rnn, gru, lstm, layer_norm, conv1d, parameter.
        layer: what the user wrote, for messages (`nn.LSTM layer 1`, `Bidirectional(LSTM)`).
        shapes: canonical suffix -> shape, in torch's layout (`weight_ih_l0`, `bias`, ...).
        facts: the options of its kind (OPTIONS) its layer fixes, which both sides must share for equal outputs.
        read: () -> the canonical arrays; write: canonical arrays -> None (cast to the leaf's dtype).
        summed: a stock Keras cell holding one bias (b_ih + b_hh).
        handles: the framework's weight objects behind it (a walk finds the weights no leaf covers).
    """

    path: str
    kind: str
    layer: str
    shapes: dict[str, tuple]
    facts: dict[str, object]
    read: Callable[[], dict[str, np.ndarray]]
    write: Callable[[Mapping[str, np.ndarray]], None]
    summed: bool = False
    handles: list = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        return f"{self.path} ({self.layer})"


@dataclasses.dataclass
class Pair:
    source: Leaf
    target: Leaf
    how: str  # "key map", "name", "own name" (the last path component), "kind and shape" (the only candidate) or "order"


GUESSED = "order"


@dataclasses.dataclass
class Conversion:
    """What `convert` did: every pair of leaves and how it was made, and what the user should know."""

    source_stack: str
    target_stack: str
    pairs: list[Pair]
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


def state_block_facts(found: list[Leaf], block_path: str, facts: dict) -> None:
    """A Transformer block's configuration (norm order, activation) stated on its self-attention leaf, the one
    both stacks name `<block>.self_attn`: two blocks computing otherwise then do not pair."""
    for leaf in found:
        if leaf.path == f"{block_path}self_attn":
            leaf.facts.update(facts)


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
    pairs = pair_leaves(source_leaves, target_leaves, _pairs_named(key_map))
    guessed = [pair for pair in pairs if pair.how == GUESSED]
    undecided = "; ".join(filter(None, [guessed and _guess_text(guessed), _around_text(pairs)]))
    if undecided and inputs is None:
        named = f", or a key map naming the pairs, e.g. {_key_map_of(guessed)}" if guessed else ""
        raise ValueError(f"{undecided}: pass inputs= (a batch both models run on) to settle them{named}")
    before = [pair.target.read() for pair in pairs] if undecided else []
    for pair in pairs:
        pair.target.write(pair.source.read())
    if undecided:
        _settle(source, target, inputs, pairs, guessed, undecided, before)
    notes = _notes(pairs) + ([(f"{undecided}; running both models on the inputs settled them", False)] if undecided else [])
    for note in (note for note, drifts in notes if drifts):  # said also where a notebook ignores the report
        warnings.warn(note, stacklevel=2)
    return Conversion(source_stack, target_stack, pairs, [note for note, _ in notes], sum(len(p.source.shapes) for p in pairs),
                      sum(math.prod(shape) for p in pairs for shape in p.source.shapes.values()))  # fmt: skip


def _notes(pairs: list[Pair]) -> list[tuple[str, bool]]:
    """One note per kind of summed-bias layer: torch to Keras summed (training drifts), or Keras to torch."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for pair in pairs:
        if pair.target.summed or pair.source.summed:
            template, layer = (SUMMED_NOTE, pair.target.layer) if pair.target.summed else (ZEROED_NOTE, pair.source.layer)
            grouped.setdefault((template, layer), []).append(pair.target.path)
    return [(template.format(targets=", ".join(paths), layer=layer), template is SUMMED_NOTE)
            for (template, layer), paths in grouped.items()]  # fmt: skip


def _guess_text(guessed: list[Pair]) -> str:
    listed = "; ".join(f"{pair.source.describe()} -> {pair.target.path}" for pair in guessed)
    return f"{len(guessed)} pairs were made by order among layers of the same kind and shapes ({listed})"


def _key_map_of(pairs: list[Pair]) -> str:
    return json.dumps({pair.source.path: pair.target.path for pair in pairs})


def _around_text(pairs: list[Pair]) -> str:
    """The pairs differing in options a model's own code may do around the layer (AROUND_THE_LAYER), or ""."""
    listed = "; ".join(_fact_lines(pairs, around=True))
    return f"configuration differs in what a model's own code may do around the layer ({listed})" if listed else ""


def _settle(source, target, inputs, pairs: list[Pair], guessed: list[Pair], undecided: str, before: list[dict]) -> None:
    """Both models run on `inputs`: equal outputs settle the pairs made by order and the options done around
    a layer; otherwise the target gets its weights back and one error names them."""
    check = verify(source, target, inputs)
    if check.ok:
        return
    for pair, arrays in zip(pairs, before, strict=True):
        pair.target.write(arrays)
    worst = max((c for c in check.components if c.max_abs is not None), key=lambda c: c.max_abs, default=None)
    differs = f"{worst.name} differs by {worst.max_abs:.1e}" if worst is not None else "the outputs differ"
    remedies = [f"name the pairs in a key map (this one is the order tried: {_key_map_of(guessed)})"] if guessed else []
    remedies += ["build the two layers with the same options"] if _around_text(pairs) else []
    raise ValueError(f"{undecided}, and with them the models' outputs differ on the inputs ({differs}): "
                     f"{'; '.join(remedies)}; the target keeps its weights")  # fmt: skip


# ---- pairing ----


@dataclasses.dataclass
class NamedPairs:
    """A key map as pairing sees it: `target(path)` names a source path's target path (or None), and every
    entry must pair some source path (`idle`)."""

    target: Callable[[str], str | None]
    idle: Callable[[list[str]], list[str]]


def _pairs_named(key_map) -> NamedPairs:
    """The key map as a NamedPairs."""
    if key_map is None:
        return NamedPairs(lambda path: None, lambda paths: [])
    if isinstance(key_map, (str, Path)):
        key_map = _load_key_map(Path(key_map))
    if isinstance(key_map, layouts.KeyMap):
        rules = key_map.renames

        def first(path: str) -> str | None:
            return next((renamed for rule in rules if (renamed := rule.apply(path)) is not None), None)

        def idle(paths: list[str]) -> list[str]:
            used = {next((rule.label for rule in rules if rule.apply(path) is not None), None) for path in paths}
            return [rule.describe() for rule in rules if rule.label not in used]

        return NamedPairs(first, idle)
    if isinstance(key_map, Mapping):
        return NamedPairs(lambda path: key_map.get(path), lambda paths: [repr(key) for key in key_map if key not in paths])
    given = type(key_map).__name__
    raise ValueError(f"key_map takes {{source path: target path}}, a shared.port.layouts.KeyMap or a JSON file, got {given}")


def _load_key_map(path: Path):
    data = layouts.read_json(path)  # one line naming the file: unreadable, too large, not UTF-8 or not JSON
    if isinstance(data, dict) and "renames" in data:
        return layouts.parse(data, str(path))
    if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
        return data
    raise ValueError(f'key map {path}: expected {{"source path": "target path", ...}} or {{"renames": [...]}}')


def pair_leaves(sources: list[Leaf], targets: list[Leaf], named: NamedPairs | None = None) -> list[Pair]:
    """Pair by the key map, then by path and kind, then by kind and shapes (in order among several
    candidates); strict (see the module docstring)."""
    named = named or _pairs_named(None)
    _check_options([*sources, *targets])
    by_path = {leaf.path: leaf for leaf in targets}
    unknown = [f"{leaf.path} -> {named.target(leaf.path)}" for leaf in sources if named.target(leaf.path) not in (None, *by_path)]
    idle = named.idle([leaf.path for leaf in sources])
    problems = [f"names target layers the target model does not have: {', '.join(unknown)}"] if unknown else []
    problems += [f"pairs no source layer with {', '.join(idle)}"] if idle else []
    if problems:
        layers = f"the source's layers: {', '.join(leaf.path for leaf in sources)}; the target's: {', '.join(by_path)}"
        raise ValueError(f"the key map {'; it '.join(problems)} ({layers})")
    pairs, free, paired = [], dict(by_path), set()

    def add(leaf: Leaf, found: Leaf, how: str) -> None:
        pairs.append(Pair(leaf, free.pop(found.path), how))
        paired.add(id(leaf))

    for how, match in (("key map", lambda leaf: named.target(leaf.path)), ("name", lambda leaf: leaf.path)):
        for leaf in sources:
            found = free.get(match(leaf))
            if found is not None and id(leaf) not in paired and (how == "key map" or found.kind == leaf.kind):
                add(leaf, found, how)
    for leaf, found in _by_own_name([leaf for leaf in sources if id(leaf) not in paired], list(free.values())):
        add(leaf, found, "own name")
    for same_shapes in (True, False):  # the rest of a kind (no same-shape candidate) in order: _check names them
        leftover = [leaf for leaf in sources if id(leaf) not in paired]
        for leaf_class in _classes(leftover, same_shapes):
            candidates = [found for found in free.values() if _same_class(found, leaf_class[0], same_shapes)]
            single = same_shapes and len(leaf_class) == 1 and len(candidates) == 1
            for leaf, found in zip(leaf_class, candidates, strict=False):
                add(leaf, found, "kind and shape" if single else GUESSED)
    order = {id(leaf): index for index, leaf in enumerate(sources)}
    pairs.sort(key=lambda pair: order[id(pair.source)])
    _check(pairs, [leaf for leaf in sources if id(leaf) not in paired], list(free.values()))
    return pairs


def _own_name(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _by_own_name(sources: list[Leaf], targets: list[Leaf]) -> list[tuple[Leaf, Leaf]]:
    """Pairs whose last path component, kind and shapes agree and single each other out (`attention_1.scale` and
    `attention.scale`, where the containers' names differ)."""

    def grouped(leaves: list[Leaf]) -> dict[tuple, list[Leaf]]:
        groups: dict[tuple, list[Leaf]] = {}
        for leaf in leaves:
            groups.setdefault((_own_name(leaf.path), leaf.kind, tuple(leaf.shapes.items())), []).append(leaf)
        return groups

    found = grouped(targets)
    return [
        (group[0], found[key][0]) for key, group in grouped(sources).items() if len(group) == 1 and len(found.get(key, [])) == 1
    ]


def _classes(leaves: list[Leaf], same_shapes: bool) -> list[list[Leaf]]:
    """`leaves` grouped by kind (and shapes), in order of first appearance."""
    groups: dict = {}
    for leaf in leaves:
        groups.setdefault((leaf.kind, tuple(leaf.shapes.items()) if same_shapes else None), []).append(leaf)
    return list(groups.values())


def _same_class(leaf: Leaf, other: Leaf, same_shapes: bool) -> bool:
    return leaf.kind == other.kind and (not same_shapes or leaf.shapes == other.shapes)


def shortest_paths(leaves: list[Leaf]) -> list[Leaf]:
    """One leaf per layer, in order of first appearance, named by its shortest path: a layer reachable by
    several (an attribute and a `hparams` dict's entry) is found once per path by a walk."""
    kept: dict[tuple, Leaf] = {}
    for leaf in leaves:
        key = tuple(id(handle) for handle in leaf.handles)
        held = kept.setdefault(key, leaf)
        if _path_length(leaf.path) < _path_length(held.path):
            held.path = leaf.path
    return list(kept.values())


def _path_length(path: str) -> tuple[int, int]:
    return path.count(".") + path.count("["), len(path)


def _check(pairs: list[Pair], unused: list[Leaf], empty: list[Leaf]) -> None:
    """One ValueError listing every problem, with a key map pairing the leftovers by shape."""
    wrong = [p for p in pairs if p.source.shapes != p.target.shapes]
    misshaped = [f"{p.source.describe()} -> {p.target.describe()}: {_shapes(p.source)} != {_shapes(p.target)}" for p in wrong]
    differing = _fact_lines(pairs, around=False)
    problems = [
        ("target layers left empty", [leaf.describe() for leaf in empty]),
        ("source layers left over", [leaf.describe() for leaf in unused]),
        ("mis-shaped pairs", misshaped),
        ("configuration differs", differing),
    ]
    lines = [f"{title}: {'; '.join(items)}" for title, items in problems if items]
    proposal = _propose([*unused, *(p.source for p in wrong)], [*empty, *(p.target for p in wrong)])
    if proposal:
        lines.append(f"pairs proposed by shape (a key map for key_map / --key-map): {json.dumps(proposal)}")
    if lines:
        raise ValueError("the models do not pair: " + " | ".join(lines))


def _propose(sources: list[Leaf], targets: list[Leaf]) -> dict[str, str]:
    """Each source leaf with the first free target leaf of its kind and shapes."""
    free, proposal = list(targets), {}
    for leaf in sources:
        match = next((t for t in free if t.kind == leaf.kind and t.shapes == leaf.shapes), None)
        if match is not None:
            proposal[leaf.path] = match.path
            free.remove(match)
    return proposal


def _shapes(leaf: Leaf) -> str:
    return ", ".join(f"{suffix or 'value'} {tuple(shape)}" for suffix, shape in leaf.shapes.items())


def _check_options(leaves: list[Leaf]) -> None:
    """Each fact a walk states is an option of its leaf's kind (OPTIONS): the one table both stacks follow."""
    unlisted = [f"{leaf.describe()}: {name}" for leaf in leaves for name in leaf.facts if name not in OPTIONS.get(leaf.kind, ())]
    if unlisted:
        raise ValueError(f"options no entry of shared.port.conversion.OPTIONS lists for their kind: {', '.join(unlisted)}")


def _fact_lines(pairs: list[Pair], around: bool) -> list[str]:
    """`source path -> target path: option source value != target value` for each option both leaves of a pair
    state differently, of those done around the layer (AROUND_THE_LAYER) or of the others."""
    lines = []
    for pair in pairs:
        a, b = pair.source.facts, pair.target.facts
        differ = [name for name in a if name in b and (name in AROUND_THE_LAYER) == around and not _same(a[name], b[name])]
        lines += [f"{pair.source.path} -> {pair.target.path}: {name} {a[name]!r} != {b[name]!r}" for name in differ]
    return lines


def _same(a, b) -> bool:
    """Equal; numbers as floats, to rounding (a bool or None is no number: `max norm` None != 2.0)."""
    numbers = all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in (a, b))
    if numbers and (isinstance(a, float) or isinstance(b, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


# ---- verification: the two models' outputs side by side ----


def map_inputs(inputs, fn):
    """`fn` applied to each array of a verification batch: an array, a tuple (or list) or a dict of arrays."""
    if isinstance(inputs, Mapping):
        return {key: fn(value) for key, value in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return tuple(fn(value) for value in inputs)
    return fn(inputs)


def positional(function) -> list[str]:
    """The positional parameters of a model's `forward`/`call` a verification batch may be spread over."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    parameters = inspect.signature(function).parameters.values()
    return [p.name for p in parameters if p.kind in kinds and p.name not in ("training", "mask")]


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
