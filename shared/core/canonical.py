"""Canonical weights: one layout for both stacks, and the table of leaf rules that maps it to Keras.

The canonical layout is the PyTorch `state_dict` of our torch modules, whose attribute names are the
documents' own. A *leaf* is one layer that owns weights (a Linear, an Embedding, a recurrent layer, or a
bare parameter); its canonical keys are `<attribute path>.<suffix>`. Each rule below converts one leaf's
canonical arrays (keyed by suffix) to the arrays of the matching Keras variables (keyed by variable name)
and back. The Keras stack walks its model, names every leaf by the same attribute path, and applies the
rule for the leaf's kind: no per-model code anywhere.

Recurrent leaves hold one *cell* per (layer, direction); the cell suffix is torch's own: `_l0`,
`_l0_reverse`, `_l1`, ... The Keras stack names the variables of each cell with the same suffix
(`kernel_l0`, `recurrent_kernel_l0_reverse`, ...), so bidirectional and stacked layers need no extra rule.

Bias policy (RNN, GRU and LSTM alike): torch keeps two biases per cell, `bias_ih` and `bias_hh`. Our Keras
cells keep both too, stacked as one `[2, G*H]` variable, exactly as Keras's own GRU does with
`reset_after=True`. Summing them into one Keras bias (the usual conversion) gives the same forward pass
but *not* the same training: torch gives the gradient g to each of the two biases, so their sum moves
twice as far under SGD and Adam alike, and global clipping counts g twice. Keeping two rows keeps every
update equal, and makes every rule here a pure permutation/transpose, so gradients convert with the same
rule as weights.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from shared.core.renames import proposal_text, propose_renames

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class LeafRule:
    """How one kind of leaf maps between canonical suffixes and Keras variable names."""

    kind: str
    to_keras: Callable[[Mapping[str, np.ndarray]], Arrays]
    from_keras: Callable[[Mapping[str, np.ndarray]], Arrays]


def _kernel_rule(kind: str, axes: tuple[int, ...]) -> LeafRule:
    """Rule for a layer whose torch `weight` is the Keras `kernel` with its axes reversed (an involution):
    Linear `[out, in]` <-> Dense `[in, out]`; Conv1d `[out, in/groups, k]` <-> Conv1D `[k, in/groups, out]`.
    The bias, where the layer has one, is the same array in both."""

    def convert(arrays: Mapping[str, np.ndarray], weight: str, other: str) -> Arrays:
        out = {other: arrays[weight].transpose(axes)}
        if "bias" in arrays:
            out["bias"] = arrays["bias"]
        return out

    return LeafRule(kind, partial(convert, weight="weight", other="kernel"), partial(convert, weight="kernel", other="weight"))


def _renaming_rule(kind: str, names: Mapping[str, str]) -> LeafRule:
    """A rule that only renames arrays, canonical suffix -> Keras name, each where the layer has it
    (Embedding `weight` <-> `embeddings`; LayerNorm `weight`, `bias` <-> `gamma`, `beta`, none without an
    affine part; a bare parameter)."""
    back = {keras_name: suffix for suffix, keras_name in names.items()}
    return LeafRule(
        kind, lambda canon: {names[k]: v for k, v in canon.items()}, lambda keras: {back[k]: v for k, v in keras.items()}
    )


def reorder_gates(array: np.ndarray, source: str, target: str, axis: int = 0) -> np.ndarray:
    """Reorder the gate blocks of `array` along `axis` from gate order `source` to `target` (e.g. "rzn")."""
    blocks = np.split(array, len(source), axis=axis)
    return np.concatenate([blocks[source.index(gate)] for gate in target], axis=axis)


_CELL_KEY = re.compile(r"^weight_ih(_l\d+(?:_reverse)?)$")


def cell_suffixes(names) -> list[str]:
    """The cell suffixes (`_l0`, `_l0_reverse`, ...) present among canonical or Keras names, in order."""
    found = [m.group(1) for m in map(_CELL_KEY.match, names) if m]
    found += [n[len("kernel") :] for n in names if n.startswith("kernel_l")]
    return sorted(set(found), key=lambda s: (int(re.search(r"\d+", s).group()), s.endswith("_reverse")))


def recurrent_rule(kind: str, torch_gates: str, keras_gates: str) -> LeafRule:
    """Rule for nn.RNN/GRU/LSTM (any layers, any direction) <-> our Keras cells with a `[2, G*H]` bias.

    Args:
        torch_gates: torch's gate order along the stacked axis, e.g. "rzn" for GRU.
        keras_gates: the Keras cell's gate order, e.g. "zrn" for GRU (Keras calls n "h").
    """

    def to_keras(canon: Mapping[str, np.ndarray]) -> Arrays:
        keras, gates = {}, partial(reorder_gates, source=torch_gates, target=keras_gates)
        for sfx in cell_suffixes(canon):
            keras[f"kernel{sfx}"] = gates(canon[f"weight_ih{sfx}"]).T  # [G*H, in] -> [in, G*H]
            keras[f"recurrent_kernel{sfx}"] = gates(canon[f"weight_hh{sfx}"]).T  # [G*H, H] -> [H, G*H]
            if f"bias_ih{sfx}" in canon:  # a layer built without biases (bias=False, use_bias=False) has none
                keras[f"bias{sfx}"] = np.stack([gates(canon[f"bias_ih{sfx}"]), gates(canon[f"bias_hh{sfx}"])])  # [2, G*H]
        return keras

    def from_keras(keras: Mapping[str, np.ndarray]) -> Arrays:
        canon, gates = {}, partial(reorder_gates, source=keras_gates, target=torch_gates)
        for sfx in cell_suffixes(keras):
            canon[f"weight_ih{sfx}"] = gates(keras[f"kernel{sfx}"].T)
            canon[f"weight_hh{sfx}"] = gates(keras[f"recurrent_kernel{sfx}"].T)
            if f"bias{sfx}" in keras:
                canon[f"bias_ih{sfx}"] = gates(keras[f"bias{sfx}"][0])
                canon[f"bias_hh{sfx}"] = gates(keras[f"bias{sfx}"][1])
        return canon

    return LeafRule(kind, to_keras, from_keras)


def summed_bias_rule(kind: str, torch_gates: str, keras_gates: str) -> LeafRule:
    """The usual conversion for *stock* Keras SimpleRNN/LSTM cells, which hold one bias: b_ih + b_hh.

    Forward-equal, not training-equal (see the module docstring): reading it back gives b_ih = bias,
    b_hh = 0. Offered for porting stock Keras models; our own cells use `recurrent_rule`.
    """
    exact = recurrent_rule(kind, torch_gates, keras_gates)

    def to_keras(canon: Mapping[str, np.ndarray]) -> Arrays:
        keras = exact.to_keras(canon)
        return {name: value.sum(0) if name.startswith("bias") else value for name, value in keras.items()}

    def from_keras(keras: Mapping[str, np.ndarray]) -> Arrays:
        stacked = {n: np.stack([v, np.zeros_like(v)]) if n.startswith("bias") else v for n, v in keras.items()}
        return exact.from_keras(stacked)

    return LeafRule(kind, to_keras, from_keras)


_PROJECTIONS = ("query", "key", "value")


def _attention_to_keras(canon: Mapping[str, np.ndarray]) -> Arrays:
    """nn.MultiheadAttention -> keras.layers.MultiHeadAttention, heads flat: each kernel `[in, heads * head_dim]`
    (torch's head h owns output features h*D .. h*D + D-1, Keras's `[in, heads, head_dim]` flattened row-major: the
    same order), the output kernel `[heads * head_dim, out]`; the Keras leaf reshapes each to its variable's shape."""
    if "in_proj_weight" in canon:  # packed [3E, E]: q, k, v blocks in that order
        weights = np.split(canon["in_proj_weight"], 3)
    else:  # kdim or vdim other than embed_dim: one weight each
        weights = [canon[f"{name[0]}_proj_weight"] for name in _PROJECTIONS]
    keras = {f"{name}_kernel": weight.T for name, weight in zip(_PROJECTIONS, weights, strict=True)}  # [in, H*D] each
    keras["output_kernel"] = canon["out_proj.weight"].T  # [H*D, E]
    if "in_proj_bias" in canon:
        keras.update({f"{name}_bias": bias for name, bias in zip(_PROJECTIONS, np.split(canon["in_proj_bias"], 3), strict=True)})
    if "out_proj.bias" in canon:
        keras["output_bias"] = canon["out_proj.bias"]
    return keras


