"""The BART family in Keras 3, in keras-hub's shape (a backbone and a Seq2SeqLM on it): what MarianMT, BART and mBART
share (transformers 5.23's marian/ and mbart/ modules are "Copied from" models/bart/modeling_bart.py).

Each family module (marian.py, bart.py, mbart.py) names its classes, its config class's defaults and its flags; the
reading of config.json and the contract (build, load_hf_weights, hf_state, hf_config) are here once.
Legend: B batch, S source, T target, E d_model, V vocab.
"""

from __future__ import annotations

import json
import weakref

import keras
from keras import ops

from tf_impl.hf import marian_layers as layers
from tf_impl.hf import marian_weights
from tf_impl.hf.generating import Generating
from tf_impl.keras_compat import backends

INTEGERS = ("vocab_size", "max_position_embeddings", "d_model", "encoder_layers", "decoder_layers",
            "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim")  # fmt: skip
RATES = ("dropout", "attention_dropout", "activation_dropout")
LAYERDROPS = ("encoder_layerdrop", "decoder_layerdrop")  # a layer skipped at random in training: not computed here
LAYER_NORM_EPS = 1e-5  # every layer norm of the three is nn.LayerNorm(d_model): torch's default eps, no config field


class Fields:
    """A config.json dict read with the family config class's defaults for absent (or null) fields."""

    def __init__(self, config: dict, defaults: dict):
        self.config, self.defaults = config, defaults

    def __getitem__(self, name: str):
        return self.config[name] if self.config.get(name) is not None else self.defaults.get(name)


