"""Greedy and beam search with Hugging Face's rules in PyTorch: shared/generation's one algorithm run eagerly over
torch tensors (`Arrays`), driving any decoding object (`start`, `step`: docs/DESIGN.md "Generation").

Mirrors tf_impl/generation.py, which runs the same algorithm compiled in Keras. Decoding objects: the
catalogue's encoder-decoders (`Seq2SeqDecoding`, documents 002 and 003) and a Hugging Face model itself
(torch_impl/hf/decoding.py, transformers' own cache), which proves this loop against HF's `generate`.
"""

from __future__ import annotations

import numpy as np
import torch

from shared.generation import search
from shared.generation.settings import GenerationSettings, Plan, planned

__all__ = ["Arrays", "Seq2SeqDecoding", "decoding_for", "reorder", "generate", "compiled_search"]


class Arrays:
    """The array namespace shared/generation is written over, in torch (eager: python ints pass for scalars)."""

    INT = torch.int64

    def _tensor(self, value, like=None):
        if isinstance(value, torch.Tensor):
            return value
        dtype = like.dtype if like is not None else None
        return torch.as_tensor(value, dtype=dtype)

    def full(self, shape, value, dtype):
        return torch.full(shape, value, dtype={"int": self.INT, "bool": torch.bool, "float32": torch.float32}[dtype])

    def zeros(self, shape, dtype):
        return self.full(shape, 0, dtype)

    def zeros_like(self, x):
        return torch.zeros_like(x)

    def arange(self, n):
        return torch.arange(n)

    def cast(self, x, dtype):
        return x.to({"int": self.INT, "bool": torch.bool, "float32": torch.float32}[dtype])

    def where(self, condition, a, b):
        like = a if isinstance(a, torch.Tensor) else b
        return torch.where(self._tensor(condition), self._tensor(a, like), self._tensor(b, like))

    def expand_dims(self, x, axis):
        return x.unsqueeze(axis)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def broadcast_to(self, x, shape):
        return self._tensor(x).expand(shape)

    def concat(self, tensors, axis):
        return torch.cat(tensors, axis)

    def equal(self, a, b):
        return self._tensor(a) == b

    def less(self, a, b):
        return self._tensor(a) < b

    def greater(self, a, b):
        return self._tensor(a) > b

    def greater_equal(self, a, b):
        return self._tensor(a) >= b

    def logical_and(self, a, b):
        return self._tensor(a) & self._tensor(b)

    def logical_or(self, a, b):
        return self._tensor(a) | self._tensor(b)

    def logical_not(self, a):
        return ~self._tensor(a)

    def any(self, x, axis=None, keepdims=False):
        return x.any() if axis is None else x.any(axis, keepdim=keepdims)

    def all(self, x, axis=None, keepdims=False):
        return x.all() if axis is None else x.all(axis, keepdim=keepdims)

    def min(self, x, axis, keepdims=False):
        return x.amin(axis, keepdim=keepdims)

    def max(self, x):
        return x.max()

    def clip(self, x, low, high):
        return max(low, min(high, x)) if isinstance(x, int) else x.clamp(low, high)

    def argmax(self, x):
        return x.argmax(-1)

    def log_softmax(self, x):
        return torch.log_softmax(x, -1)

    def isin(self, x, ids):
        x = self._tensor(x)
        return torch.isin(x, torch.tensor(ids, dtype=x.dtype)) if ids else torch.zeros_like(x, dtype=torch.bool)

    def top_k(self, x, k):
        """The k largest along the last axis, the lower index first among equal values (a stable sort)."""
        values, indices = torch.sort(x, dim=-1, descending=True, stable=True)
        return values[..., :k], indices[..., :k]

    def take_along(self, x, indices, axis):
        return torch.take_along_dim(x, indices, axis)  # broadcasts `indices` over the other axes

    def take_column(self, x, index):
        return x[..., index]

    def set_column(self, x, index, values):
        x = x.clone()
        x[..., index] = values
        return x

    def gather_constant(self, table, index):
        return torch.tensor(table[index], dtype=torch.float32)

    def mark(self, ids, valid, vocabulary: int):
        """[N, V] booleans: True where some valid position of `ids [N, M]` holds that id."""
        marked = torch.zeros((ids.shape[0], vocabulary + 1), dtype=torch.bool)
        return marked.scatter_(1, torch.where(valid, ids, vocabulary), True)[:, :vocabulary]


