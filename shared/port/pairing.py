"""How `convert` pairs two models' leaves (shared.core.leaves): by the key map, then by path and kind, then by kind
and shapes (in order among several candidates: a guess `convert` settles by running both models); strict, one
ValueError listing every leaf left empty or over, every mis-shaped pair and every configuration that differs
(shared.port.conversion's docstring gives the whole rule). The options table both stacks' walks state facts from
(OPTIONS) is checked here."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from shared.core.leaves import Leaf
from shared.port import layouts

_RECURRENT = ("activation", "recurrent activation", "bias", "bidirectional", "go backwards", "merge mode")
# The options of each kind of leaf that change its function where its weights cannot show it: each stack's walk
# states those its layer fixes (Leaf.facts; a cell fixes no direction, a bare weight of your own module nothing), and
# a pair stating two values of one does not pair. Not here, as a torch model's forward does them as a rule: a Dense's
# or Conv1D's activation, return_sequences / return_state, mask_zero, stateful, batch_first, causal masks (arguments
# of a call in both frameworks); dropout acts in training only.
OPTIONS: dict[str, tuple[str, ...]] = {
    "linear": ("bias",),
    "embedding": ("max norm", "lookup"),  # lookup: of the ids given, or of the positions 0..T-1 (keras-hub's)
    "rnn": tuple(option for option in _RECURRENT if option != "recurrent activation"),
    "gru": _RECURRENT,
    "lstm": _RECURRENT,
    "layer_norm": ("eps", "normalized axes", "rms scaling"),
    "conv1d": ("stride", "dilation", "groups", "padding", "bias"),
    "multi_head_attention": ("heads", "bias", "norm first", "activation"),  # a Transformer block's, on its self_attn
    "parameter": ("score mode", "use scale"),  # Keras's Attention / AdditiveAttention and their torch twins
}
# Options a model's own code can do around the layer: torch's layers read forwards and concatenate a bidirectional
# layer's halves, and a torch model may flip the sequence or sum the halves itself (tests/zoo/tf_nmt_2022_torch.py);
# a torch model looks up a position table with `nn.Embedding(positions)(torch.arange(length))`, where keras-hub's
# PositionEmbedding takes no ids. A pair differing in one is settled by running both models on `inputs`, refused
# without them.
AROUND_THE_LAYER = frozenset({"go backwards", "merge mode", "lookup"})


@dataclasses.dataclass
class Pair:
    """Two leaves paired, and how (`GUESSED`: by order, a guess to settle)."""

    source: Leaf
    target: Leaf
    how: str  # "key map", "name", "own name" (the last path component), "kind and shape" (the only candidate) or "order"


GUESSED = "order"


@dataclasses.dataclass
class NamedPairs:
    """A key map as pairing sees it: `target(path)` names a source path's target path (or None), and every
    entry must pair some source path (`idle`)."""

    target: Callable[[str], str | None]
    idle: Callable[[list[str]], list[str]]


def named_pairs(key_map) -> NamedPairs:
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
    named = named or named_pairs(None)
    sources, targets = split_composites(sources, targets), split_composites(targets, sources)
    refused = [leaf.refusal for leaf in [*sources, *targets] if leaf.refusal]
    if refused:
        raise ValueError("; ".join(refused))
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


def split_composites(leaves: list[Leaf], others: list[Leaf]) -> list[Leaf]:
    """`leaves` with each composite (Leaf.splits: a Keras MultiHeadAttention) whose kind `others` has none of read as
    its parts (`attention.query`, `.key`, `.value`, `.output`; or `.qkv` packed and `.output`): the split of fewest
    parts whose kinds and shapes the other model still has, else the first. Each part names its composite
    (`part_of`): `convert` settles its pairs by running both models, as the heads are the other model's own code."""
    kinds = {leaf.kind for leaf in others}
    available = Counter(_key(leaf) for leaf in others)
    out = []
    for leaf in leaves:
        if not leaf.splits or leaf.kind in kinds:
            out.append(leaf)
            continue
        fits = [split for split in sorted(leaf.splits, key=len) if not Counter(map(_key, split)) - available]
        chosen = fits[0] if fits else leaf.splits[0]
        available -= Counter(map(_key, chosen))
        out += [dataclasses.replace(part, path=f"{leaf.path}.{_own_name(part.path)}", part_of=leaf.describe()) for part in chosen]
    return out


def _key(leaf: Leaf) -> tuple:
    return leaf.kind, tuple(leaf.shapes.items())


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


def _check(pairs: list[Pair], unused: list[Leaf], empty: list[Leaf]) -> None:
    """One ValueError listing every problem, with a key map pairing the leftovers by shape."""
    wrong = [p for p in pairs if p.source.kind != p.target.kind or p.source.shapes != p.target.shapes]
    misshaped = [f"{p.source.describe()} -> {p.target.describe()}: {_mismatch(p)}" for p in wrong]
    differing = fact_lines(pairs, around=False)
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


def _mismatch(pair: Pair) -> str:
    """What keeps a named pair apart: its kinds (each with the rules of its own), else its shapes."""
    if pair.source.kind != pair.target.kind:
        return f"kinds differ: {pair.source.kind} != {pair.target.kind} (no rule converts one into the other)"
    return f"{_shapes(pair.source)} != {_shapes(pair.target)}"


def _shapes(leaf: Leaf) -> str:
    return ", ".join(f"{suffix or 'value'} {tuple(shape)}" for suffix, shape in leaf.shapes.items())


def _check_options(leaves: list[Leaf]) -> None:
    """Each fact a walk states is an option of its leaf's kind (OPTIONS): the one table both stacks follow."""
    unlisted = [f"{leaf.describe()}: {name}" for leaf in leaves for name in leaf.facts if name not in OPTIONS.get(leaf.kind, ())]
    if unlisted:
        raise ValueError(f"options no entry of shared.port.pairing.OPTIONS lists for their kind: {', '.join(unlisted)}")


def fact_lines(pairs: list[Pair], around: bool) -> list[str]:
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
