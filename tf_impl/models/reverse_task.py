"""Document 001 (attention mechanisms on the reverse-sequence task) in Keras: `ReverseTaskV0`,
`ReverseTaskV6`, the Bahdanau concatenative variant, `ReverseTaskV7`, `ReverseTaskV8` and the Luong
concat variant, mirroring torch_impl/models/reverse_task.py class for class and attribute for attribute.

Legend: B batch, S source length, T target length, E embedding_dim, H hidden_size, A attention_size,
V vocab_size. Batch-first; a Keras recurrent state is `[B, H]` where torch's is `[1, B, H]`.
"""

from __future__ import annotations

import keras
from keras import ops

from shared.core.taps import (
    CONTEXT_VECTORS,
    ENCODER_OUTPUTS,
    ENCODER_STATE,
    SOURCE_EMBEDDINGS,
    TARGET_EMBEDDINGS,
    is_recording,
    tap,
)
from tf_impl.fitting import KerasInputs
from tf_impl.keras_compat import backends
from tf_impl.keras_compat.layers import torch_gru, torch_rnn
from tf_impl.keras_compat.serializable import CatalogueModel
from tf_impl.models.seq2seq import gru_cell, masked_softmax, over_time, run_gru


def _dense(units: int, name: str, dtype, use_bias: bool = True) -> keras.layers.Dense:
    return keras.layers.Dense(units, use_bias=use_bias, name=name, dtype=dtype)


class ReverseTaskBase(KerasInputs, CatalogueModel, keras.Model):
    """What every model of document 001 shares: embeddings and recurrent layers on both sides.

    Attributes:
        as_written: decode with the listing's own per-step computation (the speed baseline of
            `rosetta bench`); False (ours): hoist what does not depend on the step out of the loop.
    """

    rnn_factory = staticmethod(torch_gru)
    as_written = False

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int, decoder_input_size: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.decoder_input_size = decoder_input_size  # Keras infers input sizes; kept for get_config
        dtype = self.dtype_policy
        self.enc_embeddings = keras.layers.Embedding(vocab_size, embedding_dim, name="enc_embeddings", dtype=dtype)
        self.encoder = self.rnn_factory(hidden_size, name="encoder", dtype=dtype)
        self.dec_embeddings = keras.layers.Embedding(vocab_size, embedding_dim, name="dec_embeddings", dtype=dtype)
        self.decoder = self.rnn_factory(hidden_size, name="decoder", dtype=dtype)

    def call(self, enc_inputs, dec_inputs=None, training=None):
        """The document's signature: `[B, S]`, `[B, T]` token ids -> logits `[B, T, V]`."""
        if dec_inputs is None:  # Keras's one input (tf_impl.fitting): fit, evaluate, predict
            return self.keras_call(enc_inputs, training)
        return self.decode(enc_inputs, dec_inputs)[0]

    def decode(self, enc_inputs, dec_inputs, training=False):
        """Logits `[B, T, V]` and the attention weights of every decoder step `[B, T, S]` (None: no attention)."""
        enc_emb = tap(SOURCE_EMBEDDINGS, self.enc_embeddings(enc_inputs))  # [B, S, E]
        enc_out, enc_hidden = self.encode(enc_emb)  # [B, S, H], [B, H]
        tap(ENCODER_OUTPUTS, enc_out)
        tap(ENCODER_STATE, enc_hidden)
        if self.as_written:
            return self.decode_as_written(enc_out, enc_hidden, dec_inputs)
        return self.decode_hoisted(enc_out, enc_hidden, dec_inputs)

    def encode(self, enc_emb):
        """The encoder over the source embeddings `[B, S, E]` -> outputs `[B, S, H]`, final state (torch `[1, B, H]`,
        Keras `[B, H]`). Ours: the inputs' share of the gates in one product before the loop (`run_gru`, as torch's
        nn.GRU; faster in a tf.function and under XLA: docs/measurements.md); as written, Keras's GRU, which multiplies
        each step's inputs inside its loop. A vanilla RNN (ReverseTaskV0) runs as Keras made it, both ways."""
        if self.as_written or not isinstance(self.encoder, keras.layers.GRU):
            return self.encoder(enc_emb)
        return run_gru(self.encoder, enc_emb)


