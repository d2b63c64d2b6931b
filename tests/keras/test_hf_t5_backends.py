"""Our Keras T5 (tf_impl/hf/t5.py) on Keras's JAX and torch backends (tox env keras, KERAS_BACKEND names the backend)
against transformers' T5ForConditionalGeneration (eager attention, eval): the proof of tests/hf/test_t5_keras.py for
v1.0 (relu, tied, scaled decoder output) and the pre-5.x untied v1.1 (gated-gelu, its own lm_head) on a ragged padding
batch: float64 within 1e-12 of the largest value (JAX with x64), float32 within 1e-5; the `.keras` round trip bit for
bit. Negative control: the RMS variance taken in float64 (not HF's float32) misses the float64 bound."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tests.hf import test_t5_keras as proof
from tf_impl.hf import t5_layers
from tf_impl.keras_compat import backends

BACKEND = backends.name()


@pytest.fixture(scope="module", params=["v1.0", "v1.1 untied"])
def folder(request, tmp_path_factory):
    return proof.make_folder(request.param, tmp_path_factory.mktemp("t5"))


def test_keras_runs_on_a_backend_other_than_tensorflow():
    """This file proves the JAX and torch backends; on TensorFlow tests/hf/test_t5_keras.py does."""
    assert BACKEND in ("jax", "torch")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ours_computes_hf_t5_on_this_backend(folder, dtype):
    batch = proof._batch()
    model = proof.ours(folder, dtype)
    errors = proof.errors_of(proof.our_outputs(model, batch), proof.hf_outputs(proof.hf_model(folder, dtype), batch))
    print(f"{BACKEND} {folder.name} {dtype}: {errors}")
    assert proof._numpy(model(batch)).dtype == np.dtype(dtype)
    assert max(errors.values()) < proof.BOUNDS[dtype], errors


def test_negative_control_float64_variance_misses_the_float64_bound(folder, monkeypatch):
    batch, reference = proof._batch(), proof.hf_outputs(proof.hf_model(folder, "float64"), proof._batch())
    monkeypatch.setattr(t5_layers.T5LayerNorm, "call", proof._norm_in_model_dtype)
    errors = proof.errors_of(proof.our_outputs(proof.ours(folder, "float64"), batch), reference)
    print(f"{BACKEND} float64 with a float64 variance: {errors}")
    assert errors["logits"] > proof.BOUNDS["float64"], errors


def test_keras_file_round_trip_on_this_backend(folder, tmp_path):
    model, batch = proof.ours(folder, "float64"), proof._batch()
    model.save(tmp_path / "t5.keras")
    loaded = keras.saving.load_model(tmp_path / "t5.keras")
    assert np.array_equal(proof._numpy(loaded(batch)), proof._numpy(model(batch)))
