"""MarianMT in Keras 3, in keras-hub's shape (a backbone and a Seq2SeqLM on it), computing transformers' MarianMTModel.

Follows transformers 5.23 models/marian/modeling_marian.py (MarianModel, MarianMTModel) built from a config.json
dict; its weights come in through tf_impl/hf/marian_weights.py. Legend: B batch, S source, T target, E d_model, V vocab.
"""

from __future__ import annotations

import keras
from keras import ops

from tf_impl.hf import marian_layers as layers
from tf_impl.keras_compat import backends

# MarianConfig's defaults (configuration_marian.py) for the fields a config.json may leave out
DEFAULTS = {
    "vocab_size": 58101, "decoder_vocab_size": None, "max_position_embeddings": 1024, "d_model": 1024,
    "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 16, "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "activation_function": "gelu", "scale_embedding": False,
    "pad_token_id": 58100, "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
    "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
}  # fmt: skip
INTEGERS = ("vocab_size", "max_position_embeddings", "d_model", "encoder_layers", "decoder_layers",
            "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim")  # fmt: skip
RATES = ("dropout", "attention_dropout", "activation_dropout")
LAYER_NORM_EPS = 1e-5  # HF's MarianEncoderLayer/DecoderLayer build nn.LayerNorm(d_model): torch's default eps, no config field


def _field(config: dict, name: str):
    return config[name] if config.get(name) is not None else DEFAULTS[name]


