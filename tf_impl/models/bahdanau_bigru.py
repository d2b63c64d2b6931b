"""Document 002 (seq2seq with attention on Multi30k, after Ben Trevett's tutorial) in Keras: `Encoder`,
`Attention`, `Decoder`, `Seq2Seq`, mirroring torch_impl/models/bahdanau_bigru.py.

Legend: B batch, S source length, T target length, Ee encoder_embed_dim, Ed decoder_embed_dim (the
document has one embed_dim; Trevett's notebook two), He encoder_hidden_size, Hd decoder_hidden_size,
V vocabulary. Batch-first inside; `Seq2Seq.call` keeps the document's time-major signature. Listing
defects fixed where they sit (each marked "fix:").
"""

from __future__ import annotations

import keras
from keras import ops

from shared.core.taps import CONTEXT_VECTORS, ENCODER_STATE, SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS, tap
from tf_impl.keras_compat.layers import one_step, torch_gru
from tf_impl.models.seq2seq import Seq2SeqBase, masked_softmax, run_bidirectional_gru, run_rnn, source_mask


class Encoder(keras.layers.Layer):
    """Document 002, `Encoder`: embedding, dropout, bidirectional GRU, `fc` from both final states to Hd, tanh.

    `embed_dim` is the encoder's embedding size, Ee (the catalogue's `encoder_embed_dim`).
    """

    def __init__(
        self, vocab_size: int, embed_dim: int, encoder_hidden_size: int, decoder_hidden_size: int, dropout: float, **kwargs
    ):
        super().__init__(**kwargs)
        dtype = self.dtype_policy
        self.dropout = keras.layers.Dropout(dropout, name="dropout", dtype=dtype)
        self.embed = keras.layers.Embedding(vocab_size, embed_dim, name="embed", dtype=dtype)
        self.gru = keras.layers.Bidirectional(torch_gru(encoder_hidden_size, "gru", dtype), name="gru", dtype=dtype)
        self.fc = keras.layers.Dense(decoder_hidden_size, name="fc", dtype=dtype)

    def call(self, x, lengths=None, training=False, hoisted=False):
        """`x [B, S]` -> outputs `[B, S, 2He]` (zero at pads), hidden `[B, Hd]`. `hoisted` (ours): each direction's
        inputs' share of the gates in one product before its loop (`run_bidirectional_gru`), as torch's nn.GRU."""
        embedding = tap(SOURCE_EMBEDDINGS, self.dropout(self.embed(x), training=training))  # [B, S, Ee]
        if hoisted:
            mask = source_mask(lengths, ops.shape(embedding)[1])  # [B, S] or None
            outputs, forward_state, backward_state = run_bidirectional_gru(self.gru, embedding, mask)  # [B, S, 2He], ...
        else:
            outputs, forward_state, backward_state = run_rnn(
                self.gru, embedding, lengths, training=training
            )  # [B, S, 2He], [B, He] x 2
        # torch's hidden[-1] is the backward pass's final state, at time 0: Keras's backward_state, not outputs[:, -1]
        concat_hidden = ops.concatenate(
            (backward_state, forward_state), axis=1
        )  # [B, 2He]; fix: the listing's torch.cat lost its first argument
        return outputs, ops.tanh(self.fc(concat_hidden))  # [B, S, 2He], [B, Hd]


