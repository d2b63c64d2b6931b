"""Keras 3 layers computing transformers' models/t5/modeling_t5.py (5.23) in keras.ops, eager attention.

Legend: B batch, S source length, T target length, E d_model, F d_ff, N heads, D d_kv, K key length, R buckets.
Plain keras.ops so every product, bucket and mask value is HF's and runs on TF, JAX and torch.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from tf_impl.hf.marian_layers import ACTIVATIONS, causal_padding_mask, padding_mask, write_cache

# aten/src/ATen/native/cpu/SumKernel.cpp (cascade_sum): how torch's CPU sums a float32 row, which T5LayerNorm's
# float32 variance inherits: 8-lane vectors, 4 rows in flight (ilp), a cascade of 4 levels
TORCH_SUM_LANES, TORCH_SUM_ILP, TORCH_SUM_LEVELS = 8, 4, 4


def _multi_row_sum(load, rows: int, size: int, zero) -> list:
    """SumKernel.cpp multi_row_sum: `load(i, k)` is row k's i-th term; partial sums cascade every 2**level_power terms."""
    level_power = max(4, (size - 1).bit_length() // TORCH_SUM_LEVELS if size > 1 else 0)
    step, mask = 1 << level_power, (1 << level_power) - 1
    acc = [[zero] * rows for _ in range(TORCH_SUM_LEVELS)]
    i = 0
    while i + step <= size:
        for _ in range(step):
            acc[0] = [acc[0][k] + load(i, k) for k in range(rows)]
            i += 1
        for j in range(1, TORCH_SUM_LEVELS):
            acc[j], acc[j - 1] = [acc[j][k] + acc[j - 1][k] for k in range(rows)], [zero] * rows
            if i & (mask << (j * level_power)):
                break
    for rest in range(i, size):
        acc[0] = [acc[0][k] + load(rest, k) for k in range(rows)]
    for j in range(1, TORCH_SUM_LEVELS):
        acc[0] = [acc[0][k] + acc[j][k] for k in range(rows)]
    return acc[0]


def _row_sum(load, size: int, zero):
    """SumKernel.cpp row_sum: the row read as (-1, ilp) rows summed side by side, the rest added, then the ilp partials."""
    rows = size // TORCH_SUM_ILP
    partial = _multi_row_sum(lambda i, k: load(i * TORCH_SUM_ILP + k), TORCH_SUM_ILP, rows, zero)
    for i in range(rows * TORCH_SUM_ILP, size):
        partial[0] = partial[0] + load(i)
    for k in range(1, TORCH_SUM_ILP):
        partial[0] = partial[0] + partial[k]
    return partial[0]


def torch_cpu_sum(x):
    """x [..., E] summed over its last axis in the order of torch's CPU float32 sum (vectorized_inner_sum) -> [..., 1]."""
    dim, lanes = x.shape[-1], TORCH_SUM_LANES
    total = ops.zeros_like(x[..., :1])  # [..., 1]
    if dim < lanes:
        return _row_sum(lambda i: x[..., i : i + 1], dim, total)
    vectors = dim // lanes
    vector = _row_sum(lambda i: x[..., i * lanes : (i + 1) * lanes], vectors, ops.zeros_like(x[..., :lanes]))  # [..., 8]
    for k in range(vectors * lanes, dim):
        total = total + x[..., k : k + 1]
    for k in range(lanes):
        total = total + vector[..., k : k + 1]
    return total  # [..., 1]


def torch_rsqrt(x):
    """torch.rsqrt of float32 [..., 1] bit for bit: torch's own kernel on Keras's torch backend (its 1 / x differs);
    elsewhere 1 / sqrt(x), both correctly rounded, as torch's vectorized rsqrt (TF's rsqrt is an approximation), with
    torch's backward (tools/autograd/derivatives.yaml rsqrt: -0.5 * grad * result.pow(3), in float32)."""
    if keras.config.backend() == "torch":
        return ops.rsqrt(x)
    return _rsqrt_with_torchs_gradient(x)


def _kept(value):
    """`value` as computed: XLA (jax.jit) rewrites 1 / sqrt(x) into its own rsqrt, not correctly rounded; JAX's
    optimization barrier keeps the division as written."""
    if keras.config.backend() != "jax":
        return value
    import jax

    return jax.lax.optimization_barrier(value)


@ops.custom_gradient
def _rsqrt_with_torchs_gradient(x):
    """1 / sqrt(x) whose gradient rounds as torch's rsqrt backward: (-0.5 g) (r r r) (pow(3) is r * r * r on CPU);
    the chain rule through 1 / sqrt rounds otherwise, 1e-7 off HF's T5 gradients even in a float64 model."""
    result = ops.divide(np.float32(1.0), _kept(ops.sqrt(x)))  # [..., 1]

    def gradient(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        return (upstream * np.float32(-0.5)) * (result * result * result)  # [..., 1]

    return result, gradient


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5LayerNorm(keras.layers.Layer):
    """T5LayerNorm: weight * x / sqrt(mean(x^2) + eps), no mean, no bias. HF takes the variance in float32 even in a
    float64 model (x.to(float32).pow(2).mean), so ours does too, summed in torch's CPU order, 1/sqrt in float32."""

    def __init__(self, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, x_shape):
        self.weight = self.add_weight(shape=(x_shape[-1],), initializer="ones", name="weight")

    def call(self, x):
        x32 = ops.cast(x, "float32")  # [B, L, E]
        variance = torch_cpu_sum(x32 * x32) / np.float32(x.shape[-1])  # [B, L, 1]
        inverse = torch_rsqrt(variance + np.float32(self.epsilon))  # [B, L, 1]
        return self.weight * (x * ops.cast(inverse, x.dtype))  # [B, L, E]

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


def relative_position_bucket(relative, bidirectional: bool, num_buckets: int, max_distance: int):
    """T5Attention._relative_position_bucket: exact buckets for small distances, log-spaced ones (computed in float32,
    as HF does) up to max_distance; bidirectional halves the buckets by sign, causal folds future positions to 0."""
    buckets = ops.zeros_like(relative)  # [T, K]
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + ops.cast(relative > 0, relative.dtype) * num_buckets
        relative = ops.abs(relative)
    else:
        relative = -ops.minimum(relative, ops.zeros_like(relative))
    max_exact = num_buckets // 2
    ratio = ops.log(ops.cast(relative, "float32") / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
    large = max_exact + ops.cast(ratio * np.float32(num_buckets - max_exact), relative.dtype)  # [T, K]: truncation
    large = ops.minimum(large, ops.full_like(large, num_buckets - 1))
    return buckets + ops.where(relative < max_exact, relative, large)  # [T, K]


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5RelativeBias(keras.layers.Layer):
    """T5Attention.compute_bias: the learned bias [R, N] of each query/key offset's bucket, as [1, N, T, K]. Only block 0
    holds it; the other blocks reuse block 0's bias, as HF passes position_bias down the stack."""

    def __init__(self, num_buckets: int, max_distance: int, heads: int, bidirectional: bool, **kwargs):
        super().__init__(**kwargs)
        self.num_buckets, self.max_distance, self.heads, self.bidirectional = num_buckets, max_distance, heads, bidirectional

    def build(self, *shapes):
        self.embeddings = self.add_weight(shape=(self.num_buckets, self.heads), initializer="zeros", name="embeddings")

    def call(self, queries, keys):
        context = ops.arange(ops.shape(queries)[1], dtype="int32")[:, None]  # [T, 1]
        return self._bias(ops.arange(ops.shape(keys)[1], dtype="int32")[None, :] - context)  # [1, N, T, K]

    def at(self, index, length: int):
        """A decoding step's bias: the query at position `index` (a traced scalar allowed) against keys 0..length-1
        [1, N, 1, K] (row `index` of `call`'s)."""
        return self._bias(ops.arange(length, dtype="int32")[None, :] - ops.cast(index, "int32"))  # [1, N, 1, K]

    def _bias(self, relative):
        """Offsets key - query [T, K] -> their buckets' learned bias [1, N, T, K]."""
        buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets, self.max_distance)  # [T, K]
        values = ops.take(self.embeddings, buckets, axis=0)  # [T, K, N]
        return ops.transpose(values, (2, 0, 1))[None]  # [1, N, T, K]

    def get_config(self):
        names = ("num_buckets", "max_distance", "heads", "bidirectional")
        return {**super().get_config(), **{name: getattr(self, name) for name in names}}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5Attention(keras.layers.Layer):
    """T5Attention + eager_attention_forward: q k^T with no 1/sqrt(d) scaling, + position bias, + mask, softmax, v, o;
    with return_weights also the probabilities [B, N, T, K] after dropout, as HF's attn_weights (output_attentions).
    A decoding step shares the product: `cached` (keys and values projected already) and `step` (a cache written)."""

    def __init__(self, dim: int, heads: int, head_dim: int, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.heads, self.head_dim, self.dropout_rate = dim, heads, head_dim, dropout
        self.inner_dim = heads * head_dim
        self.q, self.k, self.v = (keras.layers.Dense(self.inner_dim, use_bias=False, dtype=self.dtype_policy, name=n)
                                  for n in "qkv")  # fmt: skip
        self.o = keras.layers.Dense(dim, use_bias=False, dtype=self.dtype_policy, name="o")
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, *shapes):
        for dense in (self.q, self.k, self.v):
            dense.build((None, None, self.dim))
        self.o.build((None, None, self.inner_dim))

    def _split(self, x):
        shape = ops.shape(x)
        return ops.transpose(ops.reshape(x, (shape[0], shape[1], self.heads, self.head_dim)), (0, 2, 1, 3))  # [B, N, L, D]

    def call(self, query, keys, mask, position_bias=None, training=False, return_weights=False):
        out, weights = self._attend(query, *self.project(keys), mask, position_bias, training)  # [B, T, E], [B, N, T, K]
        return (out, weights) if return_weights else out

    def project(self, keys):
        """keys [B, K, E] -> their keys and values in heads [B, N, K, D] each (a decoding's memory: once per source)."""
        return self._split(self.k(keys)), self._split(self.v(keys))

    def cached(self, query, k, v, mask, position_bias=None):
        """query [B, T, E] attending keys and values projected already ([B, N, K, D]: memory or a cache) -> [B, T, E]."""
        return self._attend(query, k, v, mask, position_bias)[0]

    def step(self, query, cache: tuple, index, mask, position_bias):
        """Self-attention of one position query [B, 1, E]: its key and value written at `index` of the cache (keys,
        values [B, N, L, D]), the query attending the cache under `mask` and its bias [1, N, 1, L] -> ([B, 1, E], the
        new cache)."""
        cache = write_cache(cache, self.project(query), index)  # [B, N, L, D] each
        return self.cached(query, *cache, mask, position_bias), cache

    def _attend(self, query, k, v, mask, position_bias=None, training=False):
        q = self._split(self.q(query))  # [B, N, T, D]
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))  # [B, N, T, K]
        if position_bias is not None:
            scores = scores + position_bias  # [B, N, T, K]
        weights = self.dropout(ops.softmax(scores + mask, axis=-1), training=training)  # [B, N, T, K]
        out = ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3))  # [B, T, N, D]
        shape = ops.shape(out)
        return self.o(ops.reshape(out, (shape[0], shape[1], self.inner_dim))), weights  # [B, T, E], [B, N, T, K]

    def get_config(self):
        names = ("dim", "heads", "head_dim")
        return {**super().get_config(), **{n: getattr(self, n) for n in names}, "dropout": self.dropout_rate}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5FeedForward(keras.layers.Layer):
    """T5LayerFF: norm, then T5DenseActDense (wo(act(wi x))) or T5DenseGatedActDense (wo(act(wi_0 x) * wi_1 x))."""

    def __init__(self, dim: int, ffn_dim: int, activation: str, gated: bool, dropout: float = 0.0, epsilon: float = 1e-6,
                 **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.dim, self.ffn_dim, self.activation, self.gated, self.dropout_rate = dim, ffn_dim, activation, gated, dropout
        self.epsilon = epsilon
        self.activation_fn = ACTIVATIONS[activation]
        names = ("wi_0", "wi_1") if gated else ("wi",)
        self.projections = [keras.layers.Dense(ffn_dim, use_bias=False, dtype=self.dtype_policy, name=n) for n in names]
        self.wo = keras.layers.Dense(dim, use_bias=False, dtype=self.dtype_policy, name="wo")
        self.layer_norm = T5LayerNorm(epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, x_shape):
        for layer in (*self.projections, self.layer_norm):
            layer.build((None, None, self.dim))
        self.wo.build((None, None, self.ffn_dim))

    def call(self, x, training=False):
        normed = self.layer_norm(x)  # [B, L, E]
        hidden = self.activation_fn(self.projections[0](normed))  # [B, L, F]
        if self.gated:
            hidden = hidden * self.projections[1](normed)  # [B, L, F]
        update = self.wo(self.dropout(hidden, training=training))  # [B, L, E]
        return x + self.dropout(update, training=training)  # [B, L, E]

    def get_config(self):
        names = ("dim", "ffn_dim", "activation", "gated", "epsilon")
        return {**super().get_config(), **{n: getattr(self, n) for n in names}, "dropout": self.dropout_rate}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5Block(keras.layers.Layer):
    """T5Block: pre-norm residuals (x + attention(norm(x))): self-attention, in the decoder cross-attention on the
    encoder output (no relative bias), then T5LayerFF. With return_attention (a decoder block) also the
    cross-attention probabilities [B, N, T, S] (HF's cross_attentions entry of the block)."""

    def __init__(self, dim: int, heads: int, head_dim: int, ffn_dim: int, activation: str, gated: bool, decoder: bool,
                 dropout: float = 0.0, epsilon: float = 1e-6, **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.dim, self.heads, self.head_dim, self.ffn_dim = dim, heads, head_dim, ffn_dim
        self.activation, self.gated, self.decoder, self.dropout_rate, self.epsilon = activation, gated, decoder, dropout, epsilon
        common = {"dtype": self.dtype_policy}
        self.self_attention = T5Attention(dim, heads, head_dim, dropout, **common, name="SelfAttention")
        self.self_attention_norm = T5LayerNorm(epsilon, **common, name="self_attention_layer_norm")
        self.cross_attention = T5Attention(dim, heads, head_dim, dropout, **common, name="EncDecAttention") if decoder else None
        self.cross_attention_norm = T5LayerNorm(epsilon, **common, name="cross_attention_layer_norm") if decoder else None
        self.feed_forward = T5FeedForward(dim, ffn_dim, activation, gated, dropout, epsilon, **common, name="feed_forward")
        self.dropout = keras.layers.Dropout(dropout, **common)

    def build(self, x_shape, *shapes):
        for layer in (self.self_attention, self.self_attention_norm, self.cross_attention, self.cross_attention_norm,
                      self.feed_forward):  # fmt: skip
            if layer is not None:
                layer.build((None, None, self.dim))

    def call(self, x, self_mask, position_bias, encoder_output=None, cross_mask=None, training=False, return_attention=False):
        normed = self.self_attention_norm(x)  # [B, L, E]
        x = x + self.dropout(self.self_attention(normed, normed, self_mask, position_bias, training=training), training=training)
        weights = None
        if self.decoder:
            cross, weights = self.cross_attention(self.cross_attention_norm(x), encoder_output, cross_mask, training=training,
                                                  return_weights=True)  # [B, T, E], [B, N, T, S]  # fmt: skip
            x = x + self.dropout(cross, training=training)  # [B, T, E]
        y = self.feed_forward(x, training=training)  # [B, L, E]
        return (y, weights) if return_attention else y

    def step(self, x, cache: tuple, index, self_mask, position_bias, memory: tuple, cross_mask):
        """A decoder block's decoding step of position `index`, x [B, 1, E], in `call`'s order (dropout off):
        self-attention on the cache (keys, values [B, N, L, D]) under `self_mask` and position_bias [1, N, 1, L],
        cross-attention (no bias) on memory (the encoder output's keys and values [B, N, S, D]) -> ([B, 1, E], the cache
        with position `index` written)."""
        attended, cache = self.self_attention.step(self.self_attention_norm(x), cache, index, self_mask, position_bias)
        x = x + attended  # [B, 1, E]
        x = x + self.cross_attention.cached(self.cross_attention_norm(x), *memory, cross_mask)  # [B, 1, E]
        return self.feed_forward(x), cache  # [B, 1, E], [B, N, L, D] each

    def get_config(self):
        names = ("dim", "heads", "head_dim", "ffn_dim", "activation", "gated", "decoder", "epsilon")
        return {**super().get_config(), **{n: getattr(self, n) for n in names}, "dropout": self.dropout_rate}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5Masks(keras.layers.Layer):
    """Both padding masks (1 real, 0 pad) as HF's additive masks: encoder keys [B, 1, 1, S], causal decoder [B, 1, T, T]."""

    def call(self, encoder_padding_mask, decoder_padding_mask):
        dtype = self.compute_dtype
        return padding_mask(encoder_padding_mask, dtype), causal_padding_mask(decoder_padding_mask, dtype)
