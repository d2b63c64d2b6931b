"""Trust in what a file says of itself, numpy only: the model and config a canonical safetensors file's metadata
names, checked against its arrays before any model is built from them; a malformed field, Adam's state among them,
one line naming the file and the field; a huge value echoed clipped; an out-of-memory hint naming only the flags
given. Each bad file is a good one written by the suite, then edited as a user would. Each trap with its negative
control (the naive path shows the old failure)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from shared import catalogue, failures
from shared.core import validation
from shared.port import endpoints, porting, stages
from shared.verify import fixtures

NAME = "reverse_luong_dot"  # fixture sizes: vocab_size 19, embedding_dim 7, hidden_size 11
LAYERED = "luong_dot"  # two stacked LSTM layers at fixture sizes


def _good(tmp_path: Path, name: str = NAME, with_state: bool = False) -> Path:
    """A canonical safetensors file as `rosetta port` writes one (its metadata names the model and its config)."""
    spec = catalogue.get(name)
    weights = {key: np.float32(value) for key, value in fixtures.load_golden(name).weights.items()}
    state = None
    if with_state:
        moments = {moment: {key: np.zeros_like(value) for key, value in weights.items()} for moment in ("exp_avg", "exp_avg_sq")}
        state = {"step": 3, **moments, "lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}
    path = tmp_path / f"{name}.safetensors"
    config = catalogue.resolve_config(spec, "float32", spec.fixture_config)
    stages.write_endpoint(endpoints.endpoint(path, destination=True), path, None, name, config, "float32", weights, state)
    return path


def _edited(path: Path, config: dict | None = None, **metadata: str) -> Path:
    """`path` with its metadata edited through the safetensors library (text values, as the format has them):
    `config` entries changed in the config's JSON, other fields replaced."""
    with safe_open(str(path), "np") as opened:
        saved = dict(opened.metadata())
    if config is not None:
        saved["config"] = json.dumps({**json.loads(saved["config"]), **config})
    bad = path.with_name(f"bad-{path.name}")
    save_file(load_file(str(path)), str(bad), {**saved, **metadata})
    return bad


def _hand_edited(path: Path, drop: tuple[str, ...] = (), **metadata) -> Path:
    """`path` with metadata fields set to any JSON (a list, an object) and `drop` removed, as an edit of the header by
    hand gives; the safetensors library writes text values only."""
    blob = path.read_bytes()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    header["__metadata__"] = {key: value for key, value in {**header["__metadata__"], **metadata}.items() if key not in drop}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    bad = path.with_name(f"hand-{path.name}")
    bad.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + size :])
    return bad


def _read(path: Path, model: str | None = None, overrides: dict | None = None, with_optimizer: bool = False):
    """What a port reads of a source before it builds anything: the model's name, then the file (keyed files need
    no stack to be read)."""
    end = endpoints.endpoint(path)
    name = porting._model_name(model, end, end.layout)
    return stages.read_endpoint(end, None, name, None, overrides or {}, with_optimizer)


def _refused(path: Path, **kwargs) -> str:
    with pytest.raises(ValueError) as error:
        _read(path, **kwargs)
    message = str(error.value)
    assert str(path) in message and "\n" not in message and len(message) < 600, message
    return message


# ---- sizes checked against the arrays before a model is built ----


@pytest.mark.parametrize("size", [6000, 100_000, 12])
def test_metadata_sizes_that_contradict_the_arrays_are_refused_before_anything_is_built(tmp_path, size):
    bad = _edited(_good(tmp_path), config={"hidden_size": size})
    message = _refused(bad)
    assert f'its metadata\'s "config": hidden_size is {size}, but the arrays show hidden_size=11' in message
    assert "(encoder.weight_hh_l0 has shape (33, 11))" in message


def test_negative_control_without_the_check_the_metadatas_size_is_what_gets_built(tmp_path, monkeypatch):
    bad = _edited(_good(tmp_path), config={"hidden_size": 100_000})
    monkeypatch.setattr(validation, "check_config_fits", lambda *args: None)
    assert _read(bad).config["hidden_size"] == 100_000  # the old path: a model of this size built, then the arrays refused


