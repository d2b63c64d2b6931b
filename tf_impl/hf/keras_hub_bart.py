"""keras-hub's own BartSeq2SeqLM as a port target: HF's BartForConditionalGeneration weights in and out, the family
contract (MODELS, build, load_hf_weights, hf_state, hf_config).

Follows transformers 5.23 models/bart/modeling_bart.py (BartLearnedPositionalEmbedding's offset of 2, post-norm
layers, layernorm_embedding, lm_head tied to model.shared) and keras-hub 0.32's models/bart/bart_backbone.py, whose
one ReversibleEmbedding is the encoder's, the decoder's and the head's matrix. What keras-hub cannot compute as HF
does is refused by name; our own BART model (tf_impl/hf/) computes it. Legend: B batch, S source, T target, E d_model,
N heads, V vocabulary, P positions.
"""

from __future__ import annotations

import keras
import numpy as np

from tf_impl.hf import marian_weights
from tf_impl.keras_compat import backends

try:
    import keras_hub
except ImportError:  # keras-hub is optional (pyproject's "hub" extra): then this module owns no model
    keras_hub = None

MODELS: tuple[type, ...] = (keras_hub.models.BartSeq2SeqLM,) if keras_hub else ()
OFFSET = 2  # BartLearnedPositionalEmbedding: HF's rows 0 and 1 are never read; keras-hub keeps rows 2.. only
# BartConfig's defaults (configuration_bart.py) for the fields a config.json may leave out
DEFAULTS = {"vocab_size": 50265, "max_position_embeddings": 1024, "d_model": 1024, "encoder_layers": 12,
            "decoder_layers": 12, "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
            "decoder_ffn_dim": 4096, "activation_function": "gelu", "scale_embedding": False, "dropout": 0.1,
            "attention_dropout": 0.0, "activation_dropout": 0.0, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
            "tie_word_embeddings": True, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
            "decoder_start_token_id": 2, "forced_eos_token_id": 2}  # fmt: skip
INTEGERS = ("vocab_size", "max_position_embeddings", "d_model", "encoder_layers", "decoder_layers",
            "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim")  # fmt: skip
# one number in keras-hub's BartBackbone for both sides: the decoder's field must equal the encoder's
SAME_BOTH_SIDES = (("decoder_layers", "encoder_layers"), ("decoder_attention_heads", "encoder_attention_heads"),
                   ("decoder_ffn_dim", "encoder_ffn_dim"))  # fmt: skip
# what keras-hub fixes: BartBackbone's TransformerEncoder/Decoder use keras.activations.gelu (exact, HF's "gelu"),
# ReversibleEmbedding with tied weights, no sqrt(d_model) scale; LayerNormalization eps 1e-5 as HF's nn.LayerNorm
FIXED = {"activation_function": "gelu", "scale_embedding": False, "tie_word_embeddings": True}
OURS = "keras-hub's BartBackbone cannot compute it as HF does; our own BART model (tf_impl/hf/) does"


def _field(config: dict, name: str):
    return config[name] if config.get(name) is not None else DEFAULTS[name]


def _refuse(name: str, value, problem: str):
    raise ValueError(f"config.json field {name!r}: {value!r} {problem}: {OURS}")


