"""Keras's own attention layers in PyTorch, and what Keras's masks do in its GRUs and MultiHeadAttention.

`Attention` (Luong's dot or concat score, `use_scale`) and
`AdditiveAttention` (Bahdanau's score, `use_scale`), which torch does not ship, with Keras 3.15's semantics
(keras/src/layers/attention/attention.py, additive_attention.py) and its weight names, so a Keras model using them
ports to PyTorch (their weights pair by name with Keras's: `scale`, `concat_score_weight`) and a PyTorch user
can write the Keras equivalent.

As in Keras: `inputs` is `[query, value]` or `[query, value, key]` (key defaults to value), `mask` is
`[query_mask, value_mask]` with **True = keep** (Keras's polarity; torch's `key_padding_mask` is the opposite),
masked scores lose 1e9 before the softmax, `use_causal_mask` lets query i see values 0..i, a masked query row's
output is zero, dropout acts on the attention weights in training. Torch-specific (no Keras twin).

`masked_gru` and `keras_attention` compute, from torch's own layers' parameters, what a Keras GRU and
MultiHeadAttention compute under `mask_zero` masks (the 2022 TensorFlow tutorial's model,
torch_impl/models/tf_tutorial_mha.py).

Legend: B batch, Tq query steps, Tv value steps, D features.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from torch_impl.models.seq2seq import masked_layers, traces_recurrent_loops

__all__ = ["AdditiveAttention", "Attention", "keras_attention", "masked_gru"]

KERAS_MASKED_SCORE = -1e9  # what keras.layers.Softmax puts where a mask is False


class _KerasAttention(nn.Module):
    """What Keras's `BaseDenseAttention` does around a score: masks, softmax, dropout, the weighted values."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = dropout

    def _scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, inputs, mask=None, return_attention_scores: bool = False, use_causal_mask: bool = False):
        query, value = inputs[0], inputs[1]  # [B, Tq, D], [B, Tv, D]
        key = inputs[2] if len(inputs) > 2 else value  # [B, Tv, D]
        query_mask, value_mask = (mask[0], mask[1]) if mask is not None else (None, None)
        scores = self._scores(query, key)  # [B, Tq, Tv]
        keep = self._score_mask(scores, value_mask, use_causal_mask)
        if keep is not None:
            keep = keep if keep.dim() == 3 else keep[:, None, :]  # [B, 1 or Tq, Tv]
            large = 65504.0 if scores.dtype == torch.float16 else 1.0e9
            scores = torch.where(keep, scores, scores - large)
        weights = F.dropout(torch.softmax(scores, dim=-1), self.dropout, self.training)  # [B, Tq, Tv]
        output = weights @ value  # [B, Tq, D]
        if query_mask is not None:
            output = torch.where(query_mask[..., None], output, torch.zeros_like(output))
        return (output, weights) if return_attention_scores else output

    @staticmethod
    def _score_mask(scores: torch.Tensor, value_mask, use_causal_mask: bool):
        """Where the scores count: the value mask, and with `use_causal_mask` query i over values 0..i."""
        if not use_causal_mask:
            return value_mask
        rows, columns = scores.shape[-2:]
        causal = torch.ones(rows, columns, dtype=torch.bool, device=scores.device).tril()[None]  # [1, Tq, Tv]
        return causal if value_mask is None else value_mask[:, None, :] & causal


class Attention(_KerasAttention):
    """`keras.layers.Attention`: dot `q k^T`, or concat `w * sum(tanh(q + k))` (score_mode="concat"), times the
    learned scalar `scale` where `use_scale` (inside the tanh for concat); both weights start at one."""

    def __init__(self, use_scale: bool = False, score_mode: str = "dot", dropout: float = 0.0):
        super().__init__(dropout)
        if score_mode not in ("dot", "concat"):
            raise ValueError(f"score_mode is 'dot' or 'concat', got {score_mode!r}")
        self.use_scale, self.score_mode = use_scale, score_mode
        self.scale = nn.Parameter(torch.ones(())) if use_scale else None
        self.concat_score_weight = nn.Parameter(torch.ones(())) if score_mode == "concat" else None

    def _scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        if self.score_mode == "dot":
            scores = query @ key.transpose(-2, -1)  # [B, Tq, Tv]
            return scores * self.scale if self.scale is not None else scores
        summed = query[..., :, None, :] + key[..., None, :, :]  # [B, Tq, Tv, D]
        if self.scale is not None:
            summed = self.scale * summed
        return self.concat_score_weight * torch.tanh(summed).sum(-1)  # [B, Tq, Tv]