def test_a_layer_count_the_arrays_do_not_stack_is_refused(tmp_path, monkeypatch):
    bad = _edited(_good(tmp_path, LAYERED), config={"n_layers": 100_000})
    message = _refused(bad)
    assert "n_layers is 100000, but the arrays stack decoder.lstm 2, encoder.lstm 2 layers" in message
    monkeypatch.setattr(validation, "check_config_fits", lambda *args: None)  # negative control: 100,000 LSTM layers built
    assert _read(bad).config["n_layers"] == 100_000


def test_a_good_file_reads_with_the_sizes_its_arrays_show(tmp_path):
    found = _read(_good(tmp_path))
    assert {key: found.config[key] for key in ("vocab_size", "embedding_dim", "hidden_size")} == {
        "vocab_size": 19,
        "embedding_dim": 7,
        "hidden_size": 11,
    }


# ---- the model a file names ----


def test_a_model_field_that_is_a_list_is_one_line_naming_the_file_and_field(tmp_path):
    bad = _hand_edited(_good(tmp_path), model=["reverse_luong_dot"])
    assert "its metadata's \"model\" is ['reverse_luong_dot'], no catalogue model's name" in _refused(bad)
    assert "holds model ['reverse_luong_dot'], not 'reverse_luong_dot'" in _refused(bad, model=NAME)
    with pytest.raises(TypeError, match="unhashable"):  # negative control: the old path looked the list up as a name
        catalogue.get(["reverse_luong_dot"])


def test_metadata_naming_another_model_names_the_file(tmp_path, monkeypatch):
    good = _good(tmp_path)
    message = _refused(_edited(good, model="tf_tutorial"))
    assert "its metadata's \"config\" names 'hidden_size', 'vocab_size', which model tf_tutorial does not take" in message
    no_config = _hand_edited(good, drop=("config",), model="tf_tutorial")
    message = _refused(no_config)
    assert "its metadata's \"model\" is for model tf_tutorial, but the arrays are another model's" in message
    assert "encoder.embedding.weight (which shows its vocab_inp_size) is not among them" in message
    monkeypatch.setattr(validation, "check_config_fits", lambda *args: None)  # negative control: the catalogue's default
    assert _read(no_config).config["units"] == catalogue.get("tf_tutorial").config["units"]  # tf_tutorial was built


# ---- every malformed field: one line naming the file and the field ----