class Attention(keras.layers.Layer):
    """Document 002, `Attention`: `fc2(tanh(fc1([s; h_i])))`, softmax over the source.

    `fc1 [s; h_i]` = `fc1[:, :Hd] s + (fc1[:, Hd:] h_i + b)`: ours computes the encoder's share once
    (`keys`); given no keys, `call` repeats and concatenates at every step as the listing. A Keras
    kernel is `(in, out)`: torch's column blocks `fc1[:, :Hd]`, `fc1[:, Hd:]` are `kernel[:Hd]`, `kernel[Hd:]`.
    `bias=False` builds `fc2` without its bias (`use_bias=False`), as Trevett's `v = nn.Linear(dec_hid_dim,
    1, bias=False)` (the bias adds the same to every score: the softmax cancels it).
    """

    def __init__(self, encoder_hidden_size: int, decoder_hidden_size: int, bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.decoder_hidden_size = decoder_hidden_size
        self.fc1 = keras.layers.Dense(decoder_hidden_size, name="fc1", dtype=self.dtype_policy)
        self.fc2 = keras.layers.Dense(1, use_bias=bias, name="fc2", dtype=self.dtype_policy)

    def keys(self, encoder_outputs):
        """`fc1[:, Hd:] h_i + b` for every source step: `[B, S, 2He]` -> `[B, S, Hd]`."""
        return ops.matmul(encoder_outputs, self.fc1.kernel[self.decoder_hidden_size :]) + self.fc1.bias

    def call(self, hidden, encoder_outputs, mask=None, keys=None):
        """`hidden [B, Hd]`, `encoder_outputs [B, S, 2He]` -> weighted `[B, 2He]`, attention `[B, S]`."""
        if keys is None:
            energy = self.energy_as_written(hidden, encoder_outputs)  # [B, S, Hd]
        else:
            query_share = ops.matmul(hidden, self.fc1.kernel[: self.decoder_hidden_size])  # [B, Hd]
            energy = ops.tanh(keys + ops.expand_dims(query_share, 1))  # [B, S, Hd]
        attention = masked_softmax(ops.squeeze(self.fc2(energy), 2), mask)  # [B, S]
        weighted = tap(CONTEXT_VECTORS, ops.squeeze(ops.matmul(ops.expand_dims(attention, 1), encoder_outputs), 1))  # [B, 2He]
        return weighted, attention  # fix: the listing's weighted.permute(1, 0, 2) result was never assigned

    def energy_as_written(self, hidden, encoder_outputs):
        seq_len = encoder_outputs.shape[1]
        hidden = ops.repeat(ops.expand_dims(hidden, 1), seq_len, axis=1)  # [B, S, Hd]
        concat = ops.concatenate((hidden, encoder_outputs), axis=2)  # [B, S, Hd + 2He]; fix: first argument restored
        return ops.tanh(self.fc1(concat))  # [B, S, Hd]


class Decoder(keras.layers.Layer):
    """Document 002, `Decoder`: GRU over [embedding; weighted], `fc` over [output; weighted; embedding].

    `embed_dim` is the decoder's embedding size, Ed (the catalogue's `decoder_embed_dim`);
    `attention_bias` is the bias of the attention's `fc2`.
    """

    def __init__(self, vocab_size: int, embed_dim: int, encoder_hidden_size: int, decoder_hidden_size: int, dropout: float,
                 attention_bias: bool = True, **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        dtype = self.dtype_policy
        self.vocab_size = vocab_size
        self.dropout = keras.layers.Dropout(dropout, name="dropout", dtype=dtype)  # fix: the listing's `droppout`
        self.embedding = keras.layers.Embedding(vocab_size, embed_dim, name="embedding", dtype=dtype)
        self.gru = torch_gru(decoder_hidden_size, "gru", dtype)
        self.attention = Attention(encoder_hidden_size, decoder_hidden_size, attention_bias, name="attention", dtype=dtype)
        self.fc = keras.layers.Dense(vocab_size, name="fc", dtype=dtype)

    def call(self, x, hidden, encoder_outputs, mask=None, training=False):
        """The document's signature: -> prediction `[B, V]`, hidden `[B, Hd]`."""
        fc_in, hidden, _ = self.features(x, hidden, encoder_outputs, mask, training=training)
        return self.fc(fc_in), hidden

    def features(self, x, hidden, encoder_outputs, mask=None, keys=None, training=False):
        """`x [B]`, `hidden [B, Hd]` -> the input of `fc` `[B, Hd + 2He + Ed]`, hidden `[B, Hd]`, attention `[B, S]`."""
        embedding = tap(TARGET_EMBEDDINGS, self.dropout(self.embedding(x), training=training))  # [B, Ed]
        weighted, attention = self.attention(hidden, encoder_outputs, mask, keys)  # [B, 2He], [B, S]
        weighted_concat = ops.concatenate((embedding, weighted), axis=1)  # [B, Ed + 2He]; fix: first argument restored
        hidden, _ = one_step(self.gru, weighted_concat, [hidden], training)  # [B, Hd]: the step's output and state
        # [B, Hd + 2He + Ed]; fix: first argument restored
        return ops.concatenate((hidden, weighted, embedding), axis=1), hidden, attention


class Seq2Seq(Seq2SeqBase):
    """Document 002, `Seq2Seq(encoder, decoder, device)` with teacher forcing from a shared schedule."""

    def __init__(self, encoder: Encoder, decoder: Decoder, device=None, seed: int = 0, **kwargs):
        super().__init__(encoder, decoder, seed, **kwargs)
        self.device = device  # the document's argument; placement follows the weights

    def call(self, source, target=None, teacher_force_ratio: float = 0.5, training=None):
        """The document's signature: `source [S, B]`, `target [T, B]` -> outputs `[T, B, V]` (row 0 zero)."""
        if target is None:  # Keras's one input (tf_impl.fitting): fit, evaluate, predict
            return self.keras_call(source, training)
        return self.time_major_forward(source, target, teacher_force_ratio, training=bool(training))

    def encode(self, src, src_len=None, training=False):
        """Ours: the encoder's GRU with each direction's inputs projected in one product (`Encoder.call`'s `hoisted`);
        as written, Keras's layer, which multiplies each step's inputs inside its loop."""
        encoder_outputs, hidden = self.encoder(src, src_len, training=training, hoisted=not self.as_written)
        return self.memory(encoder_outputs, src_len), tap(ENCODER_STATE, hidden)

    def features(self, x, hidden, memory, training=False):
        encoder_outputs, mask, keys = memory
        return self.decoder.features(x, hidden, encoder_outputs, mask, keys, training=training)

    def project(self, features):
        return self.decoder.fc(features)  # [..., V]; fix: the listing returned an undefined `predictions`


def build_model(src_vocab_size: int, tgt_vocab_size: int, encoder_embed_dim: int, decoder_embed_dim: int,
                encoder_hidden_size: int, decoder_hidden_size: int, dropout: float, attention_bias: bool = True,
                dtype=None) -> Seq2Seq:  # fmt: skip
    """The catalogue's `bahdanau_bigru`: `Seq2Seq(Encoder(...), Decoder(...))` as the document wires it."""
    sizes = (encoder_hidden_size, decoder_hidden_size, dropout)
    encoder = Encoder(src_vocab_size, encoder_embed_dim, *sizes, name="encoder", dtype=dtype)
    decoder = Decoder(tgt_vocab_size, decoder_embed_dim, *sizes, attention_bias, name="decoder", dtype=dtype)
    return Seq2Seq(encoder, decoder, dtype=dtype)
