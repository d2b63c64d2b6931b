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
The rules themselves, applied to a file's arrays: shared.port.key_map_rules.

Bounded (shared.port.regex_limits): a regex is Python's `re` syntax, sized before it is compiled (the `regex` module
writes each counted repetition out: a key map's regexes together may come to MAX_REGEX_SIZE characters so written),
and each match runs under a time limit.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import regex

from shared.core import moved
from shared.port import key_map_rules, regex_limits

PRESETS_DIR = Path(__file__).parent / "presets"
_TEXT_FIELDS = ("name", "description", "source", "model", "format", "reference", "runner")
_KEYS = {*_TEXT_FIELDS, "config", "renames", "transforms"}
_TRANSFORMS = ("swap_column_blocks", "zero_bias", "swap")
_TRANSFORM_OPTIONS = {"swap_column_blocks": {"blocks", "order"}, "zero_bias": set(), "swap": set()}
# a key map is data: `reference` and `runner` may name only the tutorials' models this package ships
SHIPPED_CODE = re.compile(r"(torch_impl|tf_impl)\.references:[A-Za-z_]\w*")


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
    renames: tuple[key_map_rules.Rename, ...] = ()
    transforms: tuple[key_map_rules.Transform, ...] = ()
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
            renamed = key_map_rules.rename_keys(arrays, self.renames, self.where)
            for transform in self.transforms:
                renamed = transform.apply(renamed, inverse=False, where=self.where)
        except ValueError as error:
            if not self.preset:
                raise
            lacking = [rule.file_side for rule in error.idle] if isinstance(error, key_map_rules.IdleRenames) else []
            held = [key for key in arrays if all(key_map_rules.applied(rule, key, self.where) is None for rule in self.renames)]
            why = "" if lacking else str(error).removeprefix(f"{self.where}: ")
            raise ValueError(self.not_this_layout(source, lacking, held or list(arrays), why=why)) from None
        return renamed

    def not_this_layout(self, source: str, lacking: list[str], held: list[str], extra: bool = False, why: str = "") -> str:
        """The error of a preset that does not fit `source`: the keys its files hold that `source` lacks, and a few
        that `source` holds (`extra`: ones the layout's files do not) or `why` it does not fit."""
        parts = [f"that layout's files hold keys {key_map_rules.few(lacking)}, which {source} lacks"] if lacking else []
        beyond = ", which that layout's files do not" if extra else ""
        parts += [f"{source} holds {key_map_rules.few(held)}{beyond}"] if held and not why else []
        parts += [why] if why else []
        return f"{source} is not the {self.name} layout ({self.description}): {'; '.join(parts)}"

    def file_key(self, key: str) -> str:
        """Catalogue key `key` as this layout's files name it (as it is where no rename says how)."""
        for rule in self.renames:
            back = rule.inverse if rule.regex else key_map_rules.Rename(rule.to, rule.pattern)
            named = key_map_rules.applied(back, key, self.where) if back is not None else None
            if named is not None:
                return named
        return key

    def from_catalogue(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inverse: catalogue arrays as this layout's file holds them."""
        out = dict(arrays)
        for transform in reversed(self.transforms):
            out = transform.apply(out, inverse=True, where=self.where)
        return key_map_rules.rename_keys(out, tuple(rule.inverted(self.where) for rule in self.renames), self.where)

    def describe(self) -> str:
        """Its renames and transforms in one line ("" for the catalogue's own layout)."""
        renames = f"{len(self.renames)} rename{'s' * (len(self.renames) != 1)}" if self.renames else ""
        return "; ".join([part for part in (renames, *(t.describe() for t in self.transforms)) if part])


IDENTITY = KeyMap(where="the catalogue's own layout")


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
    budget = regex_limits.RegexBudget()
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


def _parse_rename(rule, label: str, budget: regex_limits.RegexBudget) -> key_map_rules.Rename:
    shape = '{"prefix": ..., "to": ...} or {"regex": ..., "to": ...}'
    if not isinstance(rule, dict) or "to" not in rule or ("prefix" in rule) == ("regex" in rule):
        raise ValueError(f"{label}: a rename is {shape}, got {rule!r}")
    extra = sorted(set(rule) - ({"prefix", "to"} if "prefix" in rule else {"regex", "to", "inverse"}))
    if extra:
        raise ValueError(f"{label}: unknown field {', '.join(extra)} in a rename ({shape})")
    to = _text(rule, "to", label)
    if "prefix" in rule:
        return key_map_rules.Rename(_text(rule, "prefix", label), to, label=label)
    pattern = _text(rule, "regex", label)
    budget.spend(pattern, label)  # sized before it is compiled
    try:
        compiled = regex_limits.compiled(pattern)
    except (regex.error, RecursionError, OverflowError) as error:
        raise ValueError(f"{label}: bad regex {pattern!r} ({error})") from None
    _check_groups(compiled, to, label)
    inverse = _parse_rename(rule["inverse"], f"{label}.inverse", budget) if "inverse" in rule else None
    return key_map_rules.Rename(pattern, to, regex=True, inverse=inverse, label=label, compiled=compiled)


def _check_groups(compiled, to: str, label: str) -> None:
    """Every group `to` names (\\1, \\g<name>) must be one the regex has."""
    for number, name in re.findall(r"\\(?:g<(\w+)>|(\d+))", to):
        group = name or number
        known = compiled.groupindex if not group.isdigit() else range(compiled.groups + 1)
        if (int(group) if group.isdigit() else group) not in known:
            raise ValueError(f'{label}: "to" {to!r} names group {group}, which the regex {compiled.pattern!r} does not have')


def _parse_transform(rule, label: str) -> key_map_rules.Transform:
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
        return key_map_rules.Transform(kind, tuple(pair), label=label)
    target = _text(rule, kind, label)
    if kind == "zero_bias":
        return key_map_rules.Transform(kind, target, label=label)
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
    return key_map_rules.Transform(kind, target, blocks, order, label)


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


__getattr__ = moved.getattr_for(__name__)  # the rules and the regex limits, moved to key_map_rules.py and regex_limits.py, warn
