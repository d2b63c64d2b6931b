"""Third-party layouts: how another project's checkpoint maps onto a catalogue model's canonical weights.

A *key map* is a small JSON file; the shipped presets (shared/port/presets/*.json, `rosetta port --help` lists
them) are key maps too. Every field but `renames` is optional:

    {
      "name": "trevett-nmt3",
      "description": "one line: whose files these are",
      "source": "where the layout is defined (repository, file, revision)",
      "model": "bahdanau_bigru",              catalogue model the layout ports into
      "format": "torch",                       the format its files have (rosetta port's formats)
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
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

PRESETS_DIR = Path(__file__).parent / "presets"
_KEYS = {"name", "description", "source", "model", "format", "config", "renames", "transforms", "reference", "runner"}
_TRANSFORMS = ("swap_column_blocks", "zero_bias", "swap")


@dataclasses.dataclass(frozen=True)
class Rename:
    """One rename rule: a prefix, or a regex matched against the whole key (with its inverse, if given)."""

    pattern: str
    to: str
    regex: bool = False
    inverse: Rename | None = None

    def apply(self, key: str) -> str | None:
        """The renamed key, or None where the rule does not match."""
        if not self.regex:
            return self.to + key[len(self.pattern) :] if key.startswith(self.pattern) else None
        match = re.fullmatch(self.pattern, key)
        return None if match is None else match.expand(self.to)

    def inverted(self, where: str) -> Rename:
        if not self.regex:
            return Rename(self.to, self.pattern)
        if self.inverse is None:
            raise ValueError(f'{where}: the regex rename {self.pattern!r} has no "inverse": this key map reads files only')
        return self.inverse


@dataclasses.dataclass(frozen=True)
class KeyMap:
    """A parsed key map (see the module docstring); `where` names its file in errors."""

    where: str
    name: str = ""
    description: str = ""
    source: str = ""
    model: str | None = None
    format: str | None = None
    config: Mapping = dataclasses.field(default_factory=dict)
    renames: tuple[Rename, ...] = ()
    transforms: tuple[Mapping, ...] = ()
    reference: str | None = None
    runner: str | None = None

    @property
    def identity(self) -> bool:
        return not self.renames and not self.transforms

    def to_catalogue(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The file's arrays in catalogue names and layout: renamed, then transformed."""
        renamed = _rename(arrays, self.renames, self.where)
        for transform in self.transforms:
            renamed = _transform(renamed, transform, inverse=False)
        return renamed

    def from_catalogue(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inverse: catalogue arrays as this layout's file holds them."""
        out = dict(arrays)
        for transform in reversed(self.transforms):
            out = _transform(out, transform, inverse=True)
        return _rename(out, tuple(rule.inverted(self.where) for rule in self.renames), self.where)


IDENTITY = KeyMap(where="(no key map)")


def _rename(arrays: Mapping[str, np.ndarray], rules: tuple[Rename, ...], where: str) -> dict[str, np.ndarray]:
    """Each key renamed by the first rule that matches (kept where none does); two keys onto one is an error."""
    out, sources = {}, {}
    for key, value in arrays.items():
        new = next((renamed for rule in rules if (renamed := rule.apply(key)) is not None), key)
        if new in out:
            raise ValueError(f"{where}: keys {sources[new]!r} and {key!r} are both renamed to {new!r}")
        out[new], sources[new] = value, key
    return out


def _transform(arrays: dict[str, np.ndarray], transform: Mapping, inverse: bool) -> dict[str, np.ndarray]:
    kind = next(name for name in _TRANSFORMS if name in transform)
    target = transform[kind]
    if kind == "swap":
        return _swap_leaves(arrays, *target)
    if kind == "zero_bias":
        return _drop_bias(arrays, target) if inverse else _zero_bias(arrays, target)
    return _swap_column_blocks(arrays, target, transform.get("blocks", 2), transform.get("order"), inverse)


def _swap_leaves(arrays: dict, first: str, second: str) -> dict:
    """Every array under prefix `first.` trades places with its namesake under `second.`."""

    def swapped(key: str) -> str:
        for a, b in ((first, second), (second, first)):
            if key.startswith(a + "."):
                return b + key[len(a) :]
        return key

    return {swapped(key): value for key, value in arrays.items()}


def _zero_bias(arrays: dict, leaf: str) -> dict:
    """`leaf.bias` as zeros, one per row of `leaf.weight` (a Linear the layout built without bias)."""
    weight, bias = f"{leaf}.weight", f"{leaf}.bias"
    if weight not in arrays or bias in arrays:
        return dict(arrays)  # not this layout's file: the strict check names what is wrong
    return {**arrays, bias: np.zeros(arrays[weight].shape[0], arrays[weight].dtype)}


def _drop_bias(arrays: dict, leaf: str) -> dict:
    return {key: value for key, value in arrays.items() if key != f"{leaf}.bias"}


def _swap_column_blocks(arrays: dict, key: str, blocks: int, order, inverse: bool) -> dict:
    """A Linear weight `[out, blocks * n]` with its column blocks permuted by `order` (default: reversed)."""
    if key not in arrays:
        return dict(arrays)
    order = list(order or reversed(range(blocks)))
    if inverse:
        order = list(np.argsort(order))
    parts = np.split(arrays[key], blocks, axis=1)  # [out, n] each
    return {**arrays, key: np.concatenate([parts[i] for i in order], axis=1)}  # [out, blocks * n]


# ---- reading key-map files and presets ----


def load(path) -> KeyMap:
    """A key map from a JSON file; one ValueError naming the file and the first problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise ValueError(f"{path}: cannot read the key map ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    return parse(data, str(path))


def parse(data, where: str) -> KeyMap:
    """A key map from its JSON data (see the module docstring)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a key map is a JSON object")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown field {', '.join(unknown)}; a key map holds {', '.join(sorted(_KEYS))}")
    renames = tuple(_parse_rename(rule, where) for rule in data.get("renames", []))
    transforms = tuple(_parse_transform(rule, where) for rule in data.get("transforms", []))
    fields = {
        key: data[key] for key in ("name", "description", "source", "model", "format", "reference", "runner") if key in data
    }
    if not isinstance(data.get("config", {}), dict):
        raise ValueError(f'{where}: "config" is an object of catalogue options')
    return KeyMap(where=where, config=data.get("config", {}), renames=renames, transforms=transforms, **fields)


