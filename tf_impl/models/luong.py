"""Document 003 (NLP from scratch: annotated attention, after Luong et al. 2015) in Keras: `Attention`,
`Encoder`, `Decoder`, `Model`, mirroring torch_impl/models/luong.py.

Legend: B batch, S source length, T target length, E embed_dim, H hidden_dim, L n_layers,
V output_dim. Batch-first inside; `Model.call` keeps the document's time-major signature. Listing
defects fixed where they sit (each marked "fix:").
"""

from __future__ import annotations

import keras
from keras import ops

from shared.core.taps import CONTEXT_VECTORS, SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS, tap
from tf_impl.keras_compat.layers import TorchLSTM
from tf_impl.models.seq2seq import Seq2SeqBase, masked_softmax, run_rnn

SCORE_FNS = ("dot", "general", "concat")
UNIFORM = keras.initializers.RandomUniform(-0.1, 0.1)  # the document's init_weights


class Attention(keras.layers.Layer):
    """Document 003, `Attention(hidden_dim, score_fn)`: global attention with Luong's three scores.

    dot `h_t . h_s`; general `h_t . (W h_s + b)` (the listing's Linear keeps its bias);
    concat `v . tanh(W [h_t; h_s])`.
    """

    def __init__(self, hidden_dim: int, score_fn: str = "general", **kwargs):
        super().__init__(**kwargs)
        if score_fn not in SCORE_FNS:
            raise ValueError(f"score_fn must be one of {', '.join(SCORE_FNS)}, got {score_fn!r}")
        self.score_fn = score_fn
        if score_fn in ("general", "concat"):
            self.w = _uniform_dense(hidden_dim, "w", self.dtype_policy)
        if score_fn == "concat":
            self.v = self.add_weight(shape=(hidden_dim,), initializer=UNIFORM, name="v")

    def score(self, decoder_out, encoder_outs):
        """As written: `decoder_out [B, H]`, `encoder_outs [B, S, H]` -> scores `[B, S]`."""
        query = ops.expand_dims(decoder_out, 1)  # [B, 1, H]
        if self.score_fn == "dot":
            return ops.sum(query * encoder_outs, axis=2)
        if self.score_fn == "general":
            return ops.sum(query * self.w(encoder_outs), axis=2)
        decoder_outs = ops.broadcast_to(query, ops.shape(encoder_outs))  # [B, S, H]
        cat = ops.concatenate(
            (decoder_outs, encoder_outs), axis=2
        )  # [B, S, 2H]; fix: feature axis (the listing concatenated on time)
        return ops.sum(self.v * ops.tanh(self.w(cat)), axis=2)  # fix: the paper's tanh, missing in the listing

    def keys(self, encoder_outs):
        """Ours: the encoder's share of every score, once: `h_s`, `W h_s + b`, or `W[:, H:] h_s + b`.

        A Keras kernel is `(in, out)`: torch's column block `W[:, H:]` is `kernel[H:]`.
        """
        if self.score_fn == "dot":
            return encoder_outs  # [B, S, H]
        if self.score_fn == "general":
            return self.w(encoder_outs)  # [B, S, H]
        return ops.matmul(encoder_outs, self.w.kernel[encoder_outs.shape[2] :]) + self.w.bias  # [B, S, H]

    def scores(self, keys, queries):
        """Ours: `keys [B, S, H]`, `queries [B, T, H]` -> scores `[B, T, S]`."""
        if self.score_fn != "concat":
            return ops.matmul(queries, ops.transpose(keys, (0, 2, 1)))  # [B, T, H] @ [B, H, S]
        query_share = ops.matmul(queries, self.w.kernel[: queries.shape[2]])  # [B, T, H]
        # [B, T, S, H] @ [H] -> [B, T, S]
        return ops.matmul(ops.tanh(ops.expand_dims(keys, 1) + ops.expand_dims(query_share, 2)), self.v)

    def attend(self, queries, encoder_outs, mask, keys):
        """Ours: alignment `[B, T, S]` and context `[B, T, H]` of every query at once."""
        a = masked_softmax(self.scores(keys, queries), None if mask is None else ops.expand_dims(mask, 1))  # [B, T, S]
        return a, tap(CONTEXT_VECTORS, ops.matmul(a, encoder_outs))  # [B, T, S] @ [B, S, H] -> [B, T, H]

    def call(self, decoder_out, encoder_outs, mask=None, keys=None):
        """-> alignment `a [B, S]` and context `[B, H]` (the listing's `(a, context)` order); keys: ours."""
        if keys is not None:
            a, context = self.attend(ops.expand_dims(decoder_out, 1), encoder_outs, mask, keys)  # [B, 1, S], [B, 1, H]
            return ops.squeeze(a, 1), ops.squeeze(context, 1)
        a = masked_softmax(self.score(decoder_out, encoder_outs), mask)  # [B, S]
        context = tap(CONTEXT_VECTORS, ops.squeeze(ops.matmul(ops.expand_dims(a, 1), encoder_outs), 1))  # [B, H]
        return a, context


def _uniform_dense(units: int, name: str, dtype) -> keras.layers.Dense:
    return keras.layers.Dense(units, kernel_initializer=UNIFORM, bias_initializer=UNIFORM, name=name, dtype=dtype)


def _uniform_embedding(vocab: int, dim: int, name: str, dtype) -> keras.layers.Embedding:
    return keras.layers.Embedding(vocab, dim, embeddings_initializer=UNIFORM, name=name, dtype=dtype)


