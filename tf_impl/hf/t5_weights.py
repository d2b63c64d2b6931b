"""HF's T5ForConditionalGeneration state dict (numpy arrays, keys as its state_dict()) into our Keras T5Seq2SeqLM, and
back out (hf_state).

Strict: every variable set, every key used, shapes checked; the tied keys (shared, encoder/decoder embed_tokens, and
lm_head unless the config.json says tie_word_embeddings false) may name the shared matrix under any of their names,
and must agree where repeated. HF's ignored key (decoder block 0's EncDecAttention.relative_attention_bias) is accepted
and unused, as T5ForConditionalGeneration._keys_to_ignore_on_load_unexpected has it.
"""

from __future__ import annotations

import keras
import numpy as np

from tf_impl.hf.marian_weights import assign_strict  # one strict reading for every family

IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)
EMBEDDINGS = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def _attention(prefix: str, attention) -> list:
    return [((f"{prefix}.{name}.weight",), getattr(attention, name).kernel, True) for name in ("q", "k", "v", "o")]


def _block_targets(prefix: str, block) -> list:
    """One T5Block: layer.0 self-attention, (decoder) layer.1 cross-attention, then the feed-forward layer."""
    found = _attention(f"{prefix}.layer.0.SelfAttention", block.self_attention)
    found.append(((f"{prefix}.layer.0.layer_norm.weight",), block.self_attention_norm.weight, False))
    last = 1
    if block.decoder:
        found += _attention(f"{prefix}.layer.1.EncDecAttention", block.cross_attention)
        found.append(((f"{prefix}.layer.1.layer_norm.weight",), block.cross_attention_norm.weight, False))
        last = 2
    feed_forward = block.feed_forward
    for dense in (*feed_forward.projections, feed_forward.wo):
        found.append(((f"{prefix}.layer.{last}.DenseReluDense.{dense.name}.weight",), dense.kernel, True))
    return found + [((f"{prefix}.layer.{last}.layer_norm.weight",), feed_forward.layer_norm.weight, False)]


def targets(model) -> list:
    """Every variable of `model` (a T5Seq2SeqLM) with the HF keys that hold it: (names, variable, transpose)."""
    backbone, head = model.backbone, model.lm_head
    embedding = backbone.token_embedding.embeddings
    if head.tied:
        found = [((*EMBEDDINGS, "lm_head.weight"), embedding, False)]
    else:
        found = [(EMBEDDINGS, embedding, False), (("lm_head.weight",), head.kernel, False)]
    for side in ("encoder", "decoder"):
        bias = getattr(backbone, f"{side}_relative_bias").embeddings
        found.append(((f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",), bias, False))
        for i, block in enumerate(getattr(backbone, f"{side}_blocks")):
            found += _block_targets(f"{side}.block.{i}", block)
        found.append(((f"{side}.final_layer_norm.weight",), getattr(backbone, f"{side}_final_layer_norm").weight, False))
    return found


def load_hf_weights(model, state: dict) -> None:
    """Set every variable of a T5Seq2SeqLM from HF's state dict; one ValueError listing every problem. An untied lm_head
    missing from the state takes the shared matrix, as HF's tie_weights fills it."""
    if not model.lm_head.tied and "lm_head.weight" not in state and "shared.weight" in state:
        state = {**state, "lm_head.weight": state["shared.weight"]}
    assign_strict(model, targets(model), state, set(IGNORED), "HF T5 state dict does not fit the model", [])


def hf_state(model) -> dict[str, np.ndarray]:
    """Every key of HF's state_dict() (each tied name repeated), torch's layouts, in the model's dtype."""
    state = {}
    for names, variable, transpose in targets(model):
        value = keras.ops.convert_to_numpy(variable)
        value = np.ascontiguousarray(value.T if transpose else value)
        state.update(dict.fromkeys(names, value))
    return state