def _check_numbers(fields: Fields) -> None:
    for name in INTEGERS:
        value = fields[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.json field {name!r}: expected a positive integer, got {value!r}")
    for name in RATES + LAYERDROPS:
        value = fields[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise ValueError(f"config.json field {name!r}: expected a dropout rate in [0, 1), got {value!r}")
    for name in LAYERDROPS:
        if fields[name]:
            raise ValueError(f"config.json field {name!r}: {fields[name]!r}; LayerDrop (layers skipped at random in "
                             f"training) is not computed by this model, only 0")  # fmt: skip


def _check_choices(out: dict) -> None:
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
    pad = out["pad_token_id"]
    if pad is not None and (not isinstance(pad, int) or isinstance(pad, bool) or not 0 <= pad < out["decoder_vocabulary_size"]):
        raise ValueError(f"config.json field 'pad_token_id': {pad!r} is not a token of the vocabulary")


def arguments(config: dict, model_type: str, defaults: dict) -> dict:
    """A backbone's arguments from a config.json dict of `model_type`; one ValueError naming the field it cannot honour."""
    if config.get("model_type", model_type) != model_type:
        raise ValueError(f"config.json field 'model_type': {config['model_type']!r}, expected {model_type!r}")
    fields = Fields(config, defaults)
    _check_numbers(fields)
    vocab = fields["vocab_size"]
    marian = model_type == "marian"  # only MarianConfig has a decoder vocabulary and embeddings of its own
    out = {
        "vocabulary_size": vocab,
        "decoder_vocabulary_size": (fields["decoder_vocab_size"] if marian else None) or vocab,  # MarianConfig.__post_init__
        "hidden_dim": fields["d_model"],
        "encoder_layers": fields["encoder_layers"],
        "decoder_layers": fields["decoder_layers"],
        "encoder_heads": fields["encoder_attention_heads"],
        "decoder_heads": fields["decoder_attention_heads"],
        "encoder_ffn_dim": fields["encoder_ffn_dim"],
        "decoder_ffn_dim": fields["decoder_ffn_dim"],
        "activation": fields["activation_function"],
        "scale_embedding": bool(fields["scale_embedding"]),
        "max_sequence_length": fields["max_position_embeddings"],
        "pad_token_id": fields["pad_token_id"],
        "share_embeddings": bool(fields["share_encoder_decoder_embeddings"]) if marian else True,
        "tie_word_embeddings": bool(fields["tie_word_embeddings"]),
        **{name: float(fields[name]) for name in RATES},
        "layer_norm_epsilon": LAYER_NORM_EPS,
    }
    _check_choices(out)
    return out


def inputs():
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    return {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}


# backbone -> its cross-attention model, kept off the backbone: an attribute would be walked into `.keras` files
_CROSS_ATTENTION_MODELS = weakref.WeakKeyDictionary()


class CrossAttentionOutputs:
    """`with_cross_attention()`: a second functional model over the backbone's own layers, built on request, giving its
    outputs plus "cross_attention" [B, L, N, T, S] (HF's output_attentions cross_attentions, stacked over the decoder
    layers). The backbone's graph, `model(inputs)` and `.keras` files are unchanged: serving never computes it."""

    def with_cross_attention(self) -> keras.Model:
        if self not in _CROSS_ATTENTION_MODELS:
            graph_inputs = inputs()
            _CROSS_ATTENTION_MODELS[self] = keras.Model(graph_inputs, self._forward(graph_inputs, cross_attention=True))
        return _CROSS_ATTENTION_MODELS[self]


class CrossAttentionProbe(keras.layers.Layer):
    """A decoder layer called with return_attention -> (its output, its cross-attention probabilities [B, N, T, S]). A
    layer of its own in the second graph: Keras's graph check reads a layer's outputs from its first call, which the
    backbone's graph made without them."""

    def __init__(self, layer, **kwargs):
        super().__init__(dtype=layer.dtype_policy, name=f"{layer.name}_probe", **kwargs)
        self.layer = layer

    def call(self, *args):
        return self.layer(*args, return_attention=True)


def stacked(weights: list, outputs: dict) -> dict:
    """`outputs` plus "cross_attention": each decoder layer's [B, N, T, S] stacked -> [B, L, N, T, S]."""
    return {**outputs, "cross_attention": ops.stack(weights, axis=1)}


class PlainUntilBuilt:
    """keras-hub's Backbone.__setattr__: on Keras's torch backend a layer is a torch Module, which cannot be set on a
    model before Module.__init__ ran; until then attributes are set plainly (the functional graph tracks its layers)."""

    def __setattr__(self, name, value):
        if keras.config.backend() == "torch" and not hasattr(self, "_initialized"):
            return object.__setattr__(self, name, value)
        return super().__setattr__(name, value)


class BartFamilyBackbone(CrossAttentionOutputs, PlainUntilBuilt, keras.Model):
    """Marian/Bart/MBartModel: token embeddings (pad row frozen in lookups) * embed_scale + positions (Marian's sinusoid
    or BART's learned, offset 2), layernorm_embedding (BART, mBART), the layers (post-norm; mBART pre-norm), and the
    final layer_norm (mBART). Subclasses set FLAGS, the family's; an argument given overrides it.

    Untied (tie_word_embeddings false) HF keeps encoder, decoder (and lm_head) matrices apart, and model.shared beside
    them though no forward pass reads it: ours holds it too (`shared_embed_tokens`), so every HF weight has a home.
    Called on keras-hub's four inputs (padding masks 1 for a real token); returns the encoder's and the decoder's last
    hidden states [B, S, E] and [B, T, E]. `hf_config`: the config.json dict it was built from, kept in `.keras` files.
    """

    FLAGS = {"positions": "sinusoidal", "layernorm_embedding": False, "normalize_before": False, "final_layer_norm": False}

    def __init__(self, vocabulary_size, decoder_vocabulary_size, hidden_dim, encoder_layers, decoder_layers, encoder_heads,
                 decoder_heads, encoder_ffn_dim, decoder_ffn_dim, activation="gelu", scale_embedding=False,
                 max_sequence_length=1024, pad_token_id=0, share_embeddings=True, dropout=0.0, layer_norm_epsilon=1e-5,
                 tie_word_embeddings=True, attention_dropout=0.0, activation_dropout=0.0, positions=None,
                 layernorm_embedding=None, normalize_before=None, final_layer_norm=None, hf_config=None, dtype=None,
                 **kwargs):  # fmt: skip
        arguments = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "dtype", "__class__")}
        arguments |= {flag: self.FLAGS[flag] if arguments[flag] is None else arguments[flag] for flag in self.FLAGS}
        backends.check_dtype(keras.dtype_policies.get(dtype or keras.config.floatx()).compute_dtype)  # float64 on JAX/torch
        self._embeddings(arguments, dtype)
        self.embed_scale = layers.embed_scale(hidden_dim, scale_embedding)
        self.pad_token_id = pad_token_id
        self.embed_dropout = keras.layers.Dropout(dropout, dtype=dtype)
        self.masks = layers.MarianMasks(dtype=dtype, name="masks")
        self._norms(arguments, dtype)
        common = {"activation": activation, "dropout": dropout, "epsilon": layer_norm_epsilon, "dtype": dtype,
                  "attention_dropout": attention_dropout, "activation_dropout": activation_dropout,
                  "normalize_before": arguments["normalize_before"]}  # fmt: skip
        self.encoder_layers = [layers.MarianEncoderLayer(hidden_dim, encoder_heads, encoder_ffn_dim, **common,
                                                         name=f"encoder_layer_{i}") for i in range(encoder_layers)]  # fmt: skip
        self.decoder_layers = [layers.MarianDecoderLayer(hidden_dim, decoder_heads, decoder_ffn_dim, **common,
                                                         name=f"decoder_layer_{i}") for i in range(decoder_layers)]  # fmt: skip
        graph_inputs = inputs()
        super().__init__(inputs=graph_inputs, outputs=self._forward(graph_inputs), **kwargs)
        self._initialized = True
        self.dtype_policy = keras.dtype_policies.get(dtype)  # Functional drops dtype; keras-hub's Backbone sets it so
        self.arguments = arguments
        self.shared_embed_tokens = None  # outside the graph: set once the model is, so every backend tracks it
        if share_embeddings and not tie_word_embeddings:
            self.shared_embed_tokens = keras.layers.Embedding(vocabulary_size, hidden_dim, dtype=dtype, name="shared")
            self.shared_embed_tokens.build((None, None))

    def _embeddings(self, arguments: dict, dtype) -> None:
        """Token tables (HF 5.23 ties encoder and decoder only when sharing and tying both) and position layers."""
        vocabulary, dim = arguments["vocabulary_size"], arguments["hidden_dim"]
        tied = arguments["share_embeddings"] and arguments["tie_word_embeddings"]
        self.encoder_embed_tokens = keras.layers.Embedding(vocabulary, dim, dtype=dtype, name="embed_tokens")
        self.decoder_embed_tokens = self.encoder_embed_tokens if tied else keras.layers.Embedding(
            arguments["decoder_vocabulary_size"], dim, dtype=dtype, name="decoder_embed_tokens")  # fmt: skip
        kind = {"sinusoidal": layers.MarianPositions, "learned": layers.LearnedPositions}[arguments["positions"]]
        self.encoder_embed_positions, self.decoder_embed_positions = (
            kind(arguments["max_sequence_length"], dim, dtype=dtype, name=f"{side}_embed_positions")
            for side in ("encoder", "decoder")
        )

    def _norms(self, arguments: dict, dtype) -> None:
        """layernorm_embedding after the embeddings (BART, mBART) and the final layer_norm after the layers (mBART)."""
        for side in ("encoder", "decoder"):
            for flag, name in (("layernorm_embedding", "layernorm_embedding"), ("final_layer_norm", "layer_norm")):
                norm = keras.layers.LayerNormalization(
                    epsilon=arguments["layer_norm_epsilon"], dtype=dtype, name=f"{side}_{name}"
                )
                setattr(self, f"{side}_{name}", norm if arguments[flag] else None)

    def _embed(self, tokens, embedding, positions, norm, training=False):
        x = layers.pad_row_lookup(embedding, tokens, self.pad_token_id)  # [B, L, E]
        return self._scaled(x, positions(x), norm, training)  # [B, L, E]

    def _scaled(self, x, rows, norm, training=False):
        """Looked-up tokens x [B, L, E] * embed_scale + position rows [L, E], layernorm_embedding, dropout."""
        x = x * layers.constant(self.embed_scale, x) + rows  # [B, L, E]
        return self.embed_dropout(norm(x) if norm is not None else x, training=training)  # [B, L, E]

    def encode(self, token_ids, mask):
        """The encoder on token ids [B, S] under HF's additive padding mask [B, 1, 1, S] -> its output [B, S, E]."""
        x = self._embed(token_ids, self.encoder_embed_tokens, self.encoder_embed_positions,
                        self.encoder_layernorm_embedding)  # [B, S, E]  # fmt: skip
        for layer in self.encoder_layers:
            x = layer(x, mask)  # [B, S, E]
        return self.encoder_layer_norm(x) if self.encoder_layer_norm is not None else x  # [B, S, E]

    def embed_step(self, tokens, index):
        """A decoding step's decoder input: tokens [B] at position `index` (a traced scalar allowed) embedded as the
        decoder's forward embeds them -> [B, 1, E]."""
        x = layers.pad_row_lookup(self.decoder_embed_tokens, tokens[:, None], self.pad_token_id)  # [B, 1, E]
        return self._scaled(x, self.decoder_embed_positions.at(index), self.decoder_layernorm_embedding)  # [B, 1, E]

    def decoder_output(self, y):
        """The decoder's last norm (mBART's layer_norm) on its layers' output [B, T, E]."""
        return self.decoder_layer_norm(y) if self.decoder_layer_norm is not None else y  # [B, T, E]

    def _forward(self, graph_inputs, cross_attention: bool = False):
        """The functional graph: encoder then decoder, masks as HF's eager attention adds them (cross_attention: the
        decoder layers' cross-attention probabilities too, for `with_cross_attention`)."""
        encoder_mask, self_mask = self.masks(graph_inputs["encoder_padding_mask"], graph_inputs["decoder_padding_mask"])
        encoder_output = self.encode(graph_inputs["encoder_token_ids"], encoder_mask)  # [B, S, E]
        y = self._embed(graph_inputs["decoder_token_ids"], self.decoder_embed_tokens, self.decoder_embed_positions,
                        self.decoder_layernorm_embedding)  # [B, T, E]  # fmt: skip
        weights = []
        for layer in self.decoder_layers:
            if cross_attention:
                y, probabilities = CrossAttentionProbe(layer)(y, self_mask, encoder_output, encoder_mask)  # [B, T, E]
                weights.append(probabilities)  # [B, N, T, S]
            else:
                y = layer(y, self_mask, encoder_output, encoder_mask)  # [B, T, E]
        y = self.decoder_output(y)  # [B, T, E]
        outputs = {"encoder_sequence_output": encoder_output, "decoder_sequence_output": y}
        return stacked(weights, outputs) if cross_attention else outputs

    def get_config(self):
        return {"name": self.name, "dtype": keras.saving.serialize_keras_object(self.dtype_policy), **self.arguments}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        dtype = keras.dtype_policies.get(config.pop("dtype"))
        return cls(**config, dtype=dtype)


