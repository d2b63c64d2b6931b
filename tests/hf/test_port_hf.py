"""`rosetta port` for Hugging Face models (shared/port/pretrained.py), tried as a user does: a tiny random model saved by
`save_pretrained` is the user's folder; each port's printed load line is run as printed, and what it loads is compared
with the user's own HF model (transformers, eager attention), not with our Keras twin.

Directions: folder -> .keras -> folder (from_pretrained: no missing or unexpected key, the tokenizer files and
generation_config.json carried), folder -> .weights.h5 / .pt / .safetensors and back with --config. Negative controls:
a writer that drops final_logits_bias, or swaps q and k, is caught by the mapping check and leaves nothing written;
every bad request is one error naming the file or the flag."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from shared import cli
from shared.hf import folders
from shared.port import porting, pretrained
from shared.port.pretrained_formats import PRETRAINED
from tests.zoo import hf_models as zoo

# the port's code is one for every family (tf_impl/hf/families.py dispatches); each family's model is proven in its own
# tests. Round trips here: Marian with its own target vocabulary, mBART (BART's code, pre-norm), and an untied Flan-T5
# (below); marian: the other tests
PORTED = ("marian_separate", "mbart")


def _user_folder(tmp_path, family: str, name: str = "user") -> tuple[torch.nn.Module, object]:
    """A user's folder: save_pretrained of a tiny random model, with a tokenizer file and a generation config."""
    model = zoo.model(family)
    folder = tmp_path / name
    model.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 32}))
    return model, folder


def _user_logits(model, batch: dict) -> np.ndarray:
    return pretrained.families("torch").run(model, batch)["logits"]


def _loaded_as_printed(report) -> object:
    """Run the port's printed load line; the model it binds."""
    scope: dict = {}
    exec(report.load, scope)  # the line a user copies
    return scope["model"]


def _largest_relative(actual, expected) -> float:
    return float(np.abs(np.asarray(actual, np.float64) - expected).max() / max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("family", PORTED)
def test_a_folder_ports_to_keras_and_back_to_a_folder_hf_loads(tmp_path, family):
    model, folder = _user_folder(tmp_path, family)
    report = porting.port(folder, tmp_path / "model.keras")
    assert report.ok, porting.render(report)
    batch = pretrained.verification_batch(model.config.to_dict())
    keras_model = _loaded_as_printed(report)
    assert _largest_relative(pretrained.families("tf").run(keras_model, batch)["logits"], _user_logits(model, batch)) < 1e-5
    back = porting.port(tmp_path / "model.keras", tmp_path / "back", to="hf", tokenizer=str(folder))
    assert back.ok, porting.render(back)
    reloaded = _loaded_as_printed(back)
    assert _largest_relative(_user_logits(reloaded, batch), _user_logits(model, batch)) < 1e-5
    assert (tmp_path / "back" / "tokenizer_config.json").read_text() == (folder / "tokenizer_config.json").read_text()
    assert json.loads((tmp_path / "back" / "generation_config.json").read_text())["decoder_start_token_id"] == (
        model.config.decoder_start_token_id
    )


def test_the_command_line_ports_a_folder_and_prints_the_checks(tmp_path, capsys):
    _, folder = _user_folder(tmp_path, "marian")
    assert cli.main(["port", str(folder), str(tmp_path / "out.keras")]) == 0
    printed = capsys.readouterr().out
    assert "Hugging Face marian" in printed and "the mapping" in printed and "load it:" in printed


@pytest.mark.parametrize("suffix", [".weights.h5", ".pt", ".safetensors"])
def test_files_that_name_no_architecture_port_with_the_config(tmp_path, suffix):
    model, folder = _user_folder(tmp_path, "marian")
    written = tmp_path / f"model{suffix}"
    report = porting.port(folder, written)
    assert report.ok, porting.render(report)
    batch = pretrained.verification_batch(model.config.to_dict())
    loaded = _loaded_as_printed(report)
    stack = PRETRAINED[report.destination.format.name].stack
    assert _largest_relative(pretrained.families(stack).run(loaded, batch)["logits"], _user_logits(model, batch)) < 1e-5
    with pytest.raises(ValueError, match="names no architecture: pass --config"):
        porting.port(written, tmp_path / "again", to="hf")
    if suffix != ".safetensors":  # read as .pt is (one reader of HF's state_dict for both)
        again = porting.port(written, tmp_path / "again", to="hf", config=str(folder / "config.json"))
        assert again.ok, porting.render(again)


def test_a_float64_port_is_decided_in_float64_against_the_users_model(tmp_path):
    model, folder = _user_folder(tmp_path, "marian")
    report = porting.port(folder, tmp_path / "model.keras", dtype="float64")
    assert report.ok and report.dtype == "float64"
    users = report.checks[1]
    assert users.dtype == "float32"  # the user's own folder is float32: the source as its user loads it
    assert all(component.max_abs < 1e-5 for component in report.checks[0].components)


@pytest.mark.parametrize("broken", ["final_logits_bias dropped", "q and k swapped"])
def test_a_wrong_writer_is_caught_and_leaves_nothing(tmp_path, monkeypatch, broken):
    _, folder = _user_folder(tmp_path, "marian")
    io = PRETRAINED["keras"]
    original = io.write

    def naive(path, found, dtype, source):
        arrays = dict(found.arrays)
        if broken == "final_logits_bias dropped":
            arrays["final_logits_bias"] = np.zeros_like(arrays["final_logits_bias"])
        else:
            q, k = "model.encoder.layers.0.self_attn.q_proj.weight", "model.encoder.layers.0.self_attn.k_proj.weight"
            arrays[q], arrays[k] = arrays[k], arrays[q]
        original(path, pretrained.Pretrained(found.config, arrays), dtype, source)

    monkeypatch.setattr(io, "write", naive)
    report = porting.port(folder, tmp_path / "model.keras")
    assert not report.ok and "not ported" in porting.render(report)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["user"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"model": "reverse_bahdanau"}, "--model: for the catalogue's models"),
        ({"with_optimizer": True}, "--with-optimizer: for the catalogue's models"),
        ({"to": "tf_checkpoint"}, "not a TensorFlow checkpoint"),
    ],
)
def test_catalogue_flags_and_other_formats_are_refused_by_name(tmp_path, arguments, message):
    _, folder = _user_folder(tmp_path, "marian")
    with pytest.raises(ValueError, match=message):
        porting.port(folder, tmp_path / ("checkpoint" if "to" in arguments else "out.keras"), **arguments)


