"""The Keras families of Hugging Face's seq2seq models, chosen by config.json's `model_type` (building) or by the
model's class (a loaded `.keras` file): what a port calls, through shared/stacks.py's door `hf.families`.

Each family module keeps one contract (docs/DESIGN.md "Hugging Face models"): MODELS, build, load_hf_weights,
hf_state, hf_config. BART is built as keras-hub's own BartSeq2SeqLM where that computes HF's model, else as ours.
The mirror of torch_impl/hf/families.py (transformers' models).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import keras
import numpy as np

from tf_impl.hf.generating import Generating

# model_type -> the family modules that may build it, in order of preference (the first whose build accepts the config)
BUILDERS = {"marian": ("marian",), "bart": ("bart", "keras_hub_bart"), "mbart": ("mbart",), "t5": ("t5", "keras_hub_t5"),
            "mt5": ("t5",)}  # fmt: skip


def _module(name: str):
    return importlib.import_module(f"tf_impl.hf.{name}")


def _modules() -> list:
    """Every family module, imported (which registers its Keras classes for loading)."""
    return [_module(name) for name in dict.fromkeys(name for names in BUILDERS.values() for name in names)]


def build(config: dict, dtype: str = "float32", blank: bool = False, generation_config: dict | None = None) -> keras.Model:
    """The Keras Seq2SeqLM a config.json dict describes (random weights: Keras initialises every variable it builds,
    so `blank`, which lets torch's twin skip that, changes nothing here), generating by default with
    `generation_config` (a generation_config.json's dict; keras-hub's models have no place for one); when no family
    module computes it, one ValueError giving each module's reason."""
    model_type = config.get("model_type")
    if model_type not in BUILDERS:
        raise ValueError(f"config.json field 'model_type': {model_type!r} is not one of {', '.join(BUILDERS)}")
    reasons = []
    for name in BUILDERS[model_type]:
        try:
            model = _module(name).build(config, dtype=dtype)
        except ValueError as error:
            reasons.append(str(error))
            continue
        if generation_config is not None and isinstance(model, Generating):
            model.generation_config = generation_config
        return model
    raise ValueError("; ".join(reasons) if len(reasons) > 1 else reasons[0])


def _family(model):
    for module in _modules():
        if isinstance(model, module.MODELS):
            return module
    raise ValueError(f"{type(model).__name__} is no Keras model of a Hugging Face family this suite ports "
                     f"({', '.join(BUILDERS)})")  # fmt: skip


def describe(model) -> str:
    """The model's class, as its user imports it."""
    cls = type(model)
    return f"{'keras_hub.models' if cls.__module__.startswith('keras_hub') else cls.__module__}.{cls.__name__}"


def family_of(model) -> str:
    return hf_config(model)["model_type"]


def load_hf_weights(model, state: dict[str, np.ndarray]) -> None:
    _family(model).load_hf_weights(model, state)


def hf_state(model) -> dict[str, np.ndarray]:
    return _family(model).hf_state(model)


def hf_config(model) -> dict:
    return _family(model).hf_config(model)


def load_keras(path: Path) -> keras.Model:
    """A `.keras` file of one of the families (safe mode: configs only, no code), every family's classes registered."""
    _modules()
    return keras.saving.load_model(path, safe_mode=True)


def save_keras(model, path: Path) -> None:
    model.save(path)


def load_weights(config: dict, path: Path, dtype: str = "float32") -> keras.Model:
    """The model `config` describes holding a `.weights.h5` file's weights."""
    model = build(config, dtype)
    model.load_weights(path)
    return model


def save_weights(model, path: Path) -> None:
    model.save_weights(path)


def run(model, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Encoder and decoder last hidden states [B, S, E], [B, T, E], logits [B, T, V] on keras-hub's four inputs, and
    the cross-attention probabilities [B, L, N, T, S] of the L decoder layers (torch's twin: HF's cross_attentions)."""
    inputs = {key: np.asarray(value, np.int32) for key, value in batch.items()}
    hidden = model.backbone(inputs)
    found = {"encoder": hidden["encoder_sequence_output"], "decoder": hidden["decoder_sequence_output"],
             "logits": model(inputs), "cross_attention": cross_attention(model, inputs)}  # fmt: skip
    return {name: keras.ops.convert_to_numpy(value) for name, value in found.items()}


def cross_attention(model, inputs: dict):
    """The decoder layers' cross-attention probabilities [B, L, N, T, S]: our backbones' on-request model, or
    keras-hub's (BART, T5) run once with each decoder layer recording them where they pass."""
    if hasattr(model.backbone, "with_cross_attention"):
        return model.backbone.with_cross_attention()(inputs)["cross_attention"]
    recorded = []
    probes = _keras_hub_probes(model, recorded)
    for target, name, wrapper in probes:  # on the instance, plainly: Keras's tracking never sees it; gone after the call
        object.__setattr__(target, name, wrapper)
    try:
        model.backbone(inputs)
    finally:
        for target, name, _ in probes:
            object.__delattr__(target, name)
    return keras.ops.stack(recorded, axis=1)  # [B, L, N, T, S]


def _keras_hub_probes(model, recorded: list) -> list:
    """(object, method name, wrapper) for each of keras-hub's decoder layers, where its cross-attention probabilities
    [B, N, T, S] pass: BART's MultiHeadAttention._compute_attention (asked for its scores: its fast path has none),
    T5's T5MultiHeadAttention.dropout_layer (the probabilities are its input)."""
    probes = []
    for layer in model.backbone.decoder_transformer_layers:
        if hasattr(layer, "_cross_attention_layer"):
            target, name = layer._cross_attention_layer, "_compute_attention"

            def wrapper(query, key, value, attention_mask=None, training=None, _original=target._compute_attention, **_):
                output, scores = _original(query, key, value, attention_mask, training, return_attention_scores=True)
                recorded.append(scores)  # [B, N, T, S]
                return output, scores
        else:
            target, name = layer.cross_attention.dropout_layer, "call"

            def wrapper(probabilities, training=False, _original=target.call):
                recorded.append(probabilities)  # [B, N, T, S]
                return _original(probabilities, training=training)

        probes.append((target, name, wrapper))
    return probes