BAD_CONFIGS = {
    "a size in words": ({"hidden_size": "eleven"}, "config hidden_size must be of type int, got 'eleven'"),
    "an option the model lacks": ({"bogus": 3}, "names 'bogus', which model reverse_luong_dot does not take"),
    "a negative size": ({"embedding_dim": -7}, "config embedding_dim must be a positive integer, got -7"),
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_a_bad_metadata_config_is_one_line_naming_the_file_and_field(tmp_path, case):
    config, text = BAD_CONFIGS[case]
    message = _refused(_edited(_good(tmp_path), config=config))
    assert 'its metadata\'s "config"' in message and text in message
    with pytest.raises(ValueError) as naive:  # negative control: the catalogue's own check names no file
        catalogue.resolve_config(catalogue.get(NAME), "float32", config)
    assert str(tmp_path) not in str(naive.value)


@pytest.mark.parametrize("config", ["{not json", {"hidden_size": 11}, ["hidden_size"]], ids=["not-json", "object", "list"])
def test_a_config_that_is_no_json_text_is_one_line(tmp_path, config):
    bad = _hand_edited(_good(tmp_path), config=config)
    assert "its metadata's \"config\" is not JSON text of reverse_luong_dot's options" in _refused(bad)


BAD_OPTIMIZER_FIELDS = {
    "a step in words": ({"optimizer_step": "three"}, "\"optimizer_step\" must be an integer in [0, 2**63), got 'three'"),
    "a negative step": ({"optimizer_step": "-1"}, '"optimizer_step" must be an integer in [0, 2**63)'),
    "a step past int64": ({"optimizer_step": str(2**63)}, '"optimizer_step" must be an integer in [0, 2**63)'),
    "betas in letters": ({"optimizer_betas": "a,b"}, '"optimizer_betas" must be two numbers in [0, 1)'),
    "one beta": ({"optimizer_betas": "0.9"}, '"optimizer_betas" must be two numbers in [0, 1)'),
    "an infinite lr": ({"optimizer_lr": "inf"}, "\"optimizer_lr\" must be a finite number, got 'inf'"),
}


@pytest.mark.parametrize("case", BAD_OPTIMIZER_FIELDS)
def test_a_bad_optimizer_field_is_one_line_naming_the_file_and_field(tmp_path, case):
    fields, text = BAD_OPTIMIZER_FIELDS[case]
    message = _refused(_edited(_good(tmp_path, with_state=True), **fields), with_optimizer=True)
    assert f"metadata {text}" in message, message


def test_a_step_that_is_no_text_is_one_line_and_the_naive_parse_named_no_file(tmp_path):
    bad = _hand_edited(_good(tmp_path, with_state=True), optimizer_step=[3])
    assert 'metadata "optimizer_step" must be an integer in [0, 2**63), got [3]' in _refused(bad, with_optimizer=True)
    with pytest.raises(ValueError, match="invalid literal for int") as naive:  # negative control: the old int(...)
        int("three")
    assert "optimizer_step" not in str(naive.value)


def test_a_good_optimizer_state_reads_back(tmp_path):
    state = _read(_good(tmp_path, with_state=True), with_optimizer=True).state
    assert (state["step"], state["lr"], state["betas"], state["eps"]) == (3, 1e-3, (0.9, 0.999), 1e-8)


# ---- a huge value is echoed clipped ----


def test_a_megabyte_model_name_is_echoed_clipped(tmp_path):
    huge = "m" * 1_000_000
    message = _refused(_edited(_good(tmp_path), model=huge))
    assert "characters cut]" in message and len(message) < 400
    with pytest.raises(ValueError) as naive:  # negative control: the catalogue echoes the whole name
        catalogue.get(huge)
    assert len(str(naive.value)) > 1_000_000


def test_every_error_line_is_clipped_by_describe_and_a_value_by_shown():
    line = failures.describe(ValueError(f"unknown model {'m' * 1_000_000!r}; the catalogue holds: a, b"))
    assert len(line) <= failures.LINE_LIMIT and line.startswith("unknown model 'mmm") and line.endswith("holds: a, b")
    assert failures.shown("dot") == "'dot'" and failures.shown(["a"]) == "['a']"
    long = failures.shown("x\n" * 1000)
    assert len(long) <= failures.ECHO_LIMIT and "\n" not in long and "characters cut" in long
    assert len(failures.describe(ValueError("k" * 100))) == 100  # a short line is left whole


# ---- out of memory: the hint names only the flags given ----


def _suggests_a_flag_not_given(line: str, argv: list[str]) -> bool:
    return any(flag in line and flag not in argv for flag in failures.MEMORY_FLAGS)


def test_out_of_memory_names_only_the_flags_given():
    port = ["port", "model.safetensors", "out.pt"]
    line = failures.describe(MemoryError(), port)
    assert line.startswith("out of memory: MemoryError") and not _suggests_a_flag_not_given(line, port)
    assert "the sizes and batches asked need more" in line
    if failures.available_memory() is not None:
        assert "GiB of memory is free here" in line
    train = ["train", NAME, "--set", "hidden_size=4096", "--batch-size", "512"]
    assert "a smaller --set size or --batch-size?" in failures.describe(MemoryError(), train)
    assert "a smaller --batch-size?" in failures.describe(MemoryError(), ["train", NAME, "--batch-size=512"])
    old = "out of memory: MemoryError  (a smaller --set size or --batch-size?)"  # negative control: the hint before
    assert _suggests_a_flag_not_given(old, port)


def test_an_accelerators_out_of_memory_is_not_given_the_hosts_free_memory():
    line = failures.describe(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), ["port", "a", "b"])
    assert "free here" not in line and "the sizes and batches asked need more" in line
