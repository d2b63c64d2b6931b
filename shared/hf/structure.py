"""The families' state_dicts as transformers 5.23 builds them (MarianMT, BART, mBART, T5), from a config.json dict:
every key and shape, the tied matrices (`get_expanded_tied_weights_keys`, `tie_weights`), and Marian's sinusoidal
position table, which is no weight. Numpy only: the stacks' Hugging Face models (tf_impl/hf/) use it too."""

from __future__ import annotations

import numpy as np

# ---- the family's state_dict: keys and shapes from the config ----

T5_TYPES = ("t5", "mt5")  # modeling_mt5.py's MT5ForConditionalGeneration: T5's keys, shapes and ties


def _linear(prefix: str, out: int, inp: int, bias: bool = True) -> dict[str, tuple]:
    return {f"{prefix}.weight": (out, inp)} | ({f"{prefix}.bias": (out,)} if bias else {})


def _norm(prefix: str, size: int, bias: bool = True) -> dict[str, tuple]:
    return {f"{prefix}.weight": (size,)} | ({f"{prefix}.bias": (size,)} if bias else {})


def _attention(prefix: str, d: int) -> dict[str, tuple]:
    return {
        key: shape
        for name in ("q_proj", "k_proj", "v_proj", "out_proj")
        for key, shape in _linear(f"{prefix}.{name}", d, d).items()
    }


def _bart_layer(prefix: str, d: int, ffn: int, cross: bool) -> dict[str, tuple]:
    """One encoder/decoder layer of modeling_bart.py's BartEncoderLayer/BartDecoderLayer (Marian's and mBART's alike)."""
    shapes = _attention(f"{prefix}.self_attn", d) | _norm(f"{prefix}.self_attn_layer_norm", d)
    if cross:
        shapes |= _attention(f"{prefix}.encoder_attn", d) | _norm(f"{prefix}.encoder_attn_layer_norm", d)
    return shapes | _linear(f"{prefix}.fc1", ffn, d) | _linear(f"{prefix}.fc2", d, ffn) | _norm(f"{prefix}.final_layer_norm", d)


def _bart_shapes(config: dict, model_type: str) -> dict[str, tuple]:
    """MarianMTModel / BartForConditionalGeneration / MBartForConditionalGeneration: learned positions offset by 2
    (BartLearnedPositionalEmbedding) except Marian's sinusoid; embedding norms in BART and mBART, final norms in mBART."""
    d, vocab = int(config["d_model"]), int(config["vocab_size"])
    separate = model_type == "marian" and not config.get("share_encoder_decoder_embeddings", True)
    target = int(config.get("decoder_vocab_size") or vocab) if separate else vocab
    positions = int(config["max_position_embeddings"]) + (0 if model_type == "marian" else 2)
    shapes = {"final_logits_bias": (1, target)} | ({} if separate else {"model.shared.weight": (vocab, d)})
    for side, cross in (("encoder", False), ("decoder", True)):
        prefix = f"model.{side}"
        shapes[f"{prefix}.embed_tokens.weight"] = (target if cross else vocab, d)
        shapes[f"{prefix}.embed_positions.weight"] = (positions, d)
        for index in range(int(config[f"{side}_layers"])):
            shapes |= _bart_layer(f"{prefix}.layers.{index}", d, int(config[f"{side}_ffn_dim"]), cross)
        if model_type != "marian":
            shapes |= _norm(f"{prefix}.layernorm_embedding", d)
        if model_type == "mbart":
            shapes |= _norm(f"{prefix}.layer_norm", d)
    return shapes | {"lm_head.weight": (target, d)}


def _t5_attention(prefix: str, config: dict, relative: bool) -> dict[str, tuple]:
    d, inner = int(config["d_model"]), int(config["d_kv"]) * int(config["num_heads"])
    shapes = {f"{prefix}.{name}.weight": (inner, d) for name in "qkv"} | {f"{prefix}.o.weight": (d, inner)}
    buckets = (int(config.get("relative_attention_num_buckets", 32)), int(config["num_heads"]))
    return shapes | ({f"{prefix}.relative_attention_bias.weight": buckets} if relative else {})


