"""The catalogue options third-party tutorial layouts need, and the size table of every model.

Document 002 (`bahdanau_bigru`, after Trevett's notebook 3): distinct encoder and decoder embedding
sizes, and `attention_bias=False` (Trevett's `v = nn.Linear(dec_hid, 1, bias=False)`). Document 004
(`tf_tutorial`): `w1_on_query=True`, the 2021 revision's `V(tanh(W1(query) + W2(values)))`. Each option
computes the same function in both stacks (float64, <= 1e-12), has a negative control, and survives
config validation and `.keras` files. Then `weight_sizes`: every size of every model's config can be
read back from its canonical weights (`catalogue.sizes_from_weights`).
"""

from __future__ import annotations

import numpy as np
import pytest

from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_close, assert_tokens_equal
from tests.conftest import MAXIMA, STACK_MODULES, STACKS

BOTH = pytest.mark.skipif(len(STACKS) < 2, reason="compares the two stacks: needs ROSETTA_STACKS=torch,tf")
F64 = 1e-12  # the equality policy's float64 bound on outputs
F64_GRADS = 1e-10

# (model, overrides): each option alone, then with the other options of its model
OPTIONS = {
    "bigru-no-bias": ("bahdanau_bigru", {"attention_bias": False}),
    "bigru-embed-sizes": ("bahdanau_bigru", {"encoder_embed_dim": 6, "decoder_embed_dim": 4}),
    "bigru-trevett": ("bahdanau_bigru", {"encoder_embed_dim": 6, "decoder_embed_dim": 4, "attention_bias": False}),
    "tutorial-2021": ("tf_tutorial", {"w1_on_query": True}),
    "tutorial-2021-fed": ("tf_tutorial", {"w1_on_query": True, "feed_state": True}),
}


def _shapes(stack, model) -> dict[str, tuple]:
    return {key: array.shape for key, array in stack.get_weights(model).items()}


def _model(stack, name: str, overrides: dict, dtype: str = "float64", weights=None, **build_options):
    """`name` at its fixture config with `overrides`, holding `weights` (default: drawn for its shapes)."""
    model = stack.build(name, dtype, **build_options, **{**catalogue.get(name).fixture_config, **overrides})
    stack.set_weights(model, fixtures.make_weights(f"{name}/options", _shapes(stack, model)) if weights is None else weights)
    return model


def _results(stack, model, name: str) -> dict:
    """Outputs (with the fixture's mixed teacher-forcing schedule), loss, gradients and greedy decoding."""
    spec = catalogue.get(name)
    batch, schedule = fixtures.make_batch(spec), fixtures.make_schedule(spec)
    loss, grads = stack.loss_and_grads(model, name, batch, teacher_forcing=schedule)
    return {
        "outputs": stack.run(model, name, batch, teacher_forcing=schedule),
        "loss": loss,
        "grads": grads,
        "greedy": stack.greedy(model, name, batch, max_len=batch["tgt_in"].shape[1] + fixtures.GREEDY_EXTRA_STEPS),
    }


# ---- both stacks compute the same function with each option ----


@BOTH
@pytest.mark.parametrize("case", OPTIONS)
def test_each_option_computes_the_same_function_in_both_stacks(case):
    name, overrides = OPTIONS[case]
    torch_impl, tf_impl = STACK_MODULES["torch"], STACK_MODULES["tf"]
    reference = _model(torch_impl, name, overrides)
    weights = torch_impl.get_weights(reference)
    candidate = _model(tf_impl, name, overrides, weights=weights)
    assert tf_impl.get_weights(candidate).keys() == weights.keys()
    ref, cand = _results(torch_impl, reference, name), _results(tf_impl, candidate, name)
    maxima = {key: assert_close(cand["outputs"][key], value, F64, what=f"{case} {key}") for key, value in ref["outputs"].items()}
    assert maxima.keys() == {"logits", "attention"}
    maxima["loss"] = assert_close(cand["loss"], ref["loss"], F64, what=f"{case} loss")
    assert cand["grads"].keys() == ref["grads"].keys()
    maxima["grads"] = max(assert_close(cand["grads"][k], g, F64_GRADS, what=f"{case} grad {k}") for k, g in ref["grads"].items())
    assert_tokens_equal(cand["greedy"]["tokens"], ref["greedy"]["tokens"], f"{case} greedy")
    maxima["greedy attention"] = assert_close(cand["greedy"]["attention"], ref["greedy"]["attention"], F64)
    MAXIMA[f"{name} ({case})", "float64"] = maxima


