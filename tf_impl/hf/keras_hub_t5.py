"""keras-hub's own T5Seq2SeqLM as a port source and target: HF's T5ForConditionalGeneration weights in and out, the
family contract (MODELS, build, load_hf_weights, hf_state, hf_config).

Follows transformers 5.23 models/t5/modeling_t5.py (T5ForConditionalGeneration, T5Config.__post_init__) and keras-hub
0.32's models/t5/ (T5Backbone, T5TransformerLayer, T5MultiHeadAttention, T5Seq2SeqLM). keras-hub fixes 32 buckets and a
max distance of 128, one depth for both stacks, and scales the decoder output exactly when its head is tied; it takes
the activation by Keras name, so its "gelu" is exact where HF's "gated-gelu" is gelu_new (the tanh form): what HF
cannot compute is refused by name. In float32 it computes HF's model within the equality policy; in float64 it does
not reach 1e-12 (its RMS variance is taken in float64 where HF takes it in float32, by ops.rsqrt, and masks add -1e9):
its floor is in docs/measurements.md, "Hugging Face: keras-hub T5". Our own T5 (tf_impl/hf/t5.py) is HF's to 1e-15.
Legend: B batch, S source, T target, E d_model, V vocabulary, N heads, R buckets.
"""

from __future__ import annotations

import keras
import numpy as np

from tf_impl.hf import marian_weights, t5, t5_weights
from tf_impl.keras_compat import backends

try:
    import keras_hub
except ImportError:  # keras-hub is optional (pyproject's "hub" extra): then this module owns no model
    keras_hub = None

MODELS: tuple[type, ...] = (keras_hub.models.T5Seq2SeqLM,) if keras_hub else ()
BUCKETS, MAX_DISTANCE = 32, 128  # T5MultiHeadAttention's fixed relative_attention_buckets / _max_distance
# Keras activation name (what keras.activations.serialize gives) -> HF's ACT2FN name computing the same function
TO_HF = {"relu": "relu", "gelu": "gelu", "silu": "silu", "tanh": "tanh"}
TO_KERAS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "swish": "silu", "tanh": "tanh"}
GATED_GELU = ("HF's T5 reads 'gated-gelu' as gelu_new (the tanh form) and keras-hub's 'gelu' is exact: "
              "HF cannot compute this gated exact gelu")  # fmt: skip
OURS = "keras-hub's T5Backbone cannot compute it as HF does; our own T5 model (tf_impl/hf/t5.py) does"


def _refuse(name: str, value, problem: str):
    raise ValueError(f"config.json field {name!r}: {value!r} {problem}: {OURS}")


def backbone_arguments(config: dict) -> dict:
    """T5Backbone's arguments from a config.json dict (T5Config's defaults for absent fields); one ValueError naming the
    field keras-hub cannot honour."""
    if config.get("model_type", "t5") != "t5":
        _refuse("model_type", config["model_type"], "is not 't5'")
    arguments = t5.from_hf_config(config)  # every field checked as our T5 checks it
    if arguments["num_decoder_layers"] != arguments["num_layers"]:
        _refuse("num_decoder_layers", arguments["num_decoder_layers"], f"differs from num_layers {arguments['num_layers']}")
    for name, key, fixed in (("relative_attention_num_buckets", "relative_attention_buckets", BUCKETS),
                             ("relative_attention_max_distance", "relative_attention_max_distance", MAX_DISTANCE)):  # fmt: skip
        if arguments[key] != fixed:
            _refuse(name, arguments[key], f"is not {fixed}, keras-hub's only value")
    activation, gated = arguments["activation"], arguments["gated"]
    if activation not in TO_KERAS or (gated and activation == "gelu"):
        field = "dense_act_fn" if config.get("dense_act_fn") is not None else "feed_forward_proj"
        _refuse(field, config.get(field, activation), f"(activation {activation!r}) has no keras-hub name")
    return {"vocabulary_size": arguments["vocabulary_size"], "num_layers": arguments["num_layers"],
            "num_heads": arguments["num_heads"], "hidden_dim": arguments["hidden_dim"],
            "intermediate_dim": arguments["intermediate_dim"], "key_value_dim": arguments["key_value_dim"],
            "dropout": arguments["dropout"], "activation": TO_KERAS[activation], "use_gated_activation": gated,
            "layer_norm_epsilon": arguments["layer_norm_epsilon"],
            "tie_embedding_weights": arguments["scale_decoder_outputs"]}  # fmt: skip  # keras-hub scales iff tied


