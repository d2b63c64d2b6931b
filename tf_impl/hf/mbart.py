"""mBART in Keras 3, in keras-hub's shape, computing transformers 5.23's MBartForConditionalGeneration
(models/mbart/modeling_mbart.py): BART's learned positions (offset 2) and layernorm_embedding, pre-norm layers, and
the encoder's and decoder's final layer_norm. Legend: B batch, T target, V vocab."""

from __future__ import annotations

import keras

from tf_impl.hf import bart_family

MODEL_TYPE, ARCHITECTURE = "mbart", "MBartForConditionalGeneration"
# MBartConfig's defaults (configuration_mbart.py) for the fields a config.json may leave out
DEFAULTS = {
    "vocab_size": 50265, "max_position_embeddings": 1024, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
    "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
    "activation_function": "gelu", "scale_embedding": False, "pad_token_id": 1, "dropout": 0.1, "attention_dropout": 0.0,
    "activation_dropout": 0.0, "tie_word_embeddings": True, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
}  # fmt: skip


def from_hf_config(config: dict) -> dict:
    """MBartBackbone's arguments from a config.json dict; one ValueError naming the field it cannot honour."""
    return bart_family.arguments(config, MODEL_TYPE, DEFAULTS)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MBartBackbone(bart_family.BartFamilyBackbone):
    """MBartModel: scaled token embeddings + learned positions (row = position + 2), layernorm_embedding, pre-norm
    layers (normalize_before), then the final layer_norm on each side. Returns the encoder's and the decoder's last
    hidden states [B, S, E] and [B, T, E]."""

    FLAGS = {"positions": "learned", "layernorm_embedding": True, "normalize_before": True, "final_layer_norm": True}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class MBartSeq2SeqLM(bart_family.BartFamilySeq2SeqLM):
    """MBartForConditionalGeneration: the backbone, lm_head (tied: model.shared), final_logits_bias -> [B, T, V]."""

    BACKBONE = MBartBackbone
    ARGUMENTS = staticmethod(from_hf_config)


MODELS = (MBartSeq2SeqLM,)


def build(config: dict, dtype=None) -> MBartSeq2SeqLM:
    """The MBartForConditionalGeneration a config.json dict describes (random weights), keeping the dict."""
    return MBartSeq2SeqLM.from_hf_config(config, dtype=dtype)


def hf_config(model) -> dict:
    """config.json's dict for the model (bart_family.hf_config)."""
    return bart_family.hf_config(model, MODEL_TYPE, ARCHITECTURE)


hf_state, load_hf_weights = bart_family.hf_state, bart_family.load_hf_weights