@pytest.mark.parametrize("case", OPTIONS)
def test_each_option_keeps_the_hoisted_path_equal_to_the_listing(stack, case):
    """Ours computes the values' share of the score once per sequence (`keys`): with w1_on_query it is
    W2(values). Equal to the listing's every-step computation, teacher-forced and with a schedule."""
    name, overrides = OPTIONS[case]
    spec = catalogue.get(name)
    listing = _model(stack, name, overrides, as_written=True)
    ours = _model(stack, name, overrides, weights=stack.get_weights(listing))
    batch = fixtures.make_batch(spec)
    for schedule in (None, fixtures.make_schedule(spec)):
        expected = stack.run(listing, name, batch, teacher_forcing=schedule)
        actual = stack.run(ours, name, batch, teacher_forcing=schedule)
        for key, value in expected.items():
            assert_close(actual[key], value, F64, what=f"{case} {key} (schedule {schedule is not None})")


# ---- document 002: attention_bias, encoder and decoder embedding sizes ----


def test_without_attention_bias_no_stack_holds_an_fc2_bias(stack):
    weights = _shapes(stack, stack.build("bahdanau_bigru", "float64", **catalogue.get("bahdanau_bigru").fixture_config))
    assert "decoder.attention.fc2.bias" in weights
    config = {**catalogue.get("bahdanau_bigru").fixture_config, "attention_bias": False}
    without = _shapes(stack, stack.build("bahdanau_bigru", "float64", **config))
    assert without.keys() == weights.keys() - {"decoder.attention.fc2.bias"}
    assert catalogue.get("bahdanau_bigru").zero_gradient_keys(without) == ()
    assert catalogue.get("bahdanau_bigru").zero_gradient_keys(weights) == ("decoder.attention.fc2.bias",)


def test_without_attention_bias_only_the_bias_is_gone(stack):
    """fc2's bias adds the same to every score, so the softmax cancels it: the model with the bias (any
    value) and the one without compute the same function from the other weights."""
    name = "bahdanau_bigru"
    with_bias = _model(stack, name, {})
    weights = stack.get_weights(with_bias)
    assert abs(weights["decoder.attention.fc2.bias"]).max() > 0.1
    without = _model(stack, name, {"attention_bias": False}, weights={k: v for k, v in weights.items() if "fc2.bias" not in k})
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
    model = _model(stack, name, {"encoder_embed_dim": 6, "decoder_embed_dim": 4})
    shapes = _shapes(stack, model)
    assert shapes["encoder.embed.weight"] == (V_s, 6) and shapes["encoder.gru.weight_ih_l0"] == (3 * He, 6)
    assert shapes["decoder.embedding.weight"] == (V_t, 4) and shapes["decoder.gru.weight_ih_l0"] == (3 * Hd, 2 * He + 4)
    assert shapes["decoder.fc.weight"] == (V_t, Hd + 2 * He + 4)
    outputs = stack.run(model, name, fixtures.make_batch(spec))
    B, S, T = (spec.fixture_batch[k] for k in "BST")
    assert outputs["logits"].shape == (B, T, V_t) and np.isfinite(outputs["logits"]).all()
    assert outputs["attention"].shape == (B, T, S)


def test_the_old_embed_dim_key_is_refused_by_name():
    with pytest.raises(ValueError, match="has no config embed_dim; it takes: .*encoder_embed_dim, decoder_embed_dim"):
        catalogue.resolve_config(catalogue.get("bahdanau_bigru"), "float32", {"embed_dim": 256})


# ---- document 004: w1_on_query ----


def test_w1_on_query_is_another_function_of_the_same_weights(stack):
    """Negative control: the 2021 score read with the 2020 wiring (W1 and W2 trade inputs) differs."""
    name = "tf_tutorial"
    revision_2020 = _model(stack, name, {})
    weights = stack.get_weights(revision_2020)
    assert abs(weights["decoder.attention.W1.weight"] - weights["decoder.attention.W2.weight"]).max() > 0.1
    revision_2021 = _model(stack, name, {"w1_on_query": True}, weights=weights)
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
    model = _model(stack, name, {"w1_on_query": True})
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


