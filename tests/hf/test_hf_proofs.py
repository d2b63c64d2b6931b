"""The issue's proofs beyond logits, one place for every family of tests/zoo/hf_models.py (Marian tied and with its own
decoder vocabulary, BART, mBART, T5 v1.0 and v1.1): our Keras model holding HF's weights against transformers 5.23's
(eager attention) in float64 to 1e-12 of the largest value and in float32 to 1e-5:
- the cross-attention probabilities of every decoder layer [B, L, N, T, S] (HF's output_attentions cross_attentions),
  as families.run gives them on both stacks (the backbone's on-request second graph: serving is unchanged);
- the loss with labels (-100 ignored: HF's CrossEntropyLoss, the mean over the kept labels) and every gradient of it.
Negative controls: the last layer's probabilities compared as the first's, the loss averaged over the padding too, and
T5's RMS norm differentiated through 1 / sqrt by the chain rule instead of torch's rsqrt backward, are each caught.
float32 runs on one family per backbone class (Marian: BartFamilyBackbone; T5): its code is the same for every config
of a class, which float64 proves on each."""

from __future__ import annotations

import zipfile

import h5py
import numpy as np
import pytest
import torch

from shared.port import pretrained
from tests.hf.test_marian_keras import gradient_errors
from tests.zoo import hf_models
from tf_impl.hf import families, fine_tuning, marian_weights, t5_layers, t5_weights
from torch_impl.hf import families as torch_families

BOUNDS = {"float64": 1e-12, "float32": 1e-5}
FLOAT32_FAMILIES = ("marian", "t5")  # one per backbone class
TARGET_LENGTHS = (6, 4, 2)  # the labels' kept lengths, -100 after


class Models(dict):
    """dtype -> (HF's model, ours holding its weights), each built on first use (once for the module)."""

    def __init__(self, made):
        super().__init__()
        self.made = made

    def __missing__(self, dtype: str):
        config = self.made.config.to_dict()
        hf = torch_families.build(config, dtype)
        torch_families.load_hf_weights(hf, {k: v.detach().numpy() for k, v in self.made.state_dict().items()})
        ours = families.build(config, dtype)
        families.load_hf_weights(ours, torch_families.hf_state(hf))
        self[dtype] = (hf, ours)
        return self[dtype]


def _pair(family: str) -> dict:
    made = hf_models.model(family)
    return {"family": family, "config": made.config.to_dict(), "models": Models(made), "memo": {}}


@pytest.fixture(scope="module", params=hf_models.FAMILIES)
def pair(request) -> dict:
    """One family's HF model and ours holding its weights (float64 here; float32 in `pair32`)."""
    return _pair(request.param)


@pytest.fixture(scope="module", params=FLOAT32_FAMILIES)
def pair32(request) -> dict:
    """The same for one family per backbone class, whose float32 is checked."""
    return _pair(request.param)


def _memo(pair: dict, key: tuple, compute):
    """What `compute()` gives, once per module for this family (HF's runs and gradients serve a check and its control)."""
    if key not in pair["memo"]:
        pair["memo"][key] = compute()
    return pair["memo"][key]


def _runs(pair: dict, dtype: str) -> tuple[dict, dict]:
    """families.run of HF's model and of ours on the port's verification batch, in `dtype`."""
    hf, ours = pair["models"][dtype]
    batch = pretrained.verification_batch(pair["config"])
    return _memo(pair, ("run", dtype), lambda: (torch_families.run(hf, batch), families.run(ours, batch)))


def _hf_reference(pair: dict, dtype: str) -> tuple[float, dict]:
    inputs, labels = _labels_batch(pair["config"])
    return _memo(pair, ("loss", dtype), lambda: _hf_loss_and_gradients(pair["models"][dtype][0], inputs, labels))


def _relative(actual, expected) -> float:
    return float(np.abs(np.asarray(actual, np.float64) - expected).max() / np.abs(expected).max())


# ---- cross-attention probabilities ----


def _assert_cross_attention_equals_hfs(pair: dict, dtype: str) -> None:
    expected, actual = _runs(pair, dtype)
    assert actual["cross_attention"].shape == (3, hf_models.LAYERS, hf_models.HEADS, 6, 7)  # [B, L, N, T, S]
    errors = {name: _relative(actual[name], expected[name]) for name in pretrained.OUTPUTS}
    print(f"{pair['family']} {dtype}: {errors}")
    assert max(errors.values()) < BOUNDS[dtype], errors


