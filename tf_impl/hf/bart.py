"""BART in Keras 3, in keras-hub's shape, computing transformers 5.23's BartForConditionalGeneration
(models/bart/modeling_bart.py): learned positions offset by 2, layernorm_embedding, post-norm layers.
Legend: B batch, T target, V vocab."""

from __future__ import annotations

import keras

from tf_impl.hf import bart_family

MODEL_TYPE, ARCHITECTURE = "bart", "BartForConditionalGeneration"
# BartConfig's defaults (configuration_bart.py) for the fields a config.json may leave out
DEFAULTS = {
    "vocab_size": 50265, "max_position_embeddings": 1024, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
    "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
    "activation_function": "gelu", "scale_embedding": False, "pad_token_id": 1, "dropout": 0.1, "attention_dropout": 0.0,
    "activation_dropout": 0.0, "tie_word_embeddings": True, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
}  # fmt: skip


def from_hf_config(config: dict) -> dict:
    """BartBackbone's arguments from a config.json dict; one ValueError naming the field it cannot honour."""
    return bart_family.arguments(config, MODEL_TYPE, DEFAULTS)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class BartBackbone(bart_family.BartFamilyBackbone):
    """BartModel: scaled token embeddings + learned positions (row = position + 2), layernorm_embedding, post-norm
    layers. Returns the encoder's and the decoder's last hidden states [B, S, E] and [B, T, E]."""

    FLAGS = {"positions": "learned", "layernorm_embedding": True, "normalize_before": False, "final_layer_norm": False}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class BartSeq2SeqLM(bart_family.BartFamilySeq2SeqLM):
    """BartForConditionalGeneration: the backbone, lm_head (tied: model.shared), final_logits_bias -> [B, T, V]."""

    BACKBONE = BartBackbone
    ARGUMENTS = staticmethod(from_hf_config)


MODELS = (BartSeq2SeqLM,)


def build(config: dict, dtype=None) -> BartSeq2SeqLM:
    """The BartForConditionalGeneration a config.json dict describes (random weights), keeping the dict."""
    return BartSeq2SeqLM.from_hf_config(config, dtype=dtype)


def hf_config(model) -> dict:
    """config.json's dict for the model (bart_family.hf_config)."""
    return bart_family.hf_config(model, MODEL_TYPE, ARCHITECTURE)


hf_state, load_hf_weights = bart_family.hf_state, bart_family.load_hf_weights
