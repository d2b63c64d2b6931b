"""Models as Keras users write them: `Sequential` with auto-named layers, the functional API, a subclassed
model stepping a cell. The factories are what `rosetta port --keras-model` names."""

from __future__ import annotations

import keras
from keras import layers, ops

from tests.zoo.torch_models import EMBED, HEADS, HIDDEN, MODEL_DIM, TAGS, VOCAB


def bilstm_tagger() -> keras.Model:
    return keras.Sequential([
        keras.Input(shape=(None,), dtype="int32"),
        layers.Embedding(VOCAB, EMBED),
        layers.Bidirectional(layers.LSTM(HIDDEN, return_sequences=True)),
        layers.Bidirectional(layers.LSTM(HIDDEN, return_sequences=True)),
        layers.Dense(TAGS),
    ])  # fmt: skip


@keras.saving.register_keras_serializable(package="zoo")
class LanguageModel(keras.Model):
    """A subclassed two-layer GRU language model returning (logits, last states), as the torch one does."""

    def __init__(self, dropout: float = 0.2, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self.embedding = layers.Embedding(VOCAB, EMBED)
        self.grus = [layers.GRU(HIDDEN, return_sequences=True, return_state=True, dropout=0.0) for _ in range(2)]
        self.drop = layers.Dropout(dropout)
        self.logits = layers.Dense(VOCAB)

    def call(self, inputs, training=False):
        x, states = self.drop(self.embedding(inputs), training=training), []
        for gru in self.grus:
            x, state = gru(x, training=training)
            x = self.drop(x, training=training)
            states.append(state)
        return self.logits(x), ops.stack(states)

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout}


def gru_language_model() -> keras.Model:
    return LanguageModel()


class LuongDecoder(keras.Model):
    """A step decoder with Luong's general attention, stepping a Keras cell in a Python loop."""

    def __init__(self, cell: str = "gru", **kwargs):
        super().__init__(**kwargs)
        self.embedding = layers.Embedding(VOCAB, EMBED)
        self.cell = layers.GRUCell(HIDDEN) if cell == "gru" else layers.LSTMCell(HIDDEN)
        self.attn = layers.Dense(HIDDEN, use_bias=False)
        self.concat = layers.Dense(HIDDEN, activation="tanh")
        self.out = layers.Dense(VOCAB)

    def call(self, encoder_outputs, tokens):
        zeros = ops.zeros((ops.shape(tokens)[0], HIDDEN), dtype=encoder_outputs.dtype)
        states = [zeros] if isinstance(self.cell, layers.GRUCell) else [zeros, zeros]
        logits = []
        for t in range(tokens.shape[1]):
            hidden, states = self.cell(self.embedding(tokens[:, t]), states)
            scores = ops.squeeze(ops.matmul(encoder_outputs, ops.expand_dims(self.attn(hidden), 2)), 2)
            weights = ops.softmax(scores, axis=1)
            context = ops.squeeze(ops.matmul(ops.expand_dims(weights, 1), encoder_outputs), 1)
            logits.append(self.out(self.concat(ops.concatenate([hidden, context], axis=1))))
        return ops.stack(logits, axis=1)


def luong_gru_decoder() -> keras.Model:
    return LuongDecoder("gru")


def luong_lstm_decoder() -> keras.Model:
    return LuongDecoder("lstm")


def sentiment_lstm() -> keras.Model:
    text = keras.Input(shape=(None,), dtype="int32", name="text")
    x = layers.Embedding(VOCAB, EMBED)(text)
    x = layers.Bidirectional(layers.LSTM(HIDDEN))(x)
    x = layers.Dense(HIDDEN, activation="relu")(x)
    return keras.Model(text, layers.Dense(2)(x))


def conv_gru_classifier() -> keras.Model:
    return keras.Sequential([
        keras.Input(shape=(None,), dtype="int32"),
        layers.Embedding(VOCAB, EMBED),
        layers.Conv1D(HIDDEN, 3, padding="same", activation="relu"),
        layers.LayerNormalization(epsilon=1e-5),
        layers.GRU(HIDDEN),
        layers.Dense(3),
    ])  # fmt: skip


def self_attention_classifier() -> keras.Model:
    """The functional twin: MultiHeadAttention(x, x), Add, LayerNormalization (torch's eps), average pooling."""
    tokens = keras.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(VOCAB, MODEL_DIM)(tokens)
    attended = layers.MultiHeadAttention(num_heads=HEADS, key_dim=MODEL_DIM // HEADS)(x, x)
    x = layers.LayerNormalization(epsilon=1e-5)(layers.Add()([x, attended]))
    return keras.Model(tokens, layers.Dense(2)(layers.GlobalAveragePooling1D()(x)))


class CrossAttentionDecoder(keras.Model):
    """The subclassed twin; Keras gives attention scores per head, so it averages them as torch does."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embedding = layers.Embedding(VOCAB, MODEL_DIM)
        self.cross = layers.MultiHeadAttention(num_heads=HEADS, key_dim=MODEL_DIM // HEADS)
        self.out = layers.Dense(VOCAB)

    def call(self, encoder_outputs, tokens):
        attended, scores = self.cross(self.embedding(tokens), encoder_outputs, return_attention_scores=True)  # [B, H, T, S]
        return self.out(attended), ops.mean(scores, axis=1)


def cross_attention_decoder() -> keras.Model:
    return CrossAttentionDecoder()


def _query_value_scorer(attention: layers.Layer) -> keras.Model:
    """The Keras docs' CNN + attention example (keras.layers.Attention's page), at test sizes."""
    query_input = keras.Input(shape=(None,), dtype="int32")
    value_input = keras.Input(shape=(None,), dtype="int32")
    token_embedding = layers.Embedding(input_dim=VOCAB, output_dim=EMBED)
    cnn_layer = layers.Conv1D(filters=HIDDEN, kernel_size=3, padding="same")
    query_seq_encoding = cnn_layer(token_embedding(query_input))
    value_seq_encoding = cnn_layer(token_embedding(value_input))
    query_value_attention_seq = attention([query_seq_encoding, value_seq_encoding])
    query_encoding = layers.GlobalAveragePooling1D()(query_seq_encoding)
    query_value_attention = layers.GlobalAveragePooling1D()(query_value_attention_seq)
    input_layer = layers.Concatenate()([query_encoding, query_value_attention])
    return keras.Model([query_input, value_input], layers.Dense(2)(input_layer))


def concat_attention_scorer() -> keras.Model:
    return _query_value_scorer(layers.Attention(use_scale=True, score_mode="concat"))


def additive_attention_scorer() -> keras.Model:
    return _query_value_scorer(layers.AdditiveAttention())
