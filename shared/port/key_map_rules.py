"""A key map's rules on a file's arrays (shared.port.layouts reads them from its JSON and says what each does):
renames, a prefix or a regex matched whole under a time limit (shared.port.regex_limits), and the transforms
`swap_column_blocks`, `zero_bias` and `swap`, each with its inverse. Strict as they apply: two keys renamed onto one,
a rule that renames no key (IdleRenames), or a transform that does not find what it names, is one error naming the
key map's entry (`renames[2]`, `transforms[0]`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import regex

from shared.port import regex_limits

SHOWN_KEYS = 6  # file keys quoted in an error


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
            object.__setattr__(self, "compiled", regex_limits.compiled(self.pattern))

    def apply(self, key: str) -> str | None:
        """The renamed key, or None where the rule does not match."""
        if not self.regex:
            return self.to + key[len(self.pattern) :] if key.startswith(self.pattern) else None
        match = self.compiled.fullmatch(key, timeout=regex_limits.MATCH_SECONDS)
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
    """One transform on catalogue-named arrays (shared.port.layouts' docstring says what each does), checked as it
    applies."""

    kind: str  # swap_column_blocks, zero_bias or swap
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


class IdleRenames(ValueError):
    """Renames that renamed no key of a file (`idle`)."""

    def __init__(self, message: str, idle: list[Rename]):
        super().__init__(message)
        self.idle = idle


def rename_keys(arrays: Mapping[str, np.ndarray], rules: tuple[Rename, ...], where: str) -> dict[str, np.ndarray]:
    """Each key renamed by the first rule that matches (kept where none does); two keys onto one, or a rule
    that renames nothing (IdleRenames), is an error."""
    out, sources, used = {}, {}, set()
    for key, value in arrays.items():
        new = key
        for rule in rules:
            renamed = applied(rule, key, where)
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
        raise IdleRenames(f"{where}: {said} renames no key of the file (its keys: {some(arrays)})", idle)
    return out


def applied(rule: Rename, key: str, where: str) -> str | None:
    """`rule.apply(key)`; a match past the time limit or a "to" that cannot be filled is a ValueError naming the rule."""
    try:
        return rule.apply(key)
    except TimeoutError:
        seconds = regex_limits.MATCH_SECONDS
        raise ValueError(f"{where}: {rule.describe()} ran past {seconds:g} s on the key {key!r}: a pattern of nested "
                         "repetition such as ([a-z_]+)* can take exponential time; write it without") from None  # fmt: skip
    except (regex.error, IndexError) as error:  # "to" names a group the regex lacks
        raise ValueError(f'{where}: {rule.describe()}: its "to" cannot be filled ({error})') from None


def some(arrays: Mapping) -> str:
    """A few of `arrays`' keys, for an error."""
    return few(list(arrays), SHOWN_KEYS)


def few(keys: list[str], shown: int = 3) -> str:
    """The first `shown` of `keys`, and how many there are in all where that is more."""
    return ", ".join(keys[:shown]) + (f", ... ({len(keys)} in all)" if len(keys) > shown else "")


def _under(arrays: Mapping, prefix: str) -> dict[str, tuple]:
    """{key suffix: shape} of every array under the leaf `prefix.`."""
    return {key[len(prefix) :]: np.shape(value) for key, value in arrays.items() if key.startswith(prefix + ".")}


def _swap_leaves(arrays: dict, first: str, second: str, where: str) -> dict:
    """Every array under prefix `first.` trades places with its namesake (same suffix, same shape) under `second.`."""
    held = {leaf: _under(arrays, leaf) for leaf in (first, second)}
    empty = [leaf for leaf, found in held.items() if not found]
    if empty:
        raise ValueError(f"{where}: no key under {' or '.join(empty)}. (the arrays: {some(arrays)})")
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
        raise ValueError(f"{where}: no {weight} (the arrays: {some(arrays)})")
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
        raise ValueError(f"{where}: no {key} (the arrays: {some(arrays)})")
    shape = np.shape(arrays[key])
    if len(shape) != 2 or shape[1] % blocks:
        raise ValueError(f"{where}: {key} of shape {shape} has no {blocks} equal column blocks")
    order = list(order or reversed(range(blocks)))
    if inverse:
        order = list(np.argsort(order))
    parts = np.split(arrays[key], blocks, axis=1)  # [out, n] each
    return {**arrays, key: np.concatenate([parts[i] for i in order], axis=1)}  # [out, blocks * n]
