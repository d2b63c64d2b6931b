"""Training runs in each stack alone (`rosetta train`'s engine, shared.train.runner): files, checkpoints,
evaluation, translation, and every bad input: divergence, interruption, another vocabulary, another run.

Runs are tiny (the reverse task at small sizes, a few steps), so these tests check the machinery; the
numbers of full runs are in reports/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from shared import data, stacks
from shared.cli import main as rosetta
from shared.data import readers
from shared.data.vocab import Vocab
from shared.io import safetensors_io
from shared.train import evaluation, runner, runs

SMALL = {"embedding_dim": 8, "hidden_size": 12, "attention_size": 10}
REVERSE_DATA = {"train_size": 64, "val_size": 16, "test_size": 16}


def _run(tmp_path, name="reverse_bahdanau", **settings):
    """A prepared run folder for a tiny reverse-task model: 8 steps of batch 16 (2 epochs of 4)."""
    settings = {"batch_size": 16, "epochs": 2, "checkpoint_every": 3, **settings}
    runs.create_run(tmp_path / "run", name, overrides=SMALL, corpus_options=REVERSE_DATA, **settings)
    return tmp_path / "run"


def _stack_name(stack) -> str:
    return {"torch_impl": "torch", "tf_impl": "tf"}[stack.__name__]


_TRAINED: dict[str, tuple[Path, dict]] = {}  # per stack (and pytest worker): one tiny run, trained once


def _trained_run(name: str, tmp_path_factory) -> tuple[Path, dict]:
    """The `_run` of stack `name` trained (float64: the resumed runs of test_reliability follow its curve) and its
    final metrics, trained once for every test that reads a finished run; a test that changes it copies it."""
    if name not in _TRAINED:
        run_dir = _run(tmp_path_factory.mktemp(f"trained-{name}"), dtype="float64")
        _TRAINED[name] = run_dir, runner.train(run_dir, name, progress=False)
    return _TRAINED[name]


def test_a_run_writes_logs_checkpoints_and_metrics(stack, tmp_path_factory):
    name = _stack_name(stack)
    run_dir, result = _trained_run(name, tmp_path_factory)
    out = run_dir / name
    losses = [json.loads(line) for line in (out / runs.LOSS_LOG).read_text().splitlines()]
    assert [record["step"] for record in losses] == list(range(1, 9)) and all(np.isfinite(r["loss"]) for r in losses)
    assert len((out / runs.EVAL_LOG).read_text().splitlines()) == 2  # one validation line per epoch
    assert json.loads((out / runs.EVAL_FILE).read_text()) == json.loads(json.dumps(result))
    assert result["split"] == "test" and result["steps"] == 8 and 0 <= result["sequence_accuracy"] <= 1
    _, metadata = safetensors_io.load(out / runs.CHECKPOINT)
    assert metadata["step"] == "8"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "a temporary file was left behind"


def test_the_checkpoint_loads_back_in_both_formats(stack, tmp_path_factory):
    name = _stack_name(stack)
    run_dir, _ = _trained_run(name, tmp_path_factory)
    _, model, run, corpus = runs.load_trained(run_dir, name)
    train_module = __import__(f"{stack.__name__}.files", fromlist=["load_native"])
    native = stack.build(run.model, run.dtype, **run.config)
    train_module.load_native(native, run_dir / name / f"checkpoint{train_module.NATIVE_SUFFIX}")
    for key, value in stack.get_weights(model).items():
        np.testing.assert_array_equal(stack.get_weights(native)[key], value, err_msg=key)
    again = evaluation.evaluate(stack, model, run, corpus, "test")
    assert again["loss"] == pytest.approx(json.loads((run_dir / name / runs.EVAL_FILE).read_text())["loss"], abs=1e-6)


def test_translate_decodes_and_draws_the_attention(stack, tmp_path, tmp_path_factory):
    name = _stack_name(stack)
    run_dir, _ = _trained_run(name, tmp_path_factory)
    result = evaluation.translate(run_dir, name, "3 4 5 6 7 8 9 10 11 12", heatmap=tmp_path / "attention.png")
    assert len(result["output"]) == 10 and result["attention"].shape == (10, 10)
    assert (tmp_path / "attention.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="not in the vocabulary"):
        evaluation.translate(run_dir, name, "3 4 99")


def test_a_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(stack, tmp_path, monkeypatch):
    run_dir, name = _run(tmp_path), _stack_name(stack)
    real_after_step = runner._Steps.after_step

    def poisoned(self, loss):  # the loss the stack's Trainer reports for step 7 (Keras's: from fit's logs)
        return real_after_step(self, float("nan") if self.step == 6 else loss)

    monkeypatch.setattr(runner._Steps, "after_step", poisoned)
    with pytest.raises(runs.RunError, match="at step 7; stopped, the last good checkpoint \\(step 6\\)"):
        runner.train(run_dir, name, progress=False)
    _, metadata = safetensors_io.load(run_dir / name / runs.CHECKPOINT)
    assert metadata["step"] == "6"
    runs.load_trained(run_dir, name)  # still loadable


def test_an_interrupted_run_leaves_the_last_complete_checkpoint(stack, tmp_path, monkeypatch):
    run_dir, name = _run(tmp_path), _stack_name(stack)
    real_after_step = runner._Steps.after_step

    def interrupted(self, loss):  # Ctrl-C during step 5 (inside Keras's fit for tf)
        if self.step == 4:
            raise KeyboardInterrupt
        return real_after_step(self, loss)

    monkeypatch.setattr(runner._Steps, "after_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.train(run_dir, name, progress=False)
    _, metadata = safetensors_io.load(run_dir / name / runs.CHECKPOINT)
    assert metadata["step"] == "4"  # every 3 steps and at the end of each 4-step epoch; step 5 was interrupted
    runs.load_trained(run_dir, name)
    assert not [p for p in (run_dir / name).iterdir() if p.name.startswith(".")]


def test_a_checkpoint_of_another_vocabulary_is_refused(stack, tmp_path, tmp_path_factory):
    name = _stack_name(stack)
    (first, _), second = _trained_run(name, tmp_path_factory), _run(tmp_path / "b")
    other = readers.reverse_corpus(**REVERSE_DATA, vocab_size=20, seed=1)  # same sizes, another token list
    other.src_vocab = other.tgt_vocab = Vocab(
        [*other.tgt_vocab.itos[:3], *reversed(other.tgt_vocab.itos[3:])], other.tgt_vocab.specials
    )
    other.save(second / runs.CORPUS_DIR)
    record = json.loads((second / runs.RUN_FILE).read_text())  # the run's own corpus: its checkpoint alone is foreign
    (second / runs.RUN_FILE).write_text(json.dumps({**record, "fingerprints": runs.fingerprints(other)}))
    (second / name).mkdir()
    (second / name / runs.CHECKPOINT).write_bytes((first / name / runs.CHECKPOINT).read_bytes())
    with pytest.raises(ValueError, match="trained with another src vocabulary"):
        runs.load_trained(second, name)


def test_a_second_training_needs_force(stack, tmp_path, tmp_path_factory):
    name = _stack_name(stack)
    run_dir = Path(shutil.copytree(_trained_run(name, tmp_path_factory)[0], tmp_path / "trained"))  # this test's own
    with pytest.raises(runs.RunError, match="pass --resume to continue it, --force to train again"):
        runner.train(run_dir, name, progress=False)
    runner.train(run_dir, name, force=True, progress=False)


def test_the_command_line_trains_evaluates_and_translates(stack, tmp_path, capsys):
    name, run_dir = _stack_name(stack), str(tmp_path / "cli")
    sizes = [item for key, value in SMALL.items() for item in ("--set", f"{key}={value}")]
    options = [item for key, value in REVERSE_DATA.items() for item in ("--data-option", f"{key}={value}")]
    argv = ["train", "reverse_luong_dot", "--stack", name, "--run-dir", run_dir, "--batch-size", "16", "--epochs", "1", "--quiet"]
    assert rosetta(argv + sizes[:4] + options) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["split"] == "test"  # the final metrics, one JSON line
    assert rosetta(["evaluate", run_dir, "--stack", name, "--split", "val"]) == 0
    assert json.loads(capsys.readouterr().out)["split"] == "val"
    assert rosetta(["translate", run_dir, "3 4 5", "--stack", name]) == 0
    assert len(capsys.readouterr().out.split()) == 3


# ---- bad inputs that need no training ----


def test_bad_run_requests_get_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    with pytest.raises(ValueError, match="pass --data-dir or set ROSETTA_DATA_DIR"):
        runs.create_run(tmp_path / "a", "luong_general")
    with pytest.raises(ValueError, match="does not exist"):
        runs.create_run(tmp_path / "b", "luong_general", data_dir=tmp_path / "missing")
    with pytest.raises(ValueError, match="trains nothing"):
        runs.create_run(tmp_path / "c", "additive_attention")
    with pytest.raises(ValueError, match="has no config hidden_dim"):
        runs.create_run(tmp_path / "e", "reverse_rnn", overrides={"hidden_dim": 3}, corpus_options=REVERSE_DATA)
    assert not (tmp_path / "e").exists(), "a refused request left a folder behind"
    _run(tmp_path)
    with pytest.raises(runs.RunError, match="already holds another run"):
        _run(tmp_path, epochs=3)
    with pytest.raises(ValueError, match="is not a training run"):
        runs.load_run(tmp_path)
    with pytest.raises(ValueError, match="unknown stack"):
        stacks.import_stack("jax")
    assert rosetta(["train", "luong_general", "--run-dir", str(tmp_path / "d"), "--data-dir", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_epochs_of_steps_per_epoch_read_the_passes_one_after_the_other(tmp_path):
    """Keras's `fit(train_ds.repeat(), steps_per_epoch=N)`: epoch e holds batches e*N .. e*N + N - 1 of the stream of
    shuffled passes (pass p drawn as a whole epoch p would be)."""
    run_dir = _run(tmp_path, steps_per_epoch=3, epochs=5)
    run, corpus = runs.load_run(run_dir), runs.load_corpus(run_dir)
    stream = [batch for p in range(4) for batch in corpus.batches("train", 16, rng=np.random.default_rng([run.seed, p]))]
    epochs = [batch for epoch in range(5) for batch in runner._epoch_batches(run, corpus, epoch)]
    assert len(epochs) == 15
    for got, expected in zip(epochs, stream[:15], strict=True):
        assert all(np.array_equal(got[key], expected[key]) for key in expected)
    one_pass = runs.load_run(_run(tmp_path / "b"))  # no steps_per_epoch: an epoch is one pass (the control)
    assert len(runner._epoch_batches(one_pass, corpus, 0)) == 4


def test_early_stopping_ends_the_run_after_patience_epochs_without_improvement(stack, tmp_path, monkeypatch):
    losses = iter([3.0, 2.0, 2.5, 2.0, 1.0, 0.5])  # best at epoch 1; epochs 2 and 3 do not improve (2.0 ties)
    real_evaluate = runner.evaluate
    monkeypatch.setattr(
        runner,
        "evaluate",
        lambda *a, **k: {**real_evaluate(*a, **k), "loss": next(losses)} if a[4] == "val" else real_evaluate(*a, **k),
    )
    run_dir = _run(tmp_path, steps_per_epoch=2, epochs=6, patience=2)
    runner.train(run_dir, _stack_name(stack), progress=False)
    evals = runs.read_json_lines(run_dir / _stack_name(stack) / runs.EVAL_LOG)
    assert [record["loss"] for record in evals] == [3.0, 2.0, 2.5, 2.0]  # stopped after epoch 3
    assert len(runs.read_json_lines(run_dir / _stack_name(stack) / runs.LOSS_LOG)) == 8


def test_stops_early_needs_a_patience():
    assert not runner.stops_early([{"loss": 1.0}, {"loss": 2.0}, {"loss": 3.0}], None)
    assert runner.stops_early([{"loss": 1.0}, {"loss": 2.0}, {"loss": 3.0}], 2)
    assert not runner.stops_early([{"loss": 1.0}, {"loss": 2.0}, {"loss": 0.5}], 2)
