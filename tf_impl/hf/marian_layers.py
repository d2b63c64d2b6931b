"""Keras 3 layers computing transformers' models/marian/modeling_marian.py (5.23) in keras.ops, eager attention.

Legend: B batch, S source length, T target length, E d_model, F ffn dim, N heads, V vocabulary.
Plain keras.ops (no keras-hub layers) so every product and every mask value is HF's and runs on TF, JAX and torch.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from shared.hf.structure import marian_sinusoid


def constant(value: float, like):
    """`value` in `like`'s dtype, cast from float64 (Keras on TF casts a Python float through float32 first)."""
    return ops.cast(np.float64(value), like.dtype)


def exact_gelu(x):
    """transformers' GELUActivation (torch's F.gelu): 0.5 x (1 + erf(x / sqrt(2))); tf.nn.gelu rounds 1/sqrt(2) to float32."""
    return constant(0.5, x) * x * (1.0 + ops.erf(x * constant(math.sqrt(0.5), x)))


def tanh_gelu(x):
    """transformers' NewGELUActivation (gelu_new): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = constant(math.sqrt(2.0 / math.pi), x) * (x + constant(0.044715, x) * ops.power(x, 3.0))
    return constant(0.5, x) * x * (1.0 + ops.tanh(inner))


# transformers' activations.py ACT2FN, by the names a Marian config may use
ACTIVATIONS = {"gelu": exact_gelu, "gelu_new": tanh_gelu, "gelu_pytorch_tanh": tanh_gelu, "relu": ops.relu, "silu": ops.silu,
               "swish": ops.silu, "tanh": ops.tanh}  # fmt: skip


def additive_mask(allowed, dtype: str):
    """masking_utils.eager_mask's polarity: 0 where attention is allowed, the dtype's minimum where it is not."""
    return ops.where(allowed, ops.zeros((), dtype=dtype), ops.convert_to_tensor(np.array(np.finfo(dtype).min, dtype=dtype)))


def padding_mask(mask, dtype: str):
    """A keras-hub padding mask (1 real, 0 pad) [B, K] as HF's additive mask over keys [B, 1, 1, K]."""
    return additive_mask(ops.cast(mask, "bool")[:, None, None, :], dtype)


