"""Generation on Keras's JAX and torch backends (tox env keras; KERAS_BACKEND names the backend): our Keras Marian
(trained, tests/zoo/hf_models.trained) and T5 run through tf_impl/generation.py's loop, jitted whole on JAX
(backends.jax_inference: the model's variables traced through keras.StatelessScope) and eager on torch, give the ids
of transformers' `generate` greedy and with beam search, float64 (JAX's x64) and float32.
tests/hf/test_generation_keras.py proves TensorFlow's XLA loop, tests/cross/test_generation_catalogue.py the
catalogue's models (the same loop: a decoding object is all that differs)."""

from __future__ import annotations

import copy

import pytest

from tests.hf.test_generation_keras import assert_cases_give_hfs_ids, keras_twin
from tests.hf.test_generation_rules import sources
from tests.zoo import hf_models
from tf_impl.keras_compat import backends

CASES = ("greedy", "length_penalty_early")


def test_keras_runs_on_a_backend_other_than_tensorflow():
    """This file proves the JAX and torch backends; on TensorFlow tests/hf/test_generation_keras.py does."""
    assert backends.name() in ("jax", "torch")


@pytest.fixture(scope="module", params=["marian", "t5"])  # one family per backbone class
def hf_model(request):
    model = hf_models.trained("marian") if request.param == "marian" else hf_models.model("t5")
    return model, sources(model.config.vocab_size, model.config.pad_token_id, model.config.eos_token_id)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_keras_ids_equal_hfs(hf_model, dtype):
    model, (ids, mask) = hf_model
    model = copy.deepcopy(model).double() if dtype == "float64" else model
    assert_cases_give_hfs_ids(model, keras_twin(model, dtype), ids, mask, CASES)
