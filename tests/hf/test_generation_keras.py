"""Our Keras models of the Hugging Face families (tf_impl/hf, key/value cached) run through tf_impl/generation.py's
compiled loop (XLA on TensorFlow) give the ids of transformers 5.23's `generate` on the HF model whose weights they
hold: 16 sources of mixed lengths; every supported field (tests/hf/test_generation_rules's cases) on a tiny trained
Marian in float32, greedy and beam in float64, and beam search with processors on every family.

Negative control: keras-hub's own `BeamSampler` on the same model (its beam search keeps no finished hypotheses and
no length penalty, and extends every row to the end) gives other ids than HF's beam search.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.hf.test_generation_rules import CASES, hf_generate, model_settings, sources
from tests.zoo import hf_models
from tf_impl import generation
from tf_impl.hf import families
from torch_impl.hf import families as torch_families


def keras_twin(model, dtype: str):
    ours = families.build(model.config.to_dict(), dtype)
    families.load_hf_weights(ours, torch_families.hf_state(model))
    return ours


def assert_cases_give_hfs_ids(model, ours, ids, mask, names) -> None:
    for name in names:
        expected = hf_generate(model, ids, mask, **CASES[name])
        keras_ids = generation.generate(ours, ids, mask, model_settings(model), model.config.to_dict(), **CASES[name])
        assert keras_ids.shape == expected.shape and (keras_ids == expected).all(), name


@pytest.fixture(scope="module")
def trained():
    model = hf_models.trained("marian")
    return model, sources(hf_models.VOCAB, model.config.pad_token_id, model.config.eos_token_id)


# together these set every supported field (plain greedy and beam search run in the other tests)
FIELD_CASES = ("length_penalty_early", "never_returning_two", "forced_and_minimum", "greedy_processors",
               "negative_penalty")  # fmt: skip


def test_every_field_gives_hfs_ids_in_float32(trained):
    model, (ids, mask) = trained
    assert_cases_give_hfs_ids(model, keras_twin(model, "float32"), ids, mask, FIELD_CASES)


def test_float64_gives_hfs_ids(trained):
    model, (ids, mask) = trained
    wide = copy.deepcopy(model).double()
    assert_cases_give_hfs_ids(wide, keras_twin(wide, "float64"), ids, mask, ("greedy", "length_penalty_early"))


@pytest.mark.parametrize("family", [family for family in hf_models.FAMILIES if family != "marian"])
def test_every_family_gives_hfs_ids(family):
    model = hf_models.model(family)
    ids, mask = sources(model.config.vocab_size, model.config.pad_token_id, model.config.eos_token_id)
    assert_cases_give_hfs_ids(model, keras_twin(model, "float32"), ids, mask, ("forced_and_minimum",))


def test_negative_control_keras_hubs_beam_sampler_gives_other_ids(trained):
    """keras-hub's BeamSampler over our model's cached step (its `next(prompt, cache, index)` contract)."""
    import keras_hub
    from keras import ops

    model, (ids, mask) = trained
    ours = keras_twin(model, "float32")
    decoding = ours.decoding()
    plan = model_settings(model).updated(**CASES["beam"]).resolved()
    expected = hf_generate(model, ids, mask, **CASES["beam"])
    memory, state = decoding.start(ops.convert_to_tensor(ids), ops.convert_to_tensor(mask), plan.max_length)
    beams = plan.num_beams
    memory = generation._map(memory, lambda x: ops.repeat(x, beams, axis=0))

    def next_step(prompt, cache, index):
        logits, cache = decoding.step(ops.take(prompt, index - 1, axis=1), index - 1, cache, memory)
        return logits, None, cache

    prompt = np.full((len(ids), plan.max_length), plan.pad_token_id, np.int32)
    prompt[:, 0] = plan.decoder_start_token_id
    sampler = keras_hub.samplers.BeamSampler(num_beams=beams)
    sampled = sampler(next_step, ops.convert_to_tensor(prompt), state, index=1, stop_token_ids=plan.eos_token_ids, model=None)
    sampled = ops.convert_to_numpy(sampled)[:, : expected.shape[1]]
    assert sampled.shape != expected.shape or (sampled != expected).any()
