"""Renames proposed when two sets of weight keys do not match: each unexpected key paired with the missing key of the
same last name and the best fit (same shape first, then the most path components in common), as prefix renames
ready for a key map (`rosetta port --key-map`, shared/port/layouts.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping


def propose_renames(missing: Mapping[str, tuple], unexpected: Mapping[str, tuple]) -> list[tuple[str, str]]:
    """Prefix renames (file prefix -> catalogue prefix) pairing each unexpected key with the missing key of the
    same last name (`weight`, `bias_hh_l0`, ...) and rank that fits it best (same shape first, then the most
    path components in common), where that best is unique; most supported first."""
    votes: dict[tuple[str, str], int] = {}
    for key, shape in unexpected.items():
        scored = [(_fit(key, shape, m, s), m) for m, s in missing.items() if _tail(m) == _tail(key) and len(s) == len(shape)]
        scored.sort(reverse=True)
        if scored and (len(scored) == 1 or scored[0][0] > scored[1][0]):
            rename = _prefix_rename(key, scored[0][1])
            votes[rename] = votes.get(rename, 0) + 1
    return sorted(votes, key=lambda rename: (-votes[rename], rename))


def _tail(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _fit(key: str, shape: tuple, candidate: str, candidate_shape: tuple) -> tuple[bool, int]:
    """How well `candidate` fits `key`: the same shape, then how many path components they share."""
    return tuple(shape) == tuple(candidate_shape), len(set(key.split(".")[:-1]) & set(candidate.split(".")[:-1]))


def _prefix_rename(old: str, new: str) -> tuple[str, str]:
    """The shortest prefix rename turning `old` into `new`: their common trailing components are kept."""
    a, b = old.split("."), new.split(".")
    while len(a) > 1 and len(b) > 1 and a[-1] == b[-1]:
        a, b = a[:-1], b[:-1]
    return ".".join(a) + ".", ".".join(b) + "."


def proposal_text(renames: list[tuple[str, str]]) -> str:
    """The proposed renames as a key map's `renames` field, ready to save with --key-map."""
    rules = ", ".join(json.dumps({"prefix": old, "to": new}) for old, new in renames)
    why = "a key map for --key-map; shapes cannot tell a column order"
    return f'renames proposed by name and shape ({why}): {{"renames": [{rules}]}}'
