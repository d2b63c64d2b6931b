"""`rosetta translate --input FILE --output FILE`'s bad inputs, before any model loads (numpy only): each is one clear
error naming the file and the line. The translation itself: tests/stack/test_own_corpus_run.py."""

from __future__ import annotations

import pytest

from shared import failures
from shared.cli import main as rosetta
from shared.train import translation


def _error(capsys, argv: list[str]) -> str:
    assert rosetta(argv) == failures.EXIT_FAILED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "blob,problem",
    [(None, "in.txt: no such file"), (b"ein hund\n\xffzwei\n", "in.txt, line 2: not UTF-8"),
     (b"ein hund\nzwei katzen\n  \nein mann\n", "in.txt, line 3: empty line"), (b"", "in.txt: no sentence")],
)  # fmt: skip
def test_a_bad_input_file_is_one_error_naming_file_and_line(tmp_path, capsys, blob, problem):
    source = tmp_path / "in.txt"
    if blob is not None:
        source.write_bytes(blob)
    argv = ["translate", str(tmp_path / "no-run"), "--stack", "torch", "--input", str(source), "--output", str(tmp_path / "o")]
    assert problem in _error(capsys, argv)
    assert not (tmp_path / "o").exists()


def test_lines_split_on_newlines_only():
    """A sentence holding another line separator (U+2028, form feed) stays one line; a Windows file reads alike.
    Negative control: str.splitlines would split it and shift every later line against the output."""
    text = "ein\u2028hund\r\nzwei katzen\r\n"
    assert len(text.splitlines()) == 3
    assert translation.read_sentences_of_text(text) == ["ein\u2028hund", "zwei katzen"]


def test_the_flags_go_together(tmp_path, capsys):
    run = str(tmp_path)
    assert "--input and --output go together" in _error(capsys, ["translate", run, "--stack", "torch", "--input", "x"])
    assert "--input and --output go together" in _error(capsys, ["translate", run, "a", "--stack", "torch", "--input", "x",
                                                                 "--output", "y"])  # fmt: skip
    assert "takes a sentence, or --input" in _error(capsys, ["translate", run, "--stack", "torch"])
    with pytest.raises(SystemExit):
        rosetta(["translate", run, "a", "--stack", "torch", "--beams", "0"])
    assert "argument --beams: 0 is not at least 1" in capsys.readouterr().err
