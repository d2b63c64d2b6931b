"""TensorFlow's "Neural machine translation with attention" tutorial as it was from 2019 to May 2021 (document 004's
source), transcribed in its own classes: the model the tf-nmt-2020 and tf-nmt-2021 presets run on a file
(tf_impl.references.tf_nmt_2020, tf_nmt_2021). The two revisions differ in which of the attention's two products
takes the query (`w1_on_query`).

Legend: B batch, S source length, E embedding, H units, V vocabulary.
"""

from __future__ import annotations

import keras
import tensorflow as tf


class NmtEncoder(keras.Model):
    """The tutorial's `Encoder(vocab_size, embedding_dim, enc_units, batch_sz)`: Embedding, GRU."""

    def __init__(self, vocab_size: int, embedding_dim: int, enc_units: int, batch_sz: int):
        super().__init__()
        self.batch_sz = batch_sz
        self.enc_units = enc_units
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim)
        self.gru = keras.layers.GRU(enc_units, return_sequences=True, return_state=True, recurrent_initializer="glorot_uniform")

    def call(self, x, hidden):
        x = self.embedding(x)  # [B, S, E]
        output, state = self.gru(x, initial_state=hidden)  # [B, S, H], [B, H]
        return output, state


class NmtAttention(keras.layers.Layer):
    """The tutorial's `BahdanauAttention(units)`: `V(tanh(W1(values) + W2(query)))` until February 2020,
    `V(tanh(W1(query) + W2(values)))` after (`w1_on_query`)."""

    def __init__(self, units: int, w1_on_query: bool):
        super().__init__()
        self.w1_on_query = w1_on_query
        self.W1 = keras.layers.Dense(units)
        self.W2 = keras.layers.Dense(units)
        self.V = keras.layers.Dense(1)

    def call(self, query, values):
        query_with_time_axis = tf.expand_dims(query, 1)  # [B, 1, H]
        if self.w1_on_query:
            inner = self.W1(query_with_time_axis) + self.W2(values)  # [B, S, H]
        else:
            inner = self.W1(values) + self.W2(query_with_time_axis)  # [B, S, H]
        attention_weights = tf.nn.softmax(self.V(tf.nn.tanh(inner)), axis=1)  # [B, S, 1]
        context_vector = tf.reduce_sum(attention_weights * values, axis=1)  # [B, H]
        return context_vector, attention_weights


class NmtDecoder(keras.Model):
    """The tutorial's `Decoder(vocab_size, embedding_dim, dec_units, batch_sz)`: attention, Embedding, GRU
    (called without `initial_state`, as the tutorial does), Dense."""

    def __init__(self, vocab_size: int, embedding_dim: int, dec_units: int, batch_sz: int, w1_on_query: bool):
        super().__init__()
        self.batch_sz = batch_sz
        self.dec_units = dec_units
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim)
        self.gru = keras.layers.GRU(dec_units, return_sequences=True, return_state=True, recurrent_initializer="glorot_uniform")
        self.fc = keras.layers.Dense(vocab_size)
        self.attention = NmtAttention(dec_units, w1_on_query)

    def call(self, x, hidden, enc_output):
        context_vector, attention_weights = self.attention(hidden, enc_output)  # [B, H], [B, S, 1]
        x = self.embedding(x)  # [B, 1, E]
        x = tf.concat([tf.expand_dims(context_vector, 1), x], axis=-1)  # [B, 1, H + E]
        output, state = self.gru(x)  # [B, 1, H], [B, H]
        output = tf.reshape(output, (-1, output.shape[2]))  # [B, H]
        return self.fc(output), state, attention_weights


class NmtParts(keras.Model):
    """The tutorial's `tf.train.Checkpoint(encoder=encoder, decoder=decoder)` as one object: its two parts."""

    def __init__(self, encoder: NmtEncoder, decoder: NmtDecoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
