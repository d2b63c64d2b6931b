"""A Keras model's weight-owning layers as shared.core.leaves leaves (stack-specific: the torch side is
torch_impl/conversion.py); running a model on a verification batch; its float64 copy.

Each leaf converts between its Keras variables and the canonical (torch) layout through the leaf rules of
shared.core.canonical. A Keras functional or `Sequential` model's layers are named by their own names (`lstm`,
`lstm_1`, ...); any other layer's by attribute (lists as `layers.0`). A recurrent layer over stacked cells
and our `TorchLSTM` are one leaf per layer (`rnn[0]`, `rnn[1]`); `Bidirectional` is one leaf with both
directions (`_l0`, `_l0_reverse`).
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
import numpy as np
from keras.src.models.functional import Functional

from shared.core.canonical import RULES, LeafRule
from shared.core.leaves import Leaf, map_inputs, positional, shortest_paths, state_block_facts
from tf_impl.keras_compat.backends import check_dtype, exact_float64, float64_policy
from tf_impl.keras_compat.layers import TorchLSTM, TorchLSTMCell, TorchRNNCell
from tf_impl.weights import attention_variables, present

SUPPORTED = ("Dense, Embedding, SimpleRNN, GRU (reset_after=True), LSTM, Bidirectional, RNN over SimpleRNNCell / "
             "GRUCell / LSTMCell (stacked too), the cells themselves, LayerNormalization, Conv1D, MultiHeadAttention, Attention, "
             "AdditiveAttention, our TorchRNNCell / TorchLSTMCell / TorchLSTM, a bare weight")  # fmt: skip
_CELLS = {  # cell class -> (rule kind, holds one summed bias)
    keras.layers.GRUCell: ("gru", False),
    TorchRNNCell: ("rnn", False),
    TorchLSTMCell: ("lstm", False),
    keras.layers.SimpleRNNCell: ("rnn", True),
    keras.layers.LSTMCell: ("lstm", True),
}
# keras-hub's Transformer blocks keep their parts private: each part under the name of its torch counterpart
# (nn.TransformerEncoderLayer / nn.TransformerDecoderLayer), so the two pair by name
HUB_BLOCK_PARTS = {
    "TransformerEncoder": {"self_attn": "_self_attention_layer", "norm1": "_self_attention_layer_norm",
                           "linear1": "_feedforward_intermediate_dense", "linear2": "_feedforward_output_dense",
                           "norm2": "_feedforward_layer_norm"},
    "TransformerDecoder": {"self_attn": "_self_attention_layer", "norm1": "_self_attention_layer_norm",
                           "multihead_attn": "_cross_attention_layer", "norm2": "_cross_attention_layer_norm",
                           "linear1": "_feedforward_intermediate_dense", "linear2": "_feedforward_output_dense",
                           "norm3": "_feedforward_layer_norm"},
}  # fmt: skip
# Keras layers whose weights are bare weights of the same names in their torch twins (torch_impl/keras_layers.py):
# `scale`, `concat_score_weight`
BARE_WEIGHT_LAYERS = (keras.layers.Attention, keras.layers.AdditiveAttention)
RESET_BEFORE = ("a Keras GRU with reset_after=False applies the reset gate before the recurrent matmul, (r * h) W_hn; "
                "torch's GRU applies it after, r * (h W_hn + b_hn): no weights make the two equal; build it with "
                "reset_after=True (Keras 3's default)")  # fmt: skip


def leaves(model, rules=None) -> list[Leaf]:
    """Every weight-owning layer of `model` in attribute (or functional) order; ValueError naming the layers
    with no rule, or asking to build a model that has no weights yet."""
    rules = RULES if rules is None else rules
    if not model.built or not model.weights:
        raise ValueError(f"the Keras model {model.name} has no weights yet: call it on a batch (or give it an Input) first")
    found, unsupported = [], []
    _visit(model, "", found, unsupported, rules)
    found = shortest_paths(found)  # a layer held twice (an attribute and a `hparams` dict's entry) is one leaf
    covered = {id(variable) for leaf in found for variable in leaf.handles}
    stray = [variable.path for variable in model.weights if id(variable) not in covered]
    if unsupported or stray:
        raise ValueError(f"no conversion rule for {', '.join(unsupported or stray)} (supported Keras layers: {SUPPORTED})")
    return found


def _visit(layer, path: str, found: list, unsupported: list, rules) -> None:
    units = _units(layer, path.rstrip("."), rules)
    if units is not None:
        found.extend(units)
        return
    bare = isinstance(layer, BARE_WEIGHT_LAYERS)
    if (
        type(layer).__module__.startswith("keras.")
        and not bare
        and (layer._trainable_variables or layer._non_trainable_variables)
    ):
        unsupported.append(f"{path.rstrip('.') or layer.name} ({type(layer).__name__})")
        return
    start = len(found)
    for name, child in _children(layer):
        if isinstance(child, keras.layers.Layer):
            _visit(child, f"{path}{name}.", found, unsupported, rules)
        elif isinstance(child, keras.Variable):
            found.append(_leaf(f"{path}{name}", "parameter", "weight", {"value": child}, rules["parameter"], {}))
    for leaf in found[start:] if bare else []:
        leaf.facts.update(_attention_facts(layer))
    _add_block_facts(layer, path, found)


def _attention_facts(layer) -> dict:
    """The score and scale of an Attention / AdditiveAttention, stated on its bare weights (its torch twin,
    torch_impl/keras_layers.py, states them alike): a dot score's `scale` must not pair with a concat score's weight."""
    score = "additive" if isinstance(layer, keras.layers.AdditiveAttention) else layer.score_mode  # a subclass of Attention
    return {"score mode": score, "use scale": bool(layer.use_scale)}


def _hub_layer(layer) -> str | None:
    """The class name of a keras-hub layer, None for any other."""
    return type(layer).__name__ if type(layer).__module__.startswith("keras_hub.") else None


def _hub_block(layer) -> str | None:
    """The keras-hub Transformer block `layer` is (HUB_BLOCK_PARTS), or None."""
    name = _hub_layer(layer)
    return name if name in HUB_BLOCK_PARTS else None


def _add_block_facts(layer, path: str, found: list) -> None:
    """A keras-hub block's norm order and activation, stated on its self-attention leaf (torch states its
    block's alike): a block computing otherwise does not pair."""
    if _hub_block(layer) is None:
        return
    facts = {"norm first": bool(layer.normalize_first), "activation": keras.activations.get(layer.activation).__name__}
    state_block_facts(found, path, facts)


