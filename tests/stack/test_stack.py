"""Per-stack tests, run by each of the torch and tf envs alone: shapes, golden outputs, weights, errors."""

from __future__ import annotations

import numpy as np
import pytest

from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_all_close, assert_close, assert_tokens_equal, grad_bounds, output_bounds
from tests.bad_inputs import bad_batches

MODELS = catalogue.built()
DTYPES = ["float64", "float32"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", MODELS)
def test_outputs_and_gradients_match_the_golden_file(stack, name, dtype):
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    model, bounds = fixtures.golden_model(stack, name, dtype), output_bounds(spec.tolerance, dtype)
    outputs = stack.run(model, name, golden.batch, teacher_forcing=golden.schedule)
    assert_all_close(outputs, golden.outputs, bounds, "outputs")
    loss, grads = stack.loss_and_grads(model, name, golden.batch, teacher_forcing=golden.schedule)
    assert_all_close({"loss": loss}, {"loss": golden.loss}, bounds, "loss")
    assert_all_close(grads, golden.grads, grad_bounds(spec.tolerance, dtype), "grads")
    if spec.variable_length:
        greedy = stack.greedy(model, name, golden.batch, max_len=fixtures.greedy_max_len(golden))
        assert_tokens_equal(greedy["tokens"], golden.greedy["tokens"], "greedy")
        assert_all_close({"a": greedy["attention"]}, {"a": golden.greedy["attention"]}, bounds, "greedy attention")


VARIABLE_LENGTH = [name for name in MODELS if catalogue.get(name).variable_length]


@pytest.mark.parametrize("name", VARIABLE_LENGTH)
def test_padding_changes_nothing_on_valid_positions(stack, name):
    """Each padded row gives what it gives alone, unpadded: pads are masked in encoder and attention."""
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    model, batch = fixtures.golden_model(stack, name), dict(golden.batch)
    batch["src"] = np.where(batch["src"] == spec.pad_id, spec.eos_id, batch["src"])  # pad content must not matter
    together = stack.run(model, name, batch, teacher_forcing=golden.schedule)
    for row, length in enumerate(batch["src_len"]):
        alone = {key: batch[key][row : row + 1] for key in ("tgt_in", "tgt_out")} | {"src": batch["src"][row : row + 1, :length]}
        single = stack.run(model, name, alone, teacher_forcing=golden.schedule)
        assert_close(together["logits"][row], single["logits"][0], 1e-12, what=f"row {row} logits")
        assert_close(together["attention"][row, :, :length], single["attention"][0], 1e-12, what=f"row {row} attention")
        assert not together["attention"][row, :, length:].any(), "attention on a pad position"


@pytest.mark.parametrize("name", VARIABLE_LENGTH)
def test_document_time_major_signature(stack, name):
    """The documents' `forward(source [S, B], target [T, B])` (the tutorial's `(inp [B, S], targ [B, T])`)."""
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    model = fixtures.golden_model(stack, name)
    src, tgt = golden.batch["src"], np.concatenate([golden.batch["tgt_in"], golden.batch["tgt_out"][:, -1:]], 1)
    expected = stack.run(model, name, {"src": src, "tgt_in": tgt[:, :-1]})["logits"]
    if name == "tf_tutorial":
        assert_close(_numpy(model(_ids(stack, src), _ids(stack, tgt))), expected, 1e-12)
        return
    if name == "tf_tutorial_mha":  # the 2022 tutorial's `model((context, target_in))`; torch: `model(context, target_in)`
        inputs = (_ids(stack, src), _ids(stack, tgt[:, :-1]))
        assert_close(_numpy(model(*inputs) if stack.__name__ == "torch_impl" else model(inputs)), expected, 1e-12)
        return
    outputs = _numpy(model(_ids(stack, src.T), _ids(stack, tgt.T), teacher_force_ratio=1.0))  # always the true token
    assert outputs.shape == (tgt.shape[1], len(src), spec.vocab_size) and not outputs[0].any()
    assert_close(outputs[1:].transpose(1, 0, 2), expected, 1e-12, what="time-major forward")


DROPOUT_MODELS = [name for name in catalogue.built() if catalogue.get(name).fixture_config.get("dropout")]


@pytest.mark.parametrize("name", DROPOUT_MODELS)
def test_dropout_follows_training_in_the_documents_signature_and_in_loss_and_grads(stack, name):
    """torch's `model.train()` and Keras's `training=True` turn dropout on through the document's own call and
    `loss_and_grads(training=True)`; off (the default), both are deterministic: the control."""
    golden, model = fixtures.load_golden(name), fixtures.golden_model(stack, name)
    src, tgt = golden.batch["src"], np.concatenate([golden.batch["tgt_in"], golden.batch["tgt_out"][:, -1:]], 1)
    args = (_ids(stack, src), _ids(stack, tgt)) if name == "tf_tutorial" else (_ids(stack, src.T), _ids(stack, tgt.T))
    ratio = {} if name == "tf_tutorial" else {"teacher_force_ratio": 1.0}

    def document_call(training: bool) -> np.ndarray:
        if stack.__name__ == "torch_impl":
            model.train(training)
            return _numpy(model(*args, **ratio))
        return _numpy(model(*args, **ratio, training=training))

    assert_close(document_call(False), document_call(False), 0.0, what="dropout off")
    assert np.max(np.abs(document_call(True) - document_call(False))) > 1e-6, "training did not reach dropout"
    off = [stack.loss_and_grads(model, name, golden.batch, golden.schedule)[0] for _ in range(2)]
    on = stack.loss_and_grads(model, name, golden.batch, golden.schedule, training=True)[0]
    assert off[0] == off[1] and abs(on - off[0]) > 1e-9


def _numpy(tensor) -> np.ndarray:
    return tensor.detach().numpy() if hasattr(tensor, "detach") else np.asarray(tensor)


def _ids(stack, array):
    """Token ids as the stack's own tensor type."""
    if stack.__name__ == "torch_impl":
        import torch

        return torch.as_tensor(array)
    import tensorflow as tf

    return tf.constant(array)


@pytest.mark.parametrize("name", MODELS)
def test_output_shapes_and_attention_rows(stack, name):
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    outputs = stack.run(fixtures.golden_model(stack, name, "float32"), name, golden.batch)
    B, S, T = (spec.fixture_batch[k] for k in "BST")
    width = spec.vocab_size if spec.interface == "seq2seq" else spec.fixture_config["encoder_dim"]
    main = outputs["logits" if spec.interface == "seq2seq" else "context"]
    assert main.shape == (B, T, width) and main.dtype == np.float32
    assert ("attention" in outputs) == spec.has_attention
    if spec.has_attention:
        assert outputs["attention"].shape == (B, T, S)
        attends = golden.batch["tgt_in"] != spec.pad_id if spec.masked_queries else np.ones((B, T), bool)  # [B, T]
        np.testing.assert_allclose(outputs["attention"].sum(-1), attends.astype(float), atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_document_sizes_are_the_defaults(stack, name):
    shapes = {key: array.shape for key, array in stack.get_weights(stack.build(name)).items()}
    for key, shape in DOCUMENT_SHAPES[name.split("_")[0] if name.startswith(("reverse", "luong")) else name].items():
        assert shapes[key] == shape, key


DOCUMENT_SHAPES = {  # a few weights per family at the documents' own sizes
    "tf_tutorial_mha": {
        "encoder.rnn.weight_hh_l0_reverse": (768, 256),
        "decoder.attention.mha.in_proj_weight": (768, 256),
        "decoder.output_layer.weight": (5000, 256),
    },  # fmt: skip
    "additive_attention": {"W_2.weight": (50, 100), "v": (50,)},
    "reverse": {"enc_embeddings.weight": (20, 64), "output_layer.bias": (20,)},
    "bahdanau_bigru": {
        "encoder.embed.weight": (7853, 256),
        "encoder.gru.weight_hh_l0_reverse": (1536, 512),
        "decoder.fc.weight": (5893, 1024 + 512 + 256),
    },  # fmt: skip
    "luong": {"encoder.lstm.weight_ih_l1": (2048, 512), "decoder.wc.weight": (512, 1024), "decoder.fc.weight": (5893, 512)},
    "tf_tutorial": {
        "encoder.embedding.weight": (9414, 256),
        "decoder.gru.weight_ih_l0": (3072, 1280),
        "decoder.attention.V.weight": (1, 1024),
    },  # fmt: skip
}


@pytest.mark.parametrize("name", MODELS)
def test_set_weights_of_get_weights_is_the_identity(stack, name):
    model = fixtures.golden_model(stack, name)
    weights = stack.get_weights(model)
    golden = fixtures.load_golden(name).weights
    assert weights.keys() == golden.keys() and all(np.array_equal(weights[k], golden[k]) for k in golden)
    other = stack.build(name, "float64", **catalogue.get(name).fixture_config)
    stack.set_weights(other, weights)
    again = stack.get_weights(other)
    assert all(np.array_equal(again[k], weights[k]) for k in weights)


@pytest.mark.parametrize("name", MODELS)
def test_bad_weights_are_rejected_naming_the_key(stack, name):
    model = fixtures.golden_model(stack, name)
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
    model = fixtures.golden_model(stack, name, "float32")
    for case, batch, fragment in bad_batches(spec, golden.batch):
        with pytest.raises(ValueError, match=fragment) as error:
            stack.run(model, name, batch)
        assert error.type is ValueError, case
    without_last = dict(list(golden.batch.items())[:-1])  # seq2seq: no tgt_out; attention: no values
    with pytest.raises(ValueError, match=f"missing '{list(golden.batch)[-1]}'"):
        stack.loss_and_grads(model, name, without_last)


@pytest.mark.parametrize("max_len", [0, -1, 2.5, True])
def test_greedy_rejects_a_bad_length_limit(stack, max_len):
    model = fixtures.golden_model(stack, "luong_dot", "float32")
    with pytest.raises(ValueError, match="max_len must be a positive integer"):
        stack.greedy(model, "luong_dot", fixtures.load_golden("luong_dot").batch, max_len=max_len)


def test_greedy_needs_a_model_that_decodes_greedily(stack):
    model = fixtures.golden_model(stack, "reverse_rnn", "float32")
    with pytest.raises(ValueError, match="has no greedy decoding"):
        stack.greedy(model, "reverse_rnn", fixtures.load_golden("reverse_rnn").batch)


def test_build_rejects_bad_arguments(stack):
    with pytest.raises(ValueError, match="unknown model"):
        stack.build("reverse_transformer")
    with pytest.raises(ValueError, match="dtype must be one of"):
        stack.build("reverse_rnn", dtype="bfloat16")
    with pytest.raises(ValueError, match="has no config"):
        stack.build("reverse_rnn", attention_size=3)
    with pytest.raises(ValueError, match="always teacher-forces"):
        batch = fixtures.load_golden("reverse_rnn").batch
        stack.run(fixtures.golden_model(stack, "reverse_rnn"), "reverse_rnn", batch, teacher_forcing=0.5)
