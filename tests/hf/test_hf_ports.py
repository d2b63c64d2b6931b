"""`rosetta hf-ports` (shared/tools/hf_ports.py) on TINY configs passed in (never the published sizes): a model's
record as a user's folder is built, ported both ways and given to keras-hub; resume; the memory skip; a step's
child process failing into one error line. Negative controls: resuming by name alone keeps a model whose config
changed; an estimate counting each value once in float32 lets through a model whose float64 verification would not
fit."""

from __future__ import annotations

import json

import pytest

from shared.tools import hf_ports
from tests.zoo import hf_models as zoo

BART = zoo.config("bart").to_dict() | {"num_hidden_layers": zoo.LAYERS}  # as bart-base's published config names it
MARIAN = zoo.config("marian").to_dict()


def _in_process(calls: list):
    """Each step run here (not in a child process), its name recorded."""

    def run(step, request):
        calls.append(step)
        return hf_ports.run_step(step, request)

    return run


def test_a_tiny_marian_is_built_ported_both_ways_and_given_to_keras_hub(tmp_path):
    calls: list = []
    output = tmp_path / "hf_ports.json"
    hf_ports.measure({"tiny-marian": ("none", MARIAN)}, output, tmp_path / "work", memory_mb=1e9, notes=("tiny",),
                     runner=_in_process(calls))  # fmt: skip
    assert calls == ["build", "to_keras", "to_hf", "peer"]
    data = json.loads(output.read_text())
    assert data["schema"] == hf_ports.SCHEMA and data["notes"] == ["tiny"] and data["environment"]["threads"] >= 1
    record = data["models"]["tiny-marian"]
    print(json.dumps(record, indent=1))
    assert record["status"] == "measured" and record["reason"] is None
    assert record["build"]["parameters"] > 0 and record["build"]["safetensors_bytes"] > 0
    for step in ("to_keras", "to_hf"):
        found = record["directions"][step]
        assert found["ok"] and found["wall_s"] > 0 and found["peak_rss_mb"] >= found["rss_before_mb"] > 0
        assert found["output_bytes"] > 0 and [check["dtype"] for check in found["checks"]] == ["float64", "float32"]
        assert max(found["checks"][0]["max_abs"].values()) < 1e-12
        assert set(found["checks"][1]["max_abs"]) >= {"encoder", "decoder", "logits"}  # each output the port compares
    (as_written,) = record["peer"]
    assert as_written["loads"] is False and "marian" in as_written["error"]  # keras-hub 0.32 has no Marian converter
    assert not (tmp_path / "work" / "tiny-marian").exists()  # the folders are removed once measured


def _canned(calls: list):
    """A runner that returns what each step would, without frameworks."""
    port = {"ok": True, "wall_s": 1.0, "rss_before_mb": 1.0, "peak_rss_mb": 2.0, "checks": [], "error": None}
    answers = {"build": {"parameters": 1, "safetensors_bytes": 4}, "to_keras": port, "to_hf": port,
               "peer": {"records": [{"folder": "as written", "loads": False, "error": "KeyError: x"}]}}  # fmt: skip

    def run(step, request):
        calls.append(step)
        return answers[step]

    return run


def _refuse(step, request):
    raise AssertionError(f"{step} run again: the measured model was not kept")


def test_a_rerun_keeps_what_it_measured_and_remeasures_a_changed_config(tmp_path):
    output, calls = tmp_path / "hf_ports.json", []
    hf_ports.measure({"a": ("x", MARIAN), "b": ("y", BART)}, output, tmp_path / "work", memory_mb=1e9, runner=_canned(calls))
    assert calls == ["build", "to_keras", "to_hf", "peer"] * 2
    hf_ports.measure({"a": ("x", MARIAN), "b": ("y", BART)}, output, tmp_path / "work", memory_mb=1e9, runner=_refuse)
    changed = {"a": ("x", MARIAN | {"d_model": 32})}
    calls.clear()
    hf_ports.measure(changed, output, tmp_path / "work", memory_mb=1e9, runner=_canned(calls))
    assert calls == ["build", "to_keras", "to_hf", "peer"]  # the changed config measured afresh, b kept
    assert set(json.loads(output.read_text())["models"]) == {"a", "b"}
    # negative control: kept by name alone, the changed model would not have been measured again
    previous = json.loads(output.read_text())["models"]
    assert "a" in previous and previous["a"]["config_sha"] != hf_ports.config_sha(MARIAN)


