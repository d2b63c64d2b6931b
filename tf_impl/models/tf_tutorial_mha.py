"""Document 004 as TensorFlow's NMT-with-attention tutorial is today (the 2022 rewrite in tensorflow/text,
docs/tutorials/nmt_with_attention.ipynb, model code of commit c1ddc39b): `Encoder`, `CrossAttention`, `Decoder`
and `Translator`, with the tutorial's layers, arguments and attribute names (so the tutorial's own
`model.save_weights` file loads into this model); mirrored by torch_impl/models/tf_tutorial_mha.py.

Legend: B batch, S source length, T target length, H units, V target vocabulary.

What differs from the notebook's classes: the vocabulary sizes replace its `TextVectorization` layers; the
masks of `Embedding(mask_zero=True)` are passed to the GRUs and the attention by hand (what Keras's implicit
masks pass, the same on every backend); `CrossAttention` returns the attention averaged over the heads instead
of keeping it as `last_attention_weights` (a tensor kept on a layer leaks out of a compiled step).
"""

from __future__ import annotations

import keras
from keras import ops

from shared.core.taps import (
    ATTENTION_SCORES,
    CONTEXT_VECTORS,
    ENCODER_OUTPUTS,
    SOURCE_EMBEDDINGS,
    TARGET_EMBEDDINGS,
    tap,
)
from tf_impl.models.seq2seq import Seq2SeqBase, source_mask


