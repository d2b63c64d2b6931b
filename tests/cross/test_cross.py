"""Both stacks in one process: same weights in, same outputs and gradients out, per the equality policy.

Each trap the suite pins has a negative control here: the naive conversion, run through the very same
assertion, must fail.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

import tf_impl
import torch_impl
from shared import catalogue
from shared.core.canonical import RULES, LeafRule, recurrent_rule
from shared.verify import fixtures
from shared.verify.equality import assert_close, compare_stacks
from tests.bad_inputs import bad_batches
from tests.conftest import MAXIMA

MODELS = catalogue.built()


def _pair(name: str, dtype: str):
    """torch and Keras models holding the same golden weights."""
    return [fixtures.golden_model(stack, name, dtype) for stack in (torch_impl, tf_impl)]


# Keras on TensorFlow: every model in both precisions. On Keras's JAX and torch backends (tox -e keras) float32 for
# documents 000 and 001 alone: document 002-004's float32 comparisons compile XLA programs of their own on JAX (250 of
# that env's 700 CPU-seconds) through the code their float64 ones prove; `tox -e report` (`rosetta equality --backend`)
# compares every model in both precisions on every backend
FLOAT32_EVERYWHERE = {name for name in MODELS if catalogue.get(name).document in ("000", "001")}
AGREE = [(name, dtype) for name in MODELS for dtype in ("float64", "float32")
         if dtype == "float64" or tf_impl.backends.name() == "tensorflow" or name in FLOAT32_EVERYWHERE]  # fmt: skip


@pytest.mark.parametrize(("name", "dtype"), AGREE)
def test_stacks_agree(name, dtype):
    MAXIMA[name, dtype] = compare_stacks(name, dtype, torch_impl, tf_impl)


@pytest.mark.parametrize("name", MODELS)
def test_every_traced_component_agrees_padding_included(name):
    """Embeddings, encoder outputs (zero at padded steps in both stacks) and state, attention scores,
    context vectors: the components `rosetta port` compares, float64, on the golden batch (ragged lengths)."""
    batch = fixtures.load_golden(name).batch
    traced = [stack.trace(model, name, batch) for stack, model in zip((torch_impl, tf_impl), _pair(name, "float64"), strict=True)]
    assert traced[0].keys() == traced[1].keys() and len(traced[0]) >= 3
    for key, value in traced[0].items():
        assert_close(traced[1][key], value, 1e-12, what=f"{name} {key}")


def test_encoder_outputs_at_padded_steps_need_zero_output_for_mask():
    """Negative control: Keras's default (a masked step repeats the previous output) differs from torch's packing."""
    name = "tf_tutorial"
    batch = fixtures.load_golden(name).batch
    torch_model, keras_model = _pair(name, "float64")
    keras_model.encoder.gru.zero_output_for_mask = False
    expected, actual = torch_impl.trace(torch_model, name, batch), tf_impl.trace(keras_model, name, batch)
    assert_close(actual["logits"], expected["logits"], 1e-12, what="logits")  # the attention mask hides it
    with pytest.raises(AssertionError):
        assert_close(actual["encoder outputs"], expected["encoder outputs"], 1e-12, what="encoder outputs")


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
    layer = keras.layers.GRU(3, reset_after=False)
    layer.build((1, 2, 4))
    with pytest.raises(ValueError, match="reset_after=True"):
        tf_impl.weights.leaf(layer)


def test_cross_entropy_without_ignore_class_is_caught():
    """torch's ignore_index mean over non-pad targets vs Keras's mean over every position."""
    name = "reverse_bahdanau"
    golden = fixtures.load_golden(name)
    naive = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(golden.batch["tgt_out"], golden.outputs["logits"])
    assert abs(float(naive) - golden.loss) > 1e-3
    keep = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0, dtype="float64")
    assert abs(float(keep(golden.batch["tgt_out"], golden.outputs["logits"])) - golden.loss) < 1e-12


def test_backward_state_read_at_the_last_step_is_caught():
    """torch's h_n[-1] of a bidirectional GRU is the backward pass's state at time 0, not outputs[:, -1]."""
    name = "bahdanau_bigru"
    golden = fixtures.load_golden(name)
    torch_model, keras_model = _pair(name, "float64")
    src, src_len = golden.batch["src"], golden.batch["src_len"]
    with torch.no_grad():
        _, expected = torch_model.encoder(torch.as_tensor(src), torch.as_tensor(src_len))
    outputs, hidden = keras_model.encoder(src, src_len)
    assert_close(hidden, expected, 1e-12, what="Keras Bidirectional backward_state")
    half = outputs.shape[-1] // 2
    last = np.asarray(outputs)[np.arange(len(src)), src_len - 1]  # each row's last real step
    naive = keras.ops.tanh(keras_model.encoder.fc(np.concatenate([last[:, half:], last[:, :half]], 1)))
    with pytest.raises(AssertionError, match="max \\|diff\\|"):
        assert_close(naive, expected, 1e-12, what="backward state read at the last step")
    first = np.asarray(outputs)[:, 0, half:]  # where the backward pass ends
    assert_close(keras.ops.tanh(keras_model.encoder.fc(np.concatenate([first, last[:, :half]], 1))), expected, 1e-12)


def test_unmasked_padding_is_caught():
    """Dropping `src_len` lets the padded rows attend to (and encode) their pads: the comparison fails."""
    name = "luong_general"
    golden = fixtures.load_golden(name)
    unmasked = {key: value for key, value in golden.batch.items() if key != "src_len"}
    outputs = tf_impl.run(_pair(name, "float64")[1], name, unmasked, teacher_forcing=golden.schedule)
    assert_close(outputs["logits"][0], golden.outputs["logits"][0], 1e-12)  # the full-length row is unaffected
    with pytest.raises(AssertionError, match="max \\|diff\\|"):
        assert_close(outputs["logits"], golden.outputs["logits"], 1e-12, what="logits without the mask")


@pytest.mark.parametrize("name", ["bahdanau_bigru", "luong_concat"])
def test_document_forward_draws_the_same_teacher_forcing_in_both_stacks(name):
    """`model(source, target, teacher_force_ratio=0.5)`: both stacks draw the same seeded coin flips."""
    golden = fixtures.load_golden(name)
    source = golden.batch["src"].T  # [S, B], the document's layout
    target = np.concatenate([golden.batch["tgt_in"], golden.batch["tgt_out"][:, -1:]], 1).T  # [T, B]
    torch_model, keras_model = _pair(name, "float64")
    for _ in range(3):  # successive calls draw successive flips, alike in both
        expected = torch_model(torch.as_tensor(source), torch.as_tensor(target), 0.5).detach().numpy()
        assert_close(keras_model(source, target, teacher_force_ratio=0.5), expected, 1e-12)


def _torch_lstm_step(lstm, inputs, direction, lr):
    """Outputs of a torch LSTM after one SGD step on loss = sum(outputs * direction)."""
    loss = (lstm(torch.as_tensor(inputs))[0] * torch.as_tensor(direction)).sum()
    loss.backward()
    with torch.no_grad():
        for param in lstm.parameters():
            param -= lr * param.grad
        return lstm(torch.as_tensor(inputs))[0].numpy()


def _keras_lstm_step(layer, inputs, direction, lr):
    """The same for a Keras LSTM layer."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(inputs)[0] * direction)
    for variable, gradient in zip(layer.trainable_variables, tape.gradient(loss, layer.trainable_variables), strict=True):
        variable.assign_sub(lr * gradient)
    return layer(inputs)[0]