class ReverseTaskV0(ReverseTaskBase):
    """Document 001, `ReverseTaskV0`: vanilla RNN encoder-decoder joined by the final encoder state.

    The listing runs both recurrent layers over whole sequences: nothing to hoist, as written = ours.
    """

    rnn_factory = staticmethod(torch_rnn)

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, **kwargs):
        super().__init__(vocab_size, embedding_dim, hidden_size, decoder_input_size=embedding_dim, **kwargs)
        self.output_layer = _dense(vocab_size, "output_layer", self.dtype_policy)

    def decode_hoisted(self, enc_out, enc_hidden, dec_inputs):
        dec_emb = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs))  # [B, T, E]
        dec_out, dec_hidden = self.decoder(dec_emb, initial_state=enc_hidden)  # [B, T, H], [B, H]
        return self.output_layer(dec_out), None  # [B, T, V]

    decode_as_written = decode_hoisted


class BahdanauReverseTask(ReverseTaskBase):
    """Bahdanau order: score the *previous* decoder state, then feed [embedding; context] to the GRU."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int, **kwargs):
        super().__init__(vocab_size, embedding_dim, hidden_size, embedding_dim + hidden_size, **kwargs)

    def decode_hoisted(self, enc_out, enc_hidden, dec_inputs):
        """Ours: what does not depend on the step once (the encoder's share of the score; the embeddings' share of
        the GRU's gates, projected on the table's V rows and looked up: linear maps, no dropout between, V < B T), one
        product for all that reads s_{t-1} (the score's query and the GRU's hidden gates), a GRU cell per step, the
        output layer once after the loop. The context's weights are sliced once, outside the loop, and per-step pieces
        come from a split or an unstack, never a slice: a slice's gradient zero-fills its whole source (a weight, the
        state's product, the `[B, T, 3H]` inputs) in each step's backward. Under TensorFlow's XLA the context enters
        the gates as `probs (enc_out kernel[E:])`, the encoder outputs projected once before the loop (one product a
        step fewer); a tf.function and JAX (`backends.products_per_step`) take `(probs enc_out) kernel[E:]`, faster
        there (docs/measurements.md)."""
        tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs))  # [B, T, E] for the taps; no gradient flows from it
        keys = self.keys(enc_out)  # [B, S, A]
        E, A, cell = self.embedding_dim, keys.shape[2], self.decoder.cell
        share_table = ops.matmul(self.dec_embeddings.embeddings, cell.kernel[:E]) + cell.bias[0]  # [V, 3H]
        emb_share = ops.take(share_table, dec_inputs, axis=0)  # [B, T, 3H]
        query_kernel, query_bias = self.query_projection()  # [H, A], [A]
        state_kernel = ops.concatenate([query_kernel, cell.recurrent_kernel], axis=1)  # [H, A + 3H]
        state_bias = ops.concatenate([query_bias, cell.bias[1]], axis=0)  # [A + 3H]
        context_kernel = cell.kernel[E:]  # [H, 3H]
        compiled = self.jit_compile is True  # Keras's XLA: TensorFlow's xla mode, JAX's jit
        projected = compiled and not backends.products_per_step()  # TensorFlow's XLA
        context_values = ops.matmul(enc_out, context_kernel) if projected else None  # [B, S, 3H]

        def context_share(probs):  # [B, S] -> the context's share of the gates [B, 3H]
            if projected:
                return attention_context(probs, context_values, compiled=True)  # [B, S] over [B, S, 3H]
            context_vector = tap(CONTEXT_VECTORS, attention_context(probs, enc_out, compiled))  # [B, H]
            return ops.matmul(context_vector, context_kernel)  # [B, H] @ [H, 3H]

        def step(state, emb_share_t):  # s_{t-1}: [B, H]
            state_share = ops.matmul(state, state_kernel) + state_bias  # [B, A + 3H]
            query, hidden_share = ops.split(state_share, [A], axis=1)  # [B, A], [B, 3H]
            probs = ops.squeeze(masked_softmax(additive_scores(self.v, keys, ops.expand_dims(query, 1)), None), 1)  # [B, S]
            state = gru_cell(emb_share_t + context_share(probs), hidden_share, state)  # [B, H]
            return state, (state, probs)

        _, (states, attention) = over_time(step, enc_hidden, emb_share)  # [B, T, H], [B, T, S]
        if projected and is_recording():  # the context vectors, which the taps alone read
            tap(CONTEXT_VECTORS, ops.matmul(attention, enc_out))  # [B, T, S] @ [B, S, H] -> [B, T, H]
        return self.output_layer(states), attention  # [B, T, V], [B, T, S]

    def decode_as_written(self, enc_out, enc_hidden, dec_inputs):
        """The listing's loop: the score from scratch, the embedding and the output layer at every step."""
        prev_hidden, outputs, attention = enc_hidden, [], []  # s_{t-1}: [B, H]
        for t in range(dec_inputs.shape[1]):
            probs = masked_softmax(self.scores_as_written(enc_out, prev_hidden), None)  # [B, S]
            context_vector = tap(CONTEXT_VECTORS, ops.matmul(ops.expand_dims(probs, 1), enc_out))  # [B, 1, H]
            emb_vector = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs[:, t : t + 1]))  # [B, 1, E]
            s_t = ops.concatenate([emb_vector, context_vector], axis=2)  # [B, 1, E + H]
            dec_out_t, prev_hidden = self.decoder(s_t, initial_state=prev_hidden)  # [B, 1, H], [B, H]
            outputs.append(self.output_layer(dec_out_t))  # [B, 1, V]
            attention.append(probs)
        return ops.concatenate(outputs, axis=1), ops.stack(attention, axis=1)  # [B, T, V], [B, T, S]


