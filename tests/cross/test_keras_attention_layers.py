"""Keras's own attention layers and their PyTorch twins (torch_impl/keras_layers.py): `Attention` (dot and
concat scores, `use_scale`) and `AdditiveAttention`, equal to Keras's in float64 with value masks, causal
masks, query masks and the attention scores returned; the Keras docs' CNN + attention model ported both ways
through them. Negative controls: torch's mask polarity, and the score without its scale."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

import tf_impl.conversion as keras_side
import torch_impl.conversion as torch_side
from shared.port.conversion import convert, verify
from tests.zoo import keras_models, torch_models
from tf_impl.keras_compat.backends import float64_policy
from torch_impl import keras_layers

RNG = np.random.default_rng(0)
_np = keras.ops.convert_to_numpy  # a Keras tensor of any backend as numpy
QUERY, VALUE, KEY = (RNG.normal(size=(3, steps, 6)) for steps in (4, 5, 5))
VALUE_MASK = np.arange(5) < np.array([[5], [3], [1]])  # [B, Tv]: True = keep (Keras's polarity)
QUERY_MASK = np.arange(4) < np.array([[4], [2], [3]])  # [B, Tq]
LAYERS = {
    "dot": (lambda: keras.layers.Attention(), lambda: keras_layers.Attention()),
    "dot, scaled": (lambda: keras.layers.Attention(use_scale=True), lambda: keras_layers.Attention(use_scale=True)),
    "concat, scaled": (lambda: keras.layers.Attention(use_scale=True, score_mode="concat"),
                       lambda: keras_layers.Attention(use_scale=True, score_mode="concat")),
    "additive": (lambda: keras.layers.AdditiveAttention(), lambda: keras_layers.AdditiveAttention(6)),
}  # fmt: skip
CALLS = {
    "plain": {},
    "value mask": {"mask": [None, VALUE_MASK]},
    "query and value masks": {"mask": [QUERY_MASK, VALUE_MASK]},
    "causal": {"use_causal_mask": True},
    "causal and value mask": {"use_causal_mask": True, "mask": [None, VALUE_MASK]},
}


def _pair(layer: str):
    """(Keras layer, torch twin) in float64 holding the same weights (scales drawn away from their start)."""
    make_keras, make_torch = LAYERS[layer]
    with float64_policy():
        keras_layer = make_keras()
        keras_layer([QUERY, VALUE, KEY])
    for variable in keras_layer.weights:
        variable.assign(RNG.uniform(0.5, 1.5, variable.shape))
    twin = make_torch().double()
    if keras_layer.weights:  # the plain dot score has none
        convert(keras_layer, twin)
    return keras_layer, twin


def _torch_call(twin, call: dict, **extra):
    mask = call.get("mask")
    torch_mask = None if mask is None else [None if m is None else torch.as_tensor(m) for m in mask]
    inputs = [torch.as_tensor(array) for array in (QUERY, VALUE, KEY)]
    return twin(inputs, mask=torch_mask, use_causal_mask=call.get("use_causal_mask", False), **extra)


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("layer", LAYERS)
def test_the_torch_twins_compute_kerass_attention(layer, call):
    keras_layer, twin = _pair(layer)
    expected, scores = keras_layer([QUERY, VALUE, KEY], return_attention_scores=True, **CALLS[call])
    output, weights = _torch_call(twin, CALLS[call], return_attention_scores=True)
    assert np.abs(output.detach().numpy() - _np(expected)).max() <= 1e-12
    assert np.abs(weights.detach().numpy() - _np(scores)).max() <= 1e-12


def test_torchs_mask_polarity_given_to_the_twin_is_caught():
    """Negative control: torch's key_padding_mask says True where to ignore; the twin (as Keras) keeps True."""
    keras_layer, twin = _pair("additive")
    expected = _np(keras_layer([QUERY, VALUE, KEY], mask=[None, VALUE_MASK]))
    naive = _torch_call(twin, {"mask": [None, ~VALUE_MASK]}).detach().numpy()
    assert np.abs(naive - expected).max() > 1e-2


def test_a_score_without_its_scale_is_caught():
    """Negative control: the same weights with `use_scale` off (the scale dropped on the way)."""
    keras_layer, _ = _pair("concat, scaled")
    unscaled = keras_layers.Attention(score_mode="concat").double()
    with torch.no_grad():
        unscaled.concat_score_weight.copy_(torch.as_tensor(_np(keras_layer.concat_score_weight)))
    expected = _np(keras_layer([QUERY, VALUE, KEY]))
    assert np.abs(_torch_call(unscaled, {}).detach().numpy() - expected).max() > 1e-3


def test_the_twins_refuse_what_keras_refuses_or_reads_on_build():
    with pytest.raises(ValueError, match="score_mode is 'dot' or 'concat'"):
        keras_layers.Attention(score_mode="general")
    with pytest.raises(ValueError, match="needs dim, the query's width"):
        keras_layers.AdditiveAttention()


MODELS = ["concat_attention_scorer", "additive_attention_scorer"]
INPUTS = (RNG.integers(1, 30, (3, 5)), RNG.integers(1, 30, (3, 7)))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("source", ["torch", "tf"])
@pytest.mark.parametrize("name", MODELS)
def test_the_keras_docs_attention_model_ports_both_ways_through_the_twins(name, source, dtype):
    torch.manual_seed(1)
    keras.utils.set_random_seed(2)
    torch_model = torch_side.build(getattr(torch_models, name), dtype, INPUTS)
    keras_model = keras_side.build(getattr(keras_models, name), dtype, INPUTS)
    src, dst = (torch_model, keras_model) if source == "torch" else (keras_model, torch_model)
    done = convert(src, dst)
    assert "order" not in {pair.how for pair in done.pairs}  # scale and concat_score_weight pair by their own names
    check = verify(src, dst, INPUTS)
    assert check.ok and check.components[0].max_abs <= {"float64": 1e-12, "float32": 1e-5}[dtype]
