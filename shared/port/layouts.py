"""Third-party layouts: how another project's checkpoint maps onto a catalogue model's canonical weights.

A *key map* is a small JSON file; the shipped presets (shared/port/presets/*.json, `rosetta port --help` lists
them) are key maps too. Every field but `renames` is optional:

    {
      "name": "trevett-nmt3",
      "description": "one line: whose files these are",
      "source": "where the layout is defined (repository, file, revision)",
      "model": "bahdanau_bigru",              catalogue model the layout ports into
      "format": "torch",                       the format its files have (rosetta port's formats; a Keras
                                               format's layout reads its model's SavedModel folders too)
      "config": {"attention_bias": false},     catalogue options the layout needs
      "renames": [                             file key -> catalogue key; the first rule that matches wins
        {"prefix": "encoder.rnn.", "to": "encoder.gru."},
        {"regex": "^decoder\\.attn_(.*)$", "to": "decoder.attention.\\1"}
      ],
      "transforms": [                          on the renamed arrays, in catalogue names, in order
        {"swap_column_blocks": "encoder.fc.weight", "blocks": 2},
        {"zero_bias": "decoder.attention.fc2"},
        {"swap": ["decoder.attention.W1", "decoder.attention.W2"]}
      ],
      "reference": "torch_impl.references:trevett_nmt3",   runs the layout's own model on a file
      "runner": "torch_impl.references:run_trevett_nmt3"   how to call that model (see shared.port.references)
    }

Renames apply to the keys of a torch state_dict or safetensors file (for Keras files the weights are read
by attribute path, already in catalogue names). Transforms:
- `swap_column_blocks`: a Linear weight `[out, in]` whose input is a concatenation of `blocks` equal parts
  in another order; the parts are reversed (or put in the order `"order": [1, 0, 2]`);
- `zero_bias`: the layout's Linear has no bias where the catalogue's has one: zeros are filled in (written
  back, the bias is dropped);
- `swap`: two leaves (every array under each prefix) trade places.
Each transform has an inverse, so a key map also writes files in its layout (`rosetta port --to`); a regex
rename is inverted by its optional `"inverse": {"regex": ..., "to": ...}`.

Strict: every rename must rename some key of the file, every transform must find what it names (a swap,
each leaf's namesake of the same shape; `order` a permutation of the blocks, which must divide the width),
else one error names the entry (`renames[2]`, `transforms[0]`): a key map that does nothing, or half of
what it says, never ports silently. A preset that does not fit a file says the file is not that layout.

Bounded: a regex is Python's `re` syntax, sized before it is compiled (the `regex` module writes each counted
repetition out: a key map's regexes together may come to MAX_REGEX_SIZE characters so written), and each match
runs under a time limit.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import regex  # a match with a time limit: a pattern of nested repetition must not hang a port

from shared import failures

try:
    from re import _parser as re_syntax  # the standard parser: a counted repetition stays one node, its count readable
except ImportError:  # Python 3.10
    import sre_parse as re_syntax

PRESETS_DIR = Path(__file__).parent / "presets"
_TEXT_FIELDS = ("name", "description", "source", "model", "format", "reference", "runner")
_KEYS = {*_TEXT_FIELDS, "config", "renames", "transforms"}
_TRANSFORMS = ("swap_column_blocks", "zero_bias", "swap")
_TRANSFORM_OPTIONS = {"swap_column_blocks": {"blocks", "order"}, "zero_bias": set(), "swap": set()}
# a key map is data: `reference` and `runner` may name only the tutorials' models this package ships
SHIPPED_CODE = re.compile(r"(torch_impl|tf_impl)\.references:[A-Za-z_]\w*")
SHOWN_KEYS = 6  # file keys quoted in an error
MATCH_SECONDS = 1.0  # one regex rename on one key (a key map's patterns match 100-character keys in microseconds)
# A key map's regexes together, each repetition written out to its largest count: `regex` compiles `x{1000}` as 1000
# copies (nested counts multiply), its memory and compile time growing with that size; keys are a few hundred characters.
MAX_REGEX_SIZE, MAX_REGEX_VARIABLE = 20_000, "ROSETTA_MAX_REGEX_SIZE"
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
_SHORTER = (f"write the repetition with * or + or a smaller count; {MAX_REGEX_VARIABLE}=N raises the limit, and the "
            "memory a compile takes with it")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Rename:
    """One rename rule: a prefix, or a regex matched against the whole key (with its inverse, if given);
    `label` is where the key map holds it (`renames[2]`)."""

    pattern: str
    to: str
    regex: bool = False
    inverse: Rename | None = None
    label: str = "a rename"
    compiled: object = dataclasses.field(default=None, compare=False, repr=False)  # a regex's, compiled once

    def __post_init__(self):
        if self.regex and self.compiled is None:
            object.__setattr__(self, "compiled", _compiled(self.pattern))

    def apply(self, key: str) -> str | None:
        """The renamed key, or None where the rule does not match."""
        if not self.regex:
            return self.to + key[len(self.pattern) :] if key.startswith(self.pattern) else None
        match = self.compiled.fullmatch(key, timeout=MATCH_SECONDS)
        return None if match is None else match.expand(self.to)

    @property
    def file_side(self) -> str:
        """The keys it renames, in words: `prefix*` or the regex."""
        return self.pattern if self.regex else f"{self.pattern}*"

    def inverted(self, where: str) -> Rename:
        if not self.regex:
            return Rename(self.to, self.pattern, label=self.label)
        if self.inverse is None:
            raise ValueError(f'{where}: the regex rename {self.pattern!r} has no "inverse": this key map reads files only')
        return self.inverse

    def describe(self) -> str:
        return f"{self.label} ({'regex' if self.regex else 'prefix'} {self.pattern!r} -> {self.to!r})"


@dataclasses.dataclass(frozen=True)
class Transform:
    """One transform on catalogue-named arrays (see the module docstring), checked as it applies."""

    kind: str  # one of _TRANSFORMS
    target: str | tuple[str, str]  # a key (swap_column_blocks), a leaf (zero_bias) or two leaves (swap)
    blocks: int = 2
    order: tuple[int, ...] | None = None
    label: str = "a transform"

    def apply(self, arrays: dict[str, np.ndarray], inverse: bool, where: str) -> dict[str, np.ndarray]:
        where = f"{where}: {self.label}"
        if self.kind == "swap":
            return _swap_leaves(arrays, *self.target, where)
        if self.kind == "zero_bias":
            return _drop_bias(arrays, self.target, where) if inverse else _zero_bias(arrays, self.target, where)
        return _swap_column_blocks(arrays, self.target, self.blocks, self.order, inverse, where)

    def describe(self) -> str:
        """What it does, in words, for `rosetta port`'s report."""
        if self.kind == "swap":
            return (
                f"{self.target[0]} and {self.target[1]} trade places (so the catalogue's model computes this layout's function)"
            )
        if self.kind == "zero_bias":
            return f"{self.target} has no bias in the file (zeros in the model)"
        order = self.order or tuple(reversed(range(self.blocks)))
        return f"{self.target}'s {self.blocks} column blocks in the order {list(order)}"