class Encoder(keras.layers.Layer):
    """Document 003, `Encoder`: embedding, dropout, stacked LSTM; returns dropout(outputs) and (h, c)."""

    def __init__(self, input_dim: int, embed_dim: int, hidden_dim: int, n_layers: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        dtype = self.dtype_policy
        self.embed = _uniform_embedding(input_dim, embed_dim, "embed", dtype)
        self.lstm = TorchLSTM(hidden_dim, n_layers, dropout, name="lstm", dtype=dtype)
        self.dropout = keras.layers.Dropout(dropout, name="dropout", dtype=dtype)

    def call(self, src, lengths=None, training=False):
        """`src [B, S]` -> outputs `[B, S, H]`, (h `[L, B, H]`, c `[L, B, H]`)."""
        embed = tap(SOURCE_EMBEDDINGS, self.dropout(self.embed(src), training=training))  # [B, S, E]
        out, hidden = run_rnn(self.lstm, embed, lengths, training=training)
        return self.dropout(out, training=training), hidden


class Decoder(keras.layers.Layer):
    """Document 003, `Decoder`: LSTM step, attention on its output, `wc` over [h_t; c_t] with tanh, `fc`."""

    def __init__(
        self, output_dim: int, embed_dim: int, hidden_dim: int, num_layers: int, dropout: float, score_fn="general", **kwargs
    ):
        super().__init__(**kwargs)
        dtype = self.dtype_policy
        self.output_dim = output_dim
        self.embed = _uniform_embedding(output_dim, embed_dim, "embed", dtype)
        # fix: the listing passed an undefined `n_layers`; its Attention had no way to choose score_fn
        self.lstm = TorchLSTM(hidden_dim, num_layers, dropout, name="lstm", dtype=dtype)
        self.attention = Attention(hidden_dim, score_fn, name="attention", dtype=dtype)
        self.wc = _uniform_dense(hidden_dim, "wc", dtype)
        self.fc = _uniform_dense(output_dim, "fc", dtype)  # fix: the name `fc` was lost in extraction
        self.dropout = keras.layers.Dropout(dropout, name="dropout", dtype=dtype)

    def call(self, trg, hidden, encoder_out, mask=None, training=False):
        """The document's signature: `trg [B]`, (h, c) `[L, B, H]` -> logits `[B, V]`, (h, c), attention `[B, S]`."""
        atten_hidden, hidden, atten = self.features(trg, hidden, encoder_out, mask, training=training)
        return self.fc(atten_hidden), hidden, atten  # softmax is in the loss

    def features(self, trg, hidden, encoder_out, mask=None, keys=None, training=False):
        """One step up to `fc`: `tanh(wc [h_t; c_t])` `[B, H]`, (h, c), attention `[B, S]`."""
        embed = tap(TARGET_EMBEDDINGS, self.dropout(self.embed(ops.expand_dims(trg, 1)), training=training))  # [B, 1, E]
        decoder_out, hidden = self.lstm(embed, initial_state=hidden, training=training)  # [B, 1, H]
        atten, context = self.attention(ops.squeeze(decoder_out, 1), encoder_out, mask, keys)  # [B, S], [B, H]
        atten_hidden = ops.tanh(self.wc(ops.concatenate((ops.squeeze(decoder_out, 1), context), axis=1)))  # [B, H]
        return atten_hidden, hidden, atten

    def features_teacher_forced(self, trg, hidden, encoder_out, mask, keys, training=False):
        """Ours, every input known (`trg [B, T]`): no input feeding, so the LSTM runs over the whole target
        and attention, `wc` over all steps at once -> `[B, T, H]`, attention `[B, T, S]`."""
        embed = tap(TARGET_EMBEDDINGS, self.dropout(self.embed(trg), training=training))  # [B, T, E]
        decoder_out, _ = self.lstm(embed, initial_state=hidden, training=training)  # [B, T, H]
        atten, context = self.attention.attend(decoder_out, encoder_out, mask, keys)  # [B, T, S], [B, T, H]
        return ops.tanh(self.wc(ops.concatenate((decoder_out, context), axis=2))), atten  # [B, T, H]


class Model(Seq2SeqBase):
    """Document 003, `Model(encoder, decoder)` with teacher forcing from a shared schedule."""

    def call(self, src, trg=None, teacher_force_ratio: float = 0.5, training=None):
        """The document's signature: `src [S, B]`, `trg [T, B]` -> outs `[T, B, V]`, outs[0] zero."""
        if trg is None:  # Keras's one input (tf_impl.fitting): fit, evaluate, predict
            return self.keras_call(src, training)
        return self.time_major_forward(src, trg, teacher_force_ratio, training=bool(training))

    def features(self, x, hidden, memory, training=False):
        encoder_out, mask, keys = memory
        return self.decoder.features(x, hidden, encoder_out, mask, keys, training=training)

    def project(self, features):
        return self.decoder.fc(features)  # [..., V]

    def decode_teacher_forced(self, tgt_in, hidden, memory, training=False):
        # [B, T, H], [B, T, S]
        features, attention = self.decoder.features_teacher_forced(tgt_in, hidden, *memory, training=training)
        return self.project_over_time(features), attention


def build_model(input_dim: int, output_dim: int, embed_dim: int, hidden_dim: int, n_layers: int, dropout: float,
                score_fn: str, dtype=None) -> Model:  # fmt: skip
    """The catalogue's `luong_<score_fn>`: `Model(Encoder(...), Decoder(...))`, uniform init +-0.1 as the document."""
    encoder = Encoder(input_dim, embed_dim, hidden_dim, n_layers, dropout, name="encoder", dtype=dtype)
    decoder = Decoder(output_dim, embed_dim, hidden_dim, n_layers, dropout, score_fn, name="decoder", dtype=dtype)
    return Model(encoder, decoder, dtype=dtype)