class BartFamilySeq2SeqLM(Generating, PlainUntilBuilt, keras.Model):
    """Marian/Bart/MBartForConditionalGeneration: the backbone, the lm head (tied: the decoder's embedding), plus
    final_logits_bias -> [B, T, V]; `generate` with its generation_config (tf_impl/hf/generating.py). Subclasses set
    BACKBONE and ARGUMENTS (their family's config.json reading)."""

    BACKBONE = BartFamilyBackbone
    ARGUMENTS = None

    def __init__(self, backbone, generation_config=None, **kwargs):
        self.backbone = backbone
        graph_inputs = inputs()
        hidden = backbone(graph_inputs)["decoder_sequence_output"]  # [B, T, E]
        tied = backbone.arguments.get("tie_word_embeddings", True)
        self.final_logits_bias = FinalLogitsBias(backbone.decoder_embed_tokens, tied, dtype=backbone.dtype_policy,
                                                 name="final_logits_bias")  # fmt: skip
        super().__init__(inputs=graph_inputs, outputs=self.final_logits_bias(hidden), **kwargs)
        self._initialized = True
        self.dtype_policy = backbone.dtype_policy
        self._keep_generation_config(generation_config)

    def decoding(self):
        """The key/value-cached decoding object (start, step) a generation loop calls (tf_impl/hf/decoding.py)."""
        from tf_impl.hf.decoding import BartFamilyDecoding

        return BartFamilyDecoding(self)

    def get_config(self):
        return {"name": self.name, "backbone": keras.saving.serialize_keras_object(self.backbone),
                **self._generation_config_entry()}  # fmt: skip

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(backbone=keras.saving.deserialize_keras_object(config.pop("backbone")), name=config.get("name"),
                   generation_config=config.get("generation_config"))  # fmt: skip

    @classmethod
    def from_hf_config(cls, config: dict, dtype=None, generation_config: dict | None = None):
        """The model a config.json dict describes, built (random weights until load_hf_weights), keeping the dict and
        the generation_config.json dict given."""
        kept = json.loads(json.dumps(config))  # as config.json holds it (id2label's keys strings), whatever made the dict
        return cls(cls.BACKBONE(**cls.ARGUMENTS(config), hf_config=kept, dtype=dtype), generation_config=generation_config)


