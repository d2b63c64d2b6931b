"""Hugging Face folders read and written exactly (shared/hf/folders.py): for each family (Marian shared and with a
separate decoder vocabulary, BART, mBART, T5 v1.0 and v1.1), a tiny random model saved by `save_pretrained` as one
safetensors file, sharded, and as pytorch_model.bin: `read_folder` gives its state_dict bit for bit (ties resolved,
Marian's sinusoid rebuilt), `write_folder` gives a folder `from_pretrained` loads with no missing or unexpected key
and the same logits bit for bit, tied matrices written once, tokenizer files carried. Negative controls: a naive read
misses the tied keys, an interleaved sinusoid differs, a deleted shard / unknown model_type / mis-shaped array /
wrong dtype / missing file is one error naming the file, and a failed write leaves no folder."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import transformers

from shared.hf import folders
from shared.hf.folders import read_folder, write_folder
from shared.io import safetensors_io
from tests.zoo import hf_models as zoo

TIED = {"lm_head.weight", "model.decoder.embed_tokens.weight", "model.encoder.embed_tokens.weight"}  # the keys


def _saved(family: str, folder, storage: str = "safetensors") -> torch.nn.Module:
    """A tiny `family` model saved to `folder` by save_pretrained: one file, sharded, or as pytorch_model.bin (the
    keys save_pretrained writes; transformers 5 no longer writes .bin, so torch.save writes them as version 4 did)."""
    model = zoo.model(family)
    model.save_pretrained(folder, max_shard_size="8KB" if storage == "sharded" else "5GB")
    if storage == "bin":
        kept = safetensors_io.load(folder / folders.SAFETENSORS)[0].keys()
        torch.save({key: value for key, value in model.state_dict().items() if key in kept}, folder / folders.BIN)
        os.remove(folder / folders.SAFETENSORS)
    return model


def _loaded(folder) -> tuple[torch.nn.Module, dict]:
    model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        folder, output_loading_info=True, attn_implementation="eager"
    )
    return model.eval(), info


def _bitwise(arrays: dict[str, np.ndarray], state: dict[str, torch.Tensor]) -> list[str]:
    """The keys whose arrays differ from the state_dict's in value, shape or dtype (or are missing on one side)."""
    keys = set(arrays) | set(state)
    return sorted(key for key in keys if key not in arrays or key not in state or not _same(arrays[key], state[key].numpy()))


def _same(first: np.ndarray, second: np.ndarray) -> bool:
    return first.dtype == second.dtype and first.shape == second.shape and np.array_equal(first, second)


@pytest.mark.parametrize("storage", ["safetensors", "sharded", "bin"])
@pytest.mark.parametrize("family", zoo.FAMILIES)
def test_a_folder_reads_as_the_state_dict_and_writes_back_exactly(tmp_path, family, storage):
    source, out = tmp_path / "source", tmp_path / "out"
    model = _saved(family, source, storage)
    if storage == "sharded":
        assert (source / folders.SAFE_INDEX).is_file() and len(list(source.glob("model-*.safetensors"))) > 1
    read = read_folder(source)
    assert read.model_type == family.split("_")[0]
    assert _bitwise(read.arrays, model.state_dict()) == []
    write_folder(out, read.config, read.arrays, source=source)
    loaded, info = _loaded(out)
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())
    assert torch.equal(zoo.logits(loaded, family), zoo.logits(model, family))
    assert _bitwise(read_folder(out).arrays, loaded.state_dict()) == []


@pytest.mark.parametrize("family", zoo.FAMILIES)
def test_tied_matrices_are_written_once_as_save_pretrained_writes_them(tmp_path, family):
    _saved(family, tmp_path / "source")
    read = read_folder(tmp_path / "source")
    write_folder(tmp_path / "out", read.config, read.arrays)
    ours = safetensors_io.load(tmp_path / "out" / folders.SAFETENSORS)[0]
    theirs = safetensors_io.load(tmp_path / "source" / folders.SAFETENSORS)[0]
    assert sorted(ours) == sorted(theirs) and all(_same(ours[key], theirs[key]) for key in theirs)
    derived = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert derived == json.loads((tmp_path / "source" / "generation_config.json").read_text())


def test_untied_t5_v1_1_as_version_4_wrote_it_keeps_its_own_lm_head(tmp_path):
    """A T5 v1.1 checkpoint with lm_head apart from shared (tie_word_embeddings False in config.json): both written, and
    from_pretrained leaves them untied (both present), so the logits use lm_head's own matrix."""
    _saved("t5_v1_1", tmp_path / "source")
    read = read_folder(tmp_path / "source")
    arrays = read.arrays | {"lm_head.weight": np.random.default_rng(0).normal(size=(zoo.VOCAB, zoo.MODEL_DIM)).astype(np.float32)}
    write_folder(tmp_path / "out", read.config | {"tie_word_embeddings": False}, arrays)
    assert "lm_head.weight" in safetensors_io.load(tmp_path / "out" / folders.SAFETENSORS)[0]
    loaded, info = _loaded(tmp_path / "out")
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    assert np.array_equal(loaded.lm_head.weight.detach().numpy(), arrays["lm_head.weight"])
    assert not loaded.config.scale_decoder_outputs  # v1.1's logits are not rescaled by d_model ** -0.5
    assert _bitwise(read_folder(tmp_path / "out").arrays, loaded.state_dict()) == []