def _parse_rename(rule, where: str) -> Rename:
    if not isinstance(rule, dict) or "to" not in rule or ("prefix" in rule) == ("regex" in rule):
        raise ValueError(f'{where}: a rename is {{"prefix": ..., "to": ...}} or {{"regex": ..., "to": ...}}, got {rule!r}')
    if "prefix" in rule:
        return Rename(rule["prefix"], rule["to"])
    try:
        re.compile(rule["regex"])
    except re.error as error:
        raise ValueError(f"{where}: bad regex {rule['regex']!r} ({error})") from None
    inverse = _parse_rename(rule["inverse"], where) if "inverse" in rule else None
    return Rename(rule["regex"], rule["to"], regex=True, inverse=inverse)


def _parse_transform(rule, where: str) -> Mapping:
    kinds = [kind for kind in _TRANSFORMS if isinstance(rule, dict) and kind in rule]
    if len(kinds) != 1:
        raise ValueError(f"{where}: a transform names one of {', '.join(_TRANSFORMS)}, got {rule!r}")
    if kinds[0] == "swap" and not (isinstance(rule["swap"], list) and len(rule["swap"]) == 2):
        raise ValueError(f'{where}: "swap" takes two leaf names, got {rule["swap"]!r}')
    return rule


def presets() -> dict[str, KeyMap]:
    """The shipped key maps by name, in name order."""
    found = (load(path) for path in sorted(PRESETS_DIR.glob("*.json")))
    return {preset.name: preset for preset in found}


def preset(name: str) -> KeyMap:
    known = presets()
    if name not in known:
        raise ValueError(f"unknown layout {name!r}; the presets are: {', '.join(known)}")
    return known[name]


def describe_presets() -> str:
    """One line per preset, for `rosetta port --help`."""
    return "\n".join(f"  {p.name:16s} {p.description} (model {p.model}, {p.format})" for p in presets().values())
