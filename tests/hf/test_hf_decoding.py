"""The key/value-cached decoding of our Keras HF models (tf_impl/hf/decoding.py: start, then step per position) for
every family of tests/zoo/hf_models.py: three decoder sequences fed position by position on a source batch padded to
mixed lengths give, at every step, the logits of our model's teacher-forced forward and of transformers' (eager
attention) at that position: float64 within 1e-12 of the largest value. The compiled loop (XLA, JAX) is proven by
the ids it generates: tests/hf/test_generation_keras.py, tests/keras/test_generation_backends.py.
Negative controls: the cache's later positions (> index) left unmasked, and BART's learned positions read without
their offset 2, are each caught by the same comparison."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch
from keras import ops

from tests.zoo import hf_models
from tf_impl.hf import decoding, families, marian_layers
from torch_impl.hf import families as torch_families

BOUNDS = {"float64": 1e-12, "float32": 1e-5}
FLOAT32_FAMILIES = ("marian", "t5")  # one per backbone class
SOURCE_LENGTHS = (7, 5, 3)  # the source rows' tokens, padding after
MAX_LENGTH = 6  # decoder positions, the start token included: the caches' length


def pair(family: str, dtypes=("float64",)) -> dict:
    """`family`'s HF model and ours holding its weights, per dtype: {dtype: (hf, ours)}, plus its config and batch."""
    made = hf_models.model(family)
    config = made.config.to_dict()
    state = {key: value.detach().numpy() for key, value in made.state_dict().items()}
    out = {"family": family, "config": config, "batch": batch(config)}
    for dtype in dtypes:
        hf = torch_families.build(config, dtype, blank=True)
        torch_families.load_hf_weights(hf, state)
        ours = families.build(config, dtype)
        families.load_hf_weights(ours, torch_families.hf_state(hf))
        out[dtype] = (hf, ours)
    return out


def batch(config: dict) -> dict:
    """Source ids [B, S] right-padded with the pad id (lengths 7, 5, 3), its mask, decoder ids [B, L] (the start token,
    then random target tokens), as numpy int32."""
    rng = np.random.default_rng(5)
    target_vocab = config.get("decoder_vocab_size") or config["vocab_size"]
    mask = (np.arange(7)[None] < np.array(SOURCE_LENGTHS)[:, None]).astype(np.int32)  # [B, S]
    input_ids = np.where(mask == 1, rng.integers(3, config["vocab_size"] - 2, mask.shape), config["pad_token_id"])  # [B, S]
    decoder_ids = rng.integers(3, target_vocab - 2, (len(SOURCE_LENGTHS), MAX_LENGTH))  # [B, L]
    decoder_ids[:, 0] = config["decoder_start_token_id"]
    return {"input_ids": input_ids.astype(np.int32), "attention_mask": mask, "decoder_ids": decoder_ids.astype(np.int32)}


def full_logits(model, given: dict) -> np.ndarray:
    """Our model's teacher-forced forward on every decoder position [B, L, V]."""
    inputs = {"encoder_token_ids": given["input_ids"], "encoder_padding_mask": given["attention_mask"],
              "decoder_token_ids": given["decoder_ids"], "decoder_padding_mask": np.ones_like(given["decoder_ids"])}  # fmt: skip
    return ops.convert_to_numpy(model(inputs))


def hf_logits(model, given: dict) -> np.ndarray:
    """transformers' teacher-forced forward (eager attention) [B, L, V]."""
    tensors = {name: torch.tensor(given[name], dtype=torch.int64) for name in ("input_ids", "attention_mask")}
    with torch.no_grad():
        return model(**tensors, decoder_input_ids=torch.tensor(given["decoder_ids"], dtype=torch.int64)).logits.numpy()


