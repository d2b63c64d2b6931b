"""Trust in what a file says of itself, through `rosetta port` in each stack: a canonical safetensors file's metadata
and a `.keras` file's config.json are checked against the file's arrays before a model is built from them (a size the
arrays contradict is one line naming the file and the field, and no model of it is ever built), a file naming another
model is refused naming the file, a `.keras` whose config.json is no JSON says so. Each bad file is a good one written
by the suite, edited as a user would; each trap with its negative control (the guard taken away, the old failure)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from shared import catalogue
from shared.port import file_metadata, porting
from shared.verify import fixtures
from tests.shared.test_metadata_trust import NAME, _edited, _good, _hand_edited
from tests.stack.test_reliability import _one_line_error
from tests.stack.test_runner import _stack_name

DESTINATION = {"torch": ".pt", "tf": ".weights.h5"}  # a safetensors source ported within the stack under test


class Built(Exception):
    """Raised by a build spy where a model of the sizes a file falsely claims would be built (nothing allocated)."""


def _spy_builds(monkeypatch, module, attribute: str, refuse=lambda config: False) -> list[dict]:
    """Every config `module.attribute` (a stack's build) is called with; Built where `refuse(config)`."""
    calls, real = [], getattr(module, attribute)

    def build(name, dtype="float32", *args, **config):
        calls.append(config)
        if refuse(config):
            raise Built(f"{name} built with {config}")
        return real(name, dtype, *args, **config)

    monkeypatch.setattr(module, attribute, build)
    return calls


def _port(source: Path, stack, *extra: str) -> list[str]:
    return ["port", str(source), str(source.with_name(f"out{DESTINATION[_stack_name(stack)]}")), *extra]


# ---- a canonical safetensors file's metadata ----


@pytest.mark.parametrize("size", [6000, 100_000])
def test_metadata_sizes_the_arrays_contradict_are_one_line_and_nothing_is_built(stack, tmp_path, capsys, monkeypatch, size):
    bad = _edited(_good(tmp_path), config={"hidden_size": size})
    built = _spy_builds(monkeypatch, stack, "build")
    err = _one_line_error(capsys, _port(bad, stack))
    assert f'{bad}: its metadata\'s "config": hidden_size is {size}, but the arrays show hidden_size=11' in err
    assert built == [] and sorted(path.name for path in tmp_path.iterdir()) == [bad.name, f"{NAME}.safetensors"]


def test_negative_control_without_the_check_the_metadatas_model_is_built(stack, tmp_path, monkeypatch):
    bad = _edited(_good(tmp_path), config={"hidden_size": 6000})
    monkeypatch.setattr(file_metadata.validation, "check_config_fits", lambda *args: None)
    _spy_builds(monkeypatch, stack, "build", refuse=lambda config: config.get("hidden_size") == 6000)
    with pytest.raises(Built, match="hidden_size': 6000"):  # the old port: a model of 6000 built before the arrays
        porting.port(bad, tmp_path / f"out{DESTINATION[_stack_name(stack)]}")


def test_metadata_naming_another_model_is_refused_naming_the_file(stack, tmp_path, capsys):
    bad = _edited(_good(tmp_path), model="reverse_luong_general")  # same options, one weight more
    err = _one_line_error(capsys, _port(bad, stack))
    assert f"{bad}: weights do not fit" in err and "missing keys: W.bias, W.weight" in err
    model = stack.build("reverse_luong_general", "float32", **catalogue.get(NAME).fixture_config)
    with pytest.raises(ValueError) as naive:  # negative control: the strict load alone names the class, not the file
        stack.set_weights(model, {key: np.float32(value) for key, value in fixtures.load_golden(NAME).weights.items()})
    assert "weights do not fit" in str(naive.value) and str(tmp_path) not in str(naive.value)


def test_a_model_field_that_is_a_list_is_one_line(stack, tmp_path, capsys):
    bad = _hand_edited(_good(tmp_path), model=["reverse_luong_dot"])
    err = _one_line_error(capsys, _port(bad, stack))
    assert f"{bad}: its metadata's \"model\" is ['reverse_luong_dot'], no catalogue model's name" in err


def test_an_optimizer_step_in_words_is_one_line(stack, tmp_path, capsys):
    bad = _edited(_good(tmp_path, with_state=True), optimizer_step="three")
    err = _one_line_error(capsys, [*_port(bad, stack), "--with-optimizer"])
    assert f"{bad}: metadata \"optimizer_step\" must be an integer in [0, 2**63), got 'three'" in err


# ---- a .keras file's config.json (Keras's own format: the tf stack) ----


@pytest.fixture
def keras_stack(stack):
    if _stack_name(stack) != "tf":
        pytest.skip("a .keras file is Keras's (the tf stack)")
    return stack


def _good_keras(stack, folder: Path, name: str = NAME) -> Path:
    """A `.keras` file as the suite writes one (tf_impl.files.save_keras, what `rosetta port --to keras` writes)."""
    model = stack.build(name, "float32", **catalogue.get(name).fixture_config)
    stack.set_weights(model, {key: np.float32(value) for key, value in fixtures.load_golden(name).weights.items()})
    path = folder / f"{name}.keras"
    __import__("tf_impl.files", fromlist=["save_keras"]).save_keras(model, path)
    return path


def _keras_edited(path: Path, config: str | None = None, **fields) -> Path:
    """`path` with its config.json edited (`fields` of the model's config; "rosetta_config" entries merged), or
    replaced by the text `config`, rezipped as a user's script would."""
    with zipfile.ZipFile(path) as archive:
        members = {member: archive.read(member) for member in archive.namelist()}
    if config is None:
        held = json.loads(members["config.json"])
        options = {**held["config"]["rosetta_config"], **fields.pop("rosetta_config", {})}
        held["config"].update(fields, rosetta_config=options)
        config = json.dumps(held)
    members["config.json"] = config.encode()
    bad = path.with_name(f"bad-{path.name}")
    with zipfile.ZipFile(bad, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return bad


def _keras_builds(monkeypatch, refuse=lambda config: False) -> list[dict]:
    """The configs Keras's loader builds a catalogue model from (`from_config`, through the registered builder)."""
    from tf_impl.keras_compat import serializable

    module = type("Builder", (), {"build": staticmethod(serializable._BUILD[0])})
    calls = _spy_builds(monkeypatch, module, "build", refuse)
    monkeypatch.setattr(serializable, "_BUILD", [module.build])
    return calls


def test_a_keras_config_whose_sizes_the_arrays_contradict_is_refused_before_keras_builds(
    keras_stack, tmp_path, capsys, monkeypatch
):
    bad = _keras_edited(_good_keras(keras_stack, tmp_path), rosetta_config={"hidden_size": 100_000})
    built = _keras_builds(monkeypatch)
    err = _one_line_error(capsys, ["port", str(bad), str(tmp_path / "out.weights.h5")])
    assert f'{bad}: its config.json\'s "rosetta_config": hidden_size is 100000, but the arrays show hidden_size=11' in err
    assert built == []
    monkeypatch.setattr(file_metadata, "check_keras_config", lambda *args: None)  # negative control: Keras builds it
    _keras_builds(monkeypatch, refuse=lambda config: config.get("hidden_size") == 100_000)
    with pytest.raises(ValueError, match="Built: reverse_luong_dot built with .*'hidden_size': 100000"):
        porting.port(bad, tmp_path / "out.weights.h5")


BAD_KERAS_CONFIGS = {
    "a size in words": ({"rosetta_config": {"hidden_size": "eleven"}}, "must be of type int, got 'eleven'"),
    "an option the model lacks": ({"rosetta_config": {"bogus": 1}}, "names 'bogus', which model reverse_luong_dot does not"),
    "a list as the model": ({"rosetta_model": ["reverse_luong_dot"]}, "\"rosetta_model\" is ['reverse_luong_dot'], no"),
    "another dtype": ({"rosetta_dtype": "float16"}, "\"rosetta_dtype\" is 'float16', not one of float32, float64"),
}


@pytest.mark.parametrize("case", BAD_KERAS_CONFIGS)
def test_a_bad_keras_config_is_one_line_naming_the_file_and_field(keras_stack, tmp_path, capsys, case):
    fields, text = BAD_KERAS_CONFIGS[case]
    bad = _keras_edited(_good_keras(keras_stack, tmp_path), **fields)
    err = _one_line_error(capsys, ["port", str(bad), str(tmp_path / "out.weights.h5")])
    assert str(bad) in err and "config.json's" in err and text in err, err


def test_a_keras_file_of_another_model_is_refused_before_keras_builds(keras_stack, tmp_path, capsys, monkeypatch):
    bad = _keras_edited(_good_keras(keras_stack, tmp_path), rosetta_model="luong_dot")
    built = _keras_builds(monkeypatch)
    err = _one_line_error(capsys, ["port", str(bad), str(tmp_path / "out.weights.h5"), "--model", NAME])
    assert f"{bad}: holds model 'luong_dot', not 'reverse_luong_dot'" in err and built == []


def test_a_keras_file_with_another_layer_count_is_refused_where_keras_drops_one(keras_stack, tmp_path, capsys, monkeypatch):
    bad = _keras_edited(_good_keras(keras_stack, tmp_path, "luong_dot"), rosetta_config={"n_layers": 1})
    err = _one_line_error(capsys, ["port", str(bad), str(tmp_path / "out.safetensors")])
    assert "the archive's arrays are not those of model luong_dot built with n_layers=1" in err and "rnn_1/cell" in err
    monkeypatch.setattr(file_metadata, "check_keras_config", lambda *args: None)  # negative control: a silent port
    report = porting.port(bad, tmp_path / "out.safetensors")
    assert report.ok and report.config["n_layers"] == 1  # Keras loaded one of the file's two layers, and said nothing


def test_a_keras_config_json_that_is_not_json_says_so(keras_stack, tmp_path, capsys, monkeypatch):
    bad = _keras_edited(_good_keras(keras_stack, tmp_path), config="{not json")
    for argv in ([], ["--model", NAME]):
        err = _one_line_error(capsys, ["port", str(bad), str(tmp_path / "out.weights.h5"), *argv])
        assert f"{bad}: its config.json is not JSON (Expecting property name" in err
    naive = file_metadata.keras_config

    def swallowed(path):  # negative control: the reader before, which took a broken config.json for none
        try:
            return naive(path)
        except ValueError:
            return None

    monkeypatch.setattr(file_metadata, "keras_config", swallowed)
    assert "name the catalogue model" in _one_line_error(capsys, ["port", str(bad), str(tmp_path / "out.weights.h5")])


def test_a_bare_layers_keras_file_is_checked_through_its_own_layout(keras_stack, tmp_path, capsys):
    good = _good_keras(keras_stack, tmp_path, "additive_attention")
    assert porting.port(good, tmp_path / "out.weights.h5").ok  # its arrays sit outside a Model's `layer/` in the archive
    bad = _keras_edited(good, rosetta_config={"encoder_dim": 8})
    err = _one_line_error(capsys, ["port", str(bad), str(tmp_path / "other.weights.h5")])
    assert '"rosetta_config": encoder_dim is 8, but the arrays show encoder_dim=7 (W_2.weight has shape (11, 7))' in err