class LuongReverseTask(ReverseTaskBase):
    """Luong order: run the GRU on the embedding, score the *current* state, predict from [output; context]."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int, **kwargs):
        super().__init__(vocab_size, embedding_dim, hidden_size, embedding_dim, **kwargs)

    def decode_hoisted(self, enc_out, enc_hidden, dec_inputs):
        """Ours: the decoder's input never depends on attention, so the GRU runs over the whole target
        at once (its inputs projected in one product: `run_gru`) and attention scores every step in one product."""
        dec_emb = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs))  # [B, T, E]
        dec_out, _ = run_gru(self.decoder, dec_emb, enc_hidden)  # [B, T, H]
        probs = masked_softmax(self.scores(self.keys(enc_out), dec_out), None)  # [B, T, S]
        context_vector = tap(CONTEXT_VECTORS, ops.matmul(probs, enc_out))  # [B, T, S] @ [B, S, H] -> [B, T, H]
        return self.output_layer(ops.concatenate([dec_out, context_vector], axis=2)), probs  # [B, T, V], [B, T, S]

    def decode_as_written(self, enc_out, enc_hidden, dec_inputs):
        """The listing's loop: one GRU step, one score, one output layer per target position."""
        keys = self.keys_as_written(enc_out)  # [B, S, *]
        prev_hidden, outputs, attention = enc_hidden, [], []
        for t in range(dec_inputs.shape[1]):
            emb_vector = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs[:, t : t + 1]))  # [B, 1, E]
            dec_out, prev_hidden = self.decoder(emb_vector, initial_state=prev_hidden)  # [B, 1, H], [B, H]
            probs = masked_softmax(self.scores_as_written(keys, prev_hidden), None)  # [B, S]
            context_vector = tap(CONTEXT_VECTORS, ops.matmul(ops.expand_dims(probs, 1), enc_out))  # [B, 1, H]
            outputs.append(self.output_layer(ops.concatenate([dec_out, context_vector], axis=2)))  # [B, 1, V]
            attention.append(probs)
        return ops.concatenate(outputs, axis=1), ops.stack(attention, axis=1)  # [B, T, V], [B, T, S]

    def keys_as_written(self, enc_out):
        return enc_out  # [B, S, H]