def _attention_from_keras(keras: Mapping[str, np.ndarray]) -> Arrays:
    """keras.layers.MultiHeadAttention -> nn.MultiheadAttention: packed `in_proj_weight` where the query, key and
    value inputs all have the embedding's width (torch's `_qkv_same_embed_dim`), else one weight each."""
    kernels = [keras[f"{name}_kernel"].reshape(keras[f"{name}_kernel"].shape[0], -1).T for name in _PROJECTIONS]  # [H*D, in]
    width = kernels[0].shape[0]
    if all(kernel.shape == (width, width) for kernel in kernels):
        canon = {"in_proj_weight": np.concatenate(kernels)}  # [3E, E]
    else:
        canon = {f"{name[0]}_proj_weight": kernel for name, kernel in zip(_PROJECTIONS, kernels, strict=True)}
    if "query_bias" in keras:
        canon["in_proj_bias"] = np.concatenate([keras[f"{name}_bias"].reshape(-1) for name in _PROJECTIONS])  # [3E]
    canon["out_proj.weight"] = keras["output_kernel"].reshape(width, -1).T  # [H, D, E] -> [E, H*D]
    if "output_bias" in keras:
        canon["out_proj.bias"] = keras["output_bias"]
    return canon


RULES: dict[str, LeafRule] = {
    "linear": _kernel_rule("linear", (1, 0)),
    "embedding": _renaming_rule("embedding", {"weight": "embeddings"}),
    "parameter": _renaming_rule("parameter", {"": "value"}),
    "layer_norm": _renaming_rule("layer_norm", {"weight": "gamma", "bias": "beta"}),
    "conv1d": _kernel_rule("conv1d", (2, 1, 0)),
    "rnn": recurrent_rule("rnn", torch_gates="h", keras_gates="h"),
    # torch GRU stacks (reset, update, new); Keras stacks (update, reset, candidate): swap blocks 0 and 1
    "gru": recurrent_rule("gru", torch_gates="rzn", keras_gates="zrn"),
    # LSTM: both stacks use (input, forget, cell, output)
    "lstm": recurrent_rule("lstm", torch_gates="ifgo", keras_gates="ifgo"),
    # stock Keras SimpleRNN / LSTM cells (one bias): forward-equal only
    "rnn_summed": summed_bias_rule("rnn", torch_gates="h", keras_gates="h"),
    "lstm_summed": summed_bias_rule("lstm", torch_gates="ifgo", keras_gates="ifgo"),
    # nn.MultiheadAttention <-> keras.layers.MultiHeadAttention: q/k/v blocks split, heads flattened
    "multi_head_attention": LeafRule("multi_head_attention", _attention_to_keras, _attention_from_keras),
}


