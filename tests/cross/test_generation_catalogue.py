"""The catalogue's encoder-decoders with attention (documents 002 and 003) generate the same ids in torch
(torch_impl/generation.py, eager) and Keras (tf_impl/generation.py, one compiled loop: XLA on TensorFlow, jax.jit on
JAX, eager on torch), greedy and beam search with HF's rules, on 16 sources of mixed lengths, float64 and float32.

The twins hold one set of weights, scaled up so that the random models' distributions are peaked and their
hypotheses end at different lengths. Negative control: Keras's loop fed the previous step's beam order (the state not
reordered with its beams) gives other ids.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tf_impl
import torch_impl
from shared import catalogue
from shared.generation.settings import GenerationSettings
from tf_impl import generation as keras_generation
from torch_impl import generation as torch_generation

CASES = {"greedy": {"max_new_tokens": 12},
         "beam": {"num_beams": 4, "max_new_tokens": 12, "length_penalty": 1.5, "no_repeat_ngram_size": 2,
                  "num_return_sequences": 2, "repetition_penalty": 1.2, "early_stopping": True}}  # fmt: skip
MODELS = ("bahdanau_bigru", "luong_concat")  # documents 002 and 003


def twins(name: str, dtype: str):
    spec = catalogue.get(name)
    torch.manual_seed(0)
    torch_model = torch_impl.build(name, dtype, **spec.fixture_config)
    keras_model = tf_impl.build(name, dtype, **spec.fixture_config)
    weights = {key: value * 4 for key, value in torch_impl.get_weights(torch_model).items()}
    torch_impl.set_weights(torch_model, weights)
    tf_impl.set_weights(keras_model, weights)
    return spec, torch_model, keras_model


def sources(spec, vocabulary: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    lengths = np.array([2 + i % 7 for i in range(16)])
    mask = (np.arange(lengths.max())[None] < lengths[:, None]).astype(np.int64)
    return np.where(mask == 1, rng.integers(4, vocabulary, mask.shape), spec.pad_id), mask


def both(name: str, dtype: str, case: str):
    spec, torch_model, keras_model = twins(name, dtype)
    vocabulary = spec.fixture_config.get("input_dim", spec.fixture_config.get("src_vocab_size"))
    ids, mask = sources(spec, vocabulary)
    settings = GenerationSettings(eos_token_id=spec.eos_id, pad_token_id=spec.pad_id, decoder_start_token_id=spec.sos_id)
    torch_ids = torch_generation.generate(torch_generation.Seq2SeqDecoding(torch_model), ids, mask, settings, **CASES[case])
    return torch_ids, (keras_model, ids, mask, settings)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("case", CASES)
def test_torch_and_keras_give_the_same_ids(name, case):
    torch_ids, (keras_model, ids, mask, settings) = both(name, "float64", case)
    keras_ids = keras_generation.generate(keras_model, ids, mask, settings, **CASES[case])
    assert keras_ids.shape == torch_ids.shape and (keras_ids == torch_ids).all()
    assert len({tuple(row) for row in torch_ids}) > 3  # the sources lead to different outputs


def test_float32_gives_the_same_ids():
    torch_ids, (keras_model, ids, mask, settings) = both("luong_concat", "float32", "beam")
    assert (keras_generation.generate(keras_model, ids, mask, settings, **CASES["beam"]) == torch_ids).all()


def test_negative_control_a_state_not_reordered_with_its_beams_is_caught(monkeypatch):
    torch_ids, (keras_model, ids, mask, settings) = both("luong_concat", "float64", "beam")
    monkeypatch.setattr(keras_generation, "reorder", lambda state, rows: state)
    keras_ids = keras_generation.generate(keras_model, ids, mask, settings, **CASES["beam"])
    assert keras_ids.shape != torch_ids.shape or (keras_ids != torch_ids).any()