def dot_scores(keys, states):
    """`s_t . k_i` for every decoder and source step: `[B, S, K]`, `[B, T, K]` -> `[B, T, S]`."""
    return ops.matmul(states, ops.transpose(keys, (0, 2, 1)))  # [B, T, K] @ [B, K, S]


def attention_context(probs, values, compiled: bool = False):
    """One decoder step's context: the weights `probs [B, S]` over `values [B, S, D]` -> `[B, D]`. Outside XLA a
    broadcast product and a sum, where TensorFlow's batched product of one row per example costs more; under XLA
    (`compiled`) the batched product, which its CPU code runs faster than the sum (docs/measurements.md)."""
    if compiled:
        return ops.squeeze(ops.matmul(ops.expand_dims(probs, 1), values), 1)  # [B, 1, S] @ [B, S, D] -> [B, D]
    return ops.sum(ops.expand_dims(probs, 2) * values, axis=1)  # [B, S, 1] * [B, S, D] -> [B, D]


def additive_scores(v, keys, queries, summed: bool = False):
    """`v . tanh(k_i + q_t)`: `[B, S, A]`, `[B, T, A]` -> `[B, T, S]`.

    A product with `v`'s kernel (bias-free), not a call of the layer: one Keras layer call less per decoder step. With
    `summed`, a multiply and a sum over A, which XLA fuses with the tanh: the Luong concat model's scores of every step
    at once under XLA, faster so on TensorFlow and JAX. The product elsewhere, where the sum was slower (a
    tf.function; one decoder step's scores on JAX): docs/measurements.md.
    """
    energy = ops.tanh(ops.expand_dims(keys, 1) + ops.expand_dims(queries, 2))  # [B, T, S, A]
    if summed:
        return ops.sum(energy * v.kernel[:, 0], axis=-1)  # [B, T, S, A] * [A] -> [B, T, S]
    return ops.squeeze(ops.matmul(energy, v.kernel), -1)  # [B, T, S, A] @ [A, 1] -> [B, T, S]


def concat_scores(W_a, v, enc_out, state):
    """As written: `v . tanh(W_a [s; h_i])` for every source step: `[B, H]`, `[B, S, H]` -> `[B, S]`."""
    states = ops.broadcast_to(ops.expand_dims(state, 1), ops.shape(enc_out))  # [B, S, H]
    return ops.squeeze(v(ops.tanh(W_a(ops.concatenate([states, enc_out], axis=2)))), -1)  # [B, S, 2H] -> [B, S]


class DotScore:
    """`s_t . k_i` with keys `k_i` = `h_i` (dot) or `W h_i` (general)."""

    def scores(self, keys, states):
        return dot_scores(keys, states)  # [B, T, S]

    def scores_as_written(self, keys, state):
        return ops.squeeze(ops.matmul(keys, ops.expand_dims(state, 2)), 2)  # [B, S, H] @ [B, H, 1] -> [B, S]


class ConcatScore:
    """`v . tanh(W_a [s; h_i])` split as `W_a[:, :H] s + (W_a[:, H:] h_i + b)`: the encoder's share once.

    A Keras kernel is `(in, out)`: torch's column blocks `W_a[:, :H]`, `W_a[:, H:]` are `kernel[:H]`, `kernel[H:]`.
    """

    def keys(self, enc_out):
        return ops.matmul(enc_out, self.W_a.kernel[self.hidden_size :]) + self.W_a.bias  # [B, S, A]

    def scores(self, keys, states):  # every decoder step's at once (the Luong model's): under XLA summed over A
        queries = ops.matmul(states, self.W_a.kernel[: self.hidden_size])  # [B, T, A]
        return additive_scores(self.v, keys, queries, summed=self.jit_compile is True)  # [B, T, S]

    def query_projection(self):
        """The decoder state's share of the score: `kernel[:H]`, no bias (the bias went to the keys)."""
        kernel = self.W_a.kernel[: self.hidden_size]  # [H, A]
        return kernel, ops.zeros((kernel.shape[1],), dtype=kernel.dtype)

    def scores_as_written(self, enc_out, state):
        return concat_scores(self.W_a, self.v, enc_out, state)  # [B, S]


