"""Keras's own attention layers in PyTorch: `Attention` (Luong's dot or concat score, `use_scale`) and
`AdditiveAttention` (Bahdanau's score, `use_scale`), which torch does not ship, with Keras 3.15's semantics
(keras/src/layers/attention/attention.py, additive_attention.py) and its weight names, so a Keras model using them
ports to PyTorch (their weights pair by name with Keras's: `scale`, `concat_score_weight`) and a PyTorch user
can write the Keras equivalent.

As in Keras: `inputs` is `[query, value]` or `[query, value, key]` (key defaults to value), `mask` is
`[query_mask, value_mask]` with **True = keep** (Keras's polarity; torch's `key_padding_mask` is the opposite),
masked scores lose 1e9 before the softmax, `use_causal_mask` lets query i see values 0..i, a masked query row's
output is zero, dropout acts on the attention weights in training. Torch-specific (no Keras twin).

Legend: B batch, Tq query steps, Tv value steps, D features.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["AdditiveAttention", "Attention"]


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