@dataclasses.dataclass(frozen=True)
class KeyMap:
    """A parsed key map (see the module docstring); `where` names its file in errors; `preset`: one of the shipped
    layouts, so a file it does not fit is not that layout (a user's own key map names the entry to fix instead)."""

    where: str
    name: str = ""
    description: str = ""
    source: str = ""
    model: str | None = None
    format: str | None = None
    config: Mapping = dataclasses.field(default_factory=dict)
    renames: tuple[Rename, ...] = ()
    transforms: tuple[Transform, ...] = ()
    reference: str | None = None
    runner: str | None = None
    preset: bool = False

    @property
    def identity(self) -> bool:
        return not self.renames and not self.transforms

    @property
    def title(self) -> str:
        """How messages name it: the preset's name, else the key map's file."""
        return self.name or self.where

    def to_catalogue(self, arrays: Mapping[str, np.ndarray], source: str = "the file") -> dict[str, np.ndarray]:
        """The file's arrays in catalogue names and layout: renamed, then transformed; `source` names the file."""
        try:
            renamed = _rename(arrays, self.renames, self.where)
            for transform in self.transforms:
                renamed = transform.apply(renamed, inverse=False, where=self.where)
        except ValueError as error:
            if not self.preset:
                raise
            lacking = [rule.file_side for rule in error.idle] if isinstance(error, IdleRenames) else []
            held = [key for key in arrays if all(_applied(rule, key, self.where) is None for rule in self.renames)]
            why = "" if lacking else str(error).removeprefix(f"{self.where}: ")
            raise ValueError(self.not_this_layout(source, lacking, held or list(arrays), why=why)) from None
        return renamed

    def not_this_layout(self, source: str, lacking: list[str], held: list[str], extra: bool = False, why: str = "") -> str:
        """The error of a preset that does not fit `source`: the keys its files hold that `source` lacks, and a few
        that `source` holds (`extra`: ones the layout's files do not) or `why` it does not fit."""
        parts = [f"that layout's files hold keys {_few(lacking)}, which {source} lacks"] if lacking else []
        beyond = ", which that layout's files do not" if extra else ""
        parts += [f"{source} holds {_few(held)}{beyond}"] if held and not why else []
        parts += [why] if why else []
        return f"{source} is not the {self.name} layout ({self.description}): {'; '.join(parts)}"

    def file_key(self, key: str) -> str:
        """Catalogue key `key` as this layout's files name it (as it is where no rename says how)."""
        for rule in self.renames:
            back = rule.inverse if rule.regex else Rename(rule.to, rule.pattern)
            named = _applied(back, key, self.where) if back is not None else None
            if named is not None:
                return named
        return key

    def from_catalogue(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inverse: catalogue arrays as this layout's file holds them."""
        out = dict(arrays)
        for transform in reversed(self.transforms):
            out = transform.apply(out, inverse=True, where=self.where)
        return _rename(out, tuple(rule.inverted(self.where) for rule in self.renames), self.where)

    def describe(self) -> str:
        """Its renames and transforms in one line ("" for the catalogue's own layout)."""
        renames = f"{len(self.renames)} rename{'s' * (len(self.renames) != 1)}" if self.renames else ""
        return "; ".join([part for part in (renames, *(t.describe() for t in self.transforms)) if part])


IDENTITY = KeyMap(where="the catalogue's own layout")


class IdleRenames(ValueError):
    """Renames that renamed no key of a file (`idle`)."""

    def __init__(self, message: str, idle: list[Rename]):
        super().__init__(message)
        self.idle = idle


def _rename(arrays: Mapping[str, np.ndarray], rules: tuple[Rename, ...], where: str) -> dict[str, np.ndarray]:
    """Each key renamed by the first rule that matches (kept where none does); two keys onto one, or a rule
    that renames nothing (IdleRenames), is an error."""
    out, sources, used = {}, {}, set()
    for key, value in arrays.items():
        new = key
        for rule in rules:
            renamed = _applied(rule, key, where)
            if renamed is not None:
                new = renamed
                used.add(rule.label)
                break
        if new in out:
            raise ValueError(f"{where}: keys {sources[new]!r} and {key!r} are both renamed to {new!r}")
        out[new], sources[new] = value, key
    idle = [rule for rule in rules if rule.label not in used]
    if idle and arrays:
        said = "; ".join(rule.describe() for rule in idle)
        raise IdleRenames(f"{where}: {said} renames no key of the file (its keys: {_some(arrays)})", idle)
    return out


def _compiled(pattern: str):
    """`pattern` compiled in `re`'s syntax, held by its Rename, not by the module's cache (which keeps 500)."""
    return regex.compile(pattern, regex.VERSION0, cache_pattern=False)


def written_out_size(pattern: str) -> int:
    """`pattern`'s size with each repetition written out to its largest count (an unbounded one to one more than its
    least), read from the standard library's parse, which keeps a repetition as one node; ValueError where `re`
    cannot read it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re's FutureWarning on a set such as [[a]: the pattern is sized all the same
        try:
            return _size(re_syntax.parse(pattern))
        except (re.error, RecursionError, OverflowError) as error:
            raise ValueError(f"bad regex {pattern!r} (a key map's regex is Python's re syntax: {error})") from None


def _size(items) -> int:
    total = 0
    for op, argument in items:
        inner = max(1, sum(_size(part) for part in _subpatterns(argument)))
        if str(op) in _REPEATS:
            least, most, _ = argument
            inner *= least + 1 if most == re_syntax.MAXREPEAT else most
        total += inner
    return total


def _subpatterns(argument):
    """The parsed groups inside one node's argument (a repetition's body, an alternation's branches, ...)."""
    if isinstance(argument, re_syntax.SubPattern):
        yield argument
    elif isinstance(argument, (tuple, list)):
        for part in argument:
            yield from _subpatterns(part)


class _RegexBudget:
    """The size a key map's regexes may come to together, written out (MAX_REGEX_SIZE, raised by its variable);
    each is sized before it is compiled."""

    def __init__(self):
        self.spent = 0

    def spend(self, pattern: str, label: str) -> None:
        limit, regex_shown = max_regex_size(), failures.shown(pattern)
        past = f"past the limit of {limit:,} for a key map's regexes (a key is a few hundred characters: {_SHORTER})"
        if len(pattern) > limit:  # not even parsed: the parse of a huge pattern takes memory of its own
            raise ValueError(f"{label}: the regex {regex_shown} is {len(pattern):,} characters long, {past}")
        try:
            size = written_out_size(pattern)
        except ValueError as error:
            raise ValueError(f"{label}: {error}") from None
        if self.spent + size > limit:
            before = f"; with the key map's regexes before it, {self.spent + size:,}" if self.spent else ""
            raise ValueError(f"{label}: the regex {regex_shown} is {size:,} characters with each repetition written out, "
                             f"as the regex module compiles it{before}: {past}")  # fmt: skip
        self.spent += size


def max_regex_size() -> int:
    """MAX_REGEX_SIZE, or the size its variable names."""
    rule = "the size a key map's regexes may come to is a number, e.g. 100000"
    return failures.limit_from_environment(MAX_REGEX_VARIABLE, MAX_REGEX_SIZE, rule)


def _applied(rule: Rename, key: str, where: str) -> str | None:
    try:
        return rule.apply(key)
    except TimeoutError:
        raise ValueError(f"{where}: {rule.describe()} ran past {MATCH_SECONDS:g} s on the key {key!r}: a pattern of nested "
                         "repetition such as ([a-z_]+)* can take exponential time; write it without") from None  # fmt: skip
    except (regex.error, IndexError) as error:  # "to" names a group the regex lacks
        raise ValueError(f'{where}: {rule.describe()}: its "to" cannot be filled ({error})') from None


def _some(arrays: Mapping) -> str:
    return _few(list(arrays), SHOWN_KEYS)


def _few(keys: list[str], shown: int = 3) -> str:
    return ", ".join(keys[:shown]) + (f", ... ({len(keys)} in all)" if len(keys) > shown else "")


def _under(arrays: Mapping, prefix: str) -> dict[str, tuple]:
    """{key suffix: shape} of every array under the leaf `prefix.`."""
    return {key[len(prefix) :]: np.shape(value) for key, value in arrays.items() if key.startswith(prefix + ".")}


def _swap_leaves(arrays: dict, first: str, second: str, where: str) -> dict:
    """Every array under prefix `first.` trades places with its namesake (same suffix, same shape) under `second.`."""
    held = {leaf: _under(arrays, leaf) for leaf in (first, second)}
    empty = [leaf for leaf, found in held.items() if not found]
    if empty:
        raise ValueError(f"{where}: no key under {' or '.join(empty)}. (the arrays: {_some(arrays)})")
    if held[first] != held[second]:
        raise ValueError(f"{where}: {first} {held[first]} and {second} {held[second]} do not hold the same arrays "
                         "and shapes: they cannot trade places")  # fmt: skip

    def swapped(key: str) -> str:
        for a, b in ((first, second), (second, first)):
            if key.startswith(a + "."):
                return b + key[len(a) :]
        return key

    return {swapped(key): value for key, value in arrays.items()}


def _zero_bias(arrays: dict, leaf: str, where: str) -> dict:
    """`leaf.bias` as zeros, one per row of `leaf.weight` (a Linear the layout built without bias)."""
    weight, bias = f"{leaf}.weight", f"{leaf}.bias"
    if weight not in arrays:
        raise ValueError(f"{where}: no {weight} (the arrays: {_some(arrays)})")
    if bias in arrays:
        raise ValueError(f"{where}: {bias} is there already: the file's {leaf} has a bias")
    return {**arrays, bias: np.zeros(np.shape(arrays[weight])[0], np.asarray(arrays[weight]).dtype)}


def _drop_bias(arrays: dict, leaf: str, where: str) -> dict:
    """`leaf.bias` left out of the file; only zeros may be (the layout's Linear has no bias to hold others)."""
    bias = f"{leaf}.bias"
    if bias not in arrays:
        raise ValueError(f"{where}: no {bias} to leave out")
    if np.any(np.asarray(arrays[bias]) != 0):
        raise ValueError(f"{where}: {bias} is not zero, and the layout's {leaf} has no bias: the file would compute "
                         "another function")  # fmt: skip
    return {key: value for key, value in arrays.items() if key != bias}


def _swap_column_blocks(arrays: dict, key: str, blocks: int, order, inverse: bool, where: str) -> dict:
    """A Linear weight `[out, blocks * n]` with its column blocks permuted by `order` (default: reversed)."""
    if key not in arrays:
        raise ValueError(f"{where}: no {key} (the arrays: {_some(arrays)})")
    shape = np.shape(arrays[key])
    if len(shape) != 2 or shape[1] % blocks:
        raise ValueError(f"{where}: {key} of shape {shape} has no {blocks} equal column blocks")
    order = list(order or reversed(range(blocks)))
    if inverse:
        order = list(np.argsort(order))
    parts = np.split(arrays[key], blocks, axis=1)  # [out, n] each
    return {**arrays, key: np.concatenate([parts[i] for i in order], axis=1)}  # [out, blocks * n]


# ---- reading key-map files and presets ----

MAX_KEY_MAP_BYTES = 64 * 2**20  # a key map is a few lines; a larger file is not one


def load(path) -> KeyMap:
    """A key map from a JSON file; one ValueError naming the file and every problem."""
    return parse(read_json(path), str(Path(path)))


def read_json(path):
    """The JSON data of key-map file `path` (either kind: a layout's, or convert's pairs); one ValueError naming the
    file for one that cannot be read, is too large, or is no UTF-8 JSON text."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_KEY_MAP_BYTES:
            raise ValueError(f"{path}: {path.stat().st_size:,} bytes is not a key map (a JSON file of a few lines)")
        text = path.read_bytes().decode("utf-8")
        return json.loads(text)
    except OSError as error:
        raise ValueError(f"{path}: cannot read the key map ({error.strerror})") from None
    except UnicodeDecodeError as error:
        bad = f"byte 0x{error.object[error.start]:02x} at byte {error.start + 1}"
        raise ValueError(f"{path}: not a UTF-8 JSON key map: not a UTF-8 text file ({bad})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a key map") from None


def parse(data, where: str) -> KeyMap:
    """A key map from its JSON data (see the module docstring); one ValueError listing every bad entry."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a key map is a JSON object")
    problems = []
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        problems.append(f"unknown field {', '.join(unknown)}; a key map holds {', '.join(sorted(_KEYS))}")
    texts = [key for key in _TEXT_FIELDS if key in data and not isinstance(data[key], str)]
    problems += [f'"{key}" must be a string, got {data[key]!r}' for key in texts]
    problems += [_code_problem(key, data[key]) for key in ("reference", "runner") if isinstance(data.get(key), str)]
    if not isinstance(data.get("config", {}), dict):
        problems.append('"config" is an object of catalogue options')
    budget = _RegexBudget()
    renames = _entries(data, "renames", lambda rule, label: _parse_rename(rule, label, budget), problems)
    transforms = _entries(data, "transforms", _parse_transform, problems)
    problems = [problem for problem in problems if problem]
    if problems:
        raise ValueError(f"{where}: " + "; ".join(problems))
    fields = {key: data[key] for key in _TEXT_FIELDS if key in data}
    return KeyMap(where=where, config=data.get("config", {}), renames=renames, transforms=transforms, **fields)


