"""The catalogue options third-party tutorial layouts need, in each stack: document 002's `attention_bias=False`
(Trevett's `v = nn.Linear(dec_hid, 1, bias=False)`) and distinct embedding sizes, document 004's `w1_on_query=True`
(the 2021 revision's `V(tanh(W1(query) + W2(values)))`), each with a negative control; the hoisted path equal to the
listing with each; and every size of every model's config read back from its canonical weights."""

from __future__ import annotations

import numpy as np
import pytest

from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_close
from tests.catalogue_options import OPTIONS, option_model, weight_shapes

F64 = 1e-12  # the equality policy's float64 bound on outputs
MODELS = catalogue.built()


@pytest.mark.parametrize("case", OPTIONS)
def test_each_option_keeps_the_hoisted_path_equal_to_the_listing(stack, case):
    """Ours computes the values' share of the score once per sequence (`keys`): with w1_on_query it is
    W2(values). Equal to the listing's every-step computation, teacher-forced and with a schedule."""
    name, overrides = OPTIONS[case]
    spec = catalogue.get(name)
    listing = option_model(stack, name, overrides, as_written=True)
    ours = option_model(stack, name, overrides, weights=stack.get_weights(listing))
    batch = fixtures.make_batch(spec)
    for schedule in (None, fixtures.make_schedule(spec)):
        expected = stack.run(listing, name, batch, teacher_forcing=schedule)
        actual = stack.run(ours, name, batch, teacher_forcing=schedule)
        for key, value in expected.items():
            assert_close(actual[key], value, F64, what=f"{case} {key} (schedule {schedule is not None})")


# ---- document 002: attention_bias, encoder and decoder embedding sizes ----


def test_without_attention_bias_no_stack_holds_an_fc2_bias(stack):
    weights = weight_shapes(stack, stack.build("bahdanau_bigru", "float64", **catalogue.get("bahdanau_bigru").fixture_config))
    assert "decoder.attention.fc2.bias" in weights
    config = {**catalogue.get("bahdanau_bigru").fixture_config, "attention_bias": False}
    without = weight_shapes(stack, stack.build("bahdanau_bigru", "float64", **config))
    assert without.keys() == weights.keys() - {"decoder.attention.fc2.bias"}
    assert catalogue.get("bahdanau_bigru").zero_gradient_keys(without) == ()
    assert catalogue.get("bahdanau_bigru").zero_gradient_keys(weights) == ("decoder.attention.fc2.bias",)


def test_without_attention_bias_only_the_bias_is_gone(stack):
    """fc2's bias adds the same to every score, so the softmax cancels it: the model with the bias (any
    value) and the one without compute the same function from the other weights."""
    name = "bahdanau_bigru"
    with_bias = option_model(stack, name, {})
    weights = stack.get_weights(with_bias)
    assert abs(weights["decoder.attention.fc2.bias"]).max() > 0.1
    without = option_model(
        stack, name, {"attention_bias": False}, weights={k: v for k, v in weights.items() if "fc2.bias" not in k}
    )
    batch, schedule = fixtures.make_batch(catalogue.get(name)), fixtures.make_schedule(catalogue.get(name))
    expected = stack.run(with_bias, name, batch, teacher_forcing=schedule)
    actual = stack.run(without, name, batch, teacher_forcing=schedule)
    for key, value in expected.items():
        assert_close(actual[key], value, F64, what=key)


def test_encoder_and_decoder_embedding_sizes_are_distinct_sizes(stack):
    name, spec = "bahdanau_bigru", catalogue.get("bahdanau_bigru")
    config = spec.fixture_config
    assert config["encoder_embed_dim"] != config["decoder_embed_dim"]
    V_s, V_t, He, Hd = (config[k] for k in ("src_vocab_size", "tgt_vocab_size", "encoder_hidden_size", "decoder_hidden_size"))
    model = option_model(stack, name, {"encoder_embed_dim": 6, "decoder_embed_dim": 4})
    shapes = weight_shapes(stack, model)
    assert shapes["encoder.embed.weight"] == (V_s, 6) and shapes["encoder.gru.weight_ih_l0"] == (3 * He, 6)
    assert shapes["decoder.embedding.weight"] == (V_t, 4) and shapes["decoder.gru.weight_ih_l0"] == (3 * Hd, 2 * He + 4)
    assert shapes["decoder.fc.weight"] == (V_t, Hd + 2 * He + 4)
    outputs = stack.run(model, name, fixtures.make_batch(spec))
    B, S, T = (spec.fixture_batch[k] for k in "BST")
    assert outputs["logits"].shape == (B, T, V_t) and np.isfinite(outputs["logits"]).all()
    assert outputs["attention"].shape == (B, T, S)


# ---- document 004: w1_on_query ----


