"""What a reference run gives (shared.port.references says what a reference is): the Reference record, batch ->
named components, and the two names it adds to shared.core.taps's, `attention weights` and `logits`; `traced`
names a stack's own trace alike. Low, so the stacks' tutorial models (torch_impl/references.py,
tf_impl/references.py) return them without importing the porting room."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

ATTENTION_WEIGHTS = "attention weights"
LOGITS = "logits"


@dataclasses.dataclass
class Reference:
    """A runnable reference: what it is (for the report), the precision it runs in, and batch -> components."""

    title: str
    dtype: str
    run: Callable[[dict], dict[str, np.ndarray]]


def traced(stack, model, name: str, batch: dict) -> dict[str, np.ndarray]:
    """The stack's traced components, its `attention` output named as the others."""
    found = stack.trace(model, name, batch)
    if "attention" in found:
        found[ATTENTION_WEIGHTS] = found.pop("attention")
    return found