@pytest.mark.parametrize(("name", "key"), [("bahdanau_bigru", "attention_bias"), ("tf_tutorial", "w1_on_query")])
def test_boolean_options_validate_by_type(name, key):
    from shared.cli import _key_values

    spec = catalogue.get(name)
    assert type(spec.config[key]) is bool
    for text, value in (("false", False), ("true", True)):
        overrides = _key_values([f"{key}={text}"], "--set")  # how `--set KEY=VALUE` arrives
        assert overrides == {key: value} and catalogue.resolve_config(spec, "float32", overrides)[key] is value
    for bad in (0, 1, "false", None):
        with pytest.raises(ValueError, match=f"config {key} must be of type bool"):
            catalogue.resolve_config(spec, "float32", {key: bad})
    size_key = next(iter(spec.weight_sizes))
    with pytest.raises(ValueError, match=f"config {size_key} must be of type int"):
        catalogue.resolve_config(spec, "float32", {size_key: True})  # a bool is no size


@pytest.mark.skipif("tf" not in STACKS, reason="Keras files")
@pytest.mark.parametrize("case", OPTIONS)
def test_a_keras_file_keeps_the_options(tmp_path, case):
    from tf_impl.train import load_keras, save_keras

    tf_impl = STACK_MODULES["tf"]
    name, overrides = OPTIONS[case]
    model = _model(tf_impl, name, overrides)
    save_keras(model, tmp_path / "model.keras")
    loaded, _ = load_keras(tmp_path / "model.keras")
    assert loaded.rosetta_config == {**catalogue.get(name).fixture_config, **overrides}
    assert all(type(loaded.rosetta_config[k]) is type(v) for k, v in overrides.items())
    weights, again = tf_impl.get_weights(model), tf_impl.get_weights(loaded)
    assert again.keys() == weights.keys() and all(np.array_equal(again[k], weights[k]) for k in weights)
    batch = fixtures.make_batch(catalogue.get(name))
    assert_close(tf_impl.run(loaded, name, batch)["logits"], tf_impl.run(model, name, batch)["logits"], 0.0)


# ---- the size table: every size of the config, read back from the canonical weights ----

MODELS = catalogue.built()


def _other_sizes(spec: catalogue.ModelSpec) -> dict[str, int]:
    """A second config: every size key changed, all sizes distinct from each other and from the fixture's."""
    taken = {value for value in spec.fixture_config.values() if type(value) is int}
    fresh = (n for n in range(4, 100) if n not in taken)
    return {key: next(fresh) for key in spec.weight_sizes}


@pytest.mark.parametrize("name", MODELS)
def test_the_size_table_covers_every_size_of_the_config(name):
    spec = catalogue.get(name)
    int_keys = {key for key, value in spec.config.items() if type(value) is int}
    assert spec.weight_sizes.keys() == int_keys - catalogue.NOT_WEIGHT_SIZES.keys()
    assert spec.interface != "seq2seq" or set(spec.vocab_keys) <= spec.weight_sizes.keys()


@pytest.mark.parametrize("name", MODELS)
def test_sizes_read_from_the_weights_are_the_config_sizes(stack, name):
    spec = catalogue.get(name)
    for sizes in ({key: spec.fixture_config[key] for key in spec.weight_sizes}, _other_sizes(spec)):
        model = stack.build(name, "float32", **{**spec.fixture_config, **sizes})
        assert catalogue.sizes_from_weights(spec, _shapes(stack, model)) == sizes


def test_sizes_from_weights_skips_absent_weights():
    spec = catalogue.get("bahdanau_bigru")
    shapes = {"encoder.embed.weight": (23, 7), "decoder.gru.weight_hh_l0": [33, 11], "unrelated": (1,)}
    sizes = catalogue.sizes_from_weights(spec, shapes)
    assert sizes == {"src_vocab_size": 23, "encoder_embed_dim": 7, "decoder_hidden_size": 11}
    assert all(type(value) is int for value in sizes.values())
