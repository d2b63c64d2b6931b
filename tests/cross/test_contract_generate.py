"""torch and Keras generate the same beam-search tokens through the contract (`generate`: settings from the catalogue's
spec, `<pad>` after `<eos>`), on one set of weights: document 003's luong_dot, 16 sources of mixed lengths. The
loops themselves are compared in tests/cross/test_generation_catalogue.py; each stack alone in
tests/stack/test_contract_generate.py. Negative control: torch forbidding a repeated 2-gram gives other tokens."""

from __future__ import annotations

import tf_impl
import torch_impl
from tests.stack.test_contract_generate import MAX_LEN, scaled_model_and_batch

BEAM = {"num_beams": 4, "length_penalty": 0.5}


def test_torch_and_keras_give_the_same_beam_tokens_through_the_contract():
    spec, torch_model, batch = scaled_model_and_batch(torch_impl, "luong_dot")
    _, keras_model, _ = scaled_model_and_batch(tf_impl, "luong_dot")
    torch_tokens = torch_impl.generate(torch_model, "luong_dot", batch, max_len=MAX_LEN, **BEAM)["tokens"]
    keras_tokens = tf_impl.generate(keras_model, "luong_dot", batch, max_len=MAX_LEN, **BEAM)["tokens"]
    assert keras_tokens.shape == torch_tokens.shape and (keras_tokens == torch_tokens).all()
    assert len({tuple(row) for row in torch_tokens}) > 3
    other = torch_impl.generate(torch_model, "luong_dot", batch, max_len=MAX_LEN, no_repeat_ngram_size=2, **BEAM)
    assert other["tokens"].shape != keras_tokens.shape or (other["tokens"] != keras_tokens).any()
