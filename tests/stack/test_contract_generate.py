"""The contract's `generate` (Hugging Face's greedy and beam search, settings from the catalogue's spec) in each
stack: one beam gives `greedy`'s tokens exactly, beam search ends its rows with `<eos>` then `<pad>`, and a model that
does not decode token by token gets `greedy`'s error. torch against Keras: tests/cross/test_generation_catalogue.py
(both contracts build their request in shared/generation/requests.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from shared import catalogue
from shared.generation import requests
from shared.verify import fixtures

MAX_LEN = 12


def scaled_model_and_batch(stack, name: str, dtype: str = "float64"):
    """The golden model with its weights doubled (peaked distributions: rows end at different lengths) and 16
    sources of 2 to 8 tokens."""
    spec, model = catalogue.get(name), fixtures.golden_model(stack, name, dtype)
    stack.set_weights(model, {key: value * 2 for key, value in stack.get_weights(model).items()})
    lengths = np.array([2 + i % 7 for i in range(16)])
    vocabulary = spec.fixture_config.get("input_dim", spec.fixture_config.get("src_vocab_size"))
    ids = np.random.default_rng(1).integers(4, vocabulary, (16, lengths.max()))
    src = np.where(np.arange(lengths.max())[None] < lengths[:, None], ids, spec.pad_id)  # [B, S]
    return spec, model, {"src": src, "src_len": lengths}


def test_one_beam_gives_greedys_tokens_and_beam_search_ends_each_row_with_eos_then_pad(stack):
    spec, model, batch = scaled_model_and_batch(stack, "bahdanau_bigru")  # document 002
    greedy = stack.greedy(model, "bahdanau_bigru", batch, max_len=MAX_LEN)["tokens"]
    generated = stack.generate(model, "bahdanau_bigru", batch, max_len=MAX_LEN, num_beams=1)["tokens"]
    assert generated.shape == greedy.shape and (generated == greedy).all()
    assert greedy.shape[1] <= MAX_LEN and len({tuple(row) for row in greedy}) > 3  # the sources give different outputs
    tokens = stack.generate(model, "bahdanau_bigru", batch, max_len=MAX_LEN, num_beams=4)["tokens"]
    ended = [row for row in tokens if spec.eos_id in row]
    assert tokens.shape[0] == 16 and tokens.shape[1] <= MAX_LEN and len(ended) >= 3
    for row in ended:
        end = list(row).index(spec.eos_id)
        assert (row[end + 1 :] == spec.pad_id).all() and spec.pad_id not in row[:end]
    assert tokens.shape != greedy.shape or (tokens != greedy).any()  # beam search chose other outputs somewhere


def test_one_beam_gives_greedys_tokens_for_document_003(stack):
    _, model, batch = scaled_model_and_batch(stack, "luong_dot")
    greedy = stack.greedy(model, "luong_dot", batch, max_len=MAX_LEN)["tokens"]
    generated = stack.generate(model, "luong_dot", batch, max_len=MAX_LEN)["tokens"]
    assert generated.shape == greedy.shape and (generated == greedy).all() and len({tuple(row) for row in greedy}) > 3


def test_pad_follows_eos_where_hugging_face_fills_with_eos():
    """HF fills a finished beam with `pad_token_id or eos`: a model whose pad id is 0 (spa-eng) would get `<eos>`
    after `<eos>`. Negative control: the filled rows as they come, unchanged, keep the second `<eos>`."""
    filled = np.array([[5, 3, 3, 3], [5, 6, 3, 3], [5, 6, 7, 8]])  # eos 3 filled after itself, as HF with pad 0
    started = np.concatenate([np.full((3, 1), 2), filled], 1)  # the decoder's start column, dropped
    padded = requests.greedy_shaped(started, SimpleNamespace(eos_id=3, pad_id=0))["tokens"]
    assert padded.tolist() == [[5, 3, 0, 0], [5, 6, 3, 0], [5, 6, 7, 8]]
    assert any(list(row).count(3) > 1 for row in filled)  # what the contract would return without it


def test_generate_needs_a_model_that_decodes_token_by_token(stack):
    model = fixtures.golden_model(stack, "reverse_rnn", "float32")
    with pytest.raises(ValueError, match="has no greedy decoding"):
        stack.generate(model, "reverse_rnn", fixtures.load_golden("reverse_rnn").batch, num_beams=2)
    luong = fixtures.golden_model(stack, "luong_dot", "float32")
    with pytest.raises(ValueError, match="max_len must be a positive integer"):
        stack.generate(luong, "luong_dot", fixtures.load_golden("luong_dot").batch, max_len=0)
