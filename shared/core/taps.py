"""Named intermediate tensors of one forward pass: the components `rosetta port` compares across stacks.

The models of both stacks call `tap(name, tensor)` at the same places (the encoder's embeddings,
outputs and final state, the decoder's embeddings, the attention scores before the softmax, the
context vectors). `tap` returns its tensor unchanged and keeps it only inside `recording()`, so
training, benchmarks and compiled graphs pay one test of a module global, at trace time.

A decoder step's tensor is `[B, *]` (rank 2) and a whole target's is `[B, T, *]` (ours runs some
decoders over every step at once): `collect` joins them along time, so how a stack lays out its loop
does not change what is compared. A recurrent state (torch `[L, B, H]`, Keras `[B, H]` per layer,
LSTM's `(h, c)` pairs) becomes its `[B, H]` parts side by side: `[B, parts * H]`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

SOURCE_EMBEDDINGS = "source embeddings"
ENCODER_OUTPUTS = "encoder outputs"
ENCODER_STATE = "encoder state"
TARGET_EMBEDDINGS = "target embeddings"
ATTENTION_SCORES = "attention scores"
CONTEXT_VECTORS = "context vectors"
COMPONENTS = (SOURCE_EMBEDDINGS, ENCODER_OUTPUTS, ENCODER_STATE, TARGET_EMBEDDINGS, ATTENTION_SCORES, CONTEXT_VECTORS)

_recorded: dict[str, list] | None = None


def tap(name: str, tensor):
    """`tensor`, unchanged; inside `recording()` also kept under `name` (one of COMPONENTS)."""
    if _recorded is not None:
        _recorded.setdefault(name, []).append(tensor)
    return tensor


def is_recording() -> bool:
    """Whether a `recording()` is open (then a forward pass must run eagerly: a compiled one would keep tracers)."""
    return _recorded is not None


@contextlib.contextmanager
def recording():
    """Keep every tapped tensor of the forward passes run inside; yields {name: [tensor, ...]}."""
    global _recorded
    previous, _recorded = _recorded, {}
    try:
        yield _recorded
    finally:
        _recorded = previous


def collect(recorded: dict[str, list], to_numpy: Callable) -> dict[str, np.ndarray]:
    """The recorded components as numpy arrays: states side by side, the rest joined along time."""
    arrays = {}
    for name, tensors in recorded.items():
        if name == ENCODER_STATE:
            arrays[name] = np.concatenate([part for state in tensors for part in _state_parts(state, to_numpy)], axis=-1)
        else:
            steps = [np.asarray(to_numpy(tensor)) for tensor in tensors]
            arrays[name] = np.concatenate([step[:, None] if step.ndim == 2 else step for step in steps], axis=1)
    return arrays


def _state_parts(state, to_numpy: Callable) -> list[np.ndarray]:
    """A recurrent state's `[B, H]` parts in order: tuples and lists flattened, `[L, B, H]` split by layer."""
    if isinstance(state, (tuple, list)):
        return [part for item in state for part in _state_parts(item, to_numpy)]
    array = np.asarray(to_numpy(state))
    return list(array) if array.ndim == 3 else [array]
