"""HF's state dict of the BART family (numpy arrays, keys as MarianMTModel's, BartForConditionalGeneration's and
MBartForConditionalGeneration's state_dict()) into our Keras Seq2SeqLM of it (tf_impl/hf/bart_family.py), and out.

Strict: every variable set, every key used, shapes checked; tied keys (HF writes a tied matrix once, state_dict()
repeats it) may name the shared matrix under any of their names, and must agree where repeated.
"""

from __future__ import annotations

import keras
import numpy as np

# torch nn.Linear weight [out, in] -> Keras Dense kernel [in, out]; LayerNorm weight -> gamma
DENSE = {"weight": ("kernel", True), "bias": ("bias", False)}
NORM = {"weight": ("gamma", False), "bias": ("beta", False)}


def _layer_targets(prefix: str, layer, names: tuple[str, ...]) -> list:
    targets = []
    for name in names:
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            dense = getattr(getattr(layer, name), proj)
            targets += [((f"{prefix}.{name}.{proj}.{k}",), getattr(dense, v), t) for k, (v, t) in DENSE.items()]
        norm = getattr(layer, f"{name}_layer_norm")
        targets += [((f"{prefix}.{name}_layer_norm.{k}",), getattr(norm, v), t) for k, (v, t) in NORM.items()]
    for fc in ("fc1", "fc2"):
        targets += [((f"{prefix}.{fc}.{k}",), getattr(getattr(layer, fc), v), t) for k, (v, t) in DENSE.items()]
    return targets + [((f"{prefix}.final_layer_norm.{k}",), getattr(layer.final_layer_norm, v), t) for k, (v, t) in NORM.items()]


def _embedding_targets(model) -> list:
    """(HF names of one matrix, variable, transpose): tied names share one entry (MarianMTModel._tied_weights_keys,
    which HF 5.23 empties when tie_word_embeddings is false: then shared, encoder, decoder and lm_head are four)."""
    backbone = model.backbone
    encoder, decoder = backbone.encoder_embed_tokens.embeddings, backbone.decoder_embed_tokens.embeddings
    shared = backbone.arguments["share_embeddings"]
    if not backbone.arguments.get("tie_word_embeddings", True):
        found = [(("model.encoder.embed_tokens.weight",), encoder, False),
                 (("model.decoder.embed_tokens.weight",), decoder, False),
                 (("lm_head.weight",), model.final_logits_bias.kernel, False)]  # fmt: skip
        return found + ([(("model.shared.weight",), backbone.shared_embed_tokens.embeddings, False)] if shared else [])
    if shared:
        names = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                 "lm_head.weight")  # fmt: skip
        return [(names, encoder, False)]
    return [(("model.encoder.embed_tokens.weight",), encoder, False),
            (("model.decoder.embed_tokens.weight", "lm_head.weight"), decoder, False)]  # fmt: skip


def _norm_targets(backbone) -> list:
    """BART's learned positions, layernorm_embedding (BART, mBART) and the final layer_norm (mBART), where present."""
    found = []
    for side in ("encoder", "decoder"):
        positions = getattr(backbone, f"{side}_embed_positions")
        if backbone.arguments.get("positions") == "learned":
            found.append(((f"model.{side}.embed_positions.weight",), positions.embeddings, False))
        for name in ("layernorm_embedding", "layer_norm"):
            norm = getattr(backbone, f"{side}_{name}", None)
            if norm is not None:
                found += [((f"model.{side}.{name}.{k}",), getattr(norm, v), t) for k, (v, t) in NORM.items()]
    return found


def targets(model) -> list:
    """Every variable of `model` (a Seq2SeqLM of the BART family) with the HF keys that hold it."""
    backbone = model.backbone
    found = _embedding_targets(model) + [(("final_logits_bias",), model.final_logits_bias.bias, False)]
    found += _norm_targets(backbone)
    for i, layer in enumerate(backbone.encoder_layers):
        found += _layer_targets(f"model.encoder.layers.{i}", layer, ("self_attn",))
    for i, layer in enumerate(backbone.decoder_layers):
        found += _layer_targets(f"model.decoder.layers.{i}", layer, ("self_attn", "encoder_attn"))
    return found


