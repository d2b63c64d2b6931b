"""The 2022 tutorial's Keras model under Keras's implicit masks: its decoder takes the context's mask (the one its
encoder's GRU attaches) as `context_mask`, so Keras warns of no destroyed mask, and its outputs, the target's steps,
carry no mask of the source."""

from __future__ import annotations

import warnings

import keras
import numpy as np
from keras.src.backend import get_keras_mask  # not public: Keras's own layers and losses read masks through it

import tf_impl
from shared import catalogue
from shared.verify import fixtures
from tf_impl.models import tf_tutorial_mha

NAME = "tf_tutorial_mha"
DESTROYED = "was passed an input with a mask attached to it"


def _model_and_batch():
    spec = catalogue.get(NAME)
    return tf_impl.build(NAME, "float32", **spec.fixture_config), fixtures.make_batch(spec, rng=np.random.default_rng(0))


def _warnings_of_every_use() -> list[str]:
    """The warnings of building the model, a forward pass, greedy decoding and a loss with its gradients."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, batch = _model_and_batch()
        tf_impl.run(model, NAME, batch)
        tf_impl.greedy(model, NAME, batch, max_len=4)
        tf_impl.loss_and_grads(model, NAME, batch)
    return [str(warning.message) for warning in caught]


def _output_masks(model, batch) -> list:
    """The Keras masks on the decoder's outputs (features, state, attention) and on the logits."""
    memory, _ = model.encode(batch["src"], batch.get("src_len"))
    assert get_keras_mask(memory[0]) is not None  # the context carries its GRU's mask: what reaches the decoder
    outputs = model.decoder(*memory, batch["tgt_in"])
    return [get_keras_mask(tensor) for tensor in (*outputs, model.project(outputs[0]))]


def test_the_decoder_takes_the_contexts_mask_without_a_warning():
    assert not [message for message in _warnings_of_every_use() if DESTROYED in message]


def test_negative_control_a_decoder_that_does_not_take_masks_is_warned_of(monkeypatch):
    monkeypatch.setattr(tf_tutorial_mha.Decoder, "supports_masking", False)  # the layer as it was
    assert any(f"Layer 'decoder' (of type Decoder) {DESTROYED}" in message for message in _warnings_of_every_use())


def test_the_decoders_outputs_and_the_logits_carry_no_mask_of_the_source():
    """As before the decoder took masks: a `[B, S]` mask on the `[B, T, V]` logits would be read by Keras's losses."""
    model, batch = _model_and_batch()
    assert _output_masks(model, batch) == [None] * 4


def test_negative_control_keras_default_would_put_the_source_mask_on_the_features(monkeypatch):
    monkeypatch.setattr(tf_tutorial_mha.Decoder, "compute_mask", keras.layers.Layer.compute_mask)
    model, batch = _model_and_batch()
    features_mask, *_, logits_mask = _output_masks(model, batch)
    assert features_mask is not None and tuple(features_mask.shape) == batch["src"].shape  # [B, S] on [B, T, H]
    assert logits_mask is not None
