"""HF's labels loss (-100 ignored) and every gradient of our Keras Marian and T5 v1.1 (one model per backbone class:
BartFamilyBackbone, T5Backbone) on Keras's JAX and torch backends (tox env keras, KERAS_BACKEND names the backend)
against transformers' MarianMTModel and T5ForConditionalGeneration (eager attention) in float64, within 1e-12 of the
largest value: tests/hf/test_hf_proofs.py's proof on TensorFlow, its batch, HF reference and HF-name mapping, with
the gradients taken by backends.value_and_gradients (jax.value_and_grad, torch.autograd.grad). Marian's decoder ids
hold the pad id, so nn.Embedding(padding_idx)'s stopped pad row is exercised. Negative controls: Marian's lookup
without the pad-row stop, and T5's RMS norm differentiated by the chain rule through 1 / sqrt, are each caught.
On JAX every step is jitted, as training runs it: XLA would turn T5's float32 1 / sqrt into its own rsqrt, not
correctly rounded, unless a barrier keeps the division (t5_layers._kept; its negative control below)."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest

from tests.hf import test_hf_proofs as proofs
from tests.hf.test_marian_keras import gradient_errors
from tests.zoo import hf_models
from tf_impl.hf import families, fine_tuning, marian_layers, t5_layers
from tf_impl.keras_compat import backends
from torch_impl.hf import families as torch_families

BACKEND = backends.name()
BOUND = proofs.BOUNDS["float64"]
FAMILIES = ("marian", "t5_v1_1")  # one per backbone class: BartFamilyBackbone, T5Backbone


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request) -> dict:
    """make_pair of one family, shared by the module's checks."""
    return make_pair(request.param)


def make_pair(family: str) -> dict:
    """One family's HF model in float64, ours holding its weights, HF's loss and gradients (built once per module)."""
    made = hf_models.model(family)
    config = made.config.to_dict()
    hf = torch_families.build(config, "float64")
    torch_families.load_hf_weights(hf, {k: v.detach().numpy() for k, v in made.state_dict().items()})
    inputs, labels = proofs._labels_batch(config)
    reference = proofs._hf_loss_and_gradients(hf, inputs, labels)
    pair = {"family": family, "config": config, "state": torch_families.hf_state(hf), "inputs": inputs, "labels": labels}
    return pair | {"hf": reference, "ours": ours(pair)}


def ours(pair: dict):
    """Our float64 model holding HF's weights (built anew: a functional graph keeps the functions it was built with)."""
    model = families.build(pair["config"], "float64")
    families.load_hf_weights(model, pair["state"])
    return model


def _loss_and_gradients(pair: dict, model, jit: bool = True) -> tuple[float, dict]:
    """`model` on this backend: fine_tuning's batch and HFCrossEntropy, each variable's gradient under its HF names
    (JAX: jitted, as value_and_gradients runs it; `jit=False`: op by op, as the forward proofs run)."""
    x, y = proofs._keras_batch(pair["config"], pair["inputs"], pair["labels"])
    loss_fn = fine_tuning.HFCrossEntropy(dtype=model.compute_dtype)
    found = [(names, variable, transpose) for names, variable, transpose in proofs._targets(model) if variable.trainable]
    variables = [variable for _, variable, _ in found]
    with contextlib.nullcontext() if jit else _op_by_op():
        loss, grads = backends.value_and_gradients(lambda: loss_fn(y, model(x)), variables)
    as_hf = {names: keras.ops.convert_to_numpy(grad) for (names, _, _), grad in zip(found, grads, strict=True)}
    return float(keras.ops.convert_to_numpy(loss)), {names: as_hf[names].T if t else as_hf[names] for names, _, t in found}


def _op_by_op():
    """jax.disable_jit on JAX (each op run as it comes, as model(x) runs); nothing elsewhere (nothing is compiled)."""
    if BACKEND != "jax":
        return contextlib.nullcontext()
    import jax

    return jax.disable_jit()