class AdditiveAttention(_KerasAttention):
    """`keras.layers.AdditiveAttention`: `sum(scale * tanh(q + k))` over the features; `scale` `[dim]` is learned
    where `use_scale` (Keras's glorot-uniform start; `dim` is the query's width, which Keras reads on build)."""

    def __init__(self, dim: int | None = None, use_scale: bool = True, dropout: float = 0.0):
        super().__init__(dropout)
        if use_scale and dim is None:
            raise ValueError("AdditiveAttention(use_scale=True) needs dim, the query's width (Keras reads it on build)")
        self.use_scale = use_scale
        self.scale = nn.Parameter(torch.empty(dim).uniform_(-math.sqrt(3 / dim), math.sqrt(3 / dim))) if use_scale else None

    def _scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        features = torch.tanh(query[..., :, None, :] + key[..., None, :, :])  # [B, Tq, Tv, D]
        return (features * self.scale if self.scale is not None else features).sum(-1)  # [B, Tq, Tv]


def prefix_lengths(mask: torch.Tensor) -> torch.Tensor | None:
    """Each row's count of real steps `[B]` when every row is real steps then padding; else None."""
    lengths = mask.sum(1)  # [B]
    positions = torch.arange(mask.shape[1], device=mask.device)
    return lengths if bool(torch.equal(positions < lengths.unsqueeze(1), mask)) else None


def repeat_last_output(outputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Packed outputs `[B, T, H]` (zeros after each row's end) as Keras's masked GRU leaves them: each pad step
    repeats the row's last real output (a row without one stays zero)."""
    positions = torch.arange(outputs.shape[1], device=outputs.device)  # [T]
    source = torch.minimum(positions.unsqueeze(0), (lengths - 1).clamp(min=0).unsqueeze(1))  # [B, T]
    repeated = outputs.gather(1, source.unsqueeze(2).expand_as(outputs))  # [B, T, H]
    return torch.where((lengths > 0)[:, None, None], repeated, torch.zeros_like(outputs))


def masked_gru(gru: nn.GRU, x, mask, state=None, zero_output: bool = True):
    """A batch-first `nn.GRU` (either direction count) as Keras's GRU under a mask `[B, T]`: packed when each row
    is real steps then padding, else a loop (always under torch.compile on the CPU: packing would break its graph).
    -> outputs `[B, T, D * H]`, final state `[D, B, H]`."""
    lengths = None if traces_recurrent_loops() else prefix_lengths(mask)
    if lengths is not None and bool((lengths > 0).all()):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, state = gru(packed, state)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True, total_length=x.shape[1])  # [B, T, D * H]
        return (outputs if zero_output else repeat_last_output(outputs, lengths)), state
    return masked_layers(gru, x, mask, state, zero_output)


def keras_attention(mha: nn.MultiheadAttention, query, context, query_mask, key_mask):
    """Keras's `MultiHeadAttention(return_attention_scores=True)` on the parameters of `mha`: queries scaled by
    1/sqrt(head size) before the product, scores -1e9 where a key is padding, a pad query's row zeroed after the
    softmax. `query [B, T, H]`, `context [B, S, H]`, masks `[B, T]`, `[B, S]` -> output `[B, T, H]`, weights
    `[B, heads, T, S]`."""
    heads, width = mha.num_heads, mha.embed_dim
    size = width // heads
    weights_q, weights_k, weights_v = mha.in_proj_weight.chunk(3)  # [H, H] each
    bias_q, bias_k, bias_v = mha.in_proj_bias.chunk(3)

    def split_heads(x):  # [B, L, H] -> [B, heads, L, size]
        return x.unflatten(2, (heads, size)).transpose(1, 2)

    q = split_heads(F.linear(query, weights_q, bias_q)) * (1.0 / math.sqrt(float(size)))  # [B, heads, T, size]
    k, v = split_heads(F.linear(context, weights_k, bias_k)), split_heads(F.linear(context, weights_v, bias_v))
    scores = q @ k.transpose(2, 3)  # [B, heads, T, S]
    allowed = (query_mask.unsqueeze(2) & key_mask.unsqueeze(1)).unsqueeze(1)  # [B, 1, T, S]
    weights = torch.softmax(torch.where(allowed, scores, KERAS_MASKED_SCORE), dim=-1)
    weights = torch.where(allowed, weights, 0.0)  # [B, heads, T, S]
    output = (weights @ v).transpose(1, 2).flatten(2)  # [B, T, H]
    return mha.out_proj(output), weights