def _check(config: dict) -> None:
    """One ValueError naming the first field keras-hub's BartBackbone cannot honour."""
    if config.get("model_type", "bart") != "bart":
        _refuse("model_type", config["model_type"], "is not 'bart'")
    for name in INTEGERS:
        value = _field(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.json field {name!r}: expected a positive integer, got {value!r}")
    for name, encoder in SAME_BOTH_SIDES:
        if _field(config, name) != _field(config, encoder):
            _refuse(name, _field(config, name), f"differs from {encoder} {_field(config, encoder)!r}")
    for name, wanted in FIXED.items():
        if _field(config, name) != wanted:
            _refuse(name, _field(config, name), f"is not {wanted!r}, keras-hub's only value")
    if _field(config, "d_model") % _field(config, "encoder_attention_heads"):
        raise ValueError(f"config.json field 'encoder_attention_heads': {_field(config, 'encoder_attention_heads')} does "
                         f"not divide d_model {_field(config, 'd_model')}")  # fmt: skip
    dropout = _field(config, "dropout")
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise ValueError(f"config.json field 'dropout': expected a dropout rate in [0, 1), got {dropout!r}")


def training_differences(config: dict) -> list[str]:
    """The config's training-only fields keras-hub applies otherwise (inference is equal): keras-hub drops attention
    probabilities at `dropout`, has no activation dropout and no layerdrop."""
    found = [] if _field(config, "attention_dropout") == _field(config, "dropout") else ["attention_dropout"]
    found += [name for name in ("activation_dropout", "encoder_layerdrop", "decoder_layerdrop") if _field(config, name)]
    return found


def backbone_arguments(config: dict) -> dict:
    """BartBackbone's arguments from a config.json dict; one ValueError naming the field it cannot honour."""
    _check(config)
    return {"vocabulary_size": _field(config, "vocab_size"), "num_layers": _field(config, "encoder_layers"),
            "num_heads": _field(config, "encoder_attention_heads"), "hidden_dim": _field(config, "d_model"),
            "intermediate_dim": _field(config, "encoder_ffn_dim"), "dropout": float(_field(config, "dropout")),
            "max_sequence_length": _field(config, "max_position_embeddings")}  # fmt: skip


if keras_hub is not None:

    @keras.saving.register_keras_serializable(package="rosetta_hf")
    class HfBartSeq2SeqLM(keras_hub.models.BartSeq2SeqLM):
        """keras-hub's BartSeq2SeqLM keeping the config.json dict it was built from (`hf_config`, in get_config: a
        `.keras` file keeps every field), its float64 arithmetic made exact on load as on build."""

        def __init__(self, backbone, preprocessor=None, hf_config=None, **kwargs):
            super().__init__(backbone=backbone, preprocessor=preprocessor, **kwargs)
            self.hf_config = dict(hf_config or {})
            backends.exact_float64(self)

        def get_config(self):
            return super().get_config() | {"hf_config": self.hf_config}


def build(config: dict, dtype=None):
    """The BartSeq2SeqLM a config.json dict describes (random weights, built); float64 made exact
    (backends.exact_float64: MultiHeadAttention's scale and gelu's constant in float64)."""
    if keras_hub is None:
        raise ValueError("keras-hub is not installed (pip install keras-hub): our own BART model (tf_impl/hf/) needs none")
    arguments = backbone_arguments(config)
    backends.check_dtype(keras.dtype_policies.get(dtype or keras.config.floatx()).compute_dtype)
    backbone = keras_hub.models.BartBackbone(**arguments, dtype=dtype)
    return HfBartSeq2SeqLM(backbone=backbone, hf_config={"model_type": "bart"} | config)


# ---- weights: (HF keys holding one matrix, the Keras variable, kind) ----


def _dense(hf_prefix: str, dense) -> list:
    return [((f"{hf_prefix}.weight",), dense.kernel, "linear"), ((f"{hf_prefix}.bias",), dense.bias, "plain")]


def _norm(hf_prefix: str, norm) -> list:
    return [((f"{hf_prefix}.weight",), norm.gamma, "plain"), ((f"{hf_prefix}.bias",), norm.beta, "plain")]


def _attention(hf_prefix: str, attention) -> list:
    """BartAttention's q/k/v/out_proj: nn.Linear [E, E] as MultiHeadAttention's EinsumDense kernels [E, N, h], [N, h, E]."""
    found = []
    for hf_name, dense in (("q_proj", attention.query_dense), ("k_proj", attention.key_dense),
                           ("v_proj", attention.value_dense), ("out_proj", attention.output_dense)):  # fmt: skip
        found += _dense(f"{hf_prefix}.{hf_name}", dense)
    return found


def _layer(hf_prefix: str, layer, cross: bool) -> list:
    """BartEncoderLayer/BartDecoderLayer as keras-hub's TransformerEncoder/TransformerDecoder (post-norm)."""
    found = _attention(f"{hf_prefix}.self_attn", layer._self_attention_layer)
    found += _norm(f"{hf_prefix}.self_attn_layer_norm", layer._self_attention_layer_norm)
    if cross:
        found += _attention(f"{hf_prefix}.encoder_attn", layer._cross_attention_layer)
        found += _norm(f"{hf_prefix}.encoder_attn_layer_norm", layer._cross_attention_layer_norm)
    found += _dense(f"{hf_prefix}.fc1", layer._feedforward_intermediate_dense)
    found += _dense(f"{hf_prefix}.fc2", layer._feedforward_output_dense)
    return found + _norm(f"{hf_prefix}.final_layer_norm", layer._feedforward_layer_norm)


TIED = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")


def targets(model) -> list:
    """Every variable of a BartSeq2SeqLM with the HF keys that hold it (the four tied names share one entry)."""
    backbone = model.backbone
    found = [(TIED, backbone.token_embedding.embeddings, "plain")]
    sides = (("encoder", backbone.encoder_transformer_layers, False), ("decoder", backbone.decoder_transformer_layers, True))
    for side, layers, cross in sides:
        positions = getattr(backbone, f"{side}_position_embedding").position_embeddings
        found.append(((f"model.{side}.embed_positions.weight",), positions, "positions"))
        found += _norm(f"model.{side}.layernorm_embedding", getattr(backbone, f"{side}_embeddings_layer_norm"))
        for index, layer in enumerate(layers):
            found += _layer(f"model.{side}.layers.{index}", layer, cross)
    return found


def _to_keras(value: np.ndarray, shape: tuple, kind: str) -> np.ndarray:
    """HF's array as the variable's: nn.Linear weight [out, in] -> kernel [in, ...]; positions without rows 0, 1."""
    if kind == "linear":
        return value.T.reshape(shape)
    if kind == "positions":
        return value[OFFSET:]  # [P, E]
    return value.reshape(shape)


def _hf_shape(shape: tuple, kind: str, names: tuple) -> tuple:
    if kind == "linear":
        return (int(np.prod(shape)) // shape[0], shape[0]) if len(shape) == 2 else _attention_shape(shape, names)
    if kind == "positions":
        return (shape[0] + OFFSET, shape[1])
    return (int(np.prod(shape)),) if len(shape) == 2 and names[0].endswith(".bias") else tuple(shape)


def _attention_shape(shape: tuple, names: tuple) -> tuple:
    """An EinsumDense kernel's nn.Linear shape: q/k/v [E, N, h] -> [N*h, E]; out_proj [N, h, E] -> [E, N*h]."""
    if names[0].endswith("out_proj.weight"):
        return (shape[2], shape[0] * shape[1])
    return (shape[1] * shape[2], shape[0])


def _value(state: dict, names: tuple, variable, kind: str, problems: list):
    first, key = marian_weights.stored(state, names, problems)
    if first is None:
        return None
    wanted = _hf_shape(tuple(variable.shape), kind, names)
    if tuple(first.shape) != wanted:
        problems.append(f"shape: {key} is {tuple(first.shape)}, the model needs {wanted}")
        return None
    return _to_keras(first, tuple(variable.shape), kind)


def _check_bias(model, state: dict, problems: list) -> None:
    """final_logits_bias: keras-hub's head has no bias, so only zeros load."""
    if "final_logits_bias" not in state:
        problems.append("missing: final_logits_bias")
        return
    bias = np.asarray(state["final_logits_bias"])
    if bias.shape != (1, model.backbone.vocabulary_size):
        problems.append(f"shape: final_logits_bias is {bias.shape}, the model needs {(1, model.backbone.vocabulary_size)}")
    elif np.any(bias != 0):
        problems.append(f"final_logits_bias is nonzero: keras-hub's BartSeq2SeqLM has no such bias; {OURS.split('; ')[1]}")


def load_hf_weights(model, state: dict) -> None:
    """Set every variable of a BartSeq2SeqLM from HF's state dict (BartForConditionalGeneration.state_dict() as numpy);
    one ValueError listing every problem."""
    problems: list = []
    _check_bias(model, state, problems)
    marian_weights.assign_strict(model, targets(model), state, {"final_logits_bias"},
                                 "HF BART state dict does not fit keras-hub's BartSeq2SeqLM", problems, _value)  # fmt: skip


def _to_hf(value: np.ndarray, kind: str, names: tuple) -> np.ndarray:
    shape = _hf_shape(value.shape, kind, names)
    if kind == "linear":
        return value.reshape(shape[::-1]).T.copy()
    if kind == "positions":
        return np.concatenate([np.zeros((OFFSET, value.shape[1]), value.dtype), value])  # [P + 2, E]  rows 0, 1 unread
    return value.reshape(shape)


def hf_state(model) -> dict[str, np.ndarray]:
    """Every key of BartForConditionalGeneration.state_dict() (tied keys repeated, final_logits_bias zeros), in the
    model's dtype; HF's two unread position rows are zeros."""
    state = {}
    for names, variable, kind in targets(model):
        value = _to_hf(keras.ops.convert_to_numpy(variable), kind, names)
        state |= {name: value for name in names}
    dtype = state["lm_head.weight"].dtype
    return state | {"final_logits_bias": np.zeros((1, model.backbone.vocabulary_size), dtype)}


def _special_ids(model) -> dict:
    """The tokenizer's ids where the model has a preprocessor, else BartConfig's defaults."""
    tokenizer = getattr(getattr(model, "preprocessor", None), "tokenizer", None)
    if tokenizer is None or getattr(tokenizer, "pad_token_id", None) is None:
        return {name: DEFAULTS[name] for name in ("pad_token_id", "bos_token_id", "eos_token_id",
                                                  "decoder_start_token_id", "forced_eos_token_id")}  # fmt: skip
    start, end = tokenizer.start_token_id, tokenizer.end_token_id
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": start, "eos_token_id": end,
            "decoder_start_token_id": end, "forced_eos_token_id": end}  # fmt: skip


def derived_config(model) -> dict:
    """config.json of a BartSeq2SeqLM built by hand: the backbone's sizes, keras-hub's fixed choices, attention dropout
    at `dropout` (keras-hub drops attention probabilities so), no activation dropout."""
    backbone = model.backbone
    sides = {f"{side}_{name}": value for side in ("encoder", "decoder") for name, value in
             (("layers", backbone.num_layers), ("attention_heads", backbone.num_heads),
              ("ffn_dim", backbone.intermediate_dim), ("layerdrop", 0.0))}  # fmt: skip
    return {"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "is_encoder_decoder": True,
            "vocab_size": backbone.vocabulary_size, "d_model": backbone.hidden_dim, **sides,
            "max_position_embeddings": backbone.max_sequence_length, "dropout": backbone.dropout,
            "attention_dropout": backbone.dropout, "activation_dropout": 0.0, **FIXED, **_special_ids(model)}  # fmt: skip


def hf_config(model) -> dict:
    """config.json's dict for the model: the one it was built from (HfBartSeq2SeqLM keeps it), else derived; `dtype`
    is the weights' (what hf_state gives)."""
    kept = getattr(model, "hf_config", None)
    config = dict(kept) if kept else derived_config(model)
    return config | {"dtype": keras.ops.convert_to_numpy(model.backbone.token_embedding.embeddings).dtype.name}