def stepped_logits(decoder, given: dict) -> np.ndarray:
    """start, then one eager step per decoder position (its index an int32 tensor) -> each step's logits [B, L, V];
    checks that every memory and state tensor leads with the batch and that a step keeps the state's shapes."""
    memory, state = decoder.start(given["input_ids"], given["attention_mask"], MAX_LENGTH)
    rows = len(SOURCE_LENGTHS)
    assert all(tensor.shape[0] == rows for tensor in keras.tree.flatten((memory, state)))
    found = []
    for index in range(MAX_LENGTH):
        before = [(tuple(t.shape), t.dtype) for t in keras.tree.flatten(state)]
        logits, state = decoder.step(given["decoder_ids"][:, index], ops.convert_to_tensor(index, "int32"), state, memory)
        assert [(tuple(t.shape), t.dtype) for t in keras.tree.flatten(state)] == before
        found.append(ops.convert_to_numpy(logits))  # [B, V]
    return np.stack(found, axis=1)  # [B, L, V]


def looped_logits(decoder, input_ids, attention_mask, decoder_ids):
    """The loop a compiled generator runs: start, then keras.ops.while_loop over the positions, the index a traced int32
    scalar, the logits written into a static [B, L, V] with slice_update."""
    memory, state = decoder.start(input_ids, attention_mask, MAX_LENGTH)
    logits = ops.zeros((ops.shape(decoder_ids)[0], MAX_LENGTH, decoder.vocabulary_size), decoder.dtype)  # [B, L, V]

    def body(index, state, logits):
        step_logits, state = decoder.step(ops.take(decoder_ids, index, axis=1), index, state, memory)  # [B, V]
        zero = ops.zeros_like(index)  # JAX wants every start index of one integer type
        return index + 1, state, ops.slice_update(logits, (zero, index, zero), step_logits[:, None])

    start = ops.convert_to_tensor(0, "int32")
    return ops.while_loop(lambda index, *_: index < MAX_LENGTH, body, (start, state, logits))[2]  # [B, L, V]


def relative(actual, expected) -> float:
    return float(np.abs(np.asarray(actual, np.float64) - expected).max() / np.abs(expected).max())


@pytest.fixture(scope="module", params=hf_models.FAMILIES)
def family(request) -> dict:
    """One family in float64 (built once for the module), with both references and our stepped logits."""
    made = pair(request.param)
    hf, ours = made["float64"]
    made["full"], made["hf"] = full_logits(ours, made["batch"]), hf_logits(hf, made["batch"])
    made["stepped"] = stepped_logits(decoding.decoding(ours), made["batch"])
    return made


@pytest.fixture(scope="module", params=FLOAT32_FAMILIES)
def family32(request) -> dict:
    return pair(request.param, ("float32",))


def test_each_step_equals_the_full_forward_and_hfs(family):
    errors = {"ours": relative(family["stepped"], family["full"]), "hf": relative(family["stepped"], family["hf"])}
    print(f"{family['family']} float64: {errors}")
    assert family["stepped"].shape == family["full"].shape
    assert max(errors.values()) < BOUNDS["float64"], errors


@pytest.mark.parametrize("family", FLOAT32_FAMILIES, indirect=True)  # the mask's code is one per backbone class
def test_negative_control_the_caches_later_positions_unmasked_are_caught(family, monkeypatch):
    monkeypatch.setattr(marian_layers, "cache_mask", lambda index, length, dtype: ops.zeros((1, 1, 1, length), dtype))
    error = relative(stepped_logits(decoding.decoding(family["float64"][1]), family["batch"]), family["full"])
    print(f"{family['family']} with no cache mask: {error:.3g}")
    assert error > BOUNDS["float32"]


@pytest.mark.parametrize("family", ["bart", "mbart"], indirect=True)  # the learned positions
def test_negative_control_bart_positions_without_their_offset_are_caught(family, monkeypatch):
    monkeypatch.setattr(
        marian_layers.LearnedPositions, "at", lambda self, index: ops.take(self.embeddings, ops.reshape(index, (1,)), axis=0)
    )
    error = relative(stepped_logits(decoding.decoding(family["float64"][1]), family["batch"]), family["full"])
    print(f"{family['family']} positions without offset 2: {error:.3g}")
    assert error > BOUNDS["float32"]


def test_a_model_without_cached_decoding_is_refused_by_name():
    with pytest.raises(TypeError, match="dict has no cached decoding"):
        decoding.decoding({})


def test_max_length_must_be_a_python_int(family32):
    decoder = family32["float32"][1].decoding()
    given = family32["batch"]
    with pytest.raises(ValueError, match="max_length: expected a positive python int"):
        decoder.start(given["input_ids"], given["attention_mask"], 0)