def _children(layer) -> list[tuple[str, object]]:
    """(name, layer or variable) under `layer`: a functional or Sequential model's layers by their names, a
    keras-hub block's parts by their torch names, otherwise its public attributes, lists and dicts of layers
    element by element."""
    if isinstance(layer, (keras.Sequential, Functional)):
        return [(child.name, child) for child in layer.layers]
    block = _hub_block(layer)
    if block is not None:
        parts = ((name, getattr(layer, private, None)) for name, private in HUB_BLOCK_PARTS[block].items())
        return [(name, part) for name, part in parts if part is not None]
    attributes = dict(vars(layer))
    modules = getattr(layer, "_modules", None)  # on Keras's torch backend a layer is a torch Module: sublayers sit here
    if isinstance(modules, dict):
        attributes.update((name, module) for name, module in modules.items() if name not in attributes)
    out = []
    for name, value in attributes.items():
        if name.startswith("_"):
            continue
        if isinstance(value, (list, tuple)):
            out += [(f"{name}.{index}", item) for index, item in enumerate(value)]
        elif isinstance(value, dict):
            out += [(f"{name}.{key}", item) for key, item in value.items()]
        else:
            out.append((name, value))
    return out


def _units(layer, path: str, rules) -> list[Leaf] | None:
    """The leaves `layer` is, or None where it is not a leaf."""
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return [_attention_leaf(path, layer, rules)]
    simple = _simple(layer)
    if simple is not None:
        kind, variables, facts = simple
        return [_leaf(path, kind, type(layer).__name__, variables, rules[kind], facts)]
    if isinstance(layer, keras.layers.Bidirectional):
        forward, backward = (_cells_of(side) for side in (layer.forward_layer, layer.backward_layer))
        if len(forward) != 1:
            raise ValueError(f"{path}: a Bidirectional over stacked cells has no torch counterpart; stack Bidirectional layers")
        name = f"Bidirectional({type(layer.forward_layer).__name__})"
        return [_cell_leaf(path, name, forward[0], rules, _loop_facts(layer), backward[0])]
    if isinstance(layer, (keras.layers.RNN, TorchLSTM)):
        cells = _cells_of(layer)
        loops = layer.stack if isinstance(layer, TorchLSTM) else [layer] * len(cells)  # the layer running each cell
        name = type(layer).__name__
        if len(cells) == 1:
            return [_cell_leaf(path, name, cells[0], rules, _loop_facts(loops[0]))]
        return [_cell_leaf(f"{path}[{index}]", f"{name} layer {index}", cell, rules, _loop_facts(loop))
                for index, (cell, loop) in enumerate(zip(cells, loops, strict=True))]  # fmt: skip
    if type(layer) in _CELLS:
        return [_cell_leaf(path, type(layer).__name__, layer, rules, {"bidirectional": False})]
    return None


