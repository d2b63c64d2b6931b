"""keras.io's English-to-Spanish Transformer (examples/nlp/neural_machine_translation_with_transformer.py: its
PositionalEmbedding, TransformerEncoder and TransformerDecoder as published, keras.layers.MultiHeadAttention with
key_dim=embed_dim inside) and its torch twin as torch users write attention: q/k/v/out nn.Linear through
F.scaled_dot_product_attention, or by hand; and nanoGPT's CausalSelfAttention (karpathy/nanoGPT model.py: one packed
c_attn [3E, E] and c_proj) in a small language model, with a Keras twin of MultiHeadAttention and keras-hub's
TokenAndPositionEmbedding. Tiny sizes; no padding id in the batches (the published masks are then all ones).

Legend: B batch, S source length, T target length, E embedding, H heads, D head size, V vocabulary.
"""

from __future__ import annotations

import keras
import numpy as np
import torch
import torch.nn.functional as F
from keras import layers, ops
from torch import nn

VOCAB, LENGTH, EMBED, LATENT, HEADS = 40, 8, 16, 32, 2
RNG = np.random.default_rng(61)
BATCH = {"encoder_inputs": RNG.integers(1, VOCAB, (3, LENGTH)), "decoder_inputs": RNG.integers(1, VOCAB, (3, LENGTH - 2))}
TOKENS = RNG.integers(1, VOCAB, (3, LENGTH))  # the language model's batch


# ---- keras.io's classes, as published (get_config left out: nothing here serializes them) ----


