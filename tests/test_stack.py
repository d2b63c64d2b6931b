"""Per-stack tests, run by each of the torch and tf envs alone: shapes, golden outputs, weights, errors."""

from __future__ import annotations

import numpy as np
import pytest

from shared import catalogue, fixtures
from shared.equality import assert_all_close, grad_bounds, output_bounds
from tests.bad_inputs import bad_batches

MODELS = catalogue.built()
DTYPES = ["float64", "float32"]


def fixture_model(stack, name: str, dtype: str = "float64"):
    """The model at its fixture sizes holding the golden weights."""
    model = stack.build(name, dtype, **catalogue.get(name).fixture_config)
    stack.set_weights(model, fixtures.load_golden(name).weights)
    return model


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", MODELS)
def test_outputs_and_gradients_match_the_golden_file(stack, name, dtype):
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    model = fixture_model(stack, name, dtype)
    assert_all_close(stack.run(model, name, golden.batch), golden.outputs, output_bounds(spec.tolerance, dtype), "outputs")
    loss, grads = stack.loss_and_grads(model, name, golden.batch)
    assert_all_close({"loss": loss}, {"loss": golden.loss}, output_bounds(spec.tolerance, dtype), "loss")
    assert_all_close(grads, golden.grads, grad_bounds(spec.tolerance, dtype), "grads")


@pytest.mark.parametrize("name", MODELS)
def test_output_shapes_and_attention_rows(stack, name):
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    outputs = stack.run(fixture_model(stack, name, "float32"), name, golden.batch)
    B, S, T = (spec.fixture_batch[k] for k in "BST")
    width = spec.vocab_size if spec.interface == "seq2seq" else spec.fixture_config["encoder_dim"]
    main = outputs["logits" if spec.interface == "seq2seq" else "context"]
    assert main.shape == (B, T, width) and main.dtype == np.float32
    assert ("attention" in outputs) == spec.has_attention
    if spec.has_attention:
        assert outputs["attention"].shape == (B, T, S)
        np.testing.assert_allclose(outputs["attention"].sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_document_sizes_are_the_defaults(stack, name):
    spec = catalogue.get(name)
    model = stack.build(name)
    shapes = {key: array.shape for key, array in stack.get_weights(model).items()}
    if spec.interface == "seq2seq":
        config = spec.config
        assert shapes["enc_embeddings.weight"] == (config["vocab_size"], config["embedding_dim"])
        assert shapes["output_layer.weight"][0] == config["vocab_size"] == 20
        assert shapes["encoder.weight_hh_l0"][1] == config["hidden_size"] == 128
    else:
        assert shapes["W_2.weight"] == (50, 100) and shapes["v"] == (50,)


@pytest.mark.parametrize("name", MODELS)
def test_set_weights_of_get_weights_is_the_identity(stack, name):
    model = fixture_model(stack, name)
    weights = stack.get_weights(model)
    golden = fixtures.load_golden(name).weights
    assert weights.keys() == golden.keys() and all(np.array_equal(weights[k], golden[k]) for k in golden)
    other = stack.build(name, "float64", **catalogue.get(name).fixture_config)
    stack.set_weights(other, weights)
    again = stack.get_weights(other)
    assert all(np.array_equal(again[k], weights[k]) for k in weights)


@pytest.mark.parametrize("name", MODELS)
def test_bad_weights_are_rejected_naming_the_key(stack, name):
    model = fixture_model(stack, name)
    weights = stack.get_weights(model)
    first, last = sorted(weights)[0], sorted(weights)[-1]
    cases = [
        ({k: v for k, v in weights.items() if k != first}, f"missing keys: {first}"),
        ({**weights, "extra.weight": np.zeros(2)}, "unexpected keys: extra.weight"),
        ({**weights, last: np.zeros(weights[last].shape + (1,))}, f"mis-shaped keys: {last}"),
    ]
    for bad, fragment in cases:
        with pytest.raises(ValueError, match=fragment.replace(".", r"\.")):
            stack.set_weights(model, bad)
    assert all(np.array_equal(stack.get_weights(model)[k], weights[k]) for k in weights), "a rejected set changed weights"


@pytest.mark.parametrize("name", MODELS)
def test_bad_inputs_raise_a_clear_value_error(stack, name):
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    model = fixture_model(stack, name, "float32")
    for case, batch, fragment in bad_batches(spec, golden.batch):
        with pytest.raises(ValueError, match=fragment) as error:
            stack.run(model, name, batch)
        assert error.type is ValueError, case
    without_last = dict(list(golden.batch.items())[:-1])  # seq2seq: no tgt_out; attention: no values
    with pytest.raises(ValueError, match=f"missing '{list(golden.batch)[-1]}'"):
        stack.loss_and_grads(model, name, without_last)


def test_build_rejects_bad_arguments(stack):
    with pytest.raises(ValueError, match="unknown model"):
        stack.build("reverse_transformer")
    with pytest.raises(ValueError, match="dtype must be one of"):
        stack.build("reverse_rnn", dtype="bfloat16")
    with pytest.raises(ValueError, match="has no config"):
        stack.build("reverse_rnn", attention_size=3)
    with pytest.raises(ValueError, match="always teacher-forces"):
        batch = fixtures.load_golden("reverse_rnn").batch
        stack.run(fixture_model(stack, "reverse_rnn"), "reverse_rnn", batch, teacher_forcing=0.5)
