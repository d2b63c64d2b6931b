"""Keras 3 layers computing transformers' (5.23) BART family in keras.ops, eager attention: models/bart/modeling_bart.py,
and marian/ and mbart/ ("Copied from bart": post-norm BART and Marian, pre-norm mBART). The Marian names are kept.

Legend: B batch, S source length, T target length, E d_model, F ffn dim, N heads, P positions, V vocabulary.
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


def cache_mask(index, length: int, dtype: str):
    """A decoding step's causal mask: the query at position `index` (a traced scalar allowed) may attend the cache's
    positions 0..index of `length`, not the later ones (zeros, or a beam's stale rows) [1, 1, 1, L]."""
    return additive_mask(ops.arange(length, dtype="int32") <= ops.cast(index, "int32"), dtype)[None, None, None, :]


def write_cache(cache: tuple, new: tuple, index) -> tuple:
    """Each cache [B, N, L, D] (keys, values) with `new`'s [B, N, 1, D] written at position `index` (a traced scalar
    allowed: slice_update keeps the static shape; JAX wants every start index of one integer type)."""
    index = ops.cast(index, "int32")
    zero = ops.zeros_like(index)
    start = (zero, zero, index, zero)
    return tuple(ops.slice_update(old, start, value) for old, value in zip(cache, new, strict=True))  # [B, N, L, D] each


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
        return self.rows(ops.arange(ops.shape(embeddings)[1]))  # [S, E]

    def at(self, index):
        """The row of position `index` (a traced scalar allowed) [1, E]: a decoding step's."""
        return self.rows(ops.reshape(index, (1,)))  # [1, E]

    def rows(self, positions):
        return ops.take(ops.convert_to_tensor(self.table, dtype=self.compute_dtype), positions, axis=0)  # [S, E]

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions, "dim": self.dim}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class LearnedPositions(keras.layers.Layer):
    """modeling_bart.py's BartLearnedPositionalEmbedding (mBART's alike): a table of max_position_embeddings + 2 rows,
    position i read from row i + 2 (fairseq's offset, kept by HF): [S, E] for a sequence [B, S, E]."""

    def __init__(self, max_positions: int, dim: int, offset: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.max_positions, self.dim, self.offset = max_positions, dim, offset
        initializer = keras.initializers.RandomNormal(stddev=0.02)  # BartPreTrainedModel._init_weights: init_std
        self.embeddings = self.add_weight(shape=(max_positions + 2, dim), initializer=initializer, name="embeddings")

    def call(self, embeddings):
        return self.rows(ops.arange(ops.shape(embeddings)[1]))  # [S, E]

    def at(self, index):
        """The row of position `index` (a traced scalar allowed) [1, E]: a decoding step's."""
        return self.rows(ops.reshape(index, (1,)))  # [1, E]

    def rows(self, positions):
        """Positions [S] read at row position + offset."""
        return ops.take(self.embeddings, positions + self.offset, axis=0)  # [S, E]

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions, "dim": self.dim, "offset": self.offset}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianAttention(keras.layers.Layer):
    """MarianAttention + eager_attention_forward: (q k^T) * head_dim**-0.5, additive mask, softmax, v, out_proj; with
    return_weights also the probabilities [B, N, T, K] after dropout, as HF's attn_weights (output_attentions).
    A decoding step shares the product: `cached` (keys and values projected already) and `step` (a cache written)."""

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

    def call(self, query, keys, mask, training=False, return_weights=False):
        out, weights = self._attend(query, *self.project(keys), mask, training)  # [B, T, E], [B, N, T, K]
        return (out, weights) if return_weights else out

    def project(self, keys):
        """keys [B, K, E] -> their keys and values in heads [B, N, K, D] each (a decoding's memory: once per source)."""
        return self._split(self.k_proj(keys)), self._split(self.v_proj(keys))

    def cached(self, query, k, v, mask):
        """query [B, T, E] attending keys and values projected already ([B, N, K, D]: memory or a cache) -> [B, T, E]."""
        return self._attend(query, k, v, mask)[0]

    def step(self, query, cache: tuple, index, mask):
        """Self-attention of one position query [B, 1, E]: its key and value written at `index` of the cache (keys,
        values [B, N, L, D]), the query attending the cache under `mask` -> ([B, 1, E], the new cache)."""
        cache = write_cache(cache, self.project(query), index)  # [B, N, L, D] each
        return self.cached(query, *cache, mask), cache

    def _attend(self, query, k, v, mask, training=False):
        q = self._split(self.q_proj(query))  # [B, N, T, D]
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * constant(self.scaling, q) + mask  # [B, N, T, K]
        weights = self.dropout(ops.softmax(scores, axis=-1), training=training)  # [B, N, T, K]
        out = ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3))  # [B, T, N, D]
        shape = ops.shape(out)
        return self.out_proj(ops.reshape(out, (shape[0], shape[1], self.dim))), weights  # [B, T, E], [B, N, T, K]

    def get_config(self):
        return {**super().get_config(), "dim": self.dim, "heads": self.heads, "dropout": self.dropout_rate}