@keras.saving.register_keras_serializable(package="rosetta_hf")
class FinalLogitsBias(keras.layers.Layer):
    """The lm_head (hidden @ W^T, W [V, E]: tied, the decoder's embedding; untied, its own `kernel`, HF's
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


# ---- the family contract, once for the three (each family module binds its own) ----


def hf_config(model, model_type: str, architecture: str) -> dict:
    """config.json's dict: the one the model was built from (its dtype field the model's), else one derived from the
    backbone's arguments."""
    args, dtype = model.backbone.arguments, keras.backend.standardize_dtype(model.backbone.compute_dtype)
    if args.get("hf_config"):
        kept = dict(args["hf_config"])
        return kept | {"dtype": dtype} | ({"torch_dtype": dtype} if "torch_dtype" in kept else {})
    derived = {"model_type": model_type, "architectures": [architecture], "vocab_size": args["vocabulary_size"],
               "d_model": args["hidden_dim"], "encoder_layers": args["encoder_layers"], "decoder_layers": args["decoder_layers"],
               "encoder_attention_heads": args["encoder_heads"], "decoder_attention_heads": args["decoder_heads"],
               "encoder_ffn_dim": args["encoder_ffn_dim"], "decoder_ffn_dim": args["decoder_ffn_dim"],
               "activation_function": args["activation"], "scale_embedding": args["scale_embedding"],
               "max_position_embeddings": args["max_sequence_length"], "pad_token_id": args["pad_token_id"],
               "tie_word_embeddings": args["tie_word_embeddings"], "is_encoder_decoder": True, "dtype": dtype,
               **{name: args[name] for name in RATES}}  # fmt: skip
    if model_type == "marian":
        derived |= {"decoder_vocab_size": args["decoder_vocabulary_size"],
                    "share_encoder_decoder_embeddings": args["share_embeddings"]}  # fmt: skip
    return derived


def hf_state(model) -> dict:
    """HF's full state_dict() of the model as numpy in its dtype: every key (tied repeated, Marian's sinusoids, the
    final_logits_bias buffer)."""
    return marian_weights.hf_state(model)


def load_hf_weights(model, state: dict) -> None:
    """Every variable set from HF's state dict (strict; tied keys under any of their names); one ValueError."""
    marian_weights.load_hf_weights(model, state)