def _code_problem(key: str, text: str) -> str:
    if SHIPPED_CODE.fullmatch(text):
        return ""
    return (f'"{key}" {text!r}: a key map names no code to run; it may name a tutorial model this package ships '
            "(torch_impl.references:NAME or tf_impl.references:NAME); pass your own model with --reference")  # fmt: skip


def _entries(data: dict, field: str, parse_one, problems: list) -> tuple:
    """The parsed rules of list `field`; each bad one appended to `problems`, labelled `field[i]`."""
    rules = data.get(field, [])
    if not isinstance(rules, list):
        problems.append(f'"{field}" must be a list, got {rules!r}')
        return ()
    parsed = []
    for index, rule in enumerate(rules):
        try:
            parsed.append(parse_one(rule, f"{field}[{index}]"))
        except ValueError as error:
            problems.append(str(error))
    return tuple(parsed)


def _text(rule: dict, key: str, label: str) -> str:
    """`rule[key]`, a string (non-empty but for a rename's "to", which may strip a prefix)."""
    value = rule.get(key)
    if not isinstance(value, str) or (value == "" and key != "to"):
        raise ValueError(f'{label}: "{key}" must be a non-empty string, got {value!r}')
    return value


def _parse_rename(rule, label: str, budget: _RegexBudget) -> Rename:
    shape = '{"prefix": ..., "to": ...} or {"regex": ..., "to": ...}'
    if not isinstance(rule, dict) or "to" not in rule or ("prefix" in rule) == ("regex" in rule):
        raise ValueError(f"{label}: a rename is {shape}, got {rule!r}")
    extra = sorted(set(rule) - ({"prefix", "to"} if "prefix" in rule else {"regex", "to", "inverse"}))
    if extra:
        raise ValueError(f"{label}: unknown field {', '.join(extra)} in a rename ({shape})")
    to = _text(rule, "to", label)
    if "prefix" in rule:
        return Rename(_text(rule, "prefix", label), to, label=label)
    pattern = _text(rule, "regex", label)
    budget.spend(pattern, label)  # sized before it is compiled
    try:
        compiled = _compiled(pattern)
    except (regex.error, RecursionError, OverflowError) as error:
        raise ValueError(f"{label}: bad regex {pattern!r} ({error})") from None
    _check_groups(compiled, to, label)
    inverse = _parse_rename(rule["inverse"], f"{label}.inverse", budget) if "inverse" in rule else None
    return Rename(pattern, to, regex=True, inverse=inverse, label=label, compiled=compiled)


