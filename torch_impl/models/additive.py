"""Document 000 (additive attention in PyTorch), class `AdditiveAttention`.

Legend: B batch, S encoder steps, T decoder steps, De encoder_dim, Dd decoder_dim.
"""

from __future__ import annotations

import torch
from torch import nn

from shared.core.taps import ATTENTION_SCORES, tap
from torch_impl.inductor_ops import energy_tanh


class AdditiveAttention(nn.Module):
    """Document 000, `AdditiveAttention(encoder_dim=100, decoder_dim=50)`: score = v . tanh(W_1 q + W_2 h).

    The text calls `v` a scaling factor: it is the learned vector of the score, drawn from U[0, 1) as the
    listing's `torch.rand` does. Unbatched as the document (`query [Dd]`, `values [S, De]`) and batched
    (`query [B, Dd]`, `values [B, S, De]`).
    """

    as_written = False

    def __init__(self, encoder_dim: int = 100, decoder_dim: int = 50):
        super().__init__()
        self.encoder_dim = encoder_dim
        self.decoder_dim = decoder_dim
        self.v = nn.Parameter(torch.rand(self.decoder_dim))  # [Dd]
        self.W_1 = nn.Linear(self.decoder_dim, self.decoder_dim)
        self.W_2 = nn.Linear(self.encoder_dim, self.decoder_dim)

    def forward(self, query: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Context vector: `[De]` for one query, `[B, De]` for a batch."""
        weights = torch.softmax(self._get_weights(query, values), dim=-1)  # [..., S]
        return (weights.unsqueeze(-2) @ values).squeeze(-2)  # [..., 1, S] @ [..., S, De] -> [..., De]

    def _get_weights(self, query: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Unnormalised scores `[..., S]`, as the document's `_get_weights` (it plots these)."""
        query = query.unsqueeze(-2)  # [..., 1, Dd]; broadcasting replaces the listing's repeat
        weights = self.W_1(query) + self.W_2(values)  # [..., S, Dd]
        return torch.tanh(weights) @ self.v  # [..., S]

    def attend(self, queries: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Ours: every query at once, `W_2(values)` once (the document's heatmap loop: `attend_as_written`).

        Args:
            queries: `[B, T, Dd]`; values: `[B, S, De]`.
        Returns:
            context `[B, T, De]` and attention weights `[B, T, S]`.
        """
        if self.as_written:
            return self.attend_as_written(queries, values)
        weights = self.W_1(queries).unsqueeze(2) + self.W_2(values).unsqueeze(1)  # [B, T, 1, Dd] + [B, 1, S, Dd]
        attention = torch.softmax(tap(ATTENTION_SCORES, energy_tanh(weights) @ self.v), dim=-1)  # [B, T, S]
        return attention @ values, attention  # [B, T, S] @ [B, S, De] -> [B, T, De]

    def attend_as_written(self, queries, values):
        """One `_get_weights` per decoder step, as the document's heatmap loop."""
        scores = torch.stack([self._get_weights(queries[:, t], values) for t in range(queries.shape[1])], 1)
        attention = torch.softmax(tap(ATTENTION_SCORES, scores), dim=-1)  # [B, T, S]
        return attention @ values, attention  # [B, T, S] @ [B, S, De] -> [B, T, De]