def causal_padding_mask(mask, dtype: str):
    """create_causal_mask with a padding mask: key k allowed for query t when k <= t and k is real [B, 1, T, T]."""
    length = ops.shape(mask)[1]
    positions = ops.arange(length)
    causal = positions[None, :] <= positions[:, None]  # [T, T]
    return additive_mask(ops.logical_and(causal[None, None], ops.cast(mask, "bool")[:, None, None, :]), dtype)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianMasks(keras.layers.Layer):
    """Both padding masks (1 real, 0 pad) as HF's additive masks: encoder keys [B, 1, 1, S], causal decoder [B, 1, T, T]."""

    def call(self, encoder_padding_mask, decoder_padding_mask):
        dtype = self.compute_dtype
        return padding_mask(encoder_padding_mask, dtype), causal_padding_mask(decoder_padding_mask, dtype)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianPositions(keras.layers.Layer):
    """Marian's sinusoidal positions [S, E] for a sequence [B, S, E]: a table, not a weight (HF never saves it)."""

    def __init__(self, max_positions: int, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.max_positions = max_positions
        self.dim = dim
        self.table = marian_sinusoid(max_positions, dim, self.compute_dtype)  # [P, E]

    def call(self, embeddings):
        length = ops.shape(embeddings)[1]
        return ops.take(ops.convert_to_tensor(self.table, dtype=self.compute_dtype), ops.arange(length), axis=0)  # [S, E]

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions, "dim": self.dim}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianAttention(keras.layers.Layer):
    """MarianAttention + eager_attention_forward: (q k^T) * head_dim**-0.5, additive mask, softmax, v, out_proj."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.heads, self.dropout_rate = dim, heads, dropout
        self.head_dim = dim // heads
        self.scaling = self.head_dim**-0.5
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            keras.layers.Dense(dim, dtype=self.dtype_policy, name=name) for name in ("q_proj", "k_proj", "v_proj", "out_proj")
        )
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape, keys_shape=None, mask_shape=None):
        for dense in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            dense.build((None, None, self.dim))

    def _split(self, x):
        shape = ops.shape(x)
        return ops.transpose(ops.reshape(x, (shape[0], shape[1], self.heads, self.head_dim)), (0, 2, 1, 3))  # [B, N, L, D]

    def call(self, query, keys, mask, training=False):
        q, k, v = self._split(self.q_proj(query)), self._split(self.k_proj(keys)), self._split(self.v_proj(keys))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * constant(self.scaling, q) + mask  # [B, N, T, K]
        weights = self.dropout(ops.softmax(scores, axis=-1), training=training)  # [B, N, T, K]
        out = ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3))  # [B, T, N, D]
        shape = ops.shape(out)
        return self.out_proj(ops.reshape(out, (shape[0], shape[1], self.dim)))  # [B, T, E]

    def get_config(self):
        return {**super().get_config(), "dim": self.dim, "heads": self.heads, "dropout": self.dropout_rate}


class _PostNormBlocks(keras.layers.Layer):
    """What Marian's encoder and decoder layers share: post-norm residuals and the feed-forward block."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, activation: str, dropout: float = 0.0, epsilon: float = 1e-5,
                 attention_dropout: float = 0.0, activation_dropout: float = 0.0, **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.dim, self.heads, self.ffn_dim, self.activation = dim, heads, ffn_dim, activation
        self.dropout_rate, self.epsilon = dropout, epsilon
        self.attention_dropout, self.activation_dropout = attention_dropout, activation_dropout
        self.activation_fn = ACTIVATIONS[activation]
        self.fc1 = keras.layers.Dense(ffn_dim, dtype=self.dtype_policy, name="fc1")
        self.fc2 = keras.layers.Dense(dim, dtype=self.dtype_policy, name="fc2")
        self.final_layer_norm = self._norm("final_layer_norm")
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.activation_dropout_layer = keras.layers.Dropout(activation_dropout, dtype=self.dtype_policy)

    def _attention(self, name: str):
        """A MarianAttention whose weights drop at attention_dropout in training (HF's eager_attention_forward)."""
        return MarianAttention(self.dim, self.heads, self.attention_dropout, dtype=self.dtype_policy, name=name)

    def _build_feed_forward(self, x_shape) -> None:
        for layer in (self.fc1, self.final_layer_norm):
            layer.build(x_shape)
        self.fc2.build((None, None, self.ffn_dim))

    def _norm(self, name: str):
        return keras.layers.LayerNormalization(epsilon=self.epsilon, dtype=self.dtype_policy, name=name)

    def _residual(self, x, update, norm, training):
        return norm(x + self.dropout(update, training=training))  # [B, L, E]: post-norm, as BART and Marian

    def _feed_forward(self, x, training):
        """fc1, activation, activation_dropout (HF drops between the two products), fc2, then dropout and the norm."""
        hidden = self.activation_dropout_layer(self.activation_fn(self.fc1(x)), training=training)  # [B, L, F]
        update = self.fc2(hidden)  # [B, L, E]
        return self._residual(x, update, self.final_layer_norm, training)

    def get_config(self):
        names = ("dim", "heads", "ffn_dim", "activation", "epsilon", "attention_dropout", "activation_dropout")
        return {**super().get_config(), **{n: getattr(self, n) for n in names}, "dropout": self.dropout_rate}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianEncoderLayer(_PostNormBlocks):
    """MarianEncoderLayer: self-attention, then the feed-forward block, each added then normed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn = self._attention("self_attn")
        self.self_attn_layer_norm = self._norm("self_attn_layer_norm")

    def build(self, x_shape, mask_shape=None):
        for layer in (self.self_attn, self.self_attn_layer_norm):
            layer.build(x_shape)
        self._build_feed_forward(x_shape)

    def call(self, x, mask, training=False):
        x = self._residual(x, self.self_attn(x, x, mask, training=training), self.self_attn_layer_norm, training)  # [B, S, E]
        return self._feed_forward(x, training)  # [B, S, E]


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianDecoderLayer(_PostNormBlocks):
    """MarianDecoderLayer: causal self-attention, cross-attention on the encoder, feed-forward; each post-normed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn = self._attention("self_attn")
        self.self_attn_layer_norm = self._norm("self_attn_layer_norm")
        self.encoder_attn = self._attention("encoder_attn")
        self.encoder_attn_layer_norm = self._norm("encoder_attn_layer_norm")

    def build(self, x_shape, *shapes):
        for layer in (self.self_attn, self.encoder_attn, self.self_attn_layer_norm, self.encoder_attn_layer_norm):
            layer.build(x_shape)
        self._build_feed_forward(x_shape)

    def call(self, x, self_mask, encoder_output, cross_mask, training=False):
        x = self._residual(x, self.self_attn(x, x, self_mask, training=training), self.self_attn_layer_norm, training)
        cross = self.encoder_attn(x, encoder_output, cross_mask, training=training)  # [B, T, E]
        x = self._residual(x, cross, self.encoder_attn_layer_norm, training)  # [B, T, E]
        return self._feed_forward(x, training)  # [B, T, E]


def embed_scale(dim: int, scale_embedding: bool) -> float:
    """MarianEncoder/MarianDecoder's embed_scale: sqrt(d_model) when scale_embedding, else 1."""
    return math.sqrt(dim) if scale_embedding else 1.0
