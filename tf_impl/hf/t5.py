"""T5 (v1.0, v1.1 / Flan / mT5-like gated-gelu) in Keras 3, in keras-hub's shape (a backbone and a Seq2SeqLM on it),
computing transformers' T5ForConditionalGeneration.

Follows transformers 5.23 models/t5/modeling_t5.py (T5Stack, T5ForConditionalGeneration) and configuration_t5.py
(T5Config.__post_init__: dense_act_fn, is_gated_act, scale_decoder_outputs), built from a config.json dict; its weights
come in and go out through tf_impl/hf/t5_weights.py. Legend: B batch, S source, T target, E d_model, V vocab.
"""

from __future__ import annotations

import keras
from keras import ops

from tf_impl.hf import t5_layers as layers
from tf_impl.hf import t5_weights
from tf_impl.hf.bart_family import CrossAttentionOutputs, CrossAttentionProbe, PlainUntilBuilt, stacked
from tf_impl.hf.generating import Generating
from tf_impl.hf.marian_layers import ACTIVATIONS, constant
from tf_impl.keras_compat import backends

# T5Config's defaults (configuration_t5.py) for the fields a config.json may leave out
DEFAULTS = {
    "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_decoder_layers": None,
    "num_heads": 8, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "dropout_rate": 0.1,
    "layer_norm_epsilon": 1e-6, "feed_forward_proj": "relu", "pad_token_id": 0, "decoder_start_token_id": None,
}  # fmt: skip
# MT5Config's defaults where they differ (configuration_mt5.py)
MT5_DEFAULTS = DEFAULTS | {"vocab_size": 250112, "d_ff": 1024, "num_layers": 8, "num_heads": 6, "feed_forward_proj": "gated-gelu",
                           "decoder_start_token_id": 0}  # fmt: skip
MODEL_TYPES = ("t5", "mt5")  # mT5 (modeling_mt5.py MT5ForConditionalGeneration) is T5 whose decoder output is never scaled
INTEGERS = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
            "relative_attention_num_buckets", "relative_attention_max_distance")  # fmt: skip


def _field(config: dict, name: str):
    return config[name] if config.get(name) is not None else (MT5_DEFAULTS if _is_mt5(config) else DEFAULTS)[name]


def _is_mt5(config: dict) -> bool:
    return config.get("model_type") == "mt5"


def _check_numbers(config: dict) -> None:
    for name in INTEGERS:
        value = _field(config, name) if name != "num_decoder_layers" else config.get(name) or _field(config, "num_layers")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.json field {name!r}: expected a positive integer, got {value!r}")
    rate, epsilon = _field(config, "dropout_rate"), _field(config, "layer_norm_epsilon")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate < 1:
        raise ValueError(f"config.json field 'dropout_rate': expected a dropout rate in [0, 1), got {rate!r}")
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not epsilon > 0:
        raise ValueError(f"config.json field 'layer_norm_epsilon': expected a positive number, got {epsilon!r}")


def _check_buckets(config: dict) -> None:
    """The log-spaced buckets divide by log(max_distance / max_exact): HF computes inf there; we refuse the config."""
    buckets, distance = _field(config, "relative_attention_num_buckets"), _field(config, "relative_attention_max_distance")
    if buckets < 4:
        raise ValueError(f"config.json field 'relative_attention_num_buckets': {buckets} leaves no exact buckets (need >= 4)")
    if distance <= buckets // 2:
        raise ValueError(f"config.json field 'relative_attention_max_distance': {distance} must exceed half of "
                         f"relative_attention_num_buckets ({buckets // 2})")  # fmt: skip


def feed_forward(config: dict) -> tuple[str, bool]:
    """T5Config.__post_init__: feed_forward_proj "ACT" or "gated-ACT" (gated-gelu is gelu_new, the tanh form); a
    dense_act_fn or is_gated_act in config.json wins over it, as HF sets them after parsing."""
    proj = _field(config, "feed_forward_proj")
    parts = proj.split("-") if isinstance(proj, str) else []
    if not parts or (len(parts) > 1 and parts[0] != "gated") or len(parts) > 2:
        raise ValueError(f"config.json field 'feed_forward_proj': {proj!r} is not 'ACT' or 'gated-ACT'")
    activation = "gelu_new" if proj == "gated-gelu" else parts[-1]
    field = "dense_act_fn" if config.get("dense_act_fn") is not None else "feed_forward_proj"
    activation = config.get("dense_act_fn") or activation
    if activation not in ACTIVATIONS:
        raise ValueError(f"config.json field {field!r}: activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    gated = config["is_gated_act"] if config.get("is_gated_act") is not None else parts[0] == "gated"
    if not isinstance(gated, bool):
        raise ValueError(f"config.json field 'is_gated_act': expected true or false, got {gated!r}")
    return activation, gated


def _token(config: dict, name: str, vocab: int):
    value = _field(config, name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab):
        raise ValueError(f"config.json field {name!r}: {value!r} is not a token of the vocabulary (size {vocab})")
    return value


def _flag(config: dict, name: str, default: bool) -> bool:
    value = config.get(name)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"config.json field {name!r}: expected true or false, got {value!r}")
    return default if value is None else value