class TransformerEncoder(layers.Layer):
    def __init__(self, embed_dim, dense_dim, num_heads, **kwargs):
        super().__init__(**kwargs)
        self.embed_dim = embed_dim
        self.dense_dim = dense_dim
        self.num_heads = num_heads
        self.attention = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.dense_proj = keras.Sequential([layers.Dense(dense_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm_1 = layers.LayerNormalization()
        self.layernorm_2 = layers.LayerNormalization()
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is not None:
            padding_mask = ops.cast(mask[:, None, :], dtype="int32")
        else:
            padding_mask = None
        attention_output = self.attention(query=inputs, value=inputs, key=inputs, attention_mask=padding_mask)
        proj_input = self.layernorm_1(inputs + attention_output)
        proj_output = self.dense_proj(proj_input)
        return self.layernorm_2(proj_input + proj_output)


class PositionalEmbedding(layers.Layer):
    def __init__(self, sequence_length, vocab_size, embed_dim, **kwargs):
        super().__init__(**kwargs)
        self.token_embeddings = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.position_embeddings = layers.Embedding(input_dim=sequence_length, output_dim=embed_dim)
        self.sequence_length = sequence_length
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim

    def call(self, inputs):
        length = ops.shape(inputs)[-1]
        positions = ops.arange(0, length, 1)
        embedded_tokens = self.token_embeddings(inputs)
        embedded_positions = self.position_embeddings(positions)
        return embedded_tokens + embedded_positions

    def compute_mask(self, inputs, mask=None):
        return ops.not_equal(inputs, 0)


class TransformerDecoder(layers.Layer):
    def __init__(self, embed_dim, latent_dim, num_heads, **kwargs):
        super().__init__(**kwargs)
        self.embed_dim = embed_dim
        self.latent_dim = latent_dim
        self.num_heads = num_heads
        self.attention_1 = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.attention_2 = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.dense_proj = keras.Sequential([layers.Dense(latent_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm_1 = layers.LayerNormalization()
        self.layernorm_2 = layers.LayerNormalization()
        self.layernorm_3 = layers.LayerNormalization()
        self.supports_masking = True

    def call(self, inputs, mask=None):
        inputs, encoder_outputs = inputs
        causal_mask = self.get_causal_attention_mask(inputs)
        if mask is None:
            inputs_padding_mask, encoder_outputs_padding_mask = None, None
        else:
            inputs_padding_mask, encoder_outputs_padding_mask = mask
        attention_output_1 = self.attention_1(
            query=inputs, value=inputs, key=inputs, attention_mask=causal_mask, query_mask=inputs_padding_mask
        )
        out_1 = self.layernorm_1(inputs + attention_output_1)
        attention_output_2 = self.attention_2(
            query=out_1,
            value=encoder_outputs,
            key=encoder_outputs,
            query_mask=inputs_padding_mask,
            key_mask=encoder_outputs_padding_mask,
        )
        out_2 = self.layernorm_2(out_1 + attention_output_2)
        proj_output = self.dense_proj(out_2)
        return self.layernorm_3(out_2 + proj_output)

    def get_causal_attention_mask(self, inputs):
        input_shape = ops.shape(inputs)
        batch_size, sequence_length = input_shape[0], input_shape[1]
        i = ops.arange(sequence_length)[:, None]
        j = ops.arange(sequence_length)
        mask = ops.cast(i >= j, dtype="int32")
        mask = ops.reshape(mask, (1, input_shape[1], input_shape[1]))
        # fix: the published ops.tile by a concatenated shape tensor fails in a symbolic TensorFlow build; broadcast
        return ops.broadcast_to(mask, (batch_size, sequence_length, sequence_length))


def keras_io_transformer() -> keras.Model:
    """The published model (one encoder and one decoder layer), at tiny sizes."""
    encoder_inputs = keras.Input(shape=(None,), dtype="int64", name="encoder_inputs")
    x = PositionalEmbedding(LENGTH, VOCAB, EMBED)(encoder_inputs)  # [B, S, E]
    encoder_outputs = TransformerEncoder(EMBED, LATENT, HEADS)(x)  # [B, S, E]
    decoder_inputs = keras.Input(shape=(None,), dtype="int64", name="decoder_inputs")
    x = PositionalEmbedding(LENGTH, VOCAB, EMBED)(decoder_inputs)  # [B, T, E]
    x = TransformerDecoder(EMBED, LATENT, HEADS)([x, encoder_outputs])  # [B, T, E]
    x = layers.Dropout(0.5)(x)
    decoder_outputs = layers.Dense(VOCAB, activation="softmax")(x)  # [B, T, V]
    return keras.Model({"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}, decoder_outputs, name="transformer")


# ---- its torch twin, attention written the common way ----


class TorchAttention(nn.Module):
    """Multi-head attention from four nn.Linear: heads split head-major (`view(B, T, H, D)`), scored by
    F.scaled_dot_product_attention, or by hand (`by_hand`: softmax(q k^T / sqrt(D)) v); `interleaved` splits the heads
    the other way (`view(B, T, D, H)`: a negative control), `key_first` registers k_proj before q_proj (another)."""

    def __init__(self, embed_dim, num_heads, head_dim, by_hand=False, interleaved=False, key_first=False):
        super().__init__()
        width = num_heads * head_dim
        if key_first:
            self.k_proj = nn.Linear(embed_dim, width)
        self.q_proj = nn.Linear(embed_dim, width)
        self.k_proj = nn.Linear(embed_dim, width)
        self.v_proj = nn.Linear(embed_dim, width)
        self.out_proj = nn.Linear(width, embed_dim)
        self.num_heads, self.head_dim, self.by_hand, self.interleaved = num_heads, head_dim, by_hand, interleaved

    def split(self, x):
        batch, length, _ = x.shape
        if self.interleaved:
            return x.view(batch, length, self.head_dim, self.num_heads).permute(0, 3, 1, 2)  # [B, H, T, D]
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]

    def merge(self, x):
        if self.interleaved:
            return x.permute(0, 2, 3, 1).flatten(2)  # [B, T, D * H]
        return x.transpose(1, 2).flatten(2)  # [B, T, H * D]

    def forward(self, query, key, value, causal=False):
        q, k, v = self.split(self.q_proj(query)), self.split(self.k_proj(key)), self.split(self.v_proj(value))  # [B, H, T, D]
        if not self.by_hand:
            return self.out_proj(self.merge(F.scaled_dot_product_attention(q, k, v, is_causal=causal)))  # [B, T, E]
        scores = q @ k.transpose(-2, -1) / self.head_dim**0.5  # [B, H, T, S]
        if causal:
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        return self.out_proj(self.merge(scores.softmax(-1) @ v))  # [B, T, E]


class TorchPositionalEmbedding(nn.Module):
    def __init__(self, sequence_length, vocab_size, embed_dim):
        super().__init__()
        self.token_embeddings = nn.Embedding(vocab_size, embed_dim)
        self.position_embeddings = nn.Embedding(sequence_length, embed_dim)

    def forward(self, ids):
        return self.token_embeddings(ids) + self.position_embeddings(torch.arange(ids.shape[-1]))  # [B, T, E]


def _feed_forward(embed_dim, latent_dim):
    return nn.Sequential(nn.Linear(embed_dim, latent_dim), nn.ReLU(), nn.Linear(latent_dim, embed_dim))


class TorchTransformerEncoder(nn.Module):
    def __init__(self, embed_dim, dense_dim, num_heads, **attention):
        super().__init__()
        self.attention = TorchAttention(embed_dim, num_heads, embed_dim, **attention)
        self.dense_proj = _feed_forward(embed_dim, dense_dim)
        self.layernorm_1, self.layernorm_2 = nn.LayerNorm(embed_dim, eps=1e-3), nn.LayerNorm(embed_dim, eps=1e-3)

    def forward(self, x):
        proj_input = self.layernorm_1(x + self.attention(x, x, x))  # [B, S, E]
        return self.layernorm_2(proj_input + self.dense_proj(proj_input))  # [B, S, E]


class TorchTransformerDecoder(nn.Module):
    def __init__(self, embed_dim, latent_dim, num_heads, **attention):
        super().__init__()
        self.attention_1 = TorchAttention(embed_dim, num_heads, embed_dim, **attention)
        self.attention_2 = TorchAttention(embed_dim, num_heads, embed_dim, **attention)
        self.dense_proj = _feed_forward(embed_dim, latent_dim)
        self.layernorm_1, self.layernorm_2, self.layernorm_3 = (nn.LayerNorm(embed_dim, eps=1e-3) for _ in range(3))

    def forward(self, x, encoder_outputs):
        out_1 = self.layernorm_1(x + self.attention_1(x, x, x, causal=True))  # [B, T, E]
        out_2 = self.layernorm_2(out_1 + self.attention_2(out_1, encoder_outputs, encoder_outputs))  # [B, T, E]
        return self.layernorm_3(out_2 + self.dense_proj(out_2))  # [B, T, E]


class TorchTransformer(nn.Module):
    """The keras.io model's twin; `attention`: TorchAttention's options."""

    def __init__(self, **attention):
        super().__init__()
        self.encoder_embedding = TorchPositionalEmbedding(LENGTH, VOCAB, EMBED)
        self.encoder = TorchTransformerEncoder(EMBED, LATENT, HEADS, **attention)
        self.decoder_embedding = TorchPositionalEmbedding(LENGTH, VOCAB, EMBED)
        self.decoder = TorchTransformerDecoder(EMBED, LATENT, HEADS, **attention)
        self.dense = nn.Linear(EMBED, VOCAB)

    def forward(self, encoder_inputs, decoder_inputs):
        encoder_outputs = self.encoder(self.encoder_embedding(encoder_inputs))  # [B, S, E]
        decoded = self.decoder(self.decoder_embedding(decoder_inputs), encoder_outputs)  # [B, T, E]
        return self.dense(decoded).softmax(-1)  # [B, T, V]


# ---- nanoGPT's packed attention ----


class CausalSelfAttention(nn.Module):
    """nanoGPT's (model.py, dropout left out): `order` is how its forward reads c_attn's thirds (nanoGPT: "qkv")."""

    def __init__(self, n_embd, n_head, order="qkv"):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd, self.order = n_head, n_embd, order

    def forward(self, x):
        B, T, C = x.size()  # noqa: N806 (nanoGPT's names)
        thirds = dict(zip(self.order, self.c_attn(x).split(self.n_embd, dim=2), strict=True))  # 3 x [B, T, C]
        q, k, v = (thirds[name].view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for name in "qkv")  # [B, H, T, D]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=True)  # [B, H, T, D]
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # [B, T, C]
        return self.c_proj(y)


class TinyGPT(nn.Module):
    """Token and position tables (`wte`, `wpe` at arange(T)), one packed attention, a head."""

    def __init__(self, order="qkv"):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, EMBED), nn.Embedding(LENGTH, EMBED)
        self.attn = CausalSelfAttention(EMBED, HEADS, order)
        self.lm_head = nn.Linear(EMBED, VOCAB, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))  # [B, T, E]
        return self.lm_head(x + self.attn(x))  # [B, T, V]


def keras_gpt() -> keras.Model:
    """TinyGPT in Keras: keras-hub's TokenAndPositionEmbedding, a causal MultiHeadAttention, a Dense head."""
    import keras_hub

    ids = keras.Input((LENGTH,), dtype="int32")
    x = keras_hub.layers.TokenAndPositionEmbedding(VOCAB, LENGTH, EMBED, name="embedding")(ids)  # [B, T, E]
    attended = layers.MultiHeadAttention(HEADS, EMBED // HEADS, name="attn")(x, x, use_causal_mask=True)  # [B, T, E]
    return keras.Model(ids, layers.Dense(VOCAB, use_bias=False, name="lm_head")(x + attended))  # [B, T, V]