def _check_integers(config: dict) -> None:
    for name in INTEGERS:
        value = _field(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.json field {name!r}: expected a positive integer, got {value!r}")


def _check_rates(config: dict) -> None:
    for name in RATES:
        value = _field(config, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise ValueError(f"config.json field {name!r}: expected a dropout rate in [0, 1), got {value!r}")


def _check_choices(config: dict, out: dict) -> None:
    if out["activation"] not in layers.ACTIVATIONS:
        raise ValueError(f"config.json field 'activation_function': {out['activation']!r} is not one of "
                         f"{sorted(layers.ACTIVATIONS)}")  # fmt: skip
    for side in ("encoder", "decoder"):
        if out["hidden_dim"] % out[f"{side}_heads"]:
            raise ValueError(f"config.json field '{side}_attention_heads': {out[f'{side}_heads']} does not divide "
                             f"d_model {out['hidden_dim']}")  # fmt: skip
    if out["share_embeddings"] and out["decoder_vocabulary_size"] != out["vocabulary_size"]:
        raise ValueError(f"config.json field 'decoder_vocab_size': {out['decoder_vocabulary_size']} differs from vocab_size "
                         f"{out['vocabulary_size']} while share_encoder_decoder_embeddings is true")  # fmt: skip
    if not isinstance(out["pad_token_id"], int) or not 0 <= out["pad_token_id"] < out["decoder_vocabulary_size"]:
        raise ValueError(f"config.json field 'pad_token_id': {out['pad_token_id']!r} is not a token of the vocabulary")


def from_hf_config(config: dict) -> dict:
    """MarianBackbone's arguments from a config.json dict; one ValueError naming the field it cannot honour."""
    if config.get("model_type", "marian") != "marian":
        raise ValueError(f"config.json field 'model_type': {config['model_type']!r}, expected 'marian'")
    _check_integers(config)
    _check_rates(config)
    vocab = _field(config, "vocab_size")
    out = {
        "vocabulary_size": vocab,
        "decoder_vocabulary_size": config.get("decoder_vocab_size") or vocab,  # MarianConfig.__post_init__
        "hidden_dim": _field(config, "d_model"),
        "encoder_layers": _field(config, "encoder_layers"),
        "decoder_layers": _field(config, "decoder_layers"),
        "encoder_heads": _field(config, "encoder_attention_heads"),
        "decoder_heads": _field(config, "decoder_attention_heads"),
        "encoder_ffn_dim": _field(config, "encoder_ffn_dim"),
        "decoder_ffn_dim": _field(config, "decoder_ffn_dim"),
        "activation": _field(config, "activation_function"),
        "scale_embedding": bool(_field(config, "scale_embedding")),
        "max_sequence_length": _field(config, "max_position_embeddings"),
        "pad_token_id": _field(config, "pad_token_id"),
        "share_embeddings": bool(_field(config, "share_encoder_decoder_embeddings")),
        "tie_word_embeddings": bool(_field(config, "tie_word_embeddings")),
        **{name: float(_field(config, name)) for name in RATES},
        "layer_norm_epsilon": LAYER_NORM_EPS,
    }
    _check_choices(config, out)
    return out


def _inputs():
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    return {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}


class _PlainUntilBuilt:
    """keras-hub's Backbone.__setattr__: on Keras's torch backend a layer is a torch Module, which cannot be set on a
    model before Module.__init__ ran; until then attributes are set plainly (the functional graph tracks its layers)."""

    def __setattr__(self, name, value):
        if keras.config.backend() == "torch" and not hasattr(self, "_initialized"):
            return object.__setattr__(self, name, value)
        return super().__setattr__(name, value)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianBackbone(_PlainUntilBuilt, keras.Model):
    """MarianModel: token embeddings (shared or not) * embed_scale + sinusoidal positions, post-norm layers.

    Untied (tie_word_embeddings false) HF keeps encoder, decoder (and lm_head) matrices apart, and model.shared beside
    them though no forward pass reads it: ours holds it too (`shared_embed_tokens`), so every HF weight has a home.

    Called on keras-hub's four inputs (padding masks 1 for a real token); returns the encoder's and the decoder's last
    hidden states [B, S, E] and [B, T, E].
    """

    def __init__(self, vocabulary_size, decoder_vocabulary_size, hidden_dim, encoder_layers, decoder_layers, encoder_heads,
                 decoder_heads, encoder_ffn_dim, decoder_ffn_dim, activation="gelu", scale_embedding=False,
                 max_sequence_length=1024, pad_token_id=0, share_embeddings=True, dropout=0.0, layer_norm_epsilon=1e-5,
                 tie_word_embeddings=True, attention_dropout=0.0, activation_dropout=0.0, dtype=None, **kwargs):  # fmt: skip
        arguments = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "dtype", "__class__")}
        backends.check_dtype(keras.dtype_policies.get(dtype or keras.config.floatx()).compute_dtype)  # float64 on JAX/torch
        tied = share_embeddings and tie_word_embeddings  # HF 5.23 ties encoder and decoder only when both are true
        self.encoder_embed_tokens = keras.layers.Embedding(vocabulary_size, hidden_dim, dtype=dtype, name="embed_tokens")
        self.decoder_embed_tokens = self.encoder_embed_tokens if tied else keras.layers.Embedding(
            decoder_vocabulary_size, hidden_dim, dtype=dtype, name="decoder_embed_tokens")  # fmt: skip
        self.encoder_embed_positions, self.decoder_embed_positions = (
            layers.MarianPositions(max_sequence_length, hidden_dim, dtype=dtype, name=f"{side}_embed_positions")
            for side in ("encoder", "decoder")
        )
        self.embed_scale = layers.embed_scale(hidden_dim, scale_embedding)
        self.embed_dropout = keras.layers.Dropout(dropout, dtype=dtype)
        self.masks = layers.MarianMasks(dtype=dtype, name="masks")
        common = {"activation": activation, "dropout": dropout, "epsilon": layer_norm_epsilon, "dtype": dtype,
                  "attention_dropout": attention_dropout, "activation_dropout": activation_dropout}  # fmt: skip
        self.encoder_layers = [layers.MarianEncoderLayer(hidden_dim, encoder_heads, encoder_ffn_dim, **common,
                                                         name=f"encoder_layer_{i}") for i in range(encoder_layers)]  # fmt: skip
        self.decoder_layers = [layers.MarianDecoderLayer(hidden_dim, decoder_heads, decoder_ffn_dim, **common,
                                                         name=f"decoder_layer_{i}") for i in range(decoder_layers)]  # fmt: skip
        inputs = _inputs()
        super().__init__(inputs=inputs, outputs=self._forward(inputs), **kwargs)
        self._initialized = True
        self.dtype_policy = keras.dtype_policies.get(dtype)  # Functional drops dtype; keras-hub's Backbone sets it so
        self.arguments = arguments
        self.shared_embed_tokens = None  # outside the graph: set once the model is, so every backend tracks it
        if share_embeddings and not tie_word_embeddings:
            self.shared_embed_tokens = keras.layers.Embedding(vocabulary_size, hidden_dim, dtype=dtype, name="shared")
            self.shared_embed_tokens.build((None, None))

    def _embed(self, tokens, embedding, positions, training=False):
        x = embedding(tokens)  # [B, L, E]
        x = x * layers.constant(self.embed_scale, x)  # [B, L, E]
        return self.embed_dropout(x + positions(x), training=training)  # [B, L, E]

    def _forward(self, inputs):
        """The functional graph: encoder then decoder, masks as HF's eager attention adds them."""
        encoder_mask, self_mask = self.masks(inputs["encoder_padding_mask"], inputs["decoder_padding_mask"])  # [B, 1, 1, S]
        x = self._embed(inputs["encoder_token_ids"], self.encoder_embed_tokens, self.encoder_embed_positions)  # [B, S, E]
        for layer in self.encoder_layers:
            x = layer(x, encoder_mask)  # [B, S, E]
        encoder_output = x
        y = self._embed(inputs["decoder_token_ids"], self.decoder_embed_tokens, self.decoder_embed_positions)  # [B, T, E]
        for layer in self.decoder_layers:
            y = layer(y, self_mask, encoder_output, encoder_mask)  # [B, T, E]
        return {"encoder_sequence_output": encoder_output, "decoder_sequence_output": y}

    def get_config(self):
        return {"name": self.name, "dtype": keras.saving.serialize_keras_object(self.dtype_policy), **self.arguments}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        dtype = keras.dtype_policies.get(config.pop("dtype"))
        return cls(**config, dtype=dtype)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianSeq2SeqLM(_PlainUntilBuilt, keras.Model):
    """MarianMTModel: the backbone, the lm head (tied: the decoder's embedding), plus final_logits_bias -> [B, T, V]."""

    def __init__(self, backbone: MarianBackbone, **kwargs):
        self.backbone = backbone
        inputs = _inputs()
        hidden = backbone(inputs)["decoder_sequence_output"]  # [B, T, E]
        tied = backbone.arguments.get("tie_word_embeddings", True)
        self.final_logits_bias = FinalLogitsBias(backbone.decoder_embed_tokens, tied, dtype=backbone.dtype_policy,
                                                 name="final_logits_bias")  # fmt: skip
        super().__init__(inputs=inputs, outputs=self.final_logits_bias(hidden), **kwargs)
        self._initialized = True
        self.dtype_policy = backbone.dtype_policy

    def get_config(self):
        return {"name": self.name, "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(backbone=keras.saving.deserialize_keras_object(config.pop("backbone")), name=config.get("name"))

    @classmethod
    def from_hf_config(cls, config: dict, dtype=None) -> MarianSeq2SeqLM:
        """The model a config.json dict describes, built (random weights until load_hf_weights)."""
        return cls(MarianBackbone(**from_hf_config(config), dtype=dtype))


@keras.saving.register_keras_serializable(package="rosetta_hf")
class FinalLogitsBias(keras.layers.Layer):
    """MarianMTModel's lm_head (hidden @ W^T, W [V, E]: tied, the decoder's embedding; untied, its own `kernel`, HF's
    lm_head.weight) + final_logits_bias [1, V] (a buffer in HF, saved)."""

    def __init__(self, embedding, tied: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.embedding, self.tied = embedding, tied
        vocabulary, dim = embedding.input_dim, embedding.output_dim
        self.kernel = None if tied else self.add_weight(shape=(vocabulary, dim), initializer="zeros", name="kernel")
        self.bias = self.add_weight(shape=(1, vocabulary), initializer="zeros", trainable=False, name="bias")

    def call(self, hidden):
        matrix = self.embedding.embeddings if self.tied else self.kernel  # [V, E]
        return ops.matmul(hidden, ops.transpose(matrix)) + self.bias  # [B, T, V]
