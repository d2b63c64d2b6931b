"""The framework-neutral package: catalogue, leaf rules, safetensors, fixtures, validation (numpy only)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shared import catalogue, documents
from shared.core import teacher_forcing
from shared.core.canonical import RULES, check_weights, reorder_gates
from shared.core.validation import check_batch
from shared.io import safetensors_io
from shared.verify import fixtures

DESIGN_NAMES = [
    "additive_attention", "reverse_rnn", "reverse_bahdanau", "reverse_bahdanau_concat", "reverse_luong_general",
    "reverse_luong_dot", "reverse_luong_concat", "bahdanau_bigru", "luong_dot", "luong_general", "luong_concat",
    "tf_tutorial", "tf_tutorial_mha",
]  # fmt: skip


def test_catalogue_holds_the_thirteen_models_of_the_design():
    assert list(catalogue.CATALOGUE) == DESIGN_NAMES
    for spec in catalogue.CATALOGUE.values():
        assert spec.document in documents.DOCUMENTS and spec.doc_class and spec.tolerance.reason
        if spec.less_work:  # the report's sibling ceiling: the same document, module and sizes
            sibling = catalogue.get(spec.less_work)
            assert (sibling.document, sibling.module, sibling.hoists) == (spec.document, spec.module, True), spec.name
            assert {k: v for k, v in sibling.config.items() if k != "score_fn"} == {
                k: v for k, v in spec.config.items() if k != "score_fn"
            }, spec.name


def test_shared_imports_with_numpy_alone():
    code = "import sys, shared, shared.verify.fixtures, shared.cli; bad = {'torch', 'tensorflow', 'keras'} & set(sys.modules)"
    code += "; sys.exit(str(bad) if bad else 0)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", catalogue.built())
def test_fixture_dimensions_are_all_distinct(name):
    spec = catalogue.get(name)
    dims = {k: v for k, v in spec.fixture_config.items() if type(v) is int and k not in ("batch_sz", "n_layers")}
    sizes = [*dims.values(), *spec.fixture_batch.values()]  # batch_sz is B by definition; n_layers is no width
    assert len(set(sizes)) == len(sizes), f"{name}: fixture sizes repeat: {sizes}"


@pytest.mark.parametrize("name", catalogue.built())
def test_weights_and_batches_regenerate_byte_identical(name):
    golden = fixtures.load_golden(name)
    shapes = {key: array.shape for key, array in golden.weights.items()}
    regenerated = fixtures.make_weights(name, shapes)
    assert all(regenerated[k].tobytes() == golden.weights[k].tobytes() for k in shapes)
    batch = fixtures.make_batch(catalogue.get(name))
    assert batch.keys() == golden.batch.keys()
    assert all(batch[k].tobytes() == golden.batch[k].tobytes() for k in batch)


@pytest.mark.parametrize("name", ["reverse_bahdanau", "bahdanau_bigru"])
def test_fixture_batch_pads_targets_and_repeats_a_source_token(name):
    spec = catalogue.get(name)
    batch = fixtures.make_batch(spec)
    lengths = (batch["tgt_out"] != spec.pad_id).sum(1)
    assert len(set(lengths)) == len(lengths) and (batch["tgt_out"] == spec.pad_id).any()
    assert batch["src"][0, 0] == batch["src"][-1, 0]
    assert (batch["tgt_in"][:, 1:] == batch["tgt_out"][:, :-1]).all() and (batch["tgt_in"][:, 0] == spec.sos_id).all()


def test_variable_length_fixtures_have_all_different_source_lengths_and_a_mixed_schedule():
    spec = catalogue.get("luong_general")
    batch, schedule = fixtures.make_batch(spec), fixtures.make_schedule(spec)
    lengths = batch["src_len"]
    assert len(set(lengths)) == len(lengths) == spec.fixture_batch["B"] and lengths.max() == spec.fixture_batch["S"]
    for row, length in enumerate(lengths):
        assert (batch["src"][row, length:] == spec.pad_id).all() and (batch["src"][row, :length] != spec.pad_id).all()
    assert schedule.shape == (spec.fixture_batch["T"] - 1,) and schedule.any() and not schedule.all()


def test_teacher_forcing_draw_is_seeded_and_follows_the_ratio():
    draw = teacher_forcing.draw
    assert np.array_equal(draw(0.5, 50, np.random.default_rng(3)), draw(0.5, 50, np.random.default_rng(3)))
    assert draw(1.0, 9, np.random.default_rng(0)).all() and not draw(0.0, 9, np.random.default_rng(0)).any()
    assert 0.4 < draw(0.5, 10_000, np.random.default_rng(0)).mean() < 0.6
    with pytest.raises(ValueError, match="teacher_force_ratio"):
        draw(1.5, 3, np.random.default_rng(0))


@pytest.mark.parametrize(
    "schedule,fragment",
    [([True, False], "shape \\(5,\\)"), (np.ones(5) * 0.5, "booleans"), ([[True] * 5], "shape")],
)
def test_bad_schedules_are_rejected(schedule, fragment):
    with pytest.raises(ValueError, match=fragment):
        teacher_forcing.check(catalogue.get("luong_dot"), schedule, 6)
    with pytest.raises(ValueError, match="always teacher-forces"):
        teacher_forcing.check(catalogue.get("reverse_luong_dot"), [True] * 5, 6)


def _cell(rng, gates, hidden, inputs, suffix):
    return {
        f"weight_ih{suffix}": rng.normal(size=(gates * hidden, inputs)),
        f"weight_hh{suffix}": rng.normal(size=(gates * hidden, hidden)),
        f"bias_ih{suffix}": rng.normal(size=(gates * hidden,)),
        f"bias_hh{suffix}": rng.normal(size=(gates * hidden,)),
    }


def _leaf_cases():
    rng = np.random.default_rng(0)
    yield "linear", {"weight": rng.normal(size=(3, 4)), "bias": rng.normal(size=(3,))}
    yield "linear", {"weight": rng.normal(size=(3, 4))}
    yield "embedding", {"weight": rng.normal(size=(5, 2))}
    yield "parameter", {"": rng.normal(size=(6,))}
    for kind, gates in (("rnn", 1), ("gru", 3), ("lstm", 4)):
        yield kind, _cell(rng, gates, 2, 5, "_l0")
        # bidirectional, two layers: layer 1 reads both directions of layer 0
        cells = {**_cell(rng, gates, 2, 5, "_l0"), **_cell(rng, gates, 2, 5, "_l0_reverse")}
        yield kind, {**cells, **_cell(rng, gates, 2, 4, "_l1"), **_cell(rng, gates, 2, 4, "_l1_reverse")}


@pytest.mark.parametrize("kind,canon", list(_leaf_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_leaf_rules_round_trip_exactly(kind, canon):
    back = RULES[kind].from_keras(RULES[kind].to_keras(canon))
    assert back.keys() == canon.keys()
    assert all(np.array_equal(back[k], canon[k]) for k in canon)


def test_summed_bias_rule_is_forward_equal_but_loses_the_split():
    canon = dict(_cell(np.random.default_rng(1), 4, 3, 2, "_l0"))
    keras = RULES["lstm_summed"].to_keras(canon)
    assert np.allclose(keras["bias_l0"], canon["bias_ih_l0"] + canon["bias_hh_l0"])
    back = RULES["lstm_summed"].from_keras(keras)
    assert np.allclose(back["bias_ih_l0"], keras["bias_l0"]) and not back["bias_hh_l0"].any()


def test_gru_rule_swaps_reset_and_update_blocks_and_stacks_biases():
    hidden, rows = 2, np.arange(6)
    canon = {"weight_ih_l0": np.repeat(rows[:, None], 3, 1), "weight_hh_l0": np.repeat(rows[:, None], 2, 1)}
    canon |= {"bias_ih_l0": rows * 1.0, "bias_hh_l0": rows + 10.0}
    keras = RULES["gru"].to_keras(canon)
    # torch rows are r(0,1) z(2,3) n(4,5); Keras columns are z, r, h
    assert keras["kernel_l0"].shape == (3, 3 * hidden)
    assert keras["kernel_l0"][0].tolist() == [2, 3, 0, 1, 4, 5]
    assert keras["bias_l0"].tolist() == [[2, 3, 0, 1, 4, 5], [12, 13, 10, 11, 14, 15]]


def test_reorder_gates_is_invertible():
    array = np.arange(12).reshape(4, 3)
    assert np.array_equal(reorder_gates(reorder_gates(array, "ifgo", "gofi"), "gofi", "ifgo"), array)


def test_check_weights_lists_every_problem_at_once():
    expected = {"a.weight": (2, 3), "a.bias": (2,), "b.weight": (4,)}
    given = {"a.weight": np.zeros((3, 2)), "b.weight": np.zeros(4, np.int64), "c.weight": np.zeros(1)}
    with pytest.raises(ValueError) as error:
        check_weights(expected, given, "Toy")
    message = str(error.value)
    assert "Toy" in message and "missing keys: a.bias" in message and "unexpected keys: c.weight" in message
    assert "a.weight: expected (2, 3), got (3, 2)" in message and "b.weight: dtype int64" in message


def test_safetensors_round_trip_and_compatibility(tmp_path):
    from safetensors.numpy import load_file, save_file

    tensors = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array(2.5), "i": np.arange(3)}
    ours = tmp_path / "ours.safetensors"
    safetensors_io.save(ours, tensors, {"k": "v"})
    assert all(np.array_equal(load_file(ours)[k], tensors[k]) for k in tensors)
    theirs = tmp_path / "theirs.safetensors"
    save_file(tensors, theirs)
    loaded, _ = safetensors_io.load(theirs)
    assert all(np.array_equal(loaded[k], tensors[k]) for k in tensors)
    assert safetensors_io.loads(safetensors_io.dumps(tensors))[0].keys() == tensors.keys()


def test_safetensors_rejects_garbage_and_leaves_no_partial_file(tmp_path):
    with pytest.raises(ValueError, match="not a safetensors file"):
        safetensors_io.loads(b"\x05\x00\x00\x00\x00\x00\x00\x00{{{{{", "junk")
    with pytest.raises(ValueError, match="unsupported dtype"):
        safetensors_io.save(tmp_path / "x.safetensors", {"s": np.array(["text"])})
    assert list(tmp_path.iterdir()) == []


def test_validation_accepts_the_fixture_batches():
    for name in catalogue.built():
        spec = catalogue.get(name)
        arrays = check_batch(spec, spec.fixture_config, fixtures.make_batch(spec), with_targets=spec.interface == "seq2seq")
        assert arrays


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        ({"hidden": 3}, "has no config hidden"),
        ({"hidden_size": 0}, "positive integer"),
        ({"hidden_size": 2.5}, "must be of type int"),
    ],
)
def test_bad_config_overrides_are_rejected(overrides, fragment):
    with pytest.raises(ValueError, match=fragment):
        catalogue.resolve_config(catalogue.get("reverse_luong_dot"), "float32", overrides)


def test_config_types_follow_the_document_defaults():
    spec = catalogue.get("luong_concat")
    assert catalogue.resolve_config(spec, "float64", {"dropout": 0, "n_layers": 3})["n_layers"] == 3
    for overrides, fragment in (({"dropout": 1.5}, "in \\[0, 1\\)"), ({"score_fn": 3}, "must be of type str")):
        with pytest.raises(ValueError, match=fragment):
            catalogue.resolve_config(spec, "float64", overrides)


def test_unknown_models_and_dtypes_are_rejected():
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        catalogue.get("nope")
    with pytest.raises(ValueError, match="dtype must be one of"):
        catalogue.resolve_config(catalogue.get("reverse_rnn"), "float16", {})