def from_hf_config(config: dict) -> dict:
    """T5Backbone's arguments from a config.json dict; one ValueError naming the field it cannot honour."""
    if config.get("model_type", "t5") not in MODEL_TYPES:
        raise ValueError(f"config.json field 'model_type': {config['model_type']!r}, expected one of {MODEL_TYPES}")
    _check_numbers(config)
    _check_buckets(config)
    activation, gated = feed_forward(config)
    tied = _flag(config, "tie_word_embeddings", True)  # false only in configs saved before 5.x (v1.1, Flan, mT5)
    scale = False if _is_mt5(config) else _flag(config, "scale_decoder_outputs", tied)  # T5Config.__post_init__; mT5 never
    vocab = _field(config, "vocab_size")
    return {
        "vocabulary_size": vocab, "hidden_dim": _field(config, "d_model"), "key_value_dim": _field(config, "d_kv"),
        "intermediate_dim": _field(config, "d_ff"), "num_layers": _field(config, "num_layers"),
        "num_decoder_layers": config.get("num_decoder_layers") or _field(config, "num_layers"),
        "num_heads": _field(config, "num_heads"), "relative_attention_buckets": _field(config, "relative_attention_num_buckets"),
        "relative_attention_max_distance": _field(config, "relative_attention_max_distance"), "activation": activation,
        "gated": gated, "dropout": float(_field(config, "dropout_rate")),
        "layer_norm_epsilon": float(_field(config, "layer_norm_epsilon")), "tie_word_embeddings": tied,
        "scale_decoder_outputs": scale,
        "pad_token_id": _token(config, "pad_token_id", vocab),
        "decoder_start_token_id": _token(config, "decoder_start_token_id", vocab), "hf_config": dict(config),
    }  # fmt: skip


