"""Canonical weights <-> Keras models, through the leaf rules of shared.core.canonical.

The walk below names every Keras layer that owns weights by its attribute path (the torch module's
path), finds its kind, and hands its variables to the rule of that kind. There is no per-model code:
a new model needs no change here as long as its layers are of a known kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import keras
import numpy as np

from shared.core.canonical import RULES, LeafRule, check_weights, join_key
from tf_impl.keras_compat.layers import TorchLSTM, TorchLSTMCell, TorchRNNCell

_CELL_KINDS = {
    keras.layers.GRUCell: "gru",
    TorchRNNCell: "rnn",
    TorchLSTMCell: "lstm",
    keras.layers.SimpleRNNCell: "rnn_summed",  # stock cells: one bias, forward-equal only
    keras.layers.LSTMCell: "lstm_summed",
}


def _cell_variables(cell, suffix: str) -> dict:
    """A recurrent cell's variables keyed as the recurrent rule expects: `kernel_l0`, ..."""
    return {f"kernel{suffix}": cell.kernel, f"recurrent_kernel{suffix}": cell.recurrent_kernel, f"bias{suffix}": cell.bias}


def _recurrent_kind(cell) -> str:
    kind = _CELL_KINDS.get(type(cell))
    if kind is None:
        raise ValueError(f"no canonical rule for recurrent cell {type(cell).__name__}")
    if kind == "gru" and not (cell.reset_after and cell.recurrent_activation is keras.activations.sigmoid):
        raise ValueError(f"GRU cell {cell.name}: torch's GRU needs reset_after=True and a sigmoid recurrent activation")
    if kind == "lstm_summed" and cell.recurrent_activation is not keras.activations.sigmoid:
        raise ValueError(f"LSTM cell {cell.name}: torch's LSTM needs a sigmoid recurrent activation")
    return kind


def leaf(layer) -> tuple[str, dict] | None:
    """(kind, {keras name: variable}) when `layer` is a leaf that owns weights, else None."""
    if isinstance(layer, keras.Variable):
        return "parameter", {"value": layer}
    if isinstance(layer, keras.layers.Dense):
        return "linear", {"kernel": layer.kernel, **({"bias": layer.bias} if layer.use_bias else {})}
    if isinstance(layer, keras.layers.Embedding):
        return "embedding", {"embeddings": layer.embeddings}
    if isinstance(layer, keras.layers.LayerNormalization):
        return "layer_norm", present(gamma=layer.gamma, beta=layer.beta)
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return "multi_head_attention", attention_variables(layer)
    if isinstance(layer, keras.layers.Bidirectional):
        (kind, fwd), (_, bwd) = leaf(layer.forward_layer), leaf(layer.backward_layer)
        return kind, {**fwd, **{f"{name}_reverse": var for name, var in bwd.items()}}
    if isinstance(layer, keras.layers.RNN):
        return _recurrent_kind(layer.cell), _cell_variables(layer.cell, "_l0")
    if isinstance(layer, TorchLSTM):
        cells = [rnn.cell for rnn in layer.stack]
        return "lstm", {name: var for i, cell in enumerate(cells) for name, var in _cell_variables(cell, f"_l{i}").items()}
    return None


def attention_variables(layer) -> dict:
    """A MultiHeadAttention's variables by the rule's names; ValueError for what nn.MultiheadAttention cannot
    compute (_refusal: the message names them)."""
    refusal = _refusal(layer)
    if refusal is not None:
        raise ValueError(refusal)
    dense = {"query": layer._query_dense, "key": layer._key_dense, "value": layer._value_dense, "output": layer._output_dense}
    return present(**{f"{name}_{part}": getattr(d, part, None) for name, d in dense.items() for part in ("kernel", "bias")})