_QKV = ("query", "key", "value")


def _attention_leaf(path: str, layer, rules) -> Leaf:
    """A MultiHeadAttention as one leaf (nn.MultiheadAttention's rule; where torch's cannot compute it, a leaf that
    refuses saying why), split where the other model has none (shared.port.pairing): its q, k, v and output
    projections as Dense layers hold them, or q, k, v packed in one `[in, 3 * heads * head_dim]` (nanoGPT's c_attn)."""
    facts = {"heads": layer.num_heads, "bias": bool(layer.use_bias)}
    name = f"MultiHeadAttention, {layer.num_heads} heads of {layer.key_dim}"
    try:
        whole = _leaf(path, "multi_head_attention", name, attention_variables(layer), rules["multi_head_attention"], facts)
    except ValueError as refused:
        whole = Leaf(path, "multi_head_attention", name, {}, facts, _refuse(str(refused)), _refuse(str(refused)),
                     handles=list(layer.weights), refusal=str(refused))  # fmt: skip
    if layer.attention_axes in (None, (1,), [1]) and not getattr(layer, "_use_gate", False):  # else whole or refused
        whole.splits = _attention_splits(path, name, layer, rules["linear"])
    return whole


def _attention_splits(path: str, name: str, layer, linear: LeafRule) -> list[list[Leaf]]:
    """The MultiHeadAttention's projections as Dense layers: q, k, v and output apart; and where q, k and v read one
    width, q, k, v packed in one (nanoGPT's c_attn) and the output."""
    dense = {"query": layer._query_dense, "key": layer._key_dense, "value": layer._value_dense, "output": layer._output_dense}
    flat = {part: _flat_shape(part, tuple(d.kernel.shape)) for part, d in dense.items()}
    parts = [
        _leaf(f"{path}.{part}", "linear", f"{name}: its {part} projection", present(kernel=d.kernel, bias=d.bias),
              _flat_rule(linear, {"kernel": flat[part], "bias": (flat[part][1],)}), {"bias": d.bias is not None})
        for part, d in dense.items()
    ]  # fmt: skip
    if not flat["query"] == flat["key"] == flat["value"]:
        return [parts]
    packed = {f"{part}_{kind}": getattr(dense[part], kind) for part in _QKV for kind in ("kernel", "bias")}
    qkv = _leaf(f"{path}.qkv", "linear", f"{name}: its q, k, v projections packed", present(**packed),
                _packed_rule(linear, flat["query"]), {"bias": layer.use_bias})  # fmt: skip
    return [parts, [qkv, parts[-1]]]


