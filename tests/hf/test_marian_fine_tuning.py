"""Fine-tuning on one curve: transformers' MarianMTModel in a plain PyTorch loop (torch.optim.AdamW, HF's loss from
`labels`, -100 ignored) against our Keras MarianSeq2SeqLM trained by `fit` (tf_impl/hf/fine_tuning.py, TorchAdamW),
200 steps in float64, dropout 0: per-step losses to 1e-9 and the trained weights, exported by `hf_state`, equal to
torch's state_dict. Negative controls: Keras's own AdamW (epsilon hat), the loss averaged over every position
(padding included), and the pad row's lookup gradient left unmasked (nn.Embedding(padding_idx) zeroes it; Marian's
decoder starts every target with pad) each drift off torch's curve. Also TorchAdamW, HF's loss and the labels shift
alone against torch's, and one error per bad batch."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
import transformers

from tests.zoo import hf_models
from tf_impl.hf import fine_tuning, marian, marian_layers
from tf_impl.keras_compat.optim import TorchAdam, TorchAdamW

BOUND = 1e-9
STEPS, BATCH = 200, 4  # a corpus of 8 pairs, in order: 100 epochs of 2 batches
CONTROL_STEPS = 5  # the naive setups drift from the first update on; run eagerly (tracing the step costs more than 5 steps)
LR, WEIGHT_DECAY = 1e-3, 0.01


def _corpus() -> dict:
    """8 ragged pairs, right-padded: sources of 2..7 tokens (pad where the mask is 0), targets of 1..6 (-100 after)."""
    pad, rng = hf_models.VOCAB - 1, np.random.default_rng(3)
    source_lengths, target_lengths = np.array([7, 3, 5, 2, 6, 4, 7, 3]), np.array([4, 6, 2, 5, 1, 3, 6, 2])
    mask = (np.arange(7)[None] < source_lengths[:, None]).astype("int64")  # [N, S]
    ids = np.where(mask == 1, rng.integers(3, pad, (8, 7)), pad)  # [N, S]
    labels = np.where(np.arange(6)[None] < target_lengths[:, None], rng.integers(3, pad, (8, 6)), -100)  # [N, T]
    return {name: np.tile(array, (STEPS * BATCH // 8, 1)) for name, array in
            (("input_ids", ids), ("attention_mask", mask), ("labels", labels))}  # fmt: skip


def _numpy_state(model) -> dict:
    return {key: value.detach().numpy().copy() for key, value in model.state_dict().items()}


@pytest.fixture(scope="module")
def torch_run() -> dict:
    """HF's model trained by a plain PyTorch loop: its config, first state, per-step losses and trained state_dict."""
    model = hf_models.model("marian", dropout=0.0).double().train()
    first, corpus = _numpy_state(model), _corpus()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    curve, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)  # a d_model 16 model: threads only contend with TensorFlow's on a shared machine
    try:
        for step in range(STEPS):
            rows = slice(step * BATCH, (step + 1) * BATCH)
            loss = model(**{name: torch.tensor(array[rows]) for name, array in corpus.items()}).loss  # HF's loss from labels
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    return {"config": model.config.to_dict(), "first": first, "curve": np.array(curve), "trained": _numpy_state(model)}


def _fit(run: dict, optimizer, steps: int, loss=None, labels=None, run_eagerly: bool = False):
    """Our model from torch's first state, trained by `fit` on the same batches in order: (per-step losses, model)."""
    config, corpus = run["config"], _corpus()
    model = marian.build(config, dtype="float64")
    marian.load_hf_weights(model, run["first"])
    x, y = fine_tuning.keras_batch(corpus["input_ids"], corpus["attention_mask"], corpus["labels"],
                                   config["pad_token_id"], config["decoder_start_token_id"])  # fmt: skip
    # XLA compiles longer than it runs; the controls' few steps run eagerly (the same math, no step traced)
    fine_tuning.compile_for_fine_tuning(model, optimizer, loss=loss, jit_compile=False, run_eagerly=run_eagerly)
    losses = fine_tuning.StepLosses()
    rows = steps * BATCH
    model.fit({k: v[:rows] for k, v in x.items()}, (y if labels is None else labels)[:rows], batch_size=BATCH,
              shuffle=False, verbose=0, callbacks=[losses])  # fmt: skip
    return np.array(losses.losses), model