def _check_groups(compiled, to: str, label: str) -> None:
    """Every group `to` names (\\1, \\g<name>) must be one the regex has."""
    for number, name in re.findall(r"\\(?:g<(\w+)>|(\d+))", to):
        group = name or number
        known = compiled.groupindex if not group.isdigit() else range(compiled.groups + 1)
        if (int(group) if group.isdigit() else group) not in known:
            raise ValueError(f'{label}: "to" {to!r} names group {group}, which the regex {compiled.pattern!r} does not have')


def _parse_transform(rule, label: str) -> Transform:
    kinds = [kind for kind in _TRANSFORMS if isinstance(rule, dict) and kind in rule]
    if len(kinds) != 1:
        raise ValueError(f"{label}: a transform names one of {', '.join(_TRANSFORMS)}, got {rule!r}")
    kind = kinds[0]
    extra = sorted(set(rule) - {kind} - _TRANSFORM_OPTIONS[kind])
    if extra:
        raise ValueError(f"{label}: {kind} takes no {', '.join(extra)}")
    if kind == "swap":
        pair = rule["swap"]
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair) and pair[0] != pair[1]):
            raise ValueError(f'{label}: "swap" takes two different leaf names, got {pair!r}')
        return Transform(kind, tuple(pair), label=label)
    target = _text(rule, kind, label)
    if kind == "zero_bias":
        return Transform(kind, target, label=label)
    blocks = rule.get("blocks", 2)
    if type(blocks) is not int or blocks < 2:
        raise ValueError(f'{label}: "blocks" must be a whole number of at least 2, got {blocks!r}')
    order = rule.get("order")
    if order is not None:
        if not (isinstance(order, list) and sorted(order) == list(range(blocks)) and all(type(i) is int for i in order)):
            raise ValueError(f'{label}: "order" must be a permutation of 0..{blocks - 1}, got {order!r}')
        if order == list(range(blocks)):
            raise ValueError(f'{label}: "order" {order!r} leaves every block in place: the transform does nothing')
        order = tuple(order)
    return Transform(kind, target, blocks, order, label)


def presets() -> dict[str, KeyMap]:
    """The shipped key maps by name, in name order."""
    found = (dataclasses.replace(load(path), preset=True) for path in sorted(PRESETS_DIR.glob("*.json")))
    return {preset.name: preset for preset in found}


def preset(name: str) -> KeyMap:
    known = presets()
    if name not in known:
        raise ValueError(f"unknown layout {name!r}; the presets are: {', '.join(known)}")
    return known[name]


def describe_presets() -> str:
    """One line per preset, for `rosetta port --help`."""
    return "\n".join(f"  {p.name:16s} {p.description} (model {p.model}, {p.format})" for p in presets().values())
