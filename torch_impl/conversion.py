"""A torch model's weight-owning layers as shared.core.leaves leaves (stack-specific: the Keras side is
tf_impl/conversion.py); running a model on a verification batch; its float64 copy.

The canonical layout is torch's own, so a leaf reads and writes its module's parameters by their state
names; a stacked recurrent layer is one leaf per layer, its suffixes rebased to `_l0` (`weight_ih_l1` of
`rnn` is `weight_ih_l0` of the leaf `rnn[1]`), and a cell's keys gain `_l0` (`weight_ih` is `weight_ih_l0`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from shared.core.leaves import Leaf, map_inputs, positional, shortest_paths, state_block_facts
from torch_impl.keras_layers import AdditiveAttention, Attention

SUPPORTED = (
    "Linear, Embedding, RNN, GRU, LSTM, RNNCell, GRUCell, LSTMCell, LayerNorm, Conv1d, MultiheadAttention, a bare Parameter"
)
_RECURRENT_KINDS = {nn.RNN: "rnn", nn.GRU: "gru", nn.LSTM: "lstm", nn.RNNCell: "rnn", nn.GRUCell: "gru", nn.LSTMCell: "lstm"}
_SIMPLE_KINDS = {nn.Linear: "linear", nn.Embedding: "embedding", nn.LayerNorm: "layer_norm", nn.Conv1d: "conv1d",
                 nn.MultiheadAttention: "multi_head_attention"}  # fmt: skip


def leaves(model: nn.Module, rules=None) -> list[Leaf]:
    """Every weight-owning layer of `model` in registration order; ValueError naming the unsupported ones.

    Args:
        rules: unused (torch's layout is the canonical one); accepted as the Keras walk takes it.
    """
    lazy = [name for name, param in model.named_parameters() if isinstance(param, nn.parameter.UninitializedParameter)]
    if lazy:
        raise ValueError(f"the torch model {type(model).__name__} has lazy parameters not yet initialised ({', '.join(lazy)}): "
                         "call it on a batch first")  # fmt: skip
    found, unsupported = [], []
    _visit(model, "", found, unsupported)
    found = shortest_paths(found)  # a module registered under two names is one leaf
    covered = {id(param) for leaf in found for param in leaf.handles}
    stray = [name for name, param in model.named_parameters() if id(param) not in covered]
    if unsupported or stray:
        names = unsupported or stray
        raise ValueError(f"no conversion rule for {', '.join(names)} (supported torch layers: {SUPPORTED})")
    return found


def _visit(module: nn.Module, path: str, found: list, unsupported: list) -> None:
    kind = _kind(module)
    if kind is not None:
        found.extend(_leaves_of(module, path, kind))
        return
    own = list(module.named_parameters(recurse=False))
    if own and type(module).__module__.startswith("torch."):  # a torch layer with no rule (BatchNorm1d, ...)
        unsupported.append(f"{path.rstrip('.') or 'the model'} (nn.{type(module).__name__})")
        return
    start = len(found)
    for name, param in own:  # a bare parameter of the user's own module
        found.append(_leaf(f"{path}{name}", "parameter", "Parameter", {"": param}, {}))
    for leaf in found[start:] if isinstance(module, (Attention, AdditiveAttention)) else []:
        leaf.facts.update(_attention_facts(module))
    for name, child in module._modules.items():  # every name, not named_children's first: shortest_paths picks
        if child is not None:
            _visit(child, f"{path}{name}.", found, unsupported)
    if isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
        _add_block_facts(module, path, found)


def _add_block_facts(block: nn.Module, path: str, found: list) -> None:
    """A Transformer layer's norm order and activation, stated on its self-attention leaf (a keras-hub block
    states its own alike)."""
    activation = getattr(block.activation, "__name__", type(block.activation).__name__.lower())
    state_block_facts(found, path, {"norm first": bool(block.norm_first), "activation": activation})


def _attention_facts(twin: Attention | AdditiveAttention) -> dict:
    """The score and scale of a twin of Keras's Attention / AdditiveAttention, stated on its bare weights (its
    Keras twin states them alike): a dot score's `scale` must not pair with a concat score's weight."""
    return {"score mode": getattr(twin, "score_mode", "additive"), "use scale": bool(twin.use_scale)}


def _kind(module: nn.Module) -> str | None:
    return next((kind for cls, kind in {**_RECURRENT_KINDS, **_SIMPLE_KINDS}.items() if isinstance(module, cls)), None)


def _leaves_of(module: nn.Module, path: str, kind: str) -> list[Leaf]:
    path = path.rstrip(".")
    name = type(module).__name__
    if isinstance(module, nn.RNNBase):
        return _recurrent_leaves(module, path, kind)
    if isinstance(module, nn.RNNCellBase):
        params = {f"{key}_l0": param for key, param in module.named_parameters()}
        return [_leaf(path, kind, name, params, _recurrent_facts(module, kind))]
    if isinstance(module, nn.MultiheadAttention):
        _check_attention(module, path)
    return [_leaf(path, kind, name, dict(module.named_parameters()), _simple_facts(module, kind))]


def _recurrent_leaves(module: nn.RNNBase, path: str, kind: str) -> list[Leaf]:
    """One leaf per layer of a stacked nn.RNN/GRU/LSTM (both directions in it), suffixes rebased to `_l0`."""
    if getattr(module, "proj_size", 0):
        raise ValueError(f"{path}: nn.LSTM with proj_size has no Keras counterpart")
    params = dict(module.named_parameters())
    layers = module.num_layers
    out = []
    for index in range(layers):
        own = {key.replace(f"_l{index}", "_l0"): param for key, param in params.items() if _layer_of(key) == index}
        label = f"{path}[{index}]" if layers > 1 else path
        layer = f"nn.{type(module).__name__} layer {index}" if layers > 1 else f"nn.{type(module).__name__}"
        out.append(_leaf(label, kind, layer, own, _recurrent_facts(module, kind)))
    return out


def _check_attention(module: nn.MultiheadAttention, path: str) -> None:
    """What keras.layers.MultiHeadAttention cannot hold: learned key/value biases appended to the sequence
    (`add_bias_kv`), a zero row appended to keys and values (`add_zero_attn`)."""
    if module.bias_k is not None:
        raise ValueError(f"{path}: nn.MultiheadAttention(add_bias_kv=True) appends learned key and value rows, which "
                         "keras.layers.MultiHeadAttention has no weights for")  # fmt: skip
    if module.add_zero_attn:
        raise ValueError(f"{path}: nn.MultiheadAttention(add_zero_attn=True) attends to an appended zero row, which "
                         "keras.layers.MultiHeadAttention does not")  # fmt: skip


def _layer_of(key: str) -> int:
    return int(key.split("_l")[-1].split("_")[0])


def _recurrent_facts(module: nn.Module, kind: str) -> dict:
    """Activations, bias and direction: a layer reads forwards and concatenates its two directions' outputs; a
    cell states no `go backwards` (the model's own loop decides it)."""
    facts = {"activation": getattr(module, "nonlinearity", "tanh"), "bias": bool(module.bias)}
    if kind != "rnn":
        facts["recurrent activation"] = "sigmoid"
    bidirectional = bool(getattr(module, "bidirectional", False))
    facts["bidirectional"] = bidirectional
    if isinstance(module, nn.RNNBase):
        facts["go backwards"] = False
    return {**facts, "merge mode": "concat"} if bidirectional else facts


def _simple_facts(module: nn.Module, kind: str) -> dict:
    """The options of shared.port.pairing.OPTIONS a Linear, Embedding, LayerNorm, Conv1d or
    MultiheadAttention fixes."""
    if kind == "layer_norm":
        return {"eps": float(module.eps), "normalized axes": f"the last {len(module.normalized_shape)}", "rms scaling": False}
    if kind == "multi_head_attention":
        return {"heads": module.num_heads, "bias": module.in_proj_bias is not None}
    if kind == "conv1d":
        return {"stride": module.stride[0], "dilation": module.dilation[0], "groups": module.groups,
                "padding": _padding(module), "bias": module.bias is not None}  # fmt: skip
    if kind == "linear":
        return {"bias": module.bias is not None}
    # embedding: torch renormalizes rows above it as it looks them up; a position table's ids are the model's arange
    return {"max norm": module.max_norm, "lookup": "ids"}


def _padding(conv: nn.Conv1d) -> str:
    """torch's padding in Keras's words: `valid`, `same` (symmetric, stride 1), else the count each side."""
    if conv.padding_mode != "zeros":
        return f"{conv.padding_mode} padding"
    padding = conv.padding if isinstance(conv.padding, str) else conv.padding[0]
    if padding in ("valid", 0):
        return "valid"
    if padding == "same" or (conv.stride[0] == 1 and 2 * padding == conv.dilation[0] * (conv.kernel_size[0] - 1)):
        return "same"
    return f"{padding} each side"


def _leaf(path: str, kind: str, layer: str, params: Mapping[str, nn.Parameter], facts: dict) -> Leaf:
    def read() -> dict[str, np.ndarray]:
        return {key: param.detach().cpu().numpy().copy() for key, param in params.items()}

    def write(arrays: Mapping[str, np.ndarray]) -> None:
        with torch.no_grad():
            for key, param in params.items():
                param.copy_(torch.as_tensor(np.asarray(arrays[key])))

    shapes = {key: tuple(p.shape) for key, p in params.items()}
    return Leaf(path, kind, layer, shapes, facts, read, write, handles=list(params.values()))


# ---- running a model ----


def run(model: nn.Module, inputs):
    """`model`'s outputs on `inputs` (numpy: an array, a tuple or a dict) in inference mode; floats are cast
    to the model's dtype. A tuple is spread over `forward`'s arguments, a dict passed by name."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    converted = map_inputs(inputs, lambda array: _tensor(array, dtype))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return _call(model, converted)
    finally:
        model.train(was_training)


def _tensor(array, dtype: torch.dtype) -> torch.Tensor:
    tensor = torch.as_tensor(np.asarray(array))
    return tensor.to(dtype) if tensor.is_floating_point() else tensor


def _call(model: nn.Module, inputs):
    arguments = positional(model.forward)
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, tuple) and len(arguments) > 1:
        return model(*inputs)
    return model(inputs)


def numpy(value) -> np.ndarray:
    return value.detach().cpu().numpy()


# ---- the user's model (rosetta port --torch-model; its files: torch_impl/files.py) ----


def build(factory, dtype: str, inputs=None) -> nn.Module:
    """The user's model from `factory()`, in `dtype` (float64: every float parameter widened)."""
    model = factory()
    if not isinstance(model, nn.Module):
        raise ValueError(f"--torch-model returned {type(model).__name__}, not a torch nn.Module")
    return model.double() if dtype == "float64" else model


def float64_twin(model: nn.Module, factory=None, inputs=None) -> nn.Module:
    """A float64 copy of `model` holding its weights widened exactly (`factory`, `inputs`: unused here)."""
    return copy.deepcopy(model).double()