class _Blocks(keras.layers.Layer):
    """What the encoder and decoder layers share: the residual sublayers (post-norm as BART and Marian, pre-norm as
    mBART's normalize_before) and the feed-forward block."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, activation: str, dropout: float = 0.0, epsilon: float = 1e-5,
                 attention_dropout: float = 0.0, activation_dropout: float = 0.0, normalize_before: bool = False,
                 **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.dim, self.heads, self.ffn_dim, self.activation = dim, heads, ffn_dim, activation
        self.dropout_rate, self.epsilon, self.normalize_before = dropout, epsilon, normalize_before
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

    def _sublayer(self, x, norm, update, training):
        """Pre-norm x + dropout(update(norm(x))) (mBART), else post-norm norm(x + dropout(update(x))) (BART, Marian)."""
        if self.normalize_before:
            return x + self.dropout(update(norm(x)), training=training)  # [B, L, E]
        return norm(x + self.dropout(update(x), training=training))  # [B, L, E]

    def _feed_forward(self, x, training):
        """fc1, activation, activation_dropout (HF drops between the two products), fc2; then dropout and the residual."""

        def update(h):
            return self.fc2(self.activation_dropout_layer(self.activation_fn(self.fc1(h)), training=training))  # [B, L, E]

        return self._sublayer(x, self.final_layer_norm, update, training)

    def get_config(self):
        names = (
            "dim",
            "heads",
            "ffn_dim",
            "activation",
            "epsilon",
            "attention_dropout",
            "activation_dropout",
            "normalize_before",
        )
        return {**super().get_config(), **{n: getattr(self, n) for n in names}, "dropout": self.dropout_rate}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianEncoderLayer(_Blocks):
    """Marian/Bart/MBartEncoderLayer: self-attention, then the feed-forward block, each a residual sublayer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn = self._attention("self_attn")
        self.self_attn_layer_norm = self._norm("self_attn_layer_norm")

    def build(self, x_shape, mask_shape=None):
        for layer in (self.self_attn, self.self_attn_layer_norm):
            layer.build(x_shape)
        self._build_feed_forward(x_shape)

    def call(self, x, mask, training=False):
        x = self._sublayer(x, self.self_attn_layer_norm, lambda h: self.self_attn(h, h, mask, training=training), training)
        return self._feed_forward(x, training)  # [B, S, E]


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianDecoderLayer(_Blocks):
    """Marian/Bart/MBartDecoderLayer: causal self-attention, cross-attention on the encoder, feed-forward; with
    return_attention also the cross-attention probabilities [B, N, T, S] (HF's cross_attentions entry of the layer)."""

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

    def call(self, x, self_mask, encoder_output, cross_mask, training=False, return_attention=False):
        x = self._sublayer(x, self.self_attn_layer_norm, lambda h: self.self_attn(h, h, self_mask, training=training), training)
        found = []

        def cross(h):
            out, weights = self.encoder_attn(h, encoder_output, cross_mask, training=training, return_weights=True)
            found.append(weights)  # [B, N, T, S]
            return out  # [B, T, E]

        x = self._sublayer(x, self.encoder_attn_layer_norm, cross, training)  # [B, T, E]
        y = self._feed_forward(x, training)  # [B, T, E]
        return (y, found[0]) if return_attention else y

    def step(self, x, cache: tuple, index, self_mask, memory: tuple, cross_mask):
        """A decoding step of position `index`, x [B, 1, E]: the sublayers of `call`, self-attention on the cache (keys,
        values [B, N, L, D]) under `self_mask` (cache_mask), cross-attention on memory (the encoder output's keys and
        values [B, N, S, D], `encoder_attn.project`) -> ([B, 1, E], the cache with position `index` written)."""
        written = []

        def self_attend(h):
            out, new = self.self_attn.step(h, cache, index, self_mask)  # [B, 1, E], [B, N, L, D] each
            written.append(new)
            return out

        x = self._sublayer(x, self.self_attn_layer_norm, self_attend, False)  # [B, 1, E]
        x = self._sublayer(x, self.encoder_attn_layer_norm, lambda h: self.encoder_attn.cached(h, *memory, cross_mask), False)
        return self._feed_forward(x, False), written[0]  # [B, 1, E], [B, N, L, D] each


def pad_row_lookup(embedding, tokens, pad_token_id):
    """nn.Embedding(padding_idx=pad)'s lookup: the pad id's vectors pass no gradient to the table (HF's encoder and
    decoder embed_tokens); only the looked-up copies stop, so a tied lm_head still trains that row, as in HF."""
    x = embedding(tokens)  # [B, L, E]
    if pad_token_id is None:
        return x
    is_pad = ops.expand_dims(ops.equal(tokens, pad_token_id), -1)  # [B, L, 1]
    return ops.where(is_pad, ops.stop_gradient(x), x)  # [B, L, E]


def embed_scale(dim: int, scale_embedding: bool) -> float:
    """Marian/Bart/MBart's encoder and decoder embed_scale: sqrt(d_model) when scale_embedding, else 1."""
    return math.sqrt(dim) if scale_embedding else 1.0