if keras_hub is not None:

    @keras.saving.register_keras_serializable(package="rosetta_hf")
    class HfT5Seq2SeqLM(keras_hub.models.T5Seq2SeqLM):
        """keras-hub's T5Seq2SeqLM keeping the config.json dict it was built from (`hf_config`, in get_config: a
        `.keras` file keeps every field)."""

        def __init__(self, backbone, preprocessor=None, hf_config=None, **kwargs):
            super().__init__(backbone=backbone, preprocessor=preprocessor, **kwargs)
            self.hf_config = dict(hf_config or {})

        def get_config(self):
            return super().get_config() | {"hf_config": self.hf_config}


def build(config: dict, dtype=None):
    """The T5Seq2SeqLM a config.json dict describes (random weights, built)."""
    if keras_hub is None:
        raise ValueError("keras-hub is not installed (pip install keras-hub): our own T5 model (tf_impl/hf/t5.py) needs none")
    arguments = backbone_arguments(config)
    backends.check_dtype(keras.dtype_policies.get(dtype or keras.config.floatx()).compute_dtype)
    backbone = keras_hub.models.T5Backbone(**arguments, dtype=dtype)
    return HfT5Seq2SeqLM(backbone=backbone, hf_config={"model_type": "t5"} | config)


# ---- weights: (HF keys holding one matrix, the Keras variable, transpose) ----


def _attention(prefix: str, attention) -> list:
    """T5MultiHeadAttention's Dense kernels [in, out] as T5Attention's q/k/v/o nn.Linear weights [out, in]."""
    pairs = (("q", "query_projector"), ("k", "key_projector"), ("v", "value_projector"), ("o", "output_projector"))
    found = [((f"{prefix}.{hf}.weight",), getattr(attention, name).kernel, True) for hf, name in pairs]
    if attention.use_relative_attention_bias:
        found.append(((f"{prefix}.relative_attention_bias.weight",), attention.relative_attention_bias, False))  # [R, N]
    return found


def _layer(prefix: str, layer) -> list:
    """T5TransformerLayer as HF's T5Block: layer.0 self-attention, (decoder) layer.1 cross-attention, then T5LayerFF
    (input_projector is wi, or wi_0 under the activation; gate_projector wi_1)."""
    found = _attention(f"{prefix}.layer.0.SelfAttention", layer.self_attention)
    found.append(((f"{prefix}.layer.0.layer_norm.weight",), layer.self_attention_layer_norm.weight, False))
    last = 1
    if layer.is_decoder:
        found += _attention(f"{prefix}.layer.1.EncDecAttention", layer.cross_attention)
        found.append(((f"{prefix}.layer.1.layer_norm.weight",), layer.cross_attention_layer_norm.weight, False))
        last = 2
    dense = f"{prefix}.layer.{last}.DenseReluDense"
    if layer.use_gated_activation:
        found += [((f"{dense}.wi_0.weight",), layer.input_projector.kernel, True),
                  ((f"{dense}.wi_1.weight",), layer.gate_projector.kernel, True)]  # fmt: skip
    else:
        found.append(((f"{dense}.wi.weight",), layer.input_projector.kernel, True))
    found.append(((f"{dense}.wo.weight",), layer.output_projector.kernel, True))
    return found + [((f"{prefix}.layer.{last}.layer_norm.weight",), layer.layer_norm.weight, False)]