def _refuse(message: str):
    def refuse(*arrays):
        raise ValueError(message)

    return refuse


def _flat_shape(part: str, shape: tuple) -> tuple[int, int]:
    """A projection's kernel as a Dense's: `[in, heads, head_dim]` as `[in, heads * head_dim]` (row-major: head h owns
    features h*D .. h*D + D-1, torch's view to `[B, T, H, D]`), the output's `[heads, head_dim, out]` as
    `[heads * head_dim, out]`."""
    if part == "output":
        return int(np.prod(shape[:-1])), shape[-1]
    return shape[0], int(np.prod(shape[1:]))


def _flat_rule(linear: LeafRule, flat: dict[str, tuple]) -> LeafRule:
    """The linear rule over variables read at their Dense shapes (`flat`); a write is reshaped back by _leaf."""

    def from_keras(arrays: Mapping[str, np.ndarray]) -> dict:
        return linear.from_keras({name: np.reshape(array, flat[name]) for name, array in arrays.items()})

    return LeafRule("linear", linear.to_keras, from_keras)


def _packed_rule(linear: LeafRule, flat: tuple[int, int]) -> LeafRule:
    """q, k, v as one Dense of `[in, 3 * heads * head_dim]`: the query's features first, then the key's, the value's
    (nanoGPT's `q, k, v = self.c_attn(x).split(n_embd, dim=2)`)."""
    names = _QKV

    def from_keras(arrays: Mapping[str, np.ndarray]) -> dict:
        joined = {"kernel": np.concatenate([np.reshape(arrays[f"{n}_kernel"], flat) for n in names], axis=1)}  # [in, 3HD]
        if "query_bias" in arrays:
            joined["bias"] = np.concatenate([np.reshape(arrays[f"{n}_bias"], -1) for n in names])  # [3HD]
        return linear.from_keras(joined)

    def to_keras(canon: Mapping[str, np.ndarray]) -> dict:
        keras_arrays = linear.to_keras(canon)
        split = {f"{n}_kernel": kernel for n, kernel in zip(names, np.split(keras_arrays["kernel"], 3, axis=1), strict=True)}
        if "bias" in keras_arrays:
            split.update({f"{n}_bias": bias for n, bias in zip(names, np.split(keras_arrays["bias"], 3), strict=True)})
        return split

    return LeafRule("linear", to_keras, from_keras)


def _loop_facts(layer) -> dict:
    """The direction of a recurrent layer (an RNN, or a Bidirectional: its forward layer's, and its merge mode)."""
    if isinstance(layer, keras.layers.Bidirectional):
        return {"bidirectional": True, "go backwards": bool(layer.forward_layer.go_backwards), "merge mode": layer.merge_mode}
    return {"bidirectional": False, "go backwards": bool(layer.go_backwards)}


def _simple(layer) -> tuple[str, dict, dict] | None:
    """(kind, {Keras name: variable}, facts) of a Dense, Embedding, LayerNormalization, MultiHeadAttention or
    Conv1D; the facts: the options of shared.port.pairing.OPTIONS the layer fixes."""
    if isinstance(layer, keras.layers.Dense):
        return "linear", present(kernel=layer.kernel, bias=layer.bias), {"bias": layer.bias is not None}
    if isinstance(layer, keras.layers.Embedding):
        return "embedding", {"embeddings": layer.embeddings}, {"max norm": None, "lookup": "ids"}  # Keras renormalizes no row
    if _hub_layer(layer) == "PositionEmbedding":  # the rows of positions 0..T-1, no ids given: a torch twin's arange
        return "embedding", {"embeddings": layer.position_embeddings}, {"max norm": None, "lookup": "positions"}
    if isinstance(layer, keras.layers.LayerNormalization):
        facts = {"eps": float(layer.epsilon), "normalized axes": _normalized_axes(layer), "rms scaling": bool(layer.rms_scaling)}
        return "layer_norm", present(gamma=layer.gamma, beta=layer.beta), facts
    if isinstance(layer, keras.layers.Conv1D):
        facts = {"stride": layer.strides[0], "dilation": layer.dilation_rate[0], "groups": layer.groups, "padding": layer.padding,
                 "bias": layer.bias is not None}  # fmt: skip
        return "conv1d", present(kernel=layer.kernel, bias=layer.bias), facts
    return None