def test_a_failed_step_ends_the_record_and_is_retried_on_resume(tmp_path):
    output, calls = tmp_path / "hf_ports.json", []

    def failing(step, request):
        calls.append(step)
        return {"error": "exit 137: Killed"} if step == "to_hf" else _canned([])(step, request)

    hf_ports.measure({"a": ("x", MARIAN)}, output, tmp_path / "work", memory_mb=1e9, runner=failing)
    record = json.loads(output.read_text())["models"]["a"]
    assert calls == ["build", "to_keras", "to_hf", "peer"] and record["status"] == "failed"
    assert record["reason"] == ".keras -> HF folder: exit 137: Killed" and record["peer"][0]["error"] == "KeyError: x"
    calls.clear()
    hf_ports.measure({"a": ("x", MARIAN)}, output, tmp_path / "work", memory_mb=1e9, runner=_canned(calls))
    assert calls == ["build", "to_keras", "to_hf", "peer"]


def test_a_model_whose_verification_would_not_fit_is_skipped_with_the_reason(tmp_path):
    output, calls = tmp_path / "hf_ports.json", []
    values = hf_ports.state_dict_values(BART)
    naive_mb = hf_ports.FRAMEWORKS_MB + values * 4 / 2**20  # each value once, in float32: the file's size
    ours_mb = hf_ports.estimate_peak_mb(BART)
    memory = (naive_mb + ours_mb) / 2
    assert naive_mb < memory < ours_mb  # negative control: the naive estimate would have let it through
    hf_ports.measure({"big": ("y", BART)}, output, tmp_path / "work", memory_mb=memory, runner=_canned(calls))
    record = json.loads(output.read_text())["models"]["big"]
    assert calls == ["peer"] and record["status"] == "skipped" and record["directions"] == {}
    assert f"{values:,} state_dict values" in record["reason"] and "GiB available" in record["reason"]
    assert record["peer"][0]["error"] == "KeyError: x"
    hf_ports.measure({"big": ("y", BART)}, output, tmp_path / "work", memory_mb=memory, runner=_refuse)  # still too large
    calls.clear()
    hf_ports.measure({"big": ("y", BART)}, output, tmp_path / "work", memory_mb=ours_mb + 1, runner=_canned(calls))
    assert calls == ["build", "to_keras", "to_hf", "peer"]  # where it now fits, it is measured
    assert json.loads(output.read_text())["models"]["big"]["status"] == "measured"


def test_keras_hub_also_gets_bart_with_num_hidden_layers_as_published(tmp_path):
    requests: dict = {}

    def run(step, request):
        requests[step] = request
        return _canned([])(step, request)

    hf_ports.measure({"b": ("y", BART), "m": ("x", MARIAN)}, tmp_path / "o.json", tmp_path / "work", memory_mb=1e9,
                     runner=run)  # fmt: skip
    assert list(requests["peer"]["folders"]) == ["as written"]  # the last model's, Marian: keras-hub has no converter
    hf_ports.measure({"b": ("y", BART)}, tmp_path / "p.json", tmp_path / "work", memory_mb=1e9, runner=run)
    assert list(requests["peer"]["folders"]) == ["as written", "num_hidden_layers as published"]


def test_an_untied_published_config_is_built_with_its_own_lm_head(tmp_path):
    """transformers 5's T5Config ties every T5 it builds and writes tie_word_embeddings true; flan-t5's checkpoint holds
    lm_head.weight apart from shared, its config.json false. Negative control: built as transformers builds it, the
    folder holds the tied matrix once."""
    from shared.io import safetensors_io

    config = zoo.config("t5_v1_1").to_dict()
    for name, untie in (("untied", False), ("as built", True)):
        request = {"config": config | {"tie_word_embeddings": untie}, "folder": str(tmp_path / name)}
        found = hf_ports.run_step("build", request)
        stored = safetensors_io.load(tmp_path / name / "model.safetensors")[0]
        assert found["untied_lm_head"] is (untie is False) and ("lm_head.weight" in stored) is (untie is False)
        written = json.loads((tmp_path / name / "config.json").read_text())["tie_word_embeddings"]
        assert written is untie  # the published field put back (transformers 5 writes true)
        assert found["config_restored"] == ({"tie_word_embeddings": False} if untie is False else {})
        if untie is False:
            assert not (stored["lm_head.weight"] == stored["shared.weight"]).any()


def test_a_child_that_fails_is_one_error_line(tmp_path):
    found = hf_ports.run_child("nope", {"folder": str(tmp_path / "m" / "hf")}, threads=1)
    assert found["error"].startswith("exit 1: ValueError: step 'nope': one of build, to_keras, to_hf, peer")


def test_unknown_model_names_are_one_error():
    with pytest.raises(ValueError, match=r"--models: unknown \['opus'\]; known: opus-mt-en-de"):
        hf_ports.default_models(["opus"])