def test_a_bad_folder_is_one_error_naming_its_file(tmp_path):
    _, folder = _user_folder(tmp_path, "marian")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "d_model": 24}))
    with pytest.raises(ValueError, match=r"model\.safetensors: not the marian model its config\.json describes"):
        porting.port(folder, tmp_path / "out.keras")
    assert not (tmp_path / "out.keras").exists()


def test_transformers_is_the_pinned_version():
    assert transformers.__version__ == "5.23.0"


def _untied_t5(folder) -> torch.nn.Module:
    """A Flan-T5 as transformers 5 saves it after fine-tuning: config.json says tied, the file holds lm_head.weight of
    its own values; from_pretrained loads it untied."""
    model = zoo.model("t5_v1_1")
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    model.save_pretrained(folder)
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is True
    assert not torch.equal(loaded.lm_head.weight, loaded.shared.weight)
    return loaded


def test_a_t5_saved_untied_ports_as_from_pretrained_loads_it(tmp_path):
    loaded = _untied_t5(tmp_path / "flan")
    report = porting.port(tmp_path / "flan", tmp_path / "flan.keras")
    assert report.ok, porting.render(report)
    back = porting.port(tmp_path / "flan.keras", tmp_path / "back", to="hf")
    assert back.ok, porting.render(back)
    batch = pretrained.verification_batch(loaded.config.to_dict())
    assert _largest_relative(_user_logits(_loaded_as_printed(back), batch), _user_logits(loaded, batch)) < 1e-5


def test_negative_control_the_untied_t5_read_by_its_config_alone_is_refused(tmp_path, monkeypatch):
    _untied_t5(tmp_path / "flan")
    monkeypatch.setattr(folders, "untied_config", lambda stored, config, model_type: config)
    with pytest.raises(ValueError, match="tied keys disagree"):
        porting.port(tmp_path / "flan", tmp_path / "flan.keras")