def test_the_sources_tokenizer_and_generation_files_are_carried(tmp_path):
    source = tmp_path / "source"
    _saved("marian", source)
    files = {"source.spm": b"\x00spm-src", "target.spm": b"\x00spm-tgt", "vocab.json": b'{"a": 0}',
             "tokenizer_config.json": b'{"model_max_length": 32}', "special_tokens_map.json": b"{}"}  # fmt: skip
    for name, blob in files.items():
        (source / name).write_bytes(blob)
    (source / "notes.txt").write_text("not a tokenizer file")
    generation = json.loads((source / "generation_config.json").read_text()) | {"num_beams": 4, "max_length": 64}
    (source / "generation_config.json").write_text(json.dumps(generation))
    read = read_folder(source)
    write_folder(tmp_path / "out", read.config, read.arrays, source=source)
    assert {name: (tmp_path / "out" / name).read_bytes() for name in files} == files
    assert not (tmp_path / "out" / "notes.txt").exists()
    assert json.loads((tmp_path / "out" / "generation_config.json").read_text()) == generation
    assert sorted(os.listdir(tmp_path)) == ["out", "source"]  # the staging folder placed whole, nothing left beside


@pytest.mark.parametrize("family", ["marian", "bart", "mbart"])
def test_negative_control_a_naive_read_misses_the_tied_keys(tmp_path, family):
    model = _saved(family, tmp_path / "source")
    naive, _ = folders.read_weights(tmp_path / "source")
    missing = set(model.state_dict()) - set(naive)
    positions = set(folders.MARIAN_POSITIONS) if family == "marian" else set()
    assert missing == TIED | positions
    with pytest.raises(ValueError, match="missing .*lm_head.weight"):
        folders.check_arrays(naive, read_folder(tmp_path / "source").config, family, "naive")


def test_negative_control_an_interleaved_sinusoid_differs_from_marians(tmp_path):
    model = _saved("marian", tmp_path / "source")
    table = model.state_dict()["model.encoder.embed_positions.weight"].numpy()  # [P, D]
    assert np.array_equal(folders.marian_sinusoid(zoo.POSITIONS, zoo.MODEL_DIM, np.float32), table)
    angles = np.arange(zoo.POSITIONS)[:, None] / np.power(10000, 2 * (np.arange(zoo.MODEL_DIM) // 2) / zoo.MODEL_DIM)  # [P, D]
    interleaved = np.where(np.arange(zoo.MODEL_DIM) % 2 == 0, np.sin(angles), np.cos(angles)).astype(np.float32)  # [P, D]
    assert not np.allclose(interleaved, table, atol=1e-3)
    in_float32 = folders.marian_sinusoid(zoo.POSITIONS, zoo.MODEL_DIM, np.float64)  # [P, D] float32 first, as HF
    assert np.array_equal(in_float32, table.astype(np.float64))
    assert not np.array_equal(np.sin(angles[:, 0::2]), in_float32[:, : zoo.MODEL_DIM // 2])  # float64 throughout differs


def _break(folder, break_it) -> None:
    """Rewrite model.safetensors with `break_it` applied to its arrays."""
    arrays = safetensors_io.load(folder / folders.SAFETENSORS)[0]
    (folder / folders.SAFETENSORS).write_bytes(safetensors_io.dumps(break_it(arrays), {"format": "pt"}))


FC1 = "model.encoder.layers.0.fc1.weight"
BAD_FOLDERS = {  # name -> (how the saved bart folder is broken, the file named, what the error says)
    "a shard deleted": ("shard", "model-00002-of-", "shard missing"),
    "an unknown model_type": ("model_type", "config.json", "model_type is 'bert'; known types: marian, bart, mbart, t5, mt5"),
    "a mis-shaped array": ("shape", "model.safetensors", f"{FC1} has shape \\(16, 24\\), the config gives \\(24, 16\\)"),
    "a float64 array": ("dtype", "model.safetensors", f"{FC1} has dtype float64, the config gives float32"),
    "no config.json": ("no config", "config.json", "no config.json"),
    "config.json not JSON": ("not json", "config.json", "not JSON"),
    "no weights file": ("no weights", "source", "no weights file"),
}


def _broken(folder, how: str) -> None:
    if how == "shard":
        os.remove(next(folder.glob("model-00002-of-*.safetensors")))
    elif how == "model_type":
        (folder / "config.json").write_text(json.dumps(json.loads((folder / "config.json").read_text()) | {"model_type": "bert"}))
    elif how == "shape":
        _break(folder, lambda arrays: arrays | {FC1: np.ascontiguousarray(arrays[FC1].T)})
    elif how == "dtype":
        _break(folder, lambda arrays: arrays | {FC1: arrays[FC1].astype(np.float64)})
    elif how == "no config":
        os.remove(folder / "config.json")
    elif how == "not json":
        (folder / "config.json").write_text("{model_type: bart")
    else:
        os.remove(folder / folders.SAFETENSORS)


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_negative_control_a_bad_folder_is_one_error_naming_the_file(tmp_path, case):
    how, file, says = BAD_FOLDERS[case]
    folder = tmp_path / "source"
    _saved("bart", folder, "sharded" if how == "shard" else "safetensors")
    _broken(folder, how)
    with pytest.raises(ValueError, match=f"{file}.*{says}") as caught:
        read_folder(folder)
    assert str(tmp_path) in str(caught.value) and "\n" not in str(caught.value)


def test_negative_control_a_failed_write_leaves_no_folder(tmp_path):
    _saved("mbart", tmp_path / "source")
    read = read_folder(tmp_path / "source")
    arrays = read.arrays | {FC1: read.arrays[FC1].T}
    with pytest.raises(ValueError, match=f"arrays given to write_folder: .*{FC1} has shape"):
        write_folder(tmp_path / "out", read.config, arrays)
    with pytest.raises(ValueError, match="config \\(given to write_folder\\): field model_type is 'gpt2'"):
        write_folder(tmp_path / "out", read.config | {"model_type": "gpt2"}, read.arrays)
    assert sorted(os.listdir(tmp_path)) == ["source"]
