"""The attention record of a trained run (shared.train.attention_samples) in each stack alone: the
teacher-forced attention it stores is the attention greedy decoding used, and a tiny run's record holds
its sentences' tokens and one distribution per output token.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from shared import catalogue
from shared.train import attention_samples, evaluation, runner, runs
from shared.verify import fixtures

DECODERS = [name for name in catalogue.built() if catalogue.get(name).variable_length and catalogue.get(name).has_attention]
SMALL = {"embedding_dim": 8, "hidden_size": 12, "attention_size": 10}
REVERSE_DATA = {"train_size": 48, "val_size": 16, "test_size": 16}
EXACT = 1e-12  # float64: the same computation in another order


def _greedy_and_model(stack, name: str):
    """Greedy decoding of a random source by the fixture model (golden weights, float64; the first source whose
    output has at least 3 tokens): (model, source [1, S], output ids [L], greedy attention [L, S])."""
    spec = catalogue.get(name)
    model = stack.build(name, "float64", **spec.fixture_config)
    stack.set_weights(model, fixtures.load_golden(name).weights)  # fixed weights: the same test every time
    for seed in range(20):
        src = np.random.default_rng(seed).integers(3, spec.fixture_config[spec.vocab_keys[0]], size=(1, 6))  # no special id
        decoded = stack.greedy(model, name, {"src": src, "src_len": np.array([6])}, max_len=7)
        if len(decoded["tokens"][0]) >= 3:
            break
    assert len(decoded["tokens"][0]) >= 3, "no source of the 20 gives an output of 3 tokens"
    return model, src, decoded["tokens"][0], decoded["attention"][0]


@pytest.mark.parametrize("name", DECODERS)
def test_the_teacher_forced_attention_is_the_greedy_attention(stack, name):
    spec = catalogue.get(name)
    model, src, tokens, greedy = _greedy_and_model(stack, name)
    forced = attention_samples.forced_attention(stack, model, name, src, tokens, spec.sos_id)
    assert forced.shape == greedy.shape
    np.testing.assert_allclose(forced, greedy, rtol=0, atol=EXACT)
    # negative control: the attention on other tokens (an output fed one position late, or the reference target,
    # would be such; an untrained model may decode one token throughout, so a shift alone could feed the same)
    other = np.where(tokens + 1 < spec.fixture_config[spec.vocab_keys[1]], tokens + 1, 3)
    naive = attention_samples.forced_attention(stack, model, name, src, other, spec.sos_id)
    assert np.abs(naive - greedy).max() > 100 * EXACT  # fixture models attend almost uniformly: still 100x outside


def _name(stack) -> str:
    return {"torch_impl": "torch", "tf_impl": "tf"}[stack.__name__]


def test_a_runs_record_holds_its_sentences_and_their_attention(stack, tmp_path):
    name = _name(stack)
    runs.create_run(tmp_path, "reverse_bahdanau", overrides=SMALL, corpus_options=REVERSE_DATA, batch_size=16, epochs=1)
    runner.train(tmp_path, name, progress=False)
    record = attention_samples.record(tmp_path, name, with_stacks=[name])
    assert json.loads((tmp_path / name / runs.ATTENTION_FILE).read_text()) == record  # the run wrote it when it finished
    assert record["stacks"] == [name] and record["steps"] == 3 and record["split"] == "test"
    assert [sentence["index"] for sentence in record["sentences"]] == [0, 1]
    _, _, _, corpus = runs.load_trained(tmp_path, name)
    for sentence in record["sentences"]:
        attention = np.array(sentence["attention"][name])  # [L, S]
        assert attention.shape == (len(sentence["output"]), len(sentence["source"])) == (10, 10)
        np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
        shown = evaluation.translate(tmp_path, name, " ".join(sentence["source"]))  # what `rosetta translate` shows
        assert shown["output"] == sentence["output"]
        np.testing.assert_allclose(attention, shown["attention"], atol=1e-6)
        assert sentence["source"] == corpus.src_vocab.decode(corpus.splits["test"][0][sentence["index"]])


def test_a_record_needs_the_stack_that_trained_it_and_its_checkpoint(stack, tmp_path):
    name, other = _name(stack), {"torch": "tf", "tf": "torch"}[_name(stack)]
    runs.create_run(tmp_path, "reverse_bahdanau", overrides=SMALL, corpus_options=REVERSE_DATA, batch_size=16, epochs=1)
    with pytest.raises(ValueError, match=f"decodes with the stack that trained it \\({name}\\)"):
        attention_samples.record(tmp_path, name, with_stacks=[other])
    with pytest.raises(ValueError, match=f"has no {name} checkpoint"):
        attention_samples.record(tmp_path, name, with_stacks=[name])
