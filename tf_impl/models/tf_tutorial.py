"""Document 004 (attention survey quoting TensorFlow's NMT-with-attention tutorial): `BahdanauAttention`,
`Encoder`, `Decoder` as the Keras listing writes them, and `Seq2Seq`, the tutorial's train/translate
loop as a model; mirrored by torch_impl/models/tf_tutorial.py.

Legend: B batch, S source length, E embedding_dim, H units (enc_units = dec_units), V vocabulary.

The tutorial's score changed between revisions: January 2020 `V(tanh(W1(values) + W2(query)))` (the
default), 2021 `V(tanh(W1(query) + W2(values)))` (`w1_on_query=True`). Same function, but a checkpoint
of one revision holds W1 and W2 swapped for the other.
"""

from __future__ import annotations

import keras
from keras import ops

from shared.core.taps import CONTEXT_VECTORS, ENCODER_STATE, SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS, tap
from tf_impl.models.seq2seq import Seq2SeqBase, gru_cell, masked_softmax, over_time, run_gru, run_rnn, source_mask


class BahdanauAttention(keras.layers.Layer):
    """Document 004, `BahdanauAttention(units)`: `score = V(tanh(W1(values) + W2(query)))`, softmax on axis 1.

    `query_dim` and `values_dim` mirror the torch class (which needs input sizes); Keras infers them.
    `w1_on_query=True`: the 2021 revision's `V(tanh(W1(query) + W2(values)))`.
    """

    def __init__(
        self, units: int, query_dim: int | None = None, values_dim: int | None = None, w1_on_query: bool = False, **kwargs
    ):
        super().__init__(**kwargs)
        self.w1_on_query = w1_on_query
        self.W1 = keras.layers.Dense(units, name="W1", dtype=self.dtype_policy)
        self.W2 = keras.layers.Dense(units, name="W2", dtype=self.dtype_policy)
        self.V = keras.layers.Dense(1, name="V", dtype=self.dtype_policy)

    @property
    def query_layer(self) -> keras.layers.Dense:
        """The layer applied to the query: W2 (January 2020), W1 (2021, `w1_on_query`)."""
        return self.W1 if self.w1_on_query else self.W2

    @property
    def values_layer(self) -> keras.layers.Dense:
        """The layer applied to the values: W1 (January 2020), W2 (2021, `w1_on_query`)."""
        return self.W2 if self.w1_on_query else self.W1

    def keys(self, values):
        """Ours: the values' share (`W1(values)`, `W2(values)` with w1_on_query) once per sequence instead of
        once per step: `[B, S, H]`."""
        return self.values_layer(values)

    def call(self, query, values, mask=None, keys=None):
        """`query [B, H]`, `values [B, S, H]` -> context `[B, H]`, attention_weights `[B, S, 1]`."""
        hidden_with_time_axis = ops.expand_dims(query, 1)  # [B, 1, H]
        values_share = self.values_layer(values) if keys is None else keys  # [B, S, H]; the listing: at every step
        score = self.V(ops.tanh(values_share + self.query_layer(hidden_with_time_axis)))  # [B, S, 1]
        attention_weights = ops.expand_dims(masked_softmax(ops.squeeze(score, 2), mask), 2)  # [B, S, 1]
        context_vector = tap(CONTEXT_VECTORS, ops.sum(attention_weights * values, axis=1))  # [B, H]
        return context_vector, attention_weights


def _gru(units: int, dtype) -> keras.layers.GRU:
    """The tutorial's GRU; Keras 3's defaults (reset_after=True, sigmoid gates) are torch's GRU. Ours adds
    `zero_output_for_mask` (the tutorial pads without masking): padded steps output zeros, as torch's packing."""
    return keras.layers.GRU(
        units,
        return_sequences=True,
        return_state=True,
        recurrent_initializer="glorot_uniform",
        zero_output_for_mask=True,
        name="gru",
        dtype=dtype,
    )