class ReverseTaskV6(BahdanauReverseTask):
    """Document 001, `ReverseTaskV6`: Bahdanau additive attention, `v . tanh(W_h h_i + W_s s_{t-1})`.

    The listing recomputes `W_h(enc_out)` at every decoder step (`decode_as_written`); ours once.
    """

    def __init__(
        self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128, **kwargs
    ):
        super().__init__(vocab_size, embedding_dim, hidden_size, **kwargs)
        dtype = self.dtype_policy
        self.W_h = _dense(attention_size, "W_h", dtype)  # encoder projection of h_i
        self.W_s = _dense(attention_size, "W_s", dtype)  # decoder projection of s_{t-1}
        self.v = _dense(1, "v", dtype, use_bias=False)  # attention vector -> score
        self.output_layer = _dense(vocab_size, "output_layer", dtype)

    def keys(self, enc_out):
        return self.W_h(enc_out)  # [B, S, A]

    def scores(self, keys, states):
        return additive_scores(self.v, keys, self.W_s(states))  # [B, T, S]

    def query_projection(self):
        """The decoder state's share of the score: `W_s`."""
        return self.W_s.kernel, self.W_s.bias  # [H, A], [A]

    def scores_as_written(self, enc_out, state):
        enc_proj = self.W_h(enc_out)  # [B, S, A], at every step as the listing
        return ops.squeeze(self.v(ops.tanh(enc_proj + ops.expand_dims(self.W_s(state), 1))), -1)  # [B, S]


class ReverseTaskBahdanauConcat(ConcatScore, BahdanauReverseTask):
    """Document 001, Bahdanau concatenative attention (formula only): `v . tanh(W_a [s_{t-1}; h_i])`."""

    def __init__(
        self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128, **kwargs
    ):
        super().__init__(vocab_size, embedding_dim, hidden_size, **kwargs)
        dtype = self.dtype_policy
        self.W_a = _dense(attention_size, "W_a", dtype)  # [s; h] -> attention space
        self.v = _dense(1, "v", dtype, use_bias=False)
        self.output_layer = _dense(vocab_size, "output_layer", dtype)


class ReverseTaskV7(DotScore, LuongReverseTask):
    """Document 001, `ReverseTaskV7`: Luong general attention, `s_t . W h_i` (the listing projects once)."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, **kwargs):
        super().__init__(vocab_size, embedding_dim, hidden_size, **kwargs)
        self.W = _dense(hidden_size, "W", self.dtype_policy)  # encoder space -> decoder space
        self.output_layer = _dense(vocab_size, "output_layer", self.dtype_policy)

    def keys(self, enc_out):
        return self.W(enc_out)  # [B, S, H]

    keys_as_written = keys


class ReverseTaskV8(DotScore, LuongReverseTask):
    """Document 001, `ReverseTaskV8`: Luong dot attention, `s_t . h_i`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, **kwargs):
        super().__init__(vocab_size, embedding_dim, hidden_size, **kwargs)
        self.output_layer = _dense(vocab_size, "output_layer", self.dtype_policy)

    def keys(self, enc_out):
        return enc_out  # [B, S, H]


class ReverseTaskLuongConcat(ConcatScore, LuongReverseTask):
    """Document 001, Luong concat attention (formula only): `v . tanh(W_a [s_t; h_i])`."""

    def __init__(
        self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128, **kwargs
    ):
        super().__init__(vocab_size, embedding_dim, hidden_size, **kwargs)
        dtype = self.dtype_policy
        self.W_a = _dense(attention_size, "W_a", dtype)
        self.v = _dense(1, "v", dtype, use_bias=False)
        self.output_layer = _dense(vocab_size, "output_layer", dtype)