def _normalized_axes(layer) -> str:
    """A LayerNormalization's axes in torch's words (`the last 1`: torch normalizes trailing axes only), or as
    Keras gives them where they are others."""
    axes = sorted(layer.axis) if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    rank = len((layer.get_build_config() or {}).get("input_shape") or ()) or None  # None: built without a shape
    trailing = [axis - rank if axis >= 0 and rank else axis for axis in axes]
    if trailing == list(range(-len(axes), 0)):
        return f"the last {len(axes)}"
    return f"axis {axes}" + (f" of rank {rank}" if rank else "")


def _cells_of(layer) -> list:
    if isinstance(layer, TorchLSTM):
        return [rnn.cell for rnn in layer.stack]
    cell = layer.cell
    return list(cell.cells) if isinstance(cell, keras.layers.StackedRNNCells) else [cell]


def _cell_leaf(path: str, name: str, cell, rules, direction: dict, reverse=None) -> Leaf:
    """One recurrent leaf: `cell` as `_l0`, and `reverse` (a Bidirectional's backward cell) as `_l0_reverse`;
    `direction`: its loop's facts (_loop_facts; a bare cell's states none but `bidirectional`)."""
    kind, summed = _cell_kind(cell, path)
    variables = _cell_variables(cell, "_l0")
    if reverse is not None:
        variables.update(_cell_variables(reverse, "_l0_reverse"))
    facts = {"activation": _activation(cell, "activation", "tanh"), "bias": getattr(cell, "bias", None) is not None}
    if kind != "rnn":  # our Torch cells fix torch's own activations
        facts["recurrent activation"] = _activation(cell, "recurrent_activation", "sigmoid")
    facts.update(direction)
    rule = rules[f"{kind}_summed" if summed else kind]
    return _leaf(path, kind, name, variables, rule, facts, summed)


def _activation(cell, attribute: str, fixed: str) -> str:
    function = getattr(cell, attribute, None)
    return fixed if function is None else function.__name__


def _cell_kind(cell, path: str) -> tuple[str, bool]:
    found = _CELLS.get(type(cell))
    if found is None:
        raise ValueError(f"{path}: no conversion rule for the recurrent cell {type(cell).__name__} (supported: {SUPPORTED})")
    if found[0] == "gru" and not cell.reset_after:
        raise ValueError(f"{path}: {RESET_BEFORE}")
    return found


def _cell_variables(cell, suffix: str) -> dict:
    """A cell's variables keyed as the recurrent rules expect (`kernel_l0`, ...); no bias where it has none."""
    names = {"kernel": cell.kernel, "recurrent_kernel": cell.recurrent_kernel, "bias": getattr(cell, "bias", None)}
    return {f"{name}{suffix}": variable for name, variable in names.items() if variable is not None}


def _leaf(path: str, kind: str, layer: str, variables: dict, rule, facts: dict, summed: bool = False) -> Leaf:
    def read() -> dict[str, np.ndarray]:
        return rule.from_keras({name: np.array(variable.numpy()) for name, variable in variables.items()})

    def write(arrays: Mapping[str, np.ndarray]) -> None:
        values = rule.to_keras(arrays)
        for name, variable in variables.items():  # a rule may give heads flat: [in, H*D] for [in, H, D]
            variable.assign(np.reshape(np.asarray(values[name]), variable.shape).astype(variable.dtype))

    shapes = {suffix: tuple(np.shape(value)) for suffix, value in read().items()}
    return Leaf(path, kind, layer, shapes, facts, read, write, summed, list(variables.values()))


