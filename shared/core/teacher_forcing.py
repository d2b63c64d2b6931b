"""Teacher-forcing schedules: one draw in numpy, passed to both stacks.

Documents 002 and 003 flip a coin per decoder step inside the model (`random.random() <
teacher_force_ratio`); two stacks could never agree on those flips. Here the flips are drawn once from a
seeded numpy generator and passed in: `schedule[t]` says whether decoder step t + 1 reads the true token
`tgt_in[:, t + 1]` (True) or the argmax of step t's logits (False). A schedule has T - 1 entries.
"""

from __future__ import annotations

import numpy as np

from shared.catalogue import ModelSpec


def draw(ratio: float, steps: int, rng: np.random.Generator) -> np.ndarray:
    """`steps` coin flips, each True with probability `ratio` (the documents' `random.random() < ratio`)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"teacher_force_ratio must be in [0, 1], got {ratio!r}")
    return rng.random(steps) < ratio


def check(spec: ModelSpec, schedule, target_length: int, rows: int | None = None) -> np.ndarray | None:
    """Validate a schedule for a target of `target_length` steps, `[T - 1]`, or with `rows` one per batch row,
    `(rows, T - 1)` (Keras's `fit` slices it with the batch); None means always teacher-force."""
    if schedule is None:
        return None
    if not spec.variable_length:
        raise ValueError(f"model {spec.name!r} always teacher-forces (document {spec.document}); pass teacher_forcing=None")
    array = np.asarray(schedule)
    if array.dtype != bool and not (array.dtype.kind in "iu" and np.isin(array, (0, 1)).all()):
        raise ValueError(f"teacher_forcing must hold booleans, got dtype {array.dtype}")
    expected = (target_length - 1,) if rows is None else (rows, target_length - 1)
    if array.shape != expected:
        raise ValueError(f"teacher_forcing must have shape {expected} for {target_length} target steps, got {array.shape}")
    return array.astype(bool)
