"""Our generation loop (shared/generation, run eagerly by torch_impl/generation.py) on Hugging Face's own model and
cache gives the ids of transformers 5.23's `generate` on 16 sources of mixed lengths, greedy and beam search, with
every supported GenerationConfig field at least once (a tiny Marian trained to reverse its source, whose hypotheses
end at different lengths), and greedy and beam search on every family of tests/zoo/hf_models.py: this proves the
algorithm and its settings; tests/hf/test_generation_keras.py proves the Keras models running it.

Negative controls: a search that ignores `length_penalty`, and a top-k that takes the later index first among
equal scores where HF's forced tokens make ties, each give other ids.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from shared.generation import search, settings
from tests.zoo import hf_models
from torch_impl import generation

SOURCES = 16

# name -> overrides of HF's generate; together they set every field the generator supports
CASES = {
    "greedy": {"max_new_tokens": 12},
    "beam": {"num_beams": 4, "max_new_tokens": 12},
    "length_penalty_early": {"num_beams": 4, "max_new_tokens": 14, "length_penalty": 2.0, "no_repeat_ngram_size": 2,
                             "early_stopping": True},
    "never_returning_two": {"num_beams": 3, "max_length": 12, "early_stopping": "never", "num_return_sequences": 2,
                            "repetition_penalty": 1.3},
    "forced_and_minimum": {"num_beams": 4, "min_new_tokens": 8, "max_new_tokens": 12, "forced_bos_token_id": 5,
                           "forced_eos_token_id": 6, "length_penalty": 0.5},
    "greedy_processors": {"no_repeat_ngram_size": 3, "repetition_penalty": 2.0, "max_new_tokens": 16,
                          "bad_words_ids": [[3, 4], [7]], "min_length": 5},
    "negative_penalty": {"num_beams": 5, "length_penalty": -1.0, "max_length": 16, "bad_words_ids": [[5, 6, 7], [9]],
                         "renormalize_logits": True, "decoder_start_token_id": 4},
}  # fmt: skip


def sources(vocabulary: int, pad: int, eos: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """16 sources of lengths 2..11 ending in eos, padded with `pad`: ids and mask `[16, 11]`."""
    rng = np.random.default_rng(seed)
    lengths = np.array([2 + i % 10 for i in range(SOURCES)])
    mask = (np.arange(lengths.max())[None] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, rng.integers(3, vocabulary - 2, mask.shape), pad)
    ids[np.arange(SOURCES), lengths - 1] = eos
    return ids, mask


def hf_generate(model, ids, mask, **overrides) -> np.ndarray:
    with torch.inference_mode():
        return model.generate(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask), **overrides).numpy()


def model_settings(model) -> settings.GenerationSettings:
    return settings.from_dict(model.generation_config.to_dict(), "the model's generation config")


@pytest.fixture(scope="module")
def trained():
    """The trained Marian and its 16 sources."""
    model = hf_models.trained("marian")
    return model, sources(hf_models.VOCAB, model.config.pad_token_id, model.config.eos_token_id)


def assert_cases_give_hfs_ids(model, ids, mask, names) -> None:
    for name in names:
        expected = hf_generate(model, ids, mask, **CASES[name])
        ours = generation.generate(model, ids, mask, model_settings(model), model.config.to_dict(), **CASES[name])
        assert ours.shape == expected.shape and (ours == expected).all(), name


def test_every_case_gives_hfs_ids(trained):
    model, (ids, mask) = trained
    assert_cases_give_hfs_ids(model, ids, mask, CASES)


@pytest.mark.parametrize("family", hf_models.FAMILIES)
def test_every_family_gives_hfs_ids(family):
    model = hf_models.model(family)
    ids, mask = sources(model.config.vocab_size, model.config.pad_token_id, model.config.eos_token_id)
    assert_cases_give_hfs_ids(model, ids, mask, ("greedy_processors", "forced_and_minimum"))


def test_float64_gives_hfs_ids(trained):
    model, (ids, mask) = trained
    assert_cases_give_hfs_ids(copy.deepcopy(model).double(), ids, mask, ("greedy", "length_penalty_early"))


def test_a_folders_generation_config_is_the_default(tmp_path):
    """opus-mt's published generation fields (bad_words_ids pad, forced eos, beams, renormalize) in the folder's
    generation_config.json, read by settings.read, give HF's ids with no override; without the file, config.json's
    token fields do (HF's greedy default)."""
    model = hf_models.model("marian")
    model.generation_config.update(
        num_beams=4, max_length=20, bad_words_ids=[[model.config.pad_token_id]], renormalize_logits=True
    )
    model.save_pretrained(tmp_path)
    ids, mask = sources(hf_models.VOCAB, model.config.pad_token_id, model.config.eos_token_id, seed=3)
    expected = hf_generate(model, ids, mask)
    read = settings.read(tmp_path)
    assert read.num_beams == 4 and read.bad_words_ids == ((hf_models.VOCAB - 1,),)
    assert (generation.generate(model, ids, mask, read) == expected).all()
    (tmp_path / "generation_config.json").unlink()
    from_config = settings.read(tmp_path)
    assert from_config.num_beams is None and from_config.forced_eos_token_id == 0


def test_negative_control_a_search_ignoring_length_penalty_is_caught(trained, monkeypatch):
    model, (ids, mask) = trained
    case = CASES["length_penalty_early"]
    expected = hf_generate(model, ids, mask, **case)
    monkeypatch.setattr(search, "penalties", lambda plan: [1.0] * (plan.max_length + 1))
    ours = generation.generate(model, ids, mask, model_settings(model), **case)
    assert ours.shape != expected.shape or (ours != expected).any()


def test_refused_settings_name_the_field(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "top_k": 5}))
    with pytest.raises(settings.GenerationError, match=r"generation_config.json: do_sample=True is not supported"):
        settings.read(tmp_path)
    with pytest.raises(settings.GenerationError, match="num_return_sequences=3 is more than num_beams=2"):
        settings.GenerationSettings(decoder_start_token_id=0, eos_token_id=1).updated(
            num_beams=2, num_return_sequences=3
        ).resolved()
    with pytest.raises(settings.GenerationError, match="unknown generation setting 'beams'"):
        settings.GenerationSettings().updated(beams=2)