class Encoder(keras.layers.Layer):
    """Document 004, `Encoder(vocab_size, embedding_dim, enc_units, batch_sz)`: embedding and GRU."""

    def __init__(self, vocab_size: int, embedding_dim: int, enc_units: int, batch_sz: int, **kwargs):
        super().__init__(**kwargs)
        self.batch_sz = batch_sz
        self.enc_units = enc_units
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim, name="embedding", dtype=self.dtype_policy)
        self.gru = _gru(enc_units, self.dtype_policy)

    def call(self, x, hidden, lengths=None, training=False, hoisted=False):
        """`x [B, S]`, `hidden [B, H]` -> output `[B, S, H]`, state `[B, H]`. `hoisted` (ours): the inputs' share of the
        gates in one product before the loop (`run_gru`); the tutorial's GRU multiplies each step's inside it."""
        x = tap(SOURCE_EMBEDDINGS, self.embedding(x))  # [B, S, E]
        if hoisted:
            return run_gru(self.gru, x, hidden, source_mask(lengths, ops.shape(x)[1]))  # [B, S, H], [B, H]
        output, state = run_rnn(self.gru, x, lengths, hidden, training)  # [B, S, H], [B, H]
        return output, state

    def initialize_hidden_state(self, batch_size: int | None = None):
        """Zeros `[batch_sz, enc_units]` (or `[batch_size, ...]` for a batch of another size)."""
        return ops.zeros((self.batch_sz if batch_size is None else batch_size, self.enc_units), dtype=self.compute_dtype)


class Decoder(keras.layers.Layer):
    """Document 004, `Decoder(vocab_size, embedding_dim, dec_units, batch_sz)`: attention, embedding, GRU, fc.

    The listing calls `self.gru(x)` without `initial_state`: the GRU restarts from zeros at every step
    and the previous state reaches it only as the attention query. That is kept as the default;
    `feed_state=True` passes the previous state as the paper intends. `w1_on_query` picks the
    attention's revision (`BahdanauAttention`).
    """

    def __init__(self, vocab_size: int, embedding_dim: int, dec_units: int, batch_sz: int, feed_state: bool = False,
                 w1_on_query: bool = False, **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.batch_sz = batch_sz
        self.dec_units = dec_units
        self.feed_state = feed_state
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim, name="embedding", dtype=self.dtype_policy)
        self.gru = _gru(dec_units, self.dtype_policy)
        self.fc = keras.layers.Dense(vocab_size, name="fc", dtype=self.dtype_policy)
        self.attention = BahdanauAttention(self.dec_units, w1_on_query=w1_on_query, name="attention", dtype=self.dtype_policy)

    def call(self, x, hidden, enc_output, mask=None):
        """`x [B, 1]`, `hidden [B, H]`, `enc_output [B, S, H]` -> logits `[B, V]`, state `[B, H]`, weights `[B, S, 1]`."""
        output, state, attention_weights = self.features(x, hidden, enc_output, mask)
        return self.fc(output), state, attention_weights

    def features(self, x, hidden, enc_output, mask=None, keys=None):
        """One step up to `fc`: the GRU output `[B, H]`, state `[B, H]`, attention_weights `[B, S, 1]`."""
        context_vector, attention_weights = self.attention(hidden, enc_output, mask, keys)  # [B, H], [B, S, 1]
        x = tap(TARGET_EMBEDDINGS, self.embedding(x))  # [B, 1, E]
        x = ops.concatenate([ops.expand_dims(context_vector, 1), x], axis=-1)  # [B, 1, H + E]
        output, state = self.gru(x, initial_state=hidden if self.feed_state else None)  # [B, 1, H], [B, H]
        return ops.reshape(output, (-1, output.shape[2])), state, attention_weights  # [B, H], [B, H], [B, S, 1]

    def features_teacher_forced(self, tgt_in, hidden, enc_output, mask, keys):
        """Ours, every input known (`tgt_in [B, T]`): the embeddings' share of the GRU's gates for all steps in one
        product; per step only the context's share and, with `feed_state`, the state's: a GRU cell, not a Keras
        GRU layer over a one-step sequence (a loop of its own). Without `feed_state` the listing's GRU starts each
        step from zeros, so its recurrent product is `0 recurrent_kernel`: ours skips it (the bias remains).
        -> GRU outputs `[B, T, H]`, attention `[B, T, S]`."""
        x = tap(TARGET_EMBEDDINGS, self.embedding(tgt_in))  # [B, T, E]
        H, cell = self.dec_units, self.gru.cell
        emb_share = ops.matmul(x, cell.kernel[H:]) + cell.bias[0]  # [B, T, 3H]; the GRU's input is [context; x]
        context_kernel = cell.kernel[:H]  # [H, 3H], sliced once
        zero_state, bias_share = ops.zeros_like(hidden), ops.broadcast_to(cell.bias[1], ops.shape(emb_share[:, 0]))

        def step(hidden, emb_share_t):  # [B, H], [B, 3H]
            context_vector, attention_weights = self.attention(hidden, enc_output, mask, keys)  # [B, H], [B, S, 1]
            input_share = emb_share_t + ops.matmul(context_vector, context_kernel)  # [B, 3H]
            if self.feed_state:
                hidden = gru_cell(input_share, ops.matmul(hidden, cell.recurrent_kernel) + cell.bias[1], hidden)
            else:
                hidden = gru_cell(input_share, bias_share, zero_state)  # the listing's GRU restarts from zeros
            return hidden, (hidden, ops.squeeze(attention_weights, 2))

        _, (outputs, attention) = over_time(step, hidden, emb_share)
        return outputs, attention  # [B, T, H], [B, T, S]