def _inputs():
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    return {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5Backbone(CrossAttentionOutputs, PlainUntilBuilt, keras.Model):
    """T5Model: one shared token embedding (no scaling, no positions), pre-norm blocks whose block 0 holds the relative
    position bias (bidirectional in the encoder, causal in the decoder), final RMS norms.

    Called on keras-hub's four inputs (padding masks 1 for a real token); returns the encoder's and the decoder's last
    hidden states [B, S, E] and [B, T, E]. `hf_config` keeps the config.json dict it was built from, whole.
    """

    def __init__(self, vocabulary_size, hidden_dim, key_value_dim, intermediate_dim, num_layers, num_heads,
                 num_decoder_layers=None, relative_attention_buckets=32, relative_attention_max_distance=128,
                 activation="relu", gated=False, dropout=0.0, layer_norm_epsilon=1e-6, tie_word_embeddings=True,
                 scale_decoder_outputs=None, pad_token_id=0, decoder_start_token_id=None, hf_config=None, dtype=None,
                 **kwargs):  # fmt: skip
        arguments = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "dtype", "__class__")}
        arguments["num_decoder_layers"] = num_decoder_layers = num_decoder_layers or num_layers
        if scale_decoder_outputs is None:
            arguments["scale_decoder_outputs"] = tie_word_embeddings
        backends.check_dtype(keras.dtype_policies.get(dtype or keras.config.floatx()).compute_dtype)  # float64 on JAX/torch
        relative = (relative_attention_buckets, relative_attention_max_distance, num_heads)
        self.token_embedding = keras.layers.Embedding(vocabulary_size, hidden_dim, dtype=dtype, name="shared")
        self.encoder_relative_bias, self.decoder_relative_bias = (
            layers.T5RelativeBias(*relative, side == "encoder", dtype=dtype, name=f"{side}_relative_attention_bias")
            for side in ("encoder", "decoder")
        )
        self.masks = layers.T5Masks(dtype=dtype, name="masks")
        self.dropout = keras.layers.Dropout(dropout, dtype=dtype)
        common = {"activation": activation, "gated": gated, "dropout": dropout, "epsilon": layer_norm_epsilon, "dtype": dtype}
        block = (hidden_dim, num_heads, key_value_dim, intermediate_dim)
        self.encoder_blocks, self.decoder_blocks = (
            [layers.T5Block(*block, decoder=side == "decoder", **common, name=f"{side}_block_{i}") for i in range(count)]
            for side, count in (("encoder", num_layers), ("decoder", num_decoder_layers))
        )
        self.encoder_final_layer_norm, self.decoder_final_layer_norm = (
            layers.T5LayerNorm(layer_norm_epsilon, dtype=dtype, name=f"{side}_final_layer_norm")
            for side in ("encoder", "decoder")
        )
        inputs = _inputs()
        super().__init__(inputs=inputs, outputs=self._forward(inputs), **kwargs)
        self._initialized = True
        self.dtype_policy = keras.dtype_policies.get(dtype)  # Functional drops dtype; keras-hub's Backbone sets it so
        self.arguments = arguments

    def _stack(self, x, blocks, bias, self_mask, norm, encoder_output=None, cross_mask=None, weights=None):
        """T5Stack: dropout, the blocks (block 0's position bias shared by all), final norm, dropout. A list `weights`
        collects each block's cross-attention probabilities [B, N, T, S]."""
        x = self.dropout(x)  # [B, L, E]
        position_bias = bias(x, x)  # [1, N, L, L]
        for block in blocks:
            if weights is not None:
                probe = CrossAttentionProbe(block)
                x, probabilities = probe(x, self_mask, position_bias, encoder_output, cross_mask)  # [B, T, E], [B, N, T, S]
                weights.append(probabilities)  # [B, N, T, S]
            else:
                x = block(x, self_mask, position_bias, encoder_output, cross_mask)  # [B, L, E]
        return self.dropout(norm(x))  # [B, L, E]

    def encode(self, token_ids, mask):
        """The encoder on token ids [B, S] under HF's additive padding mask [B, 1, 1, S] -> its output [B, S, E]."""
        return self._stack(self.token_embedding(token_ids), self.encoder_blocks, self.encoder_relative_bias, mask,
                           self.encoder_final_layer_norm)  # fmt: skip

    def _forward(self, inputs, cross_attention: bool = False):
        """The functional graph: encoder then decoder, masks as HF's eager attention adds them (cross_attention: the
        decoder blocks' cross-attention probabilities too, for `with_cross_attention`)."""
        encoder_mask, self_mask = self.masks(inputs["encoder_padding_mask"], inputs["decoder_padding_mask"])  # [B, 1, 1, S]
        weights = [] if cross_attention else None
        encoder_output = self.encode(inputs["encoder_token_ids"], encoder_mask)  # [B, S, E]
        decoder_output = self._stack(self.token_embedding(inputs["decoder_token_ids"]), self.decoder_blocks,
                                     self.decoder_relative_bias, self_mask, self.decoder_final_layer_norm, encoder_output,
                                     encoder_mask, weights)  # fmt: skip
        outputs = {"encoder_sequence_output": encoder_output, "decoder_sequence_output": decoder_output}
        return stacked(weights, outputs) if cross_attention else outputs

    def get_config(self):
        return {"name": self.name, "dtype": keras.saving.serialize_keras_object(self.dtype_policy), **self.arguments}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        dtype = keras.dtype_policies.get(config.pop("dtype"))
        return cls(**config, dtype=dtype)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5LMHead(keras.layers.Layer):
    """T5ForConditionalGeneration's head: hidden * d_model**-0.5 when scale_decoder_outputs, then @ W^T, W [V, E]: the
    shared embedding when tied, else its own `kernel` (HF's lm_head.weight of a pre-5.x untied checkpoint)."""

    def __init__(self, embedding, tied: bool = True, scale: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.embedding, self.tied, self.scale = embedding, tied, scale
        shape = (embedding.input_dim, embedding.output_dim)
        self.kernel = None if tied else self.add_weight(shape=shape, initializer="zeros", name="kernel")

    def call(self, hidden):
        if self.scale:
            hidden = hidden * constant(self.embedding.output_dim**-0.5, hidden)  # [B, T, E]
        matrix = self.embedding.embeddings if self.tied else self.kernel  # [V, E]
        return ops.matmul(hidden, ops.transpose(matrix))  # [B, T, V]


@keras.saving.register_keras_serializable(package="rosetta_hf")
class T5Seq2SeqLM(Generating, PlainUntilBuilt, keras.Model):
    """T5ForConditionalGeneration: the backbone and the lm head -> logits [B, T, V]; `generate` with its
    generation_config (tf_impl/hf/generating.py)."""

    def __init__(self, backbone: T5Backbone, generation_config=None, **kwargs):
        self.backbone = backbone
        inputs = _inputs()
        hidden = backbone(inputs)["decoder_sequence_output"]  # [B, T, E]
        arguments = backbone.arguments
        self.lm_head = T5LMHead(backbone.token_embedding, arguments["tie_word_embeddings"], arguments["scale_decoder_outputs"],
                                dtype=backbone.dtype_policy, name="lm_head")  # fmt: skip
        super().__init__(inputs=inputs, outputs=self.lm_head(hidden), **kwargs)
        self._initialized = True
        self.dtype_policy = backbone.dtype_policy
        self._keep_generation_config(generation_config)

    def decoding(self):
        """The key/value-cached decoding object (start, step) a generation loop calls (tf_impl/hf/decoding.py)."""
        from tf_impl.hf.decoding import T5Decoding

        return T5Decoding(self)

    def get_config(self):
        return {"name": self.name, "backbone": keras.saving.serialize_keras_object(self.backbone),
                **self._generation_config_entry()}  # fmt: skip

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(backbone=keras.saving.deserialize_keras_object(config.pop("backbone")), name=config.get("name"),
                   generation_config=config.get("generation_config"))  # fmt: skip

    @classmethod
    def from_hf_config(cls, config: dict, dtype=None, generation_config: dict | None = None) -> T5Seq2SeqLM:
        """The model a config.json dict describes, built (random weights until load_hf_weights), keeping the
        generation_config.json dict given."""
        return cls(T5Backbone(**from_hf_config(config), dtype=dtype), generation_config=generation_config)


# ---- the family contract (tf_impl/hf/families.py dispatches on model_type "t5" and on these classes) ----

MODELS = (T5Seq2SeqLM,)


def build(config: dict, dtype=None) -> T5Seq2SeqLM:
    """The T5Seq2SeqLM a config.json dict describes (random weights, built)."""
    return T5Seq2SeqLM.from_hf_config(config, dtype=dtype)


def load_hf_weights(model: T5Seq2SeqLM, state: dict) -> None:
    """Every variable from HF's state dict (strict; tied keys under any name); one ValueError listing every problem."""
    t5_weights.load_hf_weights(model, state)


def hf_state(model: T5Seq2SeqLM) -> dict:
    """Every key of HF's T5ForConditionalGeneration.state_dict() (tied keys repeated), in the model's dtype."""
    return t5_weights.hf_state(model)


def hf_config(model: T5Seq2SeqLM) -> dict:
    """config.json's dict: the one the model was built from (its dtype field the model's), else one derived from its
    arguments that HF reads back to the same computation (dense_act_fn, is_gated_act, scale_decoder_outputs written)."""
    arguments, dtype = model.backbone.arguments, keras.backend.standardize_dtype(model.backbone.compute_dtype)
    if arguments.get("hf_config"):
        kept = dict(arguments["hf_config"])
        return kept | {"dtype": dtype} | ({"torch_dtype": dtype} if "torch_dtype" in kept else {})
    gated, activation = arguments["gated"], arguments["activation"]
    return {
        "model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "vocab_size": arguments["vocabulary_size"],
        "d_model": arguments["hidden_dim"], "d_kv": arguments["key_value_dim"], "d_ff": arguments["intermediate_dim"],
        "num_layers": arguments["num_layers"], "num_decoder_layers": arguments["num_decoder_layers"],
        "num_heads": arguments["num_heads"], "relative_attention_num_buckets": arguments["relative_attention_buckets"],
        "relative_attention_max_distance": arguments["relative_attention_max_distance"],
        "feed_forward_proj": f"gated-{activation}" if gated else activation, "dense_act_fn": activation, "is_gated_act": gated,
        "dropout_rate": arguments["dropout"], "layer_norm_epsilon": arguments["layer_norm_epsilon"],
        "tie_word_embeddings": arguments["tie_word_embeddings"], "scale_decoder_outputs": arguments["scale_decoder_outputs"],
        "pad_token_id": arguments["pad_token_id"], "decoder_start_token_id": arguments["decoder_start_token_id"],
        "is_encoder_decoder": True, "dtype": dtype,
    }  # fmt: skip
