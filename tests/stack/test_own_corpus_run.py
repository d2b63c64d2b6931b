"""`rosetta train luong_general --corpus DIR --langs de,en` end to end in each stack: a tiny corpus of your own (plain
and .gz files, no test split), a few steps at small sizes, then `rosetta evaluate` and `rosetta translate` on the run.
Then `rosetta translate --input/--output` (a file, greedy and beam search) and `rosetta evaluate --beams`. The corpus
itself is tested in tests/shared/test_own_corpus.py; a file's bad inputs in tests/shared/test_translate_file.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from shared.cli import main as rosetta
from shared.train import evaluation, runs, translation

GERMAN = ["ein hund läuft .", "zwei katzen schlafen .", "ein mann isst brot .", "ein hund schläft .", "zwei hunde laufen ."]
ENGLISH = ["a dog runs .", "two cats sleep .", "a man eats bread .", "a dog sleeps .", "two dogs run ."]


def _stack_name(stack) -> str:
    return {"torch_impl": "torch", "tf_impl": "tf"}[stack.__name__]


_TRAINED: dict[str, Path] = {}  # per stack: the run the first test trained, which the others read


def test_rosetta_trains_and_translates_on_an_own_corpus(stack, tmp_path, capsys):
    corpus, run_dir, name = tmp_path / "corpus", str(tmp_path / "run"), _stack_name(stack)
    corpus.mkdir()
    (corpus / "train.de").write_text("".join(f"{line}\n" for line in GERMAN * 4))
    (corpus / "train.en.gz").write_bytes(gzip.compress("".join(f"{line}\n" for line in ENGLISH * 4).encode()))
    (corpus / "dev.de").write_text("ein hund isst .\nzwei männer laufen .\n")
    (corpus / "dev.en").write_text("a dog eats .\ntwo men run .\n")
    sizes = ["--set", "embed_dim=8", "--set", "hidden_dim=12"]
    argv = ["train", "luong_general", "--corpus", str(corpus), "--langs", "de,en", "--tokenizer", "whitespace"]
    argv += ["--min-freq", "1", "--stack", name, "--run-dir", run_dir, "--batch-size", "4", "--epochs", "2", "--quiet"]
    assert rosetta(argv + sizes) == 0
    run = runs.load_run(run_dir)
    assert (run.dataset, run.config["input_dim"], run.config["output_dim"]) == ("corpus", 17, 17)
    result = json.loads((tmp_path / "run" / name / runs.EVAL_FILE).read_text())
    assert result["split"] == "val" and result["steps"] == 10 and result["sentences"] == 2  # no test split: val
    assert result["beams"] == evaluation.FINAL_BEAMS and 0 <= result["bleu_beam"] <= 100  # beside greedy's bleu
    assert len(runs.read_json_lines(tmp_path / "run" / name / runs.LOSS_LOG)) == 10  # 2 epochs of 5 batches
    capsys.readouterr()
    assert rosetta(["evaluate", run_dir, "--stack", name, "--split", "val"]) == 0
    assert json.loads(capsys.readouterr().out)["loss"] == result["loss"]
    assert rosetta(["translate", run_dir, "Ein Hund isst.", "--stack", name]) == 0
    output, vocab = capsys.readouterr().out.split(), runs.load_corpus(tmp_path / "run").tgt_vocab
    assert 1 <= len(output) <= run.max_len and all(token in vocab.stoi for token in output)
    translated = evaluation.translate(run_dir, name, "Ein Hund isst.")  # tokenized as the corpus was: "isst." is unknown
    assert translated["source"] == ["<sos>", "ein", "hund", "isst.", "<eos>"] and translated["output"] == output
    assert translated["attention"].shape == (len(output), 5)
    _TRAINED[name] = tmp_path / "run"


def _trained(stack, tmp_path_factory, capsys) -> Path:
    """The run the first test trains, trained here where another test of this worker comes first."""
    name = _stack_name(stack)
    if name not in _TRAINED:
        test_rosetta_trains_and_translates_on_an_own_corpus(stack, tmp_path_factory.mktemp(f"own-{name}"), capsys)
        capsys.readouterr()
    return _TRAINED[name]


def test_translate_a_file_greedy_as_sentence_by_sentence_and_with_beams(stack, tmp_path, tmp_path_factory, capsys):
    run_dir, name = _trained(stack, tmp_path_factory, capsys), _stack_name(stack)
    source = tmp_path / "in.de"
    source.write_text("".join(f"{line}\n" for line in GERMAN))
    argv = ["translate", str(run_dir), "--stack", name, "--input", str(source), "--batch-size", "2"]
    assert rosetta([*argv, "--output", str(tmp_path / "greedy.en")]) == 0
    stack_, model, run, corpus = runs.load_trained(run_dir, name)  # evaluation.translate's steps, the run loaded once
    alone = [evaluation.decode(stack_, model, run, corpus, evaluation.encode_sentence(corpus, line)[0]) for line in GERMAN]
    one_by_one = [" ".join(corpus.tgt_vocab.decode(tokens)) for [(tokens, _)] in alone]
    assert (tmp_path / "greedy.en").read_text().splitlines() == one_by_one  # --beams 1: today's greedy, line by line
    assert rosetta([*argv[:-1], "5", "--output", str(tmp_path / "beam.en"), "--beams", "3", "--length-penalty", "0.8",
                    "--no-repeat-ngram-size", "2", "--early-stopping", "never", "--max-new-tokens", "6"]) == 0  # fmt: skip
    beams = (tmp_path / "beam.en").read_text().splitlines()
    assert len(beams) == 5 and all(1 <= len(line.split()) <= 6 for line in beams)
    assert "5 sentences" in capsys.readouterr().err


def test_a_failure_midway_leaves_no_output_file(stack, tmp_path, tmp_path_factory, monkeypatch, capsys):
    """Negative control: the naive writer (a line a batch, straight to the output) leaves the first batch behind."""
    run_dir, name = _trained(stack, tmp_path_factory, capsys), _stack_name(stack)
    source = tmp_path / "in.de"
    source.write_text("".join(f"{line}\n" for line in GERMAN))
    real, calls = evaluation.decode, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("interrupted")
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "decode", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        translation.translate_file(run_dir, name, source, tmp_path / "out.en", batch_size=2, progress=False)
    assert not (tmp_path / "out.en").exists() and list(tmp_path.iterdir()) == [source]
    with pytest.raises(RuntimeError, match="interrupted"), open(tmp_path / "naive.en", "w") as naive:
        for number, batch in enumerate(([GERMAN[0], GERMAN[1]], [GERMAN[2], GERMAN[3]])):
            if number == 1:  # the same failure, at the second batch
                raise RuntimeError("interrupted")
            naive.writelines(f"{line}\n" for line in batch)
    assert (tmp_path / "naive.en").read_text().count("\n") == 2  # caught: a partial file


def test_evaluate_adds_beam_search_bleu(stack, tmp_path_factory, capsys):
    run_dir, name = _trained(stack, tmp_path_factory, capsys), _stack_name(stack)
    final = json.loads((run_dir / name / runs.EVAL_FILE).read_text())
    assert rosetta(["evaluate", str(run_dir), "--stack", name, "--split", "val", "--beams", "4"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["bleu_beam"] == final["bleu_beam"] and result["bleu"] == final["bleu"] and result["beams"] == 4