def _swap_layers(hidden):
    """An RNN state `[L, B, H]` (or a tuple of them) as `[B, L, H]` and back; `[B, H]` states stay."""
    if isinstance(hidden, tuple | list):
        return type(hidden)(_swap_layers(item) for item in hidden)
    return hidden.transpose(0, 1) if hidden.dim() == 3 else hidden


class Seq2SeqDecoding:
    """A catalogue encoder-decoder (torch_impl/models/seq2seq.py `Seq2SeqBase`: documents 002 and 003) as a decoding
    object: memory is the encoder's outputs, mask and keys; state the decoder's hidden state, batch first."""

    def __init__(self, model):
        self.model = model

    def start(self, input_ids, attention_mask, max_length: int):
        memory, hidden = self.model.encode(input_ids, attention_mask.sum(1))
        return memory, _swap_layers(hidden)

    def step(self, tokens, index, state, memory):
        logits, hidden, _ = self.model.step(tokens, _swap_layers(state), memory)  # [N, V]
        return logits, _swap_layers(hidden)


def _map(structure, function):
    """`function` over every tensor of a nested tuple/list (None passes through)."""
    if structure is None:
        return None
    if isinstance(structure, tuple | list):
        return type(structure)(_map(item, function) for item in structure)
    return function(structure)


def reorder(state, rows):
    """The model's state rows `[B * K, ...]` in the order of the new running beams."""
    return _map(state, lambda x: x.index_select(0, rows))


def _loop(decoding, plan: Plan, input_ids, attention_mask):
    """HF's loop, eagerly: ids `[B * R, L]`, scores `[B * R]` (zeros for greedy) and the length HF crops to."""
    xp, batch, beams = Arrays(), input_ids.shape[0], plan.num_beams
    memory, state = decoding.start(input_ids, attention_mask, plan.max_length)
    repeat = lambda x: x.repeat_interleave(beams, 0)  # noqa: E731  (each row's beams adjacent)
    memory, state = _map(memory, repeat), _map(state, repeat)
    reorder_rows = getattr(decoding, "reorder", reorder)
    if plan.beam_search:
        table, search_state, length, going = search.penalties(plan), search.beam_start(xp, plan, batch), 1, True
        while going:
            tokens = search_state["running"][:, :, length - 1].reshape(-1)  # [B*K]
            logits, state = decoding.step(tokens, length - 1, state, memory)
            search_state, rows = search.beam_advance(xp, plan, search_state, logits, length, table)
            state = reorder_rows(state, rows)
            length += 1
            going = bool(search.beam_unfinished(xp, plan, search_state))
        return search.beam_result(xp, plan, search_state)
    search_state, length = search.greedy_start(xp, plan, batch), 1
    while bool(search.greedy_unfinished(xp, search_state)):
        logits, state = decoding.step(search_state["sequences"][:, length - 1], length - 1, state, memory)
        search_state = search.greedy_advance(xp, plan, search_state, logits, length)
        length += 1
    return search_state["sequences"], torch.zeros(batch), length


def compiled_search(decoding, plan: Plan):
    """`(input_ids, attention_mask) -> (ids, scores, used length)`: torch runs the loop eagerly (Keras compiles it)."""
    return lambda tensors: _loop(decoding, plan, *tensors)


def decoding_for(model):
    """The decoding object of a torch model this module can drive (a decoding object passes through)."""
    if hasattr(model, "start") and hasattr(model, "step") and hasattr(model, "model"):
        return model
    from torch_impl.models.seq2seq import Seq2SeqBase

    if isinstance(model, Seq2SeqBase):
        return Seq2SeqDecoding(model)
    if hasattr(model, "generation_config"):  # a transformers model
        from torch_impl.hf.decoding import HfDecoding

        return HfDecoding(model)
    raise TypeError(
        f"{type(model).__name__} has no decoding for generation: a catalogue encoder-decoder (documents 002, 003) "
        "or a transformers encoder-decoder has one"
    )


def generate(
    model,
    input_ids,
    attention_mask=None,
    settings: GenerationSettings | None = None,
    model_config: dict | None = None,
    **overrides,
) -> np.ndarray:
    """Token ids `[B * R, L]` (numpy) from source ids `[B, S]` and their padding mask (1 keeps), with `settings`
    (a model folder's: shared.generation.settings.read) updated by `overrides` in HF's field names."""
    plan = planned(settings, model_config, **overrides)
    input_ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long)
    mask = torch.ones_like(input_ids) if attention_mask is None else torch.as_tensor(np.asarray(attention_mask))
    with torch.inference_mode():
        sequences, _, used = compiled_search(decoding_for(model), plan)((input_ids, mask.to(torch.long)))
    return sequences[:, : int(used)].numpy()