def test_lstm_bias_policy_keeps_training_equal_and_the_summed_bias_is_caught():
    """Our two-bias Keras LSTM follows torch through an SGD step; the usual summed bias (stock Keras LSTM)
    gives the same forward pass but drifts after one step (torch moves b_ih + b_hh twice as far)."""
    from tf_impl.keras_compat.layers import TorchLSTM
    from tf_impl.weights import leaf

    rng = np.random.default_rng(7)
    inputs, direction = rng.normal(size=(3, 6, 5)), rng.normal(size=(3, 6, 4))
    torch.manual_seed(0)
    reference = torch.nn.LSTM(5, 4, batch_first=True).double()
    canonical = {key: value.detach().numpy().copy() for key, value in reference.state_dict().items()}
    ours = TorchLSTM(4, 1, dtype="float64")
    stock = keras.layers.LSTM(4, return_sequences=True, return_state=True, dtype="float64")
    for layer in (ours, stock):
        layer(inputs)  # build
        kind, variables = leaf(layer)
        values = RULES[kind].to_keras(canonical)
        for key, variable in variables.items():
            variable.assign(values[key])
        assert_close(layer(inputs)[0], reference(torch.as_tensor(inputs))[0].detach().numpy(), 1e-12, what=kind)
    expected = _torch_lstm_step(reference, inputs, direction, 0.5)
    assert_close(_keras_lstm_step(ours, inputs, direction, 0.5), expected, 1e-12, what="two biases after a step")
    with pytest.raises(AssertionError, match="max \\|diff\\|"):
        assert_close(_keras_lstm_step(stock, inputs, direction, 0.5), expected, 1e-12, what="summed bias after a step")