def _curve_error(curve: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(curve - reference[: len(curve)]).max() / np.abs(reference).max())


def test_fit_follows_torch_adamw_for_200_steps(torch_run):
    curve, model = _fit(torch_run, TorchAdamW(LR, weight_decay=WEIGHT_DECAY), STEPS)
    assert len(curve) == STEPS
    exported, trained = marian.hf_state(model), torch_run["trained"]
    assert sorted(exported) == sorted(trained)
    scale = max(np.abs(value).max() for value in trained.values())
    weights = {key: float(np.abs(exported[key] - value).max() / scale) for key, value in trained.items()}
    print(f"loss curve {_curve_error(curve, torch_run['curve']):.2e}, trained weights {max(weights.values()):.2e} "
          f"(loss {torch_run['curve'][0]:.3f} -> {torch_run['curve'][-1]:.3f})")  # fmt: skip
    assert _curve_error(curve, torch_run["curve"]) < BOUND
    assert max(weights.values()) < BOUND, sorted(weights.items(), key=lambda item: -item[1])[:3]
    moved = max(np.abs(value - torch_run["first"][key]).max() for key, value in trained.items())
    assert moved > 1e-2  # the premise: 200 steps moved the weights well past the bound


def _naive_loss_labels(run: dict) -> np.ndarray:
    labels = _corpus()["labels"]
    return np.where(labels == fine_tuning.IGNORE_INDEX, run["config"]["pad_token_id"], labels).astype("int32")


NAIVE = {  # name -> (optimizer, loss, labels): each a usual Keras port's choice, torch's curve missed
    "keras AdamW (epsilon hat)": lambda run: (keras.optimizers.AdamW(LR, weight_decay=WEIGHT_DECAY, epsilon=1e-8), None, None),
    "loss over every position (padding as pad)": lambda run: (
        TorchAdamW(LR, weight_decay=WEIGHT_DECAY),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype="float64"), _naive_loss_labels(run)),
}  # fmt: skip


@pytest.mark.parametrize("naive", list(NAIVE))
def test_naive_setups_drift(torch_run, naive):
    optimizer, loss, labels = NAIVE[naive](torch_run)
    curve, _ = _fit(torch_run, optimizer, CONTROL_STEPS, loss, labels, run_eagerly=True)
    print(f"{naive}: loss curve {_curve_error(curve, torch_run['curve']):.2e} in {CONTROL_STEPS} steps")
    assert _curve_error(curve, torch_run["curve"]) > BOUND


def test_pad_row_lookup_gradient_unmasked_drifts(torch_run, monkeypatch):
    """Without nn.Embedding(padding_idx)'s zero gradient on the pad row's lookups, the decoder's start token (pad)
    trains that row: the curve leaves torch's."""
    monkeypatch.setattr(marian_layers, "pad_row_lookup", lambda embedding, tokens, pad_token_id: embedding(tokens))
    curve, _ = _fit(torch_run, TorchAdamW(LR, weight_decay=WEIGHT_DECAY), CONTROL_STEPS, run_eagerly=True)
    print(f"pad row unmasked: loss curve {_curve_error(curve, torch_run['curve']):.2e} in {CONTROL_STEPS} steps")
    assert _curve_error(curve, torch_run["curve"]) > BOUND


def _torch_adamw_steps(values, gradients, decayed) -> list:
    """torch.optim.AdamW on `values`, the i-th parameter decayed only if decayed[i] (a group with weight_decay 0)."""
    params = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    groups = [{"params": [p for p, d in zip(params, decayed, strict=True) if d == flag], "weight_decay": WEIGHT_DECAY * flag}
              for flag in (True, False)]  # fmt: skip
    optimizer = torch.optim.AdamW(groups, lr=LR)
    for step in gradients:
        for param, gradient in zip(params, step, strict=True):
            param.grad = torch.tensor(gradient)
        optimizer.step()
    return [p.detach().numpy() for p in params]