class Seq2Seq(Seq2SeqBase):
    """The tutorial's loop around `Encoder` and `Decoder` (its `train_step` and `evaluate`), as a model."""

    def call(self, inp, targ=None, training=None):
        """The tutorial's `train_step` forward: `inp [B, S]`, `targ [B, T]` -> logits `[B, T - 1, V]`."""
        if targ is None:  # Keras's one input (tf_impl.fitting): fit, evaluate, predict
            return self.keras_call(inp, training)
        return self.decode(inp, targ[:, :-1], training=bool(training))[0]

    def encode(self, src, src_len=None, training=False):
        enc_hidden = self.encoder.initialize_hidden_state(ops.shape(src)[0])  # [B, H]
        hoisted = not self.as_written  # ours: the GRU's inputs projected in one product (`Encoder.call`)
        enc_output, enc_hidden = self.encoder(src, enc_hidden, src_len, training=training, hoisted=hoisted)  # [B, S, H], [B, H]
        return self.memory(enc_output, src_len), tap(ENCODER_STATE, enc_hidden)

    def features(self, x, hidden, memory, training=False):
        enc_output, mask, keys = memory
        output, state, attention_weights = self.decoder.features(ops.expand_dims(x, 1), hidden, enc_output, mask, keys)
        return output, state, ops.squeeze(attention_weights, 2)  # [B, H], [B, H], [B, S]

    def project(self, features):
        return self.decoder.fc(features)  # [..., V]

    def decode_teacher_forced(self, tgt_in, hidden, memory, training=False):
        features, attention = self.decoder.features_teacher_forced(tgt_in, hidden, *memory)  # [B, T, H], [B, T, S]
        return self.project(features), attention


def build_model(vocab_inp_size: int, vocab_tar_size: int, embedding_dim: int, units: int, batch_sz: int,
                feed_state: bool, w1_on_query: bool = False, dtype=None) -> Seq2Seq:  # fmt: skip
    """The catalogue's `tf_tutorial`: the tutorial's `Encoder` and `Decoder` joined by `Seq2Seq`."""
    encoder = Encoder(vocab_inp_size, embedding_dim, units, batch_sz, name="encoder", dtype=dtype)
    decoder = Decoder(vocab_tar_size, embedding_dim, units, batch_sz, feed_state, w1_on_query, name="decoder", dtype=dtype)
    return Seq2Seq(encoder, decoder, dtype=dtype)
