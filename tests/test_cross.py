"""Both stacks in one process: same weights in, same outputs and gradients out, per the equality policy.

Each trap the suite pins has a negative control here: the naive conversion, run through the very same
assertion, must fail.
"""

from __future__ import annotations

import numpy as np
import pytest

import tf_impl
import torch_impl
from shared import catalogue, fixtures
from shared.canonical import RULES, LeafRule, recurrent_rule
from shared.equality import compare_stacks
from tests.bad_inputs import bad_batches
from tests.conftest import MAXIMA

MODELS = catalogue.built()


def _pair(name: str, dtype: str):
    """torch and Keras models holding the same golden weights."""
    spec, weights = catalogue.get(name), fixtures.load_golden(name).weights
    models = [stack.build(name, dtype, **spec.fixture_config) for stack in (torch_impl, tf_impl)]
    for stack, model in zip((torch_impl, tf_impl), models, strict=True):
        stack.set_weights(model, weights)
    return models


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", MODELS)
def test_stacks_agree(name, dtype):
    MAXIMA[name, dtype] = compare_stacks(name, dtype, torch_impl, tf_impl)


@pytest.mark.parametrize("name", MODELS)
def test_both_stacks_reject_bad_inputs_with_the_same_message(name):
    spec, batch = catalogue.get(name), fixtures.load_golden(name).batch
    torch_model, keras_model = _pair(name, "float32")
    for case, bad, _ in bad_batches(spec, batch):
        messages = []
        for stack, model in ((torch_impl, torch_model), (tf_impl, keras_model)):
            with pytest.raises(ValueError) as error:
                stack.run(model, name, bad)
            messages.append(str(error.value))
        assert messages[0] == messages[1], case


def test_both_stacks_reject_bad_weights_with_the_same_message():
    torch_model, keras_model = _pair("reverse_bahdanau", "float32")
    weights = fixtures.load_golden("reverse_bahdanau").weights
    bad = {**{k: v for k, v in weights.items() if k != "v.weight"}, "W_h.weight": weights["W_h.weight"].T, "x": np.ones(1)}
    messages = []
    for stack, model in ((torch_impl, torch_model), (tf_impl, keras_model)):
        with pytest.raises(ValueError) as error:
            stack.set_weights(model, bad)
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "v.weight" in messages[0]


# ---- negative controls: the naive conversion of each trap must fail the same assertion ----


@pytest.mark.parametrize("name", ["reverse_bahdanau", "reverse_luong_dot"])
def test_gru_mapped_without_the_gate_swap_is_caught(name):
    naive = {**RULES, "gru": recurrent_rule("gru", torch_gates="rzn", keras_gates="rzn")}
    with pytest.raises(AssertionError, match="max \\|diff\\|"):
        compare_stacks(name, "float64", torch_impl, tf_impl, rules=naive)


def _without_recurrent_bias(rule: LeafRule) -> LeafRule:
    """The conversion that keeps only torch's input bias (drops b_hh)."""

    def to_keras(canon):
        keras = rule.to_keras(canon)
        return {key: np.stack([value[0], np.zeros_like(value[1])]) if key.startswith("bias") else value
                for key, value in keras.items()}  # fmt: skip

    return LeafRule(rule.kind, to_keras, rule.from_keras)


@pytest.mark.parametrize("kind,name", [("rnn", "reverse_rnn"), ("gru", "reverse_luong_general")])
def test_recurrent_layer_with_one_bias_dropped_is_caught(kind, name):
    naive = {**RULES, kind: _without_recurrent_bias(RULES[kind])}
    with pytest.raises(AssertionError, match="max \\|diff\\|"):
        compare_stacks(name, "float64", torch_impl, tf_impl, rules=naive)


def test_gru_with_reset_before_is_refused():
    import keras

    layer = keras.layers.GRU(3, reset_after=False)
    layer.build((1, 2, 4))
    with pytest.raises(ValueError, match="reset_after=True"):
        tf_impl.weights.leaf(layer)


def test_cross_entropy_without_ignore_class_is_caught():
    """torch's ignore_index mean over non-pad targets vs Keras's mean over every position."""
    import keras

    name = "reverse_bahdanau"
    golden = fixtures.load_golden(name)
    naive = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(golden.batch["tgt_out"], golden.outputs["logits"])
    assert abs(float(naive) - golden.loss) > 1e-3
    keep = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0, dtype="float64")
    assert abs(float(keep(golden.batch["tgt_out"], golden.outputs["logits"])) - golden.loss) < 1e-12