def _keras_steps(optimizer, values, gradients, excluded=()) -> list:
    variables = [keras.Variable(v, dtype="float64", name=f"p{i}") for i, v in enumerate(values)]
    optimizer.exclude_from_weight_decay(var_list=[variables[i] for i in excluded])
    for step in gradients:
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), v) for g, v in zip(step, variables, strict=True)])
    return [keras.ops.convert_to_numpy(v) for v in variables]


def test_torch_adamw_is_torch_optim_adamw():
    """50 steps on three tensors (the third in a no-decay group / excluded): TorchAdamW to 1e-15 relative of torch's;
    Keras's AdamW (epsilon hat, float32 learning rate) and TorchAdam (no decay) are caught."""
    rng = np.random.default_rng(0)
    values = [rng.normal(size=shape) for shape in ((3, 4), (5,), (2, 2))]
    gradients = [[rng.normal(scale=10.0 ** rng.integers(-6, 0), size=v.shape) for v in values] for _ in range(50)]
    reference = _torch_adamw_steps(values, gradients, (True, True, False))

    def error(found):
        return max(float(np.abs(f - r).max() / np.abs(r).max()) for f, r in zip(found, reference, strict=True))

    ours = error(_keras_steps(TorchAdamW(LR, weight_decay=WEIGHT_DECAY), values, gradients, excluded=(2,)))
    stock = keras.optimizers.AdamW(LR, weight_decay=WEIGHT_DECAY, epsilon=1e-8)
    keras_adamw = error(_keras_steps(stock, values, gradients, excluded=(2,)))
    no_decay = error(_keras_steps(TorchAdam(LR), values, gradients))
    print(f"TorchAdamW {ours:.2e}, keras AdamW {keras_adamw:.2e}, TorchAdam {no_decay:.2e}")
    assert ours < 1e-15
    assert keras_adamw > BOUND and no_decay > BOUND


def test_torch_adamw_config_round_trip():
    optimizer = TorchAdamW(2e-4, weight_decay=0.05)
    again = TorchAdamW.from_config(optimizer.get_config())
    assert (again.torch_lr, again.torch_weight_decay, again.weight_decay) == (2e-4, 0.05, None)
    with pytest.raises(ValueError, match="weight_decay must be a number >= 0"):
        TorchAdamW(weight_decay=-0.1)


def test_hf_loss_and_shift_are_hfs():
    """HFCrossEntropy is torch's CrossEntropyLoss(ignore_index=-100) to 1e-15; shift_tokens_right is HF's; the loss
    averaged over every position (ignored ones counted) is caught."""
    rng = np.random.default_rng(2)
    logits, labels = rng.normal(size=(3, 5, 11)), rng.integers(0, 11, (3, 5))  # [B, T, V], [B, T]
    labels[0, 3:], labels[2, 1:] = -100, -100
    reference = torch.nn.CrossEntropyLoss()(torch.tensor(logits).view(-1, 11), torch.tensor(labels).view(-1)).item()
    ours = float(keras.ops.convert_to_numpy(fine_tuning.HFCrossEntropy(dtype="float64")(labels, logits)))
    assert abs(ours - reference) / reference < 1e-15
    every = keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype="float64")(np.maximum(labels, 0), logits)
    assert abs(float(keras.ops.convert_to_numpy(every)) - reference) / reference > BOUND
    shifted = transformers.models.marian.modeling_marian.shift_tokens_right(torch.tensor(labels), 9, 10).numpy()
    assert np.array_equal(fine_tuning.shift_tokens_right(labels, 9, 10), shifted)


BAD_BATCHES = {  # field -> (input_ids, attention_mask, labels)
    "input_ids": (np.array([[3, 60]]), np.ones((1, 2), int), np.array([[4, -100]])),
    "labels": (np.array([[3, 4]]), np.ones((1, 2), int), np.array([[4, -1]])),
    "attention_mask": (np.array([[3, 4]]), np.array([[1, 2]]), np.array([[4, 5]])),
}


@pytest.mark.parametrize("field", list(BAD_BATCHES))
def test_bad_batch_names_its_field(field):
    with pytest.raises(ValueError, match=f"fine-tuning batch field '{field}'"):
        fine_tuning.keras_batch(*BAD_BATCHES[field], pad_token_id=47, decoder_start_token_id=47, vocabulary_size=48,
                                decoder_vocabulary_size=48)  # fmt: skip