def join_key(prefix: str, suffix: str) -> str:
    """Canonical key of a leaf array: `encoder.weight_ih_l0`; a bare parameter's suffix is empty."""
    return f"{prefix}.{suffix}" if suffix else prefix


def check_weights(expected: Mapping[str, tuple], given: Mapping[str, object], model: str = "model") -> None:
    """Raise one ValueError that lists every missing, unexpected, mis-shaped, non-float or non-finite key.

    Args:
        expected: canonical key -> shape, as the model holds them.
        given: canonical key -> array-like, as the caller offers them.
    """
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    misshaped, non_float, non_finite = [], [], []
    for key in sorted(set(expected) & set(given)):
        array = np.asarray(given[key])
        if tuple(array.shape) != tuple(expected[key]):
            misshaped.append(f"{key}: expected {tuple(expected[key])}, got {tuple(array.shape)}")
        elif array.dtype.kind != "f":
            non_float.append(f"{key}: dtype {array.dtype}")
        elif not np.isfinite(array).all():
            non_finite.append(f"{key}: {np.isnan(array).sum()} NaN, {np.isinf(array).sum()} infinite of {array.size}")
    problems = [
        (f"missing keys: {', '.join(missing)}", missing),
        (f"unexpected keys: {', '.join(unexpected)}", unexpected),
        (f"mis-shaped keys: {'; '.join(misshaped)}", misshaped),
        (f"non-float keys: {'; '.join(non_float)}", non_float),
        (f"non-finite keys (a diverged or corrupt file?): {'; '.join(non_finite)}", non_finite),
    ]
    lines = [text for text, items in problems if items]
    renames = propose_renames({key: expected[key] for key in missing}, {key: np.shape(given[key]) for key in unexpected})
    if renames:
        lines.append(proposal_text(renames))
    if lines:
        raise ValueError(f"weights do not fit {model}: " + " | ".join(lines))