def _refusal(layer) -> str | None:
    """Why nn.MultiheadAttention cannot compute `layer`: heads x key_dim other than the query's width, value_dim
    other than key_dim, another output_shape, attention over other axes; None where it can."""
    width = layer._query_dense.kernel.shape[0]
    problems = []
    if layer.num_heads * layer.key_dim != width:
        problems.append(f"num_heads x key_dim = {layer.num_heads} x {layer.key_dim} is not the query's width {width} "
                        "(torch's embed_dim splits into the heads)")  # fmt: skip
    if layer.value_dim != layer.key_dim:
        problems.append(f"value_dim {layer.value_dim} is not key_dim {layer.key_dim} (torch's heads share one size)")
    if layer._output_shape not in (None, width, (width,)):
        problems.append(f"output_shape {layer._output_shape} is not the query's width {width}")
    if layer.attention_axes not in (None, (1,), [1]):
        problems.append(f"attention_axes {layer.attention_axes}: torch attends over the sequence axis only")
    if getattr(layer, "_sliding_window", None) is not None:
        problems.append(f"sliding_window {layer._sliding_window}: torch's attention sees every key")
    if getattr(layer, "_use_gate", False):
        problems.append("use_gate: torch's attention has no output gate")
    if problems:
        return f"{layer.name}: a MultiHeadAttention that nn.MultiheadAttention cannot compute: {'; '.join(problems)}"
    return None


def present(**variables) -> dict:
    return {name: variable for name, variable in variables.items() if variable is not None}


def leaves(layer, prefix: str = "") -> Iterator[tuple[str, str, dict]]:
    """Every weight-owning leaf under `layer` as (canonical prefix, kind, variables), in attribute order."""
    for attribute, value in _attributes(layer).items():
        if attribute.startswith("_"):
            continue
        path = f"{prefix}{attribute}"
        found = leaf(value)
        if found is not None:
            yield (path, *found)
        elif isinstance(value, keras.layers.Layer):
            yield from leaves(value, f"{path}.")


def _attributes(layer) -> dict:
    """A layer's attributes; on Keras's torch backend its sublayers are torch modules, kept in `_modules`."""
    return {**vars(layer), **getattr(layer, "_modules", {})}


def _plan(model, rules: Mapping[str, LeafRule]):
    """Each leaf as (prefix, rule, {keras name: variable}, {canonical suffix: current value})."""
    for prefix, kind, variables in leaves(model):
        rule = rules[kind]
        yield prefix, rule, variables, rule.from_keras({name: np.array(var.numpy()) for name, var in variables.items()})


def get_weights(model, rules: Mapping[str, LeafRule] = RULES) -> dict[str, np.ndarray]:
    """Canonical weights of `model` (torch state_dict names and layouts) as numpy arrays."""
    return {join_key(prefix, sfx): value for prefix, _, _, canon in _plan(model, rules) for sfx, value in canon.items()}


def set_weights(model, weights: Mapping[str, np.ndarray], rules: Mapping[str, LeafRule] = RULES) -> None:
    """Assign canonical `weights` to `model`'s variables through the leaf rules; strict.

    Args:
        rules: the leaf rule table; tests pass a deliberately wrong one to prove the check catches it.
    """
    assign_through_rules(model, weights, lambda variable: variable, rules)


def assign_through_rules(model, arrays: Mapping[str, np.ndarray], target: Callable, rules: Mapping[str, LeafRule] = RULES):
    """Convert canonical `arrays` (weight-shaped: weights, or Adam's moments) by the leaf rules and assign
    each to `target(variable)` (the variable itself, or its optimizer slot); strict, as set_weights."""
    plan = list(_plan(model, rules))
    expected = {join_key(prefix, sfx): value.shape for prefix, _, _, canon in plan for sfx, value in canon.items()}
    check_weights(expected, arrays, type(model).__name__)
    for prefix, rule, variables, canon in plan:
        values = rule.to_keras({sfx: np.asarray(arrays[join_key(prefix, sfx)]) for sfx in canon})
        for name, variable in variables.items():
            # np.reshape: a rule that gives a flattened layout (MultiHeadAttention's [E, heads * D]) into its variable
            target(variable).assign(np.reshape(values[name], variable.shape).astype(variable.dtype))


def get_grads(model, gradient: Callable, rules: Mapping[str, LeafRule] = RULES) -> dict[str, np.ndarray]:
    """Canonical gradients; `gradient(variable)` gives a variable's gradient as numpy (every rule is a
    permutation/transpose/stack, linear, so it maps gradients exactly as it maps weights)."""
    grads = {}
    for prefix, kind, variables in leaves(model):
        canon = rules[kind].from_keras({name: gradient(variable) for name, variable in variables.items()})
        grads.update({join_key(prefix, sfx): value for sfx, value in canon.items()})
    return grads