# ---- running a model ----


def _float64_from_config(model, inputs=None):
    """A float64 copy of `model` rebuilt from its config under a float64 dtype policy, holding its weights
    widened; None where the model cannot be rebuilt so (no config, or it fixes its own dtype)."""
    check_dtype("float64")
    try:
        config = _without_dtypes(keras.saving.serialize_keras_object(model))
        with float64_policy():
            twin = keras.saving.deserialize_keras_object(config)
    except Exception:  # noqa: BLE001 (a model without a usable config: float64 is then not available)
        return None
    if not twin.built and inputs is not None:
        run(twin, inputs)
    exact_float64(twin)
    if not all(str(variable.dtype) == "float64" for variable in twin.weights) or len(twin.weights) != len(model.weights):
        return None
    twin.set_weights([np.asarray(weight, np.float64) for weight in model.get_weights()])
    return twin


def _without_dtypes(config):
    """A serialized config with every layer's dtype policy removed (the global policy then applies)."""
    if isinstance(config, dict):
        return {key: _without_dtypes(value) for key, value in config.items() if key != "dtype"}
    if isinstance(config, list):
        return [_without_dtypes(value) for value in config]
    return config


def run(model, inputs):
    """`model`'s outputs on `inputs` (numpy: an array, a tuple or a dict) in inference mode; floats are cast
    to the model's compute dtype. A functional model takes the tuple or dict as its one input; another model's
    tuple is spread over `call`'s arguments where it takes more than one."""
    dtype = model.compute_dtype
    converted = map_inputs(inputs, lambda array: _cast(array, dtype))
    if isinstance(model, (keras.Sequential, Functional)):
        return model(list(converted) if isinstance(converted, tuple) else converted, training=False)
    arguments = positional(model.call)
    if isinstance(converted, dict) and len(arguments) != 1:
        return model(**converted, training=False)
    if isinstance(converted, tuple) and len(arguments) > 1:
        return model(*converted, training=False)
    return model(converted, training=False)


def _cast(array, dtype: str) -> np.ndarray:
    array = np.asarray(array)
    return array.astype(dtype) if array.dtype.kind == "f" else array


def numpy(value) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(value))


# ---- the user's model (rosetta port --keras-model; its files: tf_impl/files.py) ----


def build(factory, dtype: str, inputs=None):
    """The user's model from `factory()` (under a float64 dtype policy for float64), built on `inputs`
    where it has no weights yet; None where float64 was asked and the model keeps another dtype."""
    if dtype == "float64":
        check_dtype(dtype)  # float64 computed as float64 on this backend (JAX's x64, Keras's type promotion)
        with float64_policy():
            model = factory()
    else:
        model = factory()
    if not isinstance(model, keras.layers.Layer):
        raise ValueError(f"--keras-model returned {type(model).__name__}, not a Keras model")
    if not model.weights and inputs is not None:
        run(model, inputs)
    if dtype == "float64" and not all(str(variable.dtype) == "float64" for variable in model.weights):
        return None
    exact_float64(model)  # a float64 MultiHeadAttention's scale and gelu, exactly (see its docstring)
    return model


def float64_twin(model, factory=None, inputs=None):
    """A float64 copy of `model` holding its weights widened exactly: built by `factory` where given, else
    from the model's config (_float64_from_config); None where neither gives float64 variables."""
    if factory is None:
        return _float64_from_config(model, inputs)
    twin = build(factory, "float64", inputs)
    if twin is None or len(twin.weights) != len(model.weights):
        return None
    twin.set_weights([np.asarray(weight, np.float64) for weight in model.get_weights()])
    return twin
