"""`rosetta train luong_general --corpus DIR --langs de,en` end to end in each stack: a tiny corpus of your own (plain
and .gz files, no test split), a few steps at small sizes, then `rosetta evaluate` and `rosetta translate` on the run.
The corpus itself is tested in tests/shared/test_own_corpus.py."""

from __future__ import annotations

import gzip
import json

from shared.cli import main as rosetta
from shared.train import evaluation, runs

GERMAN = ["ein hund läuft .", "zwei katzen schlafen .", "ein mann isst brot .", "ein hund schläft .", "zwei hunde laufen ."]
ENGLISH = ["a dog runs .", "two cats sleep .", "a man eats bread .", "a dog sleeps .", "two dogs run ."]


def _stack_name(stack) -> str:
    return {"torch_impl": "torch", "tf_impl": "tf"}[stack.__name__]


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