def test_w1_on_query_is_another_function_of_the_same_weights(stack):
    """Negative control: the 2021 score read with the 2020 wiring (W1 and W2 trade inputs) differs."""
    name = "tf_tutorial"
    revision_2020 = option_model(stack, name, {})
    weights = stack.get_weights(revision_2020)
    assert abs(weights["decoder.attention.W1.weight"] - weights["decoder.attention.W2.weight"]).max() > 0.1
    revision_2021 = option_model(stack, name, {"w1_on_query": True}, weights=weights)
    batch = fixtures.make_batch(catalogue.get(name))
    logits_2020 = stack.run(revision_2020, name, batch)["logits"]
    assert abs(stack.run(revision_2021, name, batch)["logits"] - logits_2020).max() > 1e-3
    swapped = {**weights, **{f"decoder.attention.W{a}.{p}": weights[f"decoder.attention.W{b}.{p}"]
                             for a, b in ((1, 2), (2, 1)) for p in ("weight", "bias")}}  # fmt: skip
    stack.set_weights(revision_2021, swapped)  # W1 and W2 traded: the same function again
    assert_close(stack.run(revision_2021, name, batch)["logits"], logits_2020, F64, what="W1 and W2 swapped")


def test_w1_on_query_scores_the_first_step_as_the_2021_tutorial(stack):
    """`score = V(tanh(W1(query) + W2(values)))` in numpy, for decoder step 0 (query: the encoder's state)."""
    name = "tf_tutorial"
    model = option_model(stack, name, {"w1_on_query": True})
    w = stack.get_weights(model)
    batch = fixtures.make_batch(catalogue.get(name))
    traced = stack.trace(model, name, batch)
    query, values = traced["encoder state"], traced["encoder outputs"]  # [B, H], [B, S, H]

    def dense(x, layer):
        return x @ w[f"decoder.attention.{layer}.weight"].T + w[f"decoder.attention.{layer}.bias"]

    score = dense(np.tanh(dense(query[:, None], "W1") + dense(values, "W2")), "V")[..., 0]  # [B, S]
    assert_close(traced["attention scores"][:, 0], score, F64, what="2021 score, step 0")
    valid = np.arange(score.shape[1]) < batch["src_len"][:, None]
    weights = np.where(valid, np.exp(score - score.max(1, keepdims=True)), 0.0)
    assert_close(traced["attention"][:, 0], weights / weights.sum(1, keepdims=True), F64, what="2021 attention, step 0")


@pytest.mark.parametrize("w1_on_query", [False, True])
def test_bahdanau_attention_input_sizes_follow_the_revision(stack, w1_on_query):
    """torch's layer takes its input sizes: W1 reads the values (2020) or the query (2021), W2 the other."""
    module = __import__(f"{stack.__name__}.models.tf_tutorial", fromlist=["BahdanauAttention"])
    query, values = np.random.default_rng(0).normal(size=(2, 3)), np.random.default_rng(1).normal(size=(2, 5, 4))
    if stack.__name__ == "torch_impl":
        import torch

        layer = module.BahdanauAttention(6, query_dim=3, values_dim=4, w1_on_query=w1_on_query).double()
        context, weights = layer(torch.as_tensor(query), torch.as_tensor(values))
        in_sizes = {name: getattr(layer, name).weight.shape[1] for name in ("W1", "W2")}
    else:
        layer = module.BahdanauAttention(6, query_dim=3, values_dim=4, w1_on_query=w1_on_query, dtype="float64")
        context, weights = layer(query, values)
        in_sizes = {name: getattr(layer, name).kernel.shape[0] for name in ("W1", "W2")}
    assert in_sizes == ({"W1": 3, "W2": 4} if w1_on_query else {"W1": 4, "W2": 3})
    assert tuple(context.shape) == (2, 4) and tuple(weights.shape) == (2, 5, 1)


# ---- booleans in config ----


# ---- the size table, read back from the canonical weights ----


def _other_sizes(spec: catalogue.ModelSpec) -> dict[str, int]:
    """A second config: every size key changed, all sizes distinct from each other and from the fixture's."""
    taken = {value for value in spec.fixture_config.values() if type(value) is int}
    fresh = (n for n in range(4, 100) if n not in taken)
    return {key: next(fresh) for key in spec.weight_sizes}


@pytest.mark.parametrize("name", MODELS)
def test_sizes_read_from_the_weights_are_the_config_sizes(stack, name):
    spec = catalogue.get(name)
    for sizes in ({key: spec.fixture_config[key] for key in spec.weight_sizes}, _other_sizes(spec)):
        model = stack.build(name, "float32", **{**spec.fixture_config, **sizes})
        assert catalogue.sizes_from_weights(spec, weight_shapes(stack, model)) == sizes
