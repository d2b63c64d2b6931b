"""The key/value-cached decoding of our Keras HF models (tf_impl/hf/decoding.py) on Keras's JAX and torch backends (tox
env keras, KERAS_BACKEND names the backend), one family per backbone class (Marian: BartFamilyBackbone; T5): start and
keras.ops.while_loop over the steps give our teacher-forced forward's logits at every position in float64 within
1e-12 of the largest value (JAX with x64). On JAX the whole loop runs inside jax.jit (backends.jax_inference: the
model's variables mapped to traced values by keras.StatelessScope), the step's index a tracer; on torch it runs
eagerly. tests/hf/test_hf_decoding.py proves the same against transformers on TensorFlow and under its XLA.
Negative control: the cache's later positions left unmasked are caught, on this backend too (T5: cache_mask is one
function for both classes)."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from tests.hf import test_hf_decoding as proof
from tf_impl.hf import marian_layers
from tf_impl.keras_compat import backends

BACKEND = backends.name()
BOUND = proof.BOUNDS["float64"]


@pytest.fixture(scope="module", params=proof.FLOAT32_FAMILIES)  # one family per backbone class
def family(request) -> dict:
    made = proof.pair(request.param)
    made["full"] = proof.full_logits(made["float64"][1], made["batch"])
    return made


def test_keras_runs_on_a_backend_other_than_tensorflow():
    """This file proves the JAX and torch backends; on TensorFlow tests/hf/test_hf_decoding.py does."""
    assert BACKEND in ("jax", "torch")


def looped(model, given: dict, key: str) -> tuple[np.ndarray, list]:
    """looped_logits on this backend (on JAX inside jax.jit, compiled once per model and `key`) -> the logits [B, L, V]
    and the type of each index the step was handed while tracing (JAX) or running (torch)."""
    decoder, indices = model.decoding(), []
    step = decoder.step

    def recorded(tokens, index, state, memory):
        indices.append(type(index))
        return step(tokens, index, state, memory)

    decoder.step = recorded
    tensors = tuple(given[name] for name in ("input_ids", "attention_mask", "decoder_ids"))
    if BACKEND == "jax":
        found = backends.jax_inference(model, lambda tensors: proof.looped_logits(decoder, *tensors), key=key)(tensors)
    else:
        found = proof.looped_logits(decoder, *(ops.convert_to_tensor(tensor) for tensor in tensors))
    return ops.convert_to_numpy(found), indices


def test_the_loop_equals_the_full_forward_on_this_backend(family):
    found, indices = looped(family["float64"][1], family["batch"], "hf_decoding")
    error = proof.relative(found, family["full"])
    print(f"{BACKEND} {family['family']} float64: {error:.3g}")
    assert found.dtype == np.float64
    if BACKEND == "jax":
        import jax

        assert indices and all(issubclass(kind, jax.core.Tracer) for kind in indices), indices
    assert error < BOUND, error


@pytest.mark.parametrize("family", ["t5"], indirect=True)  # cache_mask is one function for both classes
def test_negative_control_the_caches_later_positions_unmasked_are_caught(family, monkeypatch):
    monkeypatch.setattr(marian_layers, "cache_mask", lambda index, length, dtype: ops.zeros((1, 1, 1, length), dtype))
    found, _ = looped(family["float64"][1], family["batch"], "hf_decoding_unmasked")
    error = proof.relative(found, family["full"])
    print(f"{BACKEND} {family['family']} with no cache mask: {error:.3g}")
    assert error > proof.BOUNDS["float32"]
