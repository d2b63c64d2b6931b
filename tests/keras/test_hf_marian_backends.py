"""Our Keras MarianMT (tf_impl/hf/marian.py) on Keras's JAX and torch backends (tox env keras, KERAS_BACKEND names the
backend) against transformers' MarianMTModel (eager attention, eval): the proof of tests/hf/test_marian_keras.py, one
config (tied, swish, scaled embeddings, nonzero final_logits_bias) on a ragged padding batch: float64 within 1e-12 of
the largest value (JAX with x64), float32 within 1e-5; the `.keras` round trip bit for bit. Negative control: Keras's
type promotion as it ships (float64 demoted to float32 on these backends) misses the float64 bound.
BART and mBART (tests/hf/test_bart_family_keras.py's folders) alike, with the offset-2 negative control and their
`.keras` round trip."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
import transformers

from tests.hf import test_bart_family_keras as bart_tests
from tests.hf.test_marian_keras import BOUNDS, CONFIGS, _batch, _config, _errors, _hf, _hf_outputs, _numpy, _our_outputs, _ours
from tf_impl.keras_compat import backends

BACKEND = backends.name()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A user's folder: a tiny random MarianMTModel with a nonzero final_logits_bias, saved by save_pretrained."""
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**CONFIGS["tied"]))
    model.final_logits_bias.normal_()
    path = tmp_path_factory.mktemp("marian")
    model.save_pretrained(path)
    return path


def test_keras_runs_on_a_backend_other_than_tensorflow():
    """This file proves the JAX and torch backends; on TensorFlow tests/hf/test_marian_keras.py does."""
    assert BACKEND in ("jax", "torch")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ours_computes_hf_marian_on_this_backend(folder, dtype):
    batch = _batch(_config(folder)["pad_token_id"])
    model = _ours(folder, dtype)
    errors = _errors(_our_outputs(model, batch), _hf_outputs(_hf(folder, dtype), batch))
    print(f"{BACKEND} {dtype}: {errors}")
    assert _numpy(model(batch)).dtype == np.dtype(dtype)
    assert max(errors.values()) < BOUNDS[dtype], errors


def test_negative_control_kerass_shipped_promotion_misses_the_float64_bound(folder):
    """Keras 3.15 maps float64 to float32 in its promotion table on JAX and torch (keras-team/keras#23704):
    as shipped, our float64 model would compute partly in float32; backends.check_dtype (run when a float64
    MarianBackbone is built) keeps float64 in that table."""
    from keras.src.backend.common import dtypes

    batch = _batch(_config(folder)["pad_token_id"])
    model, reference = _ours(folder, "float64"), _hf_outputs(_hf(folder, "float64"), batch)
    table = dtypes.BIT64_TO_BIT32_DTYPE
    kept, table["float64"] = table["float64"], "float32"  # as Keras ships it
    try:
        errors = _errors(_our_outputs(model, batch), reference)
    finally:
        table["float64"] = kept
    print(f"{BACKEND} float64 with Keras's shipped promotion: {errors}")
    assert errors["logits"] > BOUNDS["float64"], errors


def test_keras_file_round_trip_on_this_backend(folder, tmp_path):
    model, batch = _ours(folder, "float64"), _batch(_config(folder)["pad_token_id"])
    model.save(tmp_path / "marian.keras")
    loaded = keras.saving.load_model(tmp_path / "marian.keras")
    assert np.array_equal(_numpy(loaded(batch)), _numpy(model(batch)))


@pytest.fixture(scope="module", params=["bart", "mbart"])
def bart_folder(request, tmp_path_factory):
    """A user's folder of a tiny random BART or mBART (tests/zoo/hf_models.py, nonzero final_logits_bias)."""
    return bart_tests._save(request.param, tmp_path_factory.mktemp(request.param))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ours_computes_hf_bart_and_mbart_on_this_backend(bart_folder, dtype):
    """BART's learned positions (offset 2), layernorm_embedding and mBART's pre-norm on this backend: logits and both
    last hidden states within the dtype's bound of HF's."""
    model = bart_tests._ours(bart_folder, dtype)
    errors = bart_tests._compare(bart_folder, model, dtype=dtype)
    print(f"{BACKEND} {bart_folder.name} {dtype}: {errors}")
    assert max(errors.values()) < BOUNDS[dtype], errors


def test_negative_control_bart_positions_without_the_offset_on_this_backend(bart_folder):
    model = bart_tests._ours(bart_folder, "float64")
    bart_tests._no_offset(model)
    errors = bart_tests._compare(bart_folder, model)
    assert errors["logits"] > BOUNDS["float64"], errors


def test_bart_keras_file_round_trip_on_this_backend(bart_folder, tmp_path):
    model, batch = bart_tests._ours(bart_folder, "float64"), bart_tests._batch(bart_tests._pad(bart_folder))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert np.array_equal(_numpy(loaded(batch)), _numpy(model(batch)))
    assert loaded.backbone.get_config()["hf_config"] == model.backbone.get_config()["hf_config"]
