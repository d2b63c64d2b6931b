"""Transformer blocks as the frameworks ship them (issue: attention as the frameworks ship it), through
`convert`: `nn.TransformerEncoderLayer` stacks <-> keras-hub's `TransformerEncoder` (post-norm relu, pre-norm
gelu), `nn.TransformerDecoderLayer` <-> keras-hub's `TransformerDecoder` (causal, cross-attention), and one
`nn.TransformerEncoderLayer` <-> a Keras block built by hand (keras.io's `TransformerBlock`); both ways, float64
and float32 (tests/zoo/transformer_models.py). Negative controls: a block of another norm order, activation or
epsilon is refused naming it; keras.io's own `key_dim=embed_dim` is refused saying why; float64 gelu without
the exact constant; blocks of one stack paired in another order are caught by running them."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

import tf_impl.conversion as keras_side
import torch_impl.conversion as torch_side
from shared.port.conversion import convert, verify
from tests.zoo import transformer_models as zoo
from tests.zoo.torch_models import MODEL_DIM, VOCAB

RNG = np.random.default_rng(0)
TOKENS = RNG.integers(1, VOCAB, (3, 7))
TAGGER_INPUTS = (RNG.normal(size=(3, 6, MODEL_DIM)), TOKENS[:, :5])
CASES = {  # name -> (torch factory, Keras factory, inputs)
    "post-norm relu, keras-hub": (zoo.TransformerClassifier, zoo.hub_classifier, TOKENS),
    "pre-norm gelu, keras-hub": (
        lambda: zoo.TransformerClassifier(True, "gelu"),
        lambda: zoo.hub_classifier(True, "gelu"),
        TOKENS,
    ),
    "decoder, keras-hub": (zoo.TransformerTagger, zoo.HubTagger, TAGGER_INPUTS),
    "one layer, a Keras block by hand": (zoo.OneLayerClassifier, zoo.block_classifier, TOKENS),
    "nn.Transformer, keras-hub stacks": (zoo.TransformerSeq2Seq, zoo.HubSeq2Seq, (TOKENS, TOKENS[:, :5])),
}
BOUNDS = {"float64": 1e-12, "float32": 1e-5}


def _models(case: str, dtype: str):
    """(torch model, Keras model, inputs); the torch weights drawn anew per parameter: nn.TransformerEncoder
    deep-copies one layer, so a fresh stack's blocks are all equal and their order could not show."""
    torch_factory, keras_factory, inputs = CASES[case]
    torch.manual_seed(1)
    keras.utils.set_random_seed(2)
    torch_model = torch_side.build(torch_factory, dtype, inputs)
    with torch.no_grad():
        for parameter in torch_model.parameters():
            parameter.uniform_(-0.4, 0.4)
    return torch_model, keras_side.build(keras_factory, dtype, inputs), inputs


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("direction", ["torch->keras", "keras->torch"])
@pytest.mark.parametrize("case", CASES)
def test_transformer_blocks_port_both_ways(case, direction, dtype):
    torch_model, keras_model, inputs = _models(case, dtype)
    source, target = (torch_model, keras_model) if direction == "torch->keras" else (keras_model, torch_model)
    assert not verify(source, target, inputs).ok  # two initialisations differ
    convert(source, target, inputs=inputs)  # two blocks (or two LayerNorms) of one shape: settled by running both
    check = verify(source, target, inputs)
    assert check.ok and max(c.max_abs for c in check.components) <= BOUNDS[dtype], check.components


def test_a_keras_hub_block_pairs_its_parts_by_torchs_names():
    torch_model, keras_model, _ = _models("decoder, keras-hub", "float32")  # one block: every part by name
    done = convert(torch_model, keras_model)
    assert {pair.how for pair in done.pairs} == {"name"}
    parts = ("self_attn", "multihead_attn", "linear1", "linear2", "norm1", "norm2", "norm3")
    assert {pair.target.path for pair in done.pairs} >= {f"decoder.{part}" for part in parts}


@pytest.mark.parametrize(
    ("torch_options", "keras_options", "message"),
    [
        ({"norm_first": True}, {}, r"self_attn -> transformer_encoder(_\d+)?.self_attn: norm first True != False"),
        ({"activation": "gelu"}, {}, r"activation 'gelu' != 'relu'"),
        ({}, {"layer_norm_epsilon": 1e-6}, r"norm1 -> transformer_encoder(_\d+)?.norm1: eps 1e-05 != 1e-06"),
    ],
    ids=["norm order", "activation", "epsilon"],
)
def test_a_block_computing_otherwise_is_refused_naming_what_differs(torch_options, keras_options, message):
    torch_model = zoo.TransformerClassifier(**torch_options)
    keras_model = keras_side.build(lambda: zoo.hub_classifier(**keras_options), "float32", TOKENS)
    with pytest.raises(ValueError, match=message):
        convert(torch_model, keras_model, inputs=TOKENS)


def test_the_keras_io_examples_key_dim_has_no_torch_counterpart_and_is_refused_saying_why():
    keras_model = keras_side.build(lambda: zoo.block_classifier(key_dim=MODEL_DIM), "float32", TOKENS)
    with pytest.raises(ValueError, match=r"num_heads x key_dim = 3 x 15 is not the query's width 15 \(torch's embed_dim splits"):
        convert(keras_model, zoo.OneLayerClassifier())


def test_kerass_float64_gelu_is_made_exact_and_without_it_the_proof_fails(monkeypatch):
    """tf.nn.gelu casts its 1/sqrt(2) through float32 (tensorflow/tensorflow#35938): 5e-9 off torch's gelu."""
    torch_model, keras_model, inputs = _models("pre-norm gelu, keras-hub", "float64")
    convert(torch_model, keras_model, inputs=inputs)
    assert verify(torch_model, keras_model, inputs).components[0].max_abs <= 1e-12
    monkeypatch.setattr(keras_side, "exact_float64", lambda model: 0)
    torch_model, keras_model, inputs = _models("pre-norm gelu, keras-hub", "float64")
    convert(torch_model, keras_model, inputs=inputs)
    assert 1e-12 < verify(torch_model, keras_model, inputs).components[0].max_abs < 1e-6


def test_two_blocks_of_one_shape_paired_crosswise_differ_so_running_both_settles_their_order():
    """Negative control of the order pairing: the stack's blocks paired crosswise (every shape fits) compute
    another function, which is what `convert(inputs=)` runs both models to see."""
    torch_model, keras_model, inputs = _models("post-norm relu, keras-hub", "float64")
    paths = [leaf.path for leaf in keras_side.leaves(keras_model)]
    blocks = list(dict.fromkeys(path.split(".")[0] for path in paths if path.startswith("transformer")))  # in model order
    crosswise = {f"encoder.layers.{index}.{part}": f"{blocks[1 - index]}.{part}" for index in (0, 1)
                 for part in ("self_attn", "linear1", "linear2", "norm1", "norm2")}  # fmt: skip
    convert(torch_model, keras_model, key_map=crosswise)
    assert verify(torch_model, keras_model, inputs).components[0].max_abs > 1e-3