def _tables(model) -> dict:
    """HF's sinusoidal tables: in state_dict() (not in saved files); checked against ours, never loaded."""
    backbone = model.backbone
    if backbone.arguments.get("positions", "sinusoidal") != "sinusoidal":
        return {}
    return {f"model.{side}.embed_positions.weight": getattr(backbone, f"{side}_embed_positions").table
            for side in ("encoder", "decoder")}  # fmt: skip


def stored(state: dict, names: tuple, problems: list) -> tuple[np.ndarray | None, str]:
    """The array HF's state holds under `names` (a tie's keys: the first present, every other equal to it) and its key;
    (None, "") where none is present. Each problem is appended to `problems`."""
    present = [name for name in names if name in state]
    if not present:
        problems.append(f"missing: {' or '.join(names)}")
        return None, ""
    first = np.asarray(state[present[0]])
    for other in present[1:]:
        if not np.array_equal(np.asarray(state[other]), first):
            hint = " (an untied lm_head: config.json's tie_word_embeddings false)" if other == "lm_head.weight" else ""
            problems.append(f"tied keys disagree: {present[0]} and {other} hold different matrices{hint}")
    return first, present[0]


def hf_value(state: dict, names: tuple, variable, transpose: bool, problems: list):
    """The array for `variable` (transposed for a Dense kernel), its shape checked; None where a problem was recorded."""
    first, key = stored(state, names, problems)
    if first is None:
        return None
    value = first.T if transpose else first
    if tuple(value.shape) != tuple(variable.shape):
        problems.append(f"shape: {key} is {tuple(first.shape)}, the model needs {tuple(variable.shape)}"
                        f"{' (transposed)' if transpose else ''}")  # fmt: skip
        return None
    return value


def _check_tables(model, state: dict, problems: list) -> None:
    for key, table in _tables(model).items():
        if key in state and not np.array_equal(np.asarray(state[key]).astype(table.dtype), table):
            problems.append(f"{key} is not Marian's sinusoidal table (sin half then cos half, float32 values)")


def assign_strict(model, found: list, state: dict, known: set, title: str, problems: list, value=None) -> None:
    """Every variable of `model` from HF's `state` through `found` ((HF keys, variable, how) triples, `value` reading
    each: hf_value by default), strictly: every key used or `known`, every variable mapped, a tie's keys equal. One
    ValueError titled `title` lists every problem (`problems` holds the caller's own); nothing is assigned before."""
    value = value or hf_value
    assignments, used = [], set(known)
    for names, variable, how in found:
        used.update(names)
        array = value(state, names, variable, how, problems)
        if array is not None:
            assignments.append((variable, array))
    problems += [f"unexpected: {key}" for key in sorted(set(state) - used)]
    mapped = {id(variable) for _, variable, _ in found}
    problems += [f"no HF key for the model's variable {v.path}" for v in model.weights if id(v) not in mapped]
    if problems:
        raise ValueError(f"{title}:\n  " + "\n  ".join(problems))
    for variable, array in assignments:
        variable.assign(array.astype(variable.dtype))


def load_hf_weights(model, state: dict) -> None:
    """Set every variable of a Seq2SeqLM of the family from HF's state dict; one ValueError listing every problem."""
    problems: list = []
    _check_tables(model, state, problems)
    family = type(model).__name__.removesuffix("Seq2SeqLM")
    assign_strict(model, targets(model), state, set(_tables(model)), f"HF {family} state dict does not fit the model",
                  problems)  # fmt: skip


def hf_state(model) -> dict:
    """HF's whole state_dict() of the model as numpy in the model's dtype: each tied key repeated, Marian's sinusoid
    tables (HF's buffers, never saved) and final_logits_bias included; load_hf_weights reads it back bit for bit."""
    state = {}
    for names, variable, transpose in targets(model):
        value = np.asarray(keras.ops.convert_to_numpy(variable))
        state |= dict.fromkeys(names, value.T if transpose else value)
    dtype = keras.backend.standardize_dtype(model.backbone.compute_dtype)
    return state | {key: table.astype(dtype) for key, table in _tables(model).items()}
