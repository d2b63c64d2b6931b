"""MarianMT in Keras 3, in keras-hub's shape (a backbone and a Seq2SeqLM on it), computing transformers' MarianMTModel.

Follows transformers 5.23 models/marian/modeling_marian.py (MarianModel, MarianMTModel): the BART family's model
(tf_impl/hf/bart_family.py) with Marian's sinusoidal positions, post-norm layers and no embedding norm; built from a
config.json dict, its weights in and out through tf_impl/hf/marian_weights.py. Legend: B batch, S source, T target.
"""

from __future__ import annotations

import keras

from tf_impl.hf import bart_family
from tf_impl.hf.bart_family import FinalLogitsBias  # noqa: F401  (its registered name, where earlier files found it)

MODEL_TYPE, ARCHITECTURE = "marian", "MarianMTModel"
# MarianConfig's defaults (configuration_marian.py) for the fields a config.json may leave out
DEFAULTS = {
    "vocab_size": 58101, "decoder_vocab_size": None, "max_position_embeddings": 1024, "d_model": 1024,
    "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 16, "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "activation_function": "gelu", "scale_embedding": False,
    "pad_token_id": 58100, "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
    "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True, "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
}  # fmt: skip
RATES = bart_family.RATES
LAYER_NORM_EPS = bart_family.LAYER_NORM_EPS


def from_hf_config(config: dict) -> dict:
    """MarianBackbone's arguments from a config.json dict; one ValueError naming the field it cannot honour."""
    return bart_family.arguments(config, MODEL_TYPE, DEFAULTS)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianBackbone(bart_family.BartFamilyBackbone):
    """MarianModel: token embeddings (shared or not) * embed_scale + sinusoidal positions, post-norm layers, no
    embedding norm. Returns the encoder's and the decoder's last hidden states [B, S, E] and [B, T, E]."""

    FLAGS = {"positions": "sinusoidal", "layernorm_embedding": False, "normalize_before": False, "final_layer_norm": False}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MarianSeq2SeqLM(bart_family.BartFamilySeq2SeqLM):
    """MarianMTModel: the backbone, the lm head (tied: the decoder's embedding), plus final_logits_bias -> [B, T, V]."""

    BACKBONE = MarianBackbone
    ARGUMENTS = staticmethod(from_hf_config)


MODELS = (MarianSeq2SeqLM,)


def build(config: dict, dtype=None) -> MarianSeq2SeqLM:
    """The MarianMTModel a config.json dict describes (random weights), keeping the dict."""
    return MarianSeq2SeqLM.from_hf_config(config, dtype=dtype)


def hf_config(model) -> dict:
    """config.json's dict for the model (bart_family.hf_config)."""
    return bart_family.hf_config(model, MODEL_TYPE, ARCHITECTURE)


hf_state, load_hf_weights = bart_family.hf_state, bart_family.load_hf_weights