def _t5_shapes(config: dict, model_type: str) -> dict[str, tuple]:
    """T5ForConditionalGeneration (modeling_t5.py): a relative bias in block 0's self-attention only, DenseReluDense
    `wi` or gated `wi_0`/`wi_1` (feed_forward_proj "gated-...", mT5's default), RMS norms without bias."""
    d, ffn, vocab = int(config["d_model"]), int(config["d_ff"]), int(config["vocab_size"])
    gated = str(config.get("feed_forward_proj", "gated-gelu" if model_type == "mt5" else "relu")).startswith("gated-")
    dense = ("wi_0", "wi_1") if gated else ("wi",)
    shapes = {"shared.weight": (vocab, d)}
    layers = {"encoder": int(config["num_layers"]), "decoder": int(config.get("num_decoder_layers") or config["num_layers"])}
    for side, count in layers.items():
        shapes[f"{side}.embed_tokens.weight"] = (vocab, d)
        for index in range(count):
            block = f"{side}.block.{index}.layer"
            shapes |= _t5_attention(f"{block}.0.SelfAttention", config, index == 0) | _norm(f"{block}.0.layer_norm", d, False)
            last = 1
            if side == "decoder":
                shapes |= _t5_attention(f"{block}.1.EncDecAttention", config, False) | _norm(f"{block}.1.layer_norm", d, False)
                last = 2
            shapes |= {f"{block}.{last}.DenseReluDense.{name}.weight": (ffn, d) for name in dense}
            shapes |= {f"{block}.{last}.DenseReluDense.wo.weight": (d, ffn)} | _norm(f"{block}.{last}.layer_norm", d, False)
        shapes |= _norm(f"{side}.final_layer_norm", d, False)
    return shapes | {"lm_head.weight": (vocab, d)}


def state_dict_shapes(config: dict, model_type: str) -> dict[str, tuple]:
    """Every key of the family's `AutoModelForSeq2SeqLM.from_config(config).state_dict()` and its shape."""
    try:
        return _t5_shapes(config, model_type) if model_type in T5_TYPES else _bart_shapes(config, model_type)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"config.json: field {error} is missing or not a number (the {model_type} model's sizes need it)"
        ) from None


def tied_keys(config: dict, model_type: str) -> dict[str, str]:
    """{target: source} as `get_expanded_tied_weights_keys(all_submodels=True)` gives it: nothing without
    tie_word_embeddings (T5Config and MT5Config force it True); Marian ties through `model.shared` only when it shares them."""
    if model_type not in T5_TYPES and not config.get("tie_word_embeddings", True):
        return {}
    if model_type in T5_TYPES:
        return {f"{name}.weight": "shared.weight" for name in ("encoder.embed_tokens", "decoder.embed_tokens", "lm_head")}
    if model_type == "marian" and not config.get("share_encoder_decoder_embeddings", True):
        return {"lm_head.weight": "model.decoder.embed_tokens.weight"}
    return {
        key: "model.shared.weight"
        for key in ("lm_head.weight", "model.decoder.embed_tokens.weight", "model.encoder.embed_tokens.weight")
    }


def resolve_ties(arrays: dict[str, np.ndarray], ties: dict[str, str]) -> dict[str, np.ndarray]:
    """The arrays with each tie filled as `tie_weights(missing_keys=...)` does: the target from its source, or the source
    from its target where only the target was written; both written: both kept (untied, as HF does)."""
    arrays = dict(arrays)
    for target, source in ties.items():
        if target not in arrays and source in arrays:
            arrays[target] = arrays[source]
        elif source not in arrays and target in arrays:
            arrays[source] = arrays[target]
    return arrays


def marian_sinusoid(positions: int, dim: int, dtype) -> np.ndarray:
    """modeling_marian.py's MarianSinusoidalPositionalEmbedding.create_weight [P, D]: sin of the even columns in the
    first half, cos of the odd ones in the second (not interleaved), computed in float64, then cast."""
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(positions)])
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out = np.empty((positions, dim), dtype=np.float32)  # [P, D]  torch.FloatTensor: float32 first, as HF does
    out[:, :sentinel] = np.sin(position_enc[:, 0::2])
    out[:, sentinel:] = np.cos(position_enc[:, 1::2])
    return out.astype(dtype)