def _errors(pair: dict, model=None, jit: bool | None = None) -> tuple[float, dict]:
    """The loss's error relative to HF's, and each gradient's (tests/hf/test_marian_keras.py's gradient_errors); by
    default jitted."""
    hf_loss, hf_grads = pair["hf"]
    jit = True if jit is None else jit
    loss, grads = _loss_and_gradients(pair, pair["ours"] if model is None else model, jit)
    return abs(loss - hf_loss) / abs(hf_loss), gradient_errors(grads, hf_grads)


def test_keras_runs_on_a_backend_other_than_tensorflow():
    """This file proves the JAX and torch backends; on TensorFlow tests/hf/test_hf_proofs.py does."""
    assert BACKEND in ("jax", "torch")


def test_marians_decoder_ids_hold_the_pad_id():
    """The pad row's stop is exercised: the shifted labels start with (and pad with) Marian's pad id."""
    config = hf_models.config("marian").to_dict()
    x, _ = proofs._keras_batch(config, *proofs._labels_batch(config))
    assert (x["decoder_token_ids"] == config["pad_token_id"]).any()


def test_loss_and_every_gradient_equal_hfs_on_this_backend(pair):
    """HF's labels loss and all its gradients (every trainable parameter, by HF name) within 1e-12 in float64."""
    loss_error, errors = _errors(pair)
    print(f"{BACKEND} {pair['family']} float64: loss {loss_error:.3g}, gradients max {max(errors.values()):.3g} of {len(errors)}")
    assert loss_error < BOUND and max(errors.values()) < BOUND, (loss_error, errors)


def test_negative_control_marians_lookup_without_the_pad_row_stop_is_caught(pair, monkeypatch):
    """nn.Embedding(padding_idx) passes no gradient to the pad row from a lookup; a plain lookup does (the model is
    built under the patch: its functional graph holds the lookup it was built with)."""
    if pair["family"] != "marian":
        pytest.skip("the BART family's pad-row lookup")
    monkeypatch.setattr(marian_layers, "pad_row_lookup", lambda embedding, tokens, pad_token_id: embedding(tokens))
    _, errors = _errors(pair, ours(pair), jit=False)
    print(f"{BACKEND} marian without the pad-row stop: {max(errors.values()):.3g}")
    assert max(errors.values()) > BOUND, errors


def test_negative_control_t5s_norm_differentiated_by_the_chain_rule_is_caught(pair, monkeypatch):
    """T5LayerNorm's float32 1 / sqrt differentiated as written (not as torch's rsqrt backward) misses HF's gradients
    in a float64 model: the variance is float32 in both."""
    if pair["family"] != "t5_v1_1":
        pytest.skip("T5's RMS norm only")
    monkeypatch.setattr(t5_layers, "torch_rsqrt", lambda x: t5_layers.ops.divide(np.float32(1.0), t5_layers.ops.sqrt(x)))
    _, errors = _errors(pair)
    print(f"{BACKEND} t5_v1_1 chain-rule rsqrt gradients: {max(errors.values()):.3g}")
    assert max(errors.values()) > BOUND, errors


def test_negative_control_jitted_t5_without_the_barrier_misses_the_bound(pair, monkeypatch):
    """Compiled by XLA (JAX's jit), T5LayerNorm's float32 1 / sqrt without t5_layers._kept's barrier becomes XLA's
    rsqrt, 1 ulp off on some rows: HF's gradients are missed beyond 1e-12, within float32's 1e-5."""
    if BACKEND != "jax" or pair["family"] != "t5_v1_1":
        pytest.skip("XLA's rewrite: T5 on JAX only")
    monkeypatch.setattr(t5_layers, "_kept", lambda value: value)
    loss_error, errors = _errors(pair, model=ours(pair), jit=True)  # rebuilt: the graph keeps what it was built with
    assert max(errors.values()) > BOUND and max(loss_error, *errors.values()) < proofs.BOUNDS["float32"], (loss_error, errors)
