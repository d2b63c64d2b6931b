"""Transformer blocks as their users write them, in both frameworks: PyTorch's `nn.TransformerEncoderLayer` /
`nn.TransformerDecoderLayer` (the torch docs' `batch_first` use), keras-hub's `TransformerEncoder` /
`TransformerDecoder`, and a Keras block built by hand from MultiHeadAttention + LayerNormalization + Dense (the
keras.io "Text classification with Transformer" example's `TransformerBlock`). keras-hub is imported here only."""

from __future__ import annotations

import keras
import keras_hub
from keras import layers
from torch import nn

from tests.zoo.torch_models import HEADS, MODEL_DIM, VOCAB

FFN = 11  # the feed-forward width: distinct from every other size


class TransformerClassifier(nn.Module):
    """Embeddings, two `nn.TransformerEncoderLayer`s in an `nn.TransformerEncoder`, mean over tokens, a Linear."""

    def __init__(self, norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, MODEL_DIM)
        layer = nn.TransformerEncoderLayer(MODEL_DIM, HEADS, dim_feedforward=FFN, dropout=0.1, activation=activation,
                                           layer_norm_eps=layer_norm_eps, batch_first=True, norm_first=norm_first)  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.classifier = nn.Linear(MODEL_DIM, 2)

    def forward(self, tokens):
        return self.classifier(self.encoder(self.embedding(tokens)).mean(dim=1))  # [B, 2]


def hub_classifier(normalize_first: bool = False, activation: str = "relu", layer_norm_epsilon: float = 1e-5) -> keras.Model:
    """The same with keras-hub: two `TransformerEncoder`s, average pooling, a Dense."""
    tokens = keras.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(VOCAB, MODEL_DIM)(tokens)
    options = {
        "dropout": 0.1,
        "activation": activation,
        "layer_norm_epsilon": layer_norm_epsilon,
        "normalize_first": normalize_first,
    }
    for _ in range(2):
        x = keras_hub.layers.TransformerEncoder(FFN, HEADS, **options)(x)
    return keras.Model(tokens, layers.Dense(2)(layers.GlobalAveragePooling1D()(x)))


class TransformerBlock(layers.Layer):
    """keras.io's `TransformerBlock` (Text classification with Transformer), written as published but with
    `key_dim=embed_dim // num_heads` (the example's `key_dim=embed_dim` has no torch counterpart: refused) and
    torch's LayerNorm epsilon."""

    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1, key_dim=None, epsilon=1e-5):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim or embed_dim // num_heads)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=epsilon)
        self.layernorm2 = layers.LayerNormalization(epsilon=epsilon)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs, training=False):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output, training=training)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output, training=training)
        return self.layernorm2(out1 + ffn_output)


def block_classifier(**block_options) -> keras.Model:
    """The keras.io example's model around one TransformerBlock (its positional embedding left out)."""
    tokens = keras.Input(shape=(None,), dtype="int32")
    x = TransformerBlock(MODEL_DIM, HEADS, FFN, **block_options)(layers.Embedding(VOCAB, MODEL_DIM)(tokens))
    return keras.Model(tokens, layers.Dense(2)(layers.GlobalAveragePooling1D()(x)))


class OneLayerClassifier(nn.Module):
    """One `nn.TransformerEncoderLayer` between the embeddings and a Linear (the hand-built block's twin)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, MODEL_DIM)
        self.block = nn.TransformerEncoderLayer(MODEL_DIM, HEADS, dim_feedforward=FFN, batch_first=True)
        self.classifier = nn.Linear(MODEL_DIM, 2)

    def forward(self, tokens):
        return self.classifier(self.block(self.embedding(tokens)).mean(dim=1))


class TransformerTagger(nn.Module):
    """A decoder over an encoder's states: `nn.TransformerDecoderLayer` with a causal mask, a Linear per step."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, MODEL_DIM)
        self.decoder = nn.TransformerDecoderLayer(MODEL_DIM, HEADS, dim_feedforward=FFN, batch_first=True)
        self.out = nn.Linear(MODEL_DIM, VOCAB)

    def forward(self, memory, tokens):
        causal = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], dtype=memory.dtype)
        return self.out(self.decoder(self.embedding(tokens), memory, tgt_mask=causal, tgt_is_causal=True))


class HubTagger(keras.Model):
    """The same with keras-hub's `TransformerDecoder` (causal by default)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embedding = layers.Embedding(VOCAB, MODEL_DIM)
        self.decoder = keras_hub.layers.TransformerDecoder(FFN, HEADS, layer_norm_epsilon=1e-5)
        self.out = layers.Dense(VOCAB)

    def call(self, memory, tokens):
        return self.out(self.decoder(self.embedding(tokens), memory))


def transformer_classifier() -> nn.Module:
    return TransformerClassifier()


def one_layer_classifier() -> nn.Module:
    return OneLayerClassifier()


def transformer_tagger() -> nn.Module:
    return TransformerTagger()


def hub_tagger() -> keras.Model:
    return HubTagger()


class TransformerSeq2Seq(nn.Module):
    """`nn.Transformer` as the torch translation tutorial uses it: source and target embeddings, the model
    (two encoder and two decoder layers, their final LayerNorms), a causal target mask, a generator."""

    def __init__(self):
        super().__init__()
        self.src_embedding = nn.Embedding(VOCAB, MODEL_DIM)
        self.tgt_embedding = nn.Embedding(VOCAB, MODEL_DIM)
        self.transformer = nn.Transformer(MODEL_DIM, HEADS, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FFN,
                                          batch_first=True)  # fmt: skip
        self.generator = nn.Linear(MODEL_DIM, VOCAB)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=self.generator.weight.dtype)
        return self.generator(
            self.transformer(self.src_embedding(src), self.tgt_embedding(tgt), tgt_mask=mask, tgt_is_causal=True)
        )


class HubSeq2Seq(keras.Model):
    """Its Keras twin from keras-hub's blocks: encoder and decoder stacks, each with a final LayerNormalization
    (nn.Transformer's `encoder.norm`, `decoder.norm`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.src_embedding = layers.Embedding(VOCAB, MODEL_DIM)
        self.tgt_embedding = layers.Embedding(VOCAB, MODEL_DIM)
        self.encoder_layers = [keras_hub.layers.TransformerEncoder(FFN, HEADS, layer_norm_epsilon=1e-5) for _ in range(2)]
        self.encoder_norm = layers.LayerNormalization(epsilon=1e-5)
        self.decoder_layers = [keras_hub.layers.TransformerDecoder(FFN, HEADS, layer_norm_epsilon=1e-5) for _ in range(2)]
        self.decoder_norm = layers.LayerNormalization(epsilon=1e-5)
        self.generator = layers.Dense(VOCAB)

    def call(self, src, tgt):
        memory = self.src_embedding(src)
        for layer in self.encoder_layers:
            memory = layer(memory)
        memory = self.encoder_norm(memory)
        x = self.tgt_embedding(tgt)
        for layer in self.decoder_layers:
            x = layer(x, memory)
        return self.generator(self.decoder_norm(x))