def targets(model) -> list:
    """Every variable of a keras-hub T5Seq2SeqLM with the HF keys that hold it; tied: one matrix under four names, else
    lm_head.weight is the ReversibleEmbedding's reverse_embeddings [E, V] transposed."""
    backbone = model.backbone
    embedding = backbone.token_embedding
    if backbone.tie_embedding_weights:
        found = [((*t5_weights.EMBEDDINGS, "lm_head.weight"), embedding.embeddings, False)]
    else:
        found = [(t5_weights.EMBEDDINGS, embedding.embeddings, False), (("lm_head.weight",), embedding.reverse_embeddings, True)]
    for side in ("encoder", "decoder"):
        for index, layer in enumerate(getattr(backbone, f"{side}_transformer_layers")):
            found += _layer(f"{side}.block.{index}", layer)
        found.append(((f"{side}.final_layer_norm.weight",), getattr(backbone, f"{side}_layer_norm").weight, False))
    return found


def load_hf_weights(model, state: dict) -> None:
    """Set every variable of a keras-hub T5Seq2SeqLM from HF's state dict (T5ForConditionalGeneration.state_dict() as
    numpy); one ValueError listing every problem. An untied head missing from the state takes the shared matrix, as
    HF's tie_weights fills it."""
    if not model.backbone.tie_embedding_weights and "lm_head.weight" not in state and "shared.weight" in state:
        state = {**state, "lm_head.weight": state["shared.weight"]}
    marian_weights.assign_strict(model, targets(model), state, set(t5_weights.IGNORED),
                                 "HF T5 state dict does not fit keras-hub's T5Seq2SeqLM", [])  # fmt: skip


def _activation(backbone) -> tuple[str, bool]:
    """The backbone's feed-forward as HF names it (activation, gated); one ValueError naming what HF cannot compute."""
    name, gated = keras.activations.serialize(backbone.activation), bool(backbone.use_gated_activation)
    if not isinstance(name, str) or name not in TO_HF:
        raise ValueError(f"keras-hub T5Backbone activation {name!r}: HF's T5 has no such activation (one of {sorted(TO_HF)})")
    if gated and name == "gelu":
        raise ValueError(f"keras-hub T5Backbone activation 'gelu' with use_gated_activation=True: {GATED_GELU}")
    return TO_HF[name], gated


def hf_state(model) -> dict[str, np.ndarray]:
    """Every key of T5ForConditionalGeneration.state_dict() (tied keys repeated), torch's layouts, in the model's dtype;
    a model HF cannot compute is one ValueError naming what."""
    _activation(model.backbone)
    state = {}
    for names, variable, transpose in targets(model):
        value = keras.ops.convert_to_numpy(variable)
        state.update(dict.fromkeys(names, np.ascontiguousarray(value.T if transpose else value)))
    return state


def derived_config(model) -> dict:
    """config.json of a T5Seq2SeqLM built by hand: the backbone's sizes, keras-hub's fixed buckets, T5Config's special
    ids; tie_word_embeddings false for an untied head (HF then does not scale the decoder output, as keras-hub)."""
    backbone = model.backbone
    activation, gated = _activation(backbone)
    return {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True,
            "vocab_size": backbone.vocabulary_size, "d_model": backbone.hidden_dim,
            "d_kv": backbone.key_value_dim or backbone.hidden_dim // backbone.num_heads,
            "d_ff": backbone.intermediate_dim, "num_layers": backbone.num_layers,
            "num_decoder_layers": backbone.num_layers, "num_heads": backbone.num_heads,
            "relative_attention_num_buckets": BUCKETS, "relative_attention_max_distance": MAX_DISTANCE,
            "feed_forward_proj": f"gated-{activation}" if gated else activation, "dropout_rate": backbone.dropout,
            "layer_norm_epsilon": backbone.layer_norm_epsilon, "tie_word_embeddings": backbone.tie_embedding_weights,
            "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}  # fmt: skip


def hf_config(model) -> dict:
    """config.json's dict for the model: the one it was built from (HfT5Seq2SeqLM keeps it), else derived; `dtype` is
    the weights' (what hf_state gives). A model HF cannot compute is one ValueError naming what."""
    kept = getattr(model, "hf_config", None)
    config = dict(kept) if kept else derived_config(model)
    _activation(model.backbone)
    return config | {"dtype": keras.ops.convert_to_numpy(model.backbone.token_embedding.embeddings).dtype.name}