class Encoder(keras.layers.Layer):
    """The tutorial's `Encoder(text_processor, units)` (here `vocab_size, units`): `embedding` (mask_zero), and
    `rnn`, `Bidirectional(merge_mode='sum', layer=GRU(units, return_sequences=True))`."""

    def __init__(self, vocab_size: int, units: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.units = vocab_size, units
        self.embedding = keras.layers.Embedding(vocab_size, units, mask_zero=True, name="embedding", dtype=self.dtype_policy)
        gru = keras.layers.GRU(units, return_sequences=True, recurrent_initializer="glorot_uniform", dtype=self.dtype_policy)
        self.rnn = keras.layers.Bidirectional(merge_mode="sum", layer=gru, name="rnn", dtype=self.dtype_policy)

    def call(self, x, lengths=None, training=False):
        """`x [B, S]` (and its rows' `lengths [B]`, where known) -> the context `[B, S, H]` and its mask `[B, S]`: the
        pad ids' (mask_zero), and the steps past each row's length."""
        mask = self.embedding.compute_mask(x)  # [B, S]: x != 0
        if lengths is not None:
            mask = ops.logical_and(mask, source_mask(lengths, ops.shape(x)[1]))
        embedded = tap(SOURCE_EMBEDDINGS, self.embedding(x))  # [B, S, H]
        return self.rnn(embedded, mask=mask, training=training), mask


class CrossAttention(keras.layers.Layer):
    """The tutorial's `CrossAttention(units)`: `mha` (`MultiHeadAttention(key_dim=units, num_heads=1)`), `layernorm`,
    `add`."""

    supports_masking = True  # its query arrives with the GRU's Keras mask (no warning); the masks are passed by hand

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.mha = keras.layers.MultiHeadAttention(key_dim=units, num_heads=1, name="mha", dtype=self.dtype_policy)
        self.layernorm = keras.layers.LayerNormalization(name="layernorm", dtype=self.dtype_policy)
        self.add = keras.layers.Add(name="add", dtype=self.dtype_policy)

    def call(self, x, context, query_mask, context_mask):
        """`x [B, T, H]`, `context [B, S, H]` -> `[B, T, H]`, and the attention averaged over the heads `[B, T, S]`."""
        # the tutorial's implicit masks as one attention mask: MultiHeadAttention replaces a `query_mask` argument by the
        # query's own Keras mask, which Keras's torch backend does not attach to the GRU's output
        allowed = ops.logical_and(ops.expand_dims(query_mask, 2), ops.expand_dims(context_mask, 1))  # [B, T, S]
        attn_output, attn_scores = self.mha(query=x, value=context, attention_mask=allowed, return_attention_scores=True)
        # attn_output [B, T, H], attn_scores [B, heads, T, S]
        attn_scores = tap(ATTENTION_SCORES, ops.mean(attn_scores, axis=1))  # [B, T, S]
        x = self.add([x, tap(CONTEXT_VECTORS, attn_output)])  # [B, T, H]
        return self.layernorm(x), attn_scores


class Decoder(keras.layers.Layer):
    """The tutorial's `Decoder(text_processor, units)` (here `vocab_size, units`): `embedding` (mask_zero), `rnn`
    (`GRU(units, return_sequences=True, return_state=True)`), `attention`, `output_layer`."""

    supports_masking = True  # its context arrives with the encoder GRU's Keras mask, taken as `context_mask` (no warning)

    def __init__(self, vocab_size: int, units: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.units = vocab_size, units
        self.embedding = keras.layers.Embedding(vocab_size, units, mask_zero=True, name="embedding", dtype=self.dtype_policy)
        self.rnn = keras.layers.GRU(units, return_sequences=True, return_state=True, recurrent_initializer="glorot_uniform",
                                    name="rnn", dtype=self.dtype_policy)  # fmt: skip
        self.attention = CrossAttention(units, name="attention", dtype=self.dtype_policy)
        self.output_layer = keras.layers.Dense(vocab_size, name="output_layer", dtype=self.dtype_policy)

    def call(self, context, context_mask, x, state=None, training=False):
        """The tutorial's `call(context, x, state, return_state=True)` up to the output layer: `x [B, T]`, `state
        [B, H]` or None (zeros) -> features `[B, T, H]`, state `[B, H]`, attention `[B, T, S]`."""
        mask = self.embedding.compute_mask(x)  # [B, T]
        embedded = tap(TARGET_EMBEDDINGS, self.embedding(x))  # [B, T, H]
        x, state = self.rnn(embedded, initial_state=state, mask=mask, training=training)  # [B, T, H], [B, H]
        # a pad step before any real one outputs zeros: TensorFlow's rule (Keras's JAX backend repeats the initial state)
        x = ops.where(ops.expand_dims(ops.cumsum(ops.cast(mask, "int32"), axis=1) > 0, 2), x, ops.zeros_like(x))
        x, attention = self.attention(x, context, mask, context_mask)  # [B, T, H], [B, T, S]
        return x, state, attention

    def compute_mask(self, inputs, previous_mask):
        """None: the outputs are the target's steps, and Keras's default would attach the context's mask `[B, S]` to
        the features (a logits mask Keras's own losses would read)."""
        return None


class Translator(Seq2SeqBase):
    """The tutorial's `Translator(units, context_text_processor, target_text_processor)` (here the vocabulary
    sizes): `encoder`, `decoder`; called on `(context, target_in)` as the tutorial's, greedy decoding one token at
    a time with the GRU's state carried (its `translate`)."""

    def __init__(self, units: int, context_vocab_size: int, target_vocab_size: int, **kwargs):
        dtype = kwargs.get("dtype")
        encoder = Encoder(context_vocab_size, units, name="encoder", dtype=dtype)
        decoder = Decoder(target_vocab_size, units, name="decoder", dtype=dtype)
        super().__init__(encoder, decoder, **kwargs)

    def call(self, inputs, training=None):
        """Logits `[B, T, V]` of `(context, target_in)` (the tutorial's input) or of a dict (tf_impl.fitting)."""
        return self.keras_call(inputs, training)

    def encode(self, src, src_len=None, training=False):
        """The context, its mask (from the pad ids, and from `src_len` where given), and the decoder's first state:
        zeros (the tutorial's `get_initial_state`)."""
        context, mask = self.encoder(src, src_len, training=training)  # [B, S, H], [B, S]
        tap(ENCODER_OUTPUTS, context)
        return (context, mask), ops.zeros((ops.shape(src)[0], self.decoder.units), dtype=self.compute_dtype)

    def decode(self, src, tgt_in, src_len=None, teacher_forcing=None, training=False):
        """Teacher-forced, every target at once as the tutorial's `call` (as written too); with a schedule, step
        by step (Seq2SeqBase)."""
        if teacher_forcing is not None:
            return super().decode(src, tgt_in, src_len, teacher_forcing, training=training)
        memory, state = self.encode(src, src_len, training=training)
        return self.decode_teacher_forced(tgt_in, state, memory, training=training)

    def decode_teacher_forced(self, tgt_in, hidden, memory, training=False):
        features, _, attention = self.decoder(*memory, tgt_in, training=training)  # [B, T, H], _, [B, T, S]
        return self.project(features), attention

    def features(self, x, hidden, memory, training=False):
        """One token `x [B]` from state `hidden [B, H]`: features `[B, H]`, state, attention `[B, S]`."""
        features, state, attention = self.decoder(*memory, ops.expand_dims(x, 1), hidden, training=training)
        return features[:, 0], state, attention[:, 0]  # [B, H], [B, H], [B, S]

    def project(self, features):
        return self.decoder.output_layer(features)  # [..., V]


def build_model(units: int, context_vocab_size: int, target_vocab_size: int, dtype=None) -> Translator:
    """The catalogue's `tf_tutorial_mha`: the tutorial's `Translator(units, ...)`."""
    return Translator(units, context_vocab_size, target_vocab_size, dtype=dtype)
