"""Document 000 (additive attention in PyTorch), class `AdditiveAttention`, in Keras.

Legend: B batch, S encoder steps, T decoder steps, De encoder_dim, Dd decoder_dim.
"""

from __future__ import annotations

import keras
from keras import ops

from shared.core.taps import ATTENTION_SCORES, tap
from tf_impl.keras_compat.serializable import CatalogueModel


class AdditiveAttention(CatalogueModel, keras.layers.Layer):
    """Document 000, `AdditiveAttention(encoder_dim=100, decoder_dim=50)`: score = v . tanh(W_1 q + W_2 h).

    The text calls `v` a scaling factor: it is the learned vector of the score, drawn from U[0, 1) as the
    listing's `torch.rand` does. Unbatched as the document (`query [Dd]`, `values [S, De]`) and batched
    (`query [B, Dd]`, `values [B, S, De]`).
    """

    as_written = False

    def __init__(self, encoder_dim: int = 100, decoder_dim: int = 50, **kwargs):
        super().__init__(**kwargs)
        self.encoder_dim = encoder_dim
        self.decoder_dim = decoder_dim
        self.v = self.add_weight(shape=(decoder_dim,), initializer=keras.initializers.RandomUniform(0.0, 1.0), name="v")
        self.W_1 = keras.layers.Dense(decoder_dim, name="W_1", dtype=self.dtype_policy)
        self.W_2 = keras.layers.Dense(decoder_dim, name="W_2", dtype=self.dtype_policy)

    def call(self, query, values):
        """Context vector: `[De]` for one query, `[B, De]` for a batch."""
        weights = ops.softmax(self._get_weights(query, values), axis=-1)  # [..., S]
        return ops.squeeze(ops.matmul(ops.expand_dims(weights, -2), values), -2)  # [..., De]

    def _get_weights(self, query, values):
        """Unnormalised scores `[..., S]`, as the document's `_get_weights` (it plots these)."""
        query = ops.expand_dims(query, -2)  # [..., 1, Dd]
        weights = self.W_1(query) + self.W_2(values)  # [..., S, Dd]
        return ops.matmul(ops.tanh(weights), self.v)  # [..., S]

    def attend(self, queries, values):
        """Ours: every query at once, `W_2(values)` once (the document's heatmap loop: `attend_as_written`).

        Args:
            queries: `[B, T, Dd]`; values: `[B, S, De]`.
        Returns:
            context `[B, T, De]` and attention weights `[B, T, S]`.
        """
        if self.as_written:
            return self.attend_as_written(queries, values)
        weights = ops.expand_dims(self.W_1(queries), 2) + ops.expand_dims(self.W_2(values), 1)  # [B, T, 1, Dd] + [B, 1, S, Dd]
        attention = ops.softmax(tap(ATTENTION_SCORES, ops.matmul(ops.tanh(weights), self.v)), axis=-1)  # [B, T, S]
        return ops.matmul(attention, values), attention  # [B, T, S] @ [B, S, De] -> [B, T, De]

    def attend_as_written(self, queries, values):
        """One `_get_weights` per decoder step, as the document's heatmap loop."""
        scores = ops.stack([self._get_weights(queries[:, t], values) for t in range(queries.shape[1])], 1)
        attention = ops.softmax(tap(ATTENTION_SCORES, scores), axis=-1)  # [B, T, S]
        return ops.matmul(attention, values), attention  # [B, T, S] @ [B, S, De] -> [B, T, De]

    def get_config(self):
        return {**super().get_config(), "encoder_dim": self.encoder_dim, "decoder_dim": self.decoder_dim}
