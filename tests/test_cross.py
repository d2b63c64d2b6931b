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
from tests.bad_inputs import bad_batches
from tests.equality import RECORDS, assert_all_close, grad_bounds, output_bounds

MODELS = catalogue.built()


def _pair(name: str, dtype: str, rules=RULES):
    """torch and Keras models holding the same golden weights (Keras's mapped through `rules`)."""
    spec, weights = catalogue.get(name), fixtures.load_golden(name).weights
    torch_model = torch_impl.build(name, dtype, **spec.fixture_config)
    keras_model = tf_impl.build(name, dtype, **spec.fixture_config)
    torch_impl.set_weights(torch_model, weights)
    tf_impl.set_weights(keras_model, weights, rules=rules)
    return torch_model, keras_model


def assert_stacks_agree(name: str, dtype: str, rules=RULES) -> dict[str, float]:
    """Outputs, loss and gradients of both stacks equal within the policy; return the maxima."""
    spec, batch = catalogue.get(name), fixtures.load_golden(name).batch
    torch_model, keras_model = _pair(name, dtype, rules)
    out_torch, out_keras = torch_impl.run(torch_model, name, batch), tf_impl.run(keras_model, name, batch)
    maxima = {key: assert_all_close({key: out_keras[key]}, {key: out_torch[key]}, output_bounds(spec.tolerance, dtype), name)
              for key in out_torch}  # fmt: skip
    assert out_keras.keys() == out_torch.keys()
    (loss_t, grads_t), (loss_k, grads_k) = (stack.loss_and_grads(m, name, batch) for stack, m in
                                            ((torch_impl, torch_model), (tf_impl, keras_model)))  # fmt: skip
    maxima["loss"] = assert_all_close({"loss": loss_k}, {"loss": loss_t}, output_bounds(spec.tolerance, dtype), name)
    maxima["grads"] = assert_all_close(grads_k, grads_t, grad_bounds(spec.tolerance, dtype), f"{name} grads")
    return maxima


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", MODELS)
def test_stacks_agree(name, dtype):
    for quantity, value in assert_stacks_agree(name, dtype).items():
        RECORDS.add(name, dtype, quantity, value)


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
        assert_stacks_agree(name, "float64", rules=naive)


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
        assert_stacks_agree(name, "float64", rules=naive)


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