def test_cross_attention_equals_hfs(pair):
    _assert_cross_attention_equals_hfs(pair, "float64")


def test_cross_attention_equals_hfs_in_float32(pair32):
    _assert_cross_attention_equals_hfs(pair32, "float32")


def test_negative_control_the_last_layers_probabilities_as_the_firsts_are_caught(pair):
    expected, actual = _runs(pair, "float64")
    error = _relative(actual["cross_attention"][:, ::-1], expected["cross_attention"])  # [B, L, N, T, S], layers reversed
    print(f"{pair['family']} layers swapped: {error:.3g}")
    assert error > BOUNDS["float32"]


def test_the_serving_graph_and_keras_file_do_not_hold_the_probe(pair32, tmp_path):
    """Building the second graph leaves `.keras` files (config, weight paths) and `model(inputs)` as they were (once
    per backbone class: BartFamilyBackbone, T5Backbone)."""
    _, ours = pair32["models"]["float32"]
    batch = pretrained.verification_batch(pair32["config"])
    ours.save(tmp_path / "before.keras")
    logits = np.asarray(ours(batch))
    ours.backbone.with_cross_attention()
    ours.save(tmp_path / "after.keras")
    assert _keras_file(tmp_path / "before.keras") == _keras_file(tmp_path / "after.keras")
    assert np.array_equal(np.asarray(ours(batch)), logits)
    reloaded = families.load_keras(tmp_path / "after.keras")
    assert np.array_equal(families.run(reloaded, batch)["cross_attention"], families.run(ours, batch)["cross_attention"])


def _keras_file(path) -> tuple:
    """A `.keras` file's config.json and the names of its weights file's datasets."""
    with zipfile.ZipFile(path) as archive:
        config = archive.read("config.json")
        with archive.open("model.weights.h5") as weights, h5py.File(weights) as h5:
            names = []
            h5.visit(names.append)
    return config, names


# ---- the loss with labels and its gradients ----


def _labels_batch(config: dict) -> tuple[dict, np.ndarray]:
    """HF's training inputs: input_ids [B, S] and attention_mask (lengths 7, 5, 3), labels [B, T] (-100 after 6, 4, 2)."""
    rng = np.random.default_rng(4)
    vocab = config["vocab_size"]
    target_vocab = config.get("decoder_vocab_size") or vocab
    mask = (np.arange(7)[None] < np.array([[7], [5], [3]])).astype(np.int64)  # [B, S]
    input_ids = np.where(mask == 1, rng.integers(3, vocab - 2, (3, 7)), config["pad_token_id"])  # [B, S]
    kept = np.arange(6)[None] < np.array(TARGET_LENGTHS)[:, None]  # [B, T]
    labels = np.where(kept, rng.integers(3, target_vocab - 2, (3, 6)), fine_tuning.IGNORE_INDEX)  # [B, T]
    return {"input_ids": input_ids, "attention_mask": mask}, labels


def _hf_loss_and_gradients(model, inputs: dict, labels: np.ndarray) -> tuple[float, dict]:
    """HF's own loss from `labels` (it shifts them into decoder inputs) and each trainable parameter's gradient. mBART
    is handed the decoder inputs ours reads: its shift_tokens_right wraps the last kept label (a language id) to the
    front, which fine_tuning.keras_batch does not (the loss and gradients are the subject here)."""
    model.zero_grad()
    given = {k: torch.tensor(v) for k, v in inputs.items()}
    if model.config.model_type == "mbart":
        given["decoder_input_ids"] = torch.tensor(_decoder_inputs(model.config.to_dict(), inputs, labels), dtype=torch.int64)
    loss = model(**given, labels=torch.tensor(labels)).loss
    loss.backward()
    return float(loss.detach()), {name: p.grad.numpy().copy() for name, p in model.named_parameters() if p.requires_grad}


def _keras_batch(config: dict, inputs: dict, labels: np.ndarray) -> tuple[dict, np.ndarray]:
    return fine_tuning.keras_batch(inputs["input_ids"], inputs["attention_mask"], labels, config["pad_token_id"],
                                   config["decoder_start_token_id"])  # fmt: skip


