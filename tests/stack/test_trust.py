"""Trust on the new surface, in each stack alone: one training run per folder (a second one refused naming the
first's pid), `--resume` that cannot resume refused before anything is made, run.json checked by field, Ctrl-C
as one line (exit 130) with nothing left, a key map's code limited to the tutorial models shipped."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared import failures
from shared.cli import main as rosetta
from shared.io import atomic, locks
from shared.port import porting, references
from shared.train import runs
from tests.stack.test_reliability import NAME, _destination, _one_line_error, _port, _source
from tests.stack.test_runner import REVERSE_DATA, SMALL, _stack_name

REPO = Path(__file__).resolve().parents[2]
SIZES = [item for key, value in SMALL.items() if key != "attention_size" for item in ("--set", f"{key}={value}")]
OPTIONS = [item for key, value in REVERSE_DATA.items() for item in ("--data-option", f"{key}={value}")]


def _train_argv(stack, run_dir: Path, *extra: str) -> list[str]:
    return ["train", NAME, "--stack", _stack_name(stack), "--run-dir", str(run_dir), "--batch-size", "16", "--quiet",
            *SIZES, *OPTIONS, *extra]  # fmt: skip


def test_a_second_training_run_in_the_same_folder_is_refused_naming_the_first(stack, tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "shared.cli", *_train_argv(stack, run_dir, "--epochs", "8")]  # long enough to overlap
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (run_dir / stack_log(stack)).is_file() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.poll() is None, "the first run ended before the second started"
    err = _one_line_error(capsys, _train_argv(stack, run_dir, "--epochs", "8"))
    assert f"{run_dir} is in use: a training run in process {first.pid}" in err
    assert first.wait(timeout=600) == 0, first.stderr.read()
    steps = [record["step"] for record in runs.read_json_lines(run_dir / stack_log(stack))]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == 8 * 4  # every step once
    assert not (run_dir / locks.LOCK_NAME).exists()
    # negative control: the refusal is the live holder's; the folder is free again once it has ended
    assert rosetta(_train_argv(stack, run_dir, "--epochs", "8", "--resume")) == 0
    capsys.readouterr()


def stack_log(stack) -> Path:
    return Path(_stack_name(stack)) / runs.LOSS_LOG


def test_a_resume_that_cannot_resume_is_refused_before_anything_is_made(stack, tmp_path, capsys):
    missing = tmp_path / "never-started"
    err = _one_line_error(capsys, _train_argv(stack, missing, "--resume"))
    assert f"{missing}: nothing to resume (no run.json there)" in err and not missing.exists()
    err = _one_line_error(capsys, _train_argv(stack, missing, "--resume", "--force"))
    assert "--force starts the run again, --resume continues it: pass one" in err and not missing.exists()


def test_a_hand_edited_run_json_is_one_line_naming_the_field(stack, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert rosetta(_train_argv(stack, run_dir, "--epochs", "1", "--prepare")) == 0
    record = json.loads((run_dir / runs.RUN_FILE).read_text())
    (run_dir / runs.RUN_FILE).write_text(json.dumps({**record, "epochs": "three"}))
    err = _one_line_error(capsys, _train_argv(stack, run_dir, "--resume"))
    assert f"{run_dir / runs.RUN_FILE}: epochs must be int, got 'three'" in err


def test_ctrl_c_during_a_port_is_one_line_exit_130_and_nothing_is_left(stack, tmp_path, capsys, monkeypatch):
    source = _source(stack, tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(porting, "compare_components", interrupted)  # Ctrl-C while the written file is verified
    assert rosetta(_port(source, _destination(stack, tmp_path))) == failures.EXIT_INTERRUPTED
    err = capsys.readouterr().err.strip()
    assert err == "rosetta port: interrupted (what was finished before stays; nothing partial is left)"
    assert sorted(path.name for path in tmp_path.iterdir()) == [source.name]
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(atomic.STAGED_PREFIX)]


def test_a_key_map_may_not_name_a_shipped_modules_other_functions(stack):
    """`in_float64` lives in the references module a key map may name, but is no tutorial model: refused;
    the tutorial models it ships load (negative control)."""
    module = f"{stack.__name__}.references"
    with pytest.raises(ValueError, match=r"not one of the tutorial models .* ships"):
        references.load_callable(f"{module}:in_float64", "reference", shipped=True)
    shipped = importlib.import_module(module).SHIPPED
    assert all(callable(references.load_callable(f"{module}:{name}", "reference", shipped=True)) for name in shipped)
