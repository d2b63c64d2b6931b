"""The catalogue's `tf_tutorial_mha` against the 2022 TensorFlow tutorial's own classes (tests/tutorials/tf_nmt_2022.py,
the notebook's Encoder, CrossAttention, Decoder, Translator with Keras's implicit masks), on padded batches: every
position, pad rows included; greedy decoding against the tutorial's own decoding loop (its `get_next_token` at
temperature 0). Negative control: a PyTorch twin written the plain way (tests/zoo/tf_nmt_2022_torch.py: no masks)
holding the same weights differs on the real positions."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import tf_impl
import torch_impl
from shared import catalogue
from shared.verify import fixtures
from tf_impl.keras_compat.backends import exact_float64, float64_policy

NAME = "tf_tutorial_mha"
SPEC = catalogue.get(NAME)
UNITS, CONTEXT_VOCAB, TARGET_VOCAB = (SPEC.fixture_config[key] for key in ("units", "context_vocab_size", "target_vocab_size"))
BOUNDS = {"float64": 1e-12, "float32": 1e-5}


def _tutorials_model(dtype: str, weights: dict):
    """The notebook's `Translator` in `dtype`, built by one call as the tutorial does, holding canonical `weights`
    (its attribute tree is the catalogue model's: tf_impl.set_weights walks it alike)."""
    from tests.tutorials import tf_nmt_2022

    with float64_policy() if dtype == "float64" else contextlib.nullcontext():
        model = tf_nmt_2022.translator(CONTEXT_VOCAB, TARGET_VOCAB, UNITS)
        tf_nmt_2022.teacher_forced(model, *tf_nmt_2022.example_batch(input_vocab=CONTEXT_VOCAB, target_vocab=TARGET_VOCAB))
    exact_float64(model)  # Keras on TensorFlow rounds MultiHeadAttention's 1/sqrt(key_dim) to float32 (1e-10 off)
    tf_impl.set_weights(model, weights)
    return model


def _ours(dtype: str, weights: dict):
    model = torch_impl.build(NAME, dtype, **SPEC.fixture_config)
    torch_impl.set_weights(model, weights)
    return model


def _padded_batch() -> dict:
    """The golden batch: sources of lengths 8, 7, 6 and targets of 6, 5, 4 real tokens, padded with 0 at the end."""
    batch = fixtures.load_golden(NAME).batch
    assert (batch["src"] == 0).any() and (batch["tgt_in"] == 0).any()
    return {key: batch[key] for key in ("src", "tgt_in")}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_our_model_computes_the_tutorials_function_on_padded_batches(dtype):
    weights = fixtures.load_golden(NAME).weights
    tutorial, ours, batch = _tutorials_model(dtype, weights), _ours(dtype, weights), _padded_batch()
    expected = np.asarray(tutorial((batch["src"], batch["tgt_in"])))  # [B, T, V]
    outputs = torch_impl.run(ours, NAME, batch)
    assert np.abs(outputs["logits"] - expected).max() <= BOUNDS[dtype]  # pad rows included
    attention = np.asarray(tutorial.decoder.last_attention_weights)  # [B, T, S], averaged over the one head
    assert np.abs(outputs["attention"] - attention).max() <= BOUNDS[dtype]
    assert not attention[batch["tgt_in"] == 0].any()  # Keras zeroes a pad query's row: pinned


def test_a_pytorch_twin_without_kerass_masks_is_caught():
    """Negative control: the plain PyTorch twin (no packing, no key or query masks) holding the same weights."""
    from tests.zoo import tf_nmt_2022_torch

    weights, batch = fixtures.load_golden(NAME).weights, _padded_batch()
    twin = tf_nmt_2022_torch.translator(CONTEXT_VOCAB, TARGET_VOCAB, UNITS).double()
    twin.load_state_dict({key: torch.as_tensor(value) for key, value in weights.items()})
    logits = twin(torch.as_tensor(batch["src"]), torch.as_tensor(batch["tgt_in"])).detach().numpy()
    expected = np.asarray(_tutorials_model("float64", weights)((batch["src"], batch["tgt_in"])))
    real = batch["tgt_in"] != 0
    assert np.abs(logits - expected)[real].max() > 1e-3
    assert np.abs(logits[0] - expected[0]).max() < 1e-12  # its unpadded row agrees: the comparison itself is sound


def _tutorials_translate(tutorial, src: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The tutorial's `translate` at temperature 0 on token ids `src [B, S]`: the decoder called on one token with the
    GRU's state (`get_next_token`), argmax, rows stopping at [END]; as ours, [END] kept and pads after it."""
    context = tutorial.encoder(src)
    token = np.full((len(src), 1), SPEC.sos_id)  # [B, 1]
    state, done, tokens, attention = None, np.zeros(len(src), bool), [], []
    for _ in range(max_len):
        logits, state = tutorial.decoder(context, token, state=state, return_state=True)
        token = np.asarray(logits)[:, -1].argmax(-1)[:, None]  # [B, 1]
        tokens.append(np.where(done, SPEC.pad_id, token[:, 0]))
        attention.append(np.where(done[:, None], 0.0, np.asarray(tutorial.decoder.last_attention_weights)[:, 0]))
        done |= token[:, 0] == SPEC.eos_id
        if done.all():
            break
    return np.stack(tokens, 1), np.stack(attention, 1)  # [B, L], [B, L, S]


def test_greedy_decoding_is_the_tutorials_decoding_loop_sentence_by_sentence():
    """Each row of our batched greedy decoding is the tutorial's loop on that sentence alone."""
    weights, batch = fixtures.load_golden(NAME).weights, _padded_batch()
    tutorial, max_len = _tutorials_model("float64", weights), 8
    ours = torch_impl.greedy(_ours("float64", weights), NAME, batch, max_len=max_len)
    for row, length in enumerate((batch["src"] != 0).sum(1)):
        tokens, attention = _tutorials_translate(tutorial, batch["src"][row : row + 1, :length], max_len)
        steps = tokens.shape[1]
        np.testing.assert_array_equal(ours["tokens"][row, :steps], tokens[0])
        assert not ours["tokens"][row, steps:].any()  # our batch runs on for the other rows: pads
        assert np.abs(ours["attention"][row, :steps, :length] - attention[0]).max() <= 1e-12
        assert not ours["attention"][row, :, length:].any()


def test_the_tutorials_loop_on_a_padded_batch_attends_to_the_padding():
    """The tutorial's defect, pinned: `translate` calls `self.encoder(...)` outside the model's `call`, and the
    context's Keras mask does not survive the Encoder layer's return, so on a batch of sentences of different
    lengths its decoder attends to the pad positions (the translation of a short sentence changes with its batch).
    Ours masks them: a sentence translates alike alone and in any batch."""
    weights, batch = fixtures.load_golden(NAME).weights, _padded_batch()
    _, attention = _tutorials_translate(_tutorials_model("float64", weights), batch["src"], 8)
    assert attention[batch["src"][:, None, :].repeat(attention.shape[1], 1) == 0].max() > 1e-3