def _decoder_inputs(config: dict, inputs: dict, labels: np.ndarray) -> np.ndarray:
    return _keras_batch(config, inputs, labels)[0]["decoder_token_ids"]  # [B, T]


def _targets(model) -> list:
    return (t5_weights if families.family_of(model) == "t5" else marian_weights).targets(model)


def _our_loss_and_gradients(model, config: dict, inputs: dict, labels: np.ndarray, loss_fn=None) -> tuple[float, dict]:
    """Ours: fine_tuning's batch (HF's shift) and HFCrossEntropy, each variable's gradient under its HF names."""
    import tensorflow as tf

    x, y = _keras_batch(config, inputs, labels)
    loss_fn = loss_fn or fine_tuning.HFCrossEntropy(dtype=model.compute_dtype)
    found = [(names, variable, transpose) for names, variable, transpose in _targets(model) if variable.trainable]
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x))
    grads = tape.gradient(loss, [variable.value for _, variable, _ in found])
    as_hf = {names: tf.convert_to_tensor(grad).numpy() for (names, _, _), grad in zip(found, grads, strict=True)}
    return float(loss), {names: as_hf[names].T if transpose else as_hf[names] for names, _, transpose in found}


def _assert_loss_and_every_gradient_equal_hfs(pair: dict, dtype: str) -> None:
    ours = pair["models"][dtype][1]
    inputs, labels = _labels_batch(pair["config"])
    hf_loss, hf_grads = _hf_reference(pair, dtype)
    loss, grads = _our_loss_and_gradients(ours, pair["config"], inputs, labels)
    errors = gradient_errors(grads, hf_grads)
    loss_error = abs(loss - hf_loss) / abs(hf_loss)
    print(f"{pair['family']} {dtype}: loss {loss_error:.3g}, gradients max {max(errors.values()):.3g} of {len(errors)}")
    assert loss_error < BOUNDS[dtype] and max(errors.values()) < BOUNDS[dtype], (loss_error, errors)


def test_loss_and_every_gradient_equal_hfs(pair):
    _assert_loss_and_every_gradient_equal_hfs(pair, "float64")


def test_loss_and_every_gradient_equal_hfs_in_float32(pair32):
    _assert_loss_and_every_gradient_equal_hfs(pair32, "float32")


class MeanOverPadding(fine_tuning.HFCrossEntropy):
    """The naive loss: -log p averaged over every position, the ignored ones read as the pad id."""

    def __init__(self, pad: int, **kwargs):
        super().__init__(**kwargs)
        self.pad = pad

    def call(self, y_true, y_pred):
        labels = np.where(np.asarray(y_true) == self.ignore_index, self.pad, np.asarray(y_true))  # [B, T]
        return super().call(labels, y_pred)


def test_negative_control_the_loss_averaged_over_padding_is_caught(pair):
    ours = pair["models"]["float64"][1]
    inputs, labels = _labels_batch(pair["config"])
    hf_loss, _ = _hf_reference(pair, "float64")
    naive = MeanOverPadding(pair["config"]["pad_token_id"], dtype="float64")
    loss, _ = _our_loss_and_gradients(ours, pair["config"], inputs, labels, naive)
    print(f"{pair['family']} averaged over padding: {abs(loss - hf_loss) / abs(hf_loss):.3g}")
    assert abs(loss - hf_loss) / abs(hf_loss) > BOUNDS["float32"]


def test_negative_control_t5s_norm_differentiated_by_the_chain_rule_is_caught(pair, monkeypatch):
    """T5LayerNorm's float32 1 / sqrt differentiated as written (not as torch's rsqrt backward) misses HF's gradients
    even in a float64 model: the variance is float32 in both."""
    if not pair["family"].startswith("t5"):
        pytest.skip("T5's RMS norm only")
    ours = pair["models"]["float64"][1]
    monkeypatch.setattr(t5_layers, "torch_rsqrt", lambda x: t5_layers.ops.divide(np.float32(1.0), t5_layers.ops.sqrt(x)))
    inputs, labels = _labels_batch(pair["config"])
    _, hf_grads = _hf_reference(pair, "float64")
    _, grads = _our_loss_and_gradients(ours, pair["config"], inputs, labels)
    error = max(gradient_errors(grads, hf_grads).values())
    print(f"{pair['family']} chain-rule rsqrt gradients: {error:.3g}")
    assert error > BOUNDS["float64"]
