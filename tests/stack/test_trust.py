"""Trust on the new surface, in each stack alone: one training run per folder (a second one refused naming the
first's pid), `--resume` that cannot resume refused before anything is made, run.json checked by field, Ctrl-C
as one line (exit 130) with nothing left, a key map's code limited to the tutorial models shipped, a `--force`
port written through a link (a file) or refused at one (a checkpoint folder), a racer's folder never merged, and a
refused zip-bomb `.keras` leaving nothing in the temporary folder."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from shared import catalogue, failures
from shared.cli import main as rosetta
from shared.data.vocab import Vocab
from shared.io import atomic, locks, safetensors_io
from shared.port import porting, references
from shared.train import runs
from tests.stack.test_reliability import NAME, _destination, _one_line_error, _port, _source, _staged
from tests.stack.test_runner import REVERSE_DATA, SMALL, _stack_name, _trained_run

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


# ---- a resume keeps to what the run was built from, and to checkpoints that read ----


def _unfinished_copy(stack, tmp_path_factory, folder: Path) -> Path:
    """The stack's tiny trained run (2 epochs of 4 steps, float64) copied without its eval.json: a resume goes on from
    its step-8 checkpoint."""
    run_dir = Path(shutil.copytree(_trained_run(_stack_name(stack), tmp_path_factory)[0], folder))
    (run_dir / _stack_name(stack) / runs.EVAL_FILE).unlink()
    return run_dir


def _resume_argv(stack, run_dir: Path) -> list[str]:
    return ["train", "reverse_bahdanau", "--run-dir", str(run_dir), "--stack", _stack_name(stack), "--resume", "--quiet"]


def _contents(folder: Path) -> dict:
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def _naive_fields(monkeypatch) -> None:
    """The runner's metadata reading as it was: int() and json.loads, naming nothing."""
    naive = {"count": int, "json": json.loads}
    monkeypatch.setattr(runs, "checkpoint_field", lambda path, metadata, key, kind: naive[kind](metadata[key]))


def test_a_resume_on_another_runs_corpus_is_refused_before_anything_is_written(stack, tmp_path, tmp_path_factory, capsys,
                                                                              monkeypatch):  # fmt: skip
    """The run's corpus/ replaced by another run's (the same vocabulary, twice the sentences): one line naming the
    file, every file as it was. Negative control: unchecked, the resume trains the other corpus (8 steps an epoch, not
    4) over the run's checkpoint and exits 0."""
    name, run_dir = _stack_name(stack), _unfinished_copy(stack, tmp_path_factory, tmp_path / "run")
    other = tmp_path / "other"
    runs.create_run(other, "reverse_bahdanau", overrides=SMALL, corpus_options={**REVERSE_DATA, "train_size": 128},
                    batch_size=16, epochs=2, checkpoint_every=3, dtype="float64")  # fmt: skip
    shutil.rmtree(run_dir / runs.CORPUS_DIR)
    shutil.copytree(other / runs.CORPUS_DIR, run_dir / runs.CORPUS_DIR)
    before = _contents(run_dir)
    err = _one_line_error(capsys, _resume_argv(stack, run_dir))
    assert f"{run_dir / runs.CORPUS_DIR} is not the corpus {run_dir / runs.RUN_FILE} was built from: corpus.npz has " in err
    assert _contents(run_dir) == before
    monkeypatch.setattr(runs, "check_corpus", lambda *args, **kwargs: None)
    assert rosetta(_resume_argv(stack, run_dir)) == 0
    assert safetensors_io.load(run_dir / name / runs.CHECKPOINT)[1]["step"] == "16"


def test_an_older_run_json_resumes_with_a_note_and_its_checkpoint_still_guards_the_vocabulary(stack, tmp_path, capsys,
                                                                                             tmp_path_factory):  # fmt: skip
    name, run_dir = _stack_name(stack), _unfinished_copy(stack, tmp_path_factory, tmp_path / "run")
    record = json.loads((run_dir / runs.RUN_FILE).read_text())
    del record["fingerprints"]
    (run_dir / runs.RUN_FILE).write_text(json.dumps(record))
    assert rosetta(_resume_argv(stack, run_dir)) == 0
    note = f"note: {run_dir / runs.RUN_FILE} records no fingerprints of its corpus (an older version wrote it)"
    assert note in capsys.readouterr().err
    (run_dir / name / runs.EVAL_FILE).unlink()
    corpus = runs.load_corpus(run_dir)  # another vocabulary of the same size: the tokens in another order
    corpus.src_vocab = corpus.tgt_vocab = Vocab([*corpus.src_vocab.itos[:3], *reversed(corpus.src_vocab.itos[3:])],
                                                corpus.src_vocab.specials)  # fmt: skip
    corpus.save(run_dir / runs.CORPUS_DIR)
    before = _contents(run_dir / name)
    assert rosetta(_resume_argv(stack, run_dir)) == failures.EXIT_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith(note)
    checkpoint = run_dir / name / runs.CHECKPOINT
    assert err[1].startswith(f"rosetta train ({name}): {checkpoint} was trained with another src vocabulary")
    assert _contents(run_dir / name) == before


@pytest.mark.parametrize("field, value, wanted", [("step", "two", "a whole number"), ("rng", "{", "JSON")])
def test_a_checkpoint_field_that_does_not_read_refuses_the_resume_naming_it(stack, tmp_path, tmp_path_factory, capsys,
                                                                           monkeypatch, field, value, wanted):  # fmt: skip
    """Negative control: read as the runner read it (int(), json.loads), a bare error naming neither file nor field."""
    name, run_dir = _stack_name(stack), _unfinished_copy(stack, tmp_path_factory, tmp_path / "run")
    path = run_dir / name / runs.CHECKPOINT
    tensors, metadata = safetensors_io.load(path)
    safetensors_io.save(path, tensors, {**metadata, field: value})
    before = _contents(run_dir)
    err = _one_line_error(capsys, _resume_argv(stack, run_dir))
    assert err == f'rosetta train ({name}): {path}: metadata "{field}" must be {wanted}, got {value!r}'
    assert _contents(run_dir) == before
    _naive_fields(monkeypatch)
    naive = _one_line_error(capsys, _resume_argv(stack, run_dir))
    assert str(path) not in naive and field not in naive


def test_evaluate_on_a_checkpoint_whose_config_is_not_json_names_the_file_and_field(stack, tmp_path, tmp_path_factory,
                                                                                   capsys, monkeypatch):  # fmt: skip
    name = _stack_name(stack)
    run_dir = Path(shutil.copytree(_trained_run(name, tmp_path_factory)[0], tmp_path / "run"))
    path = run_dir / name / runs.CHECKPOINT
    tensors, metadata = safetensors_io.load(path)
    safetensors_io.save(path, tensors, {**metadata, "config": "{hidden_size: 12"})
    argv = ["evaluate", str(run_dir), "--stack", name, "--batches", "1"]
    err = _one_line_error(capsys, argv)
    assert err == f"rosetta evaluate: {path}: metadata \"config\" must be JSON, got '{{hidden_size: 12'"
    _naive_fields(monkeypatch)
    assert str(path) not in _one_line_error(capsys, argv)


def test_evaluate_on_a_run_whose_sizes_contradict_its_checkpoint_builds_nothing(stack, tmp_path, tmp_path_factory,
                                                                               capsys, monkeypatch):  # fmt: skip
    """run.json and the checkpoint's metadata both edited to hidden_size 100000: refused naming run.json from the
    arrays' shapes. Negative control: unchecked, the stack is asked to build the 100000-wide model."""
    name = _stack_name(stack)
    run_dir = Path(shutil.copytree(_trained_run(name, tmp_path_factory)[0], tmp_path / "run"))
    path, record = run_dir / name / runs.CHECKPOINT, json.loads((run_dir / runs.RUN_FILE).read_text())
    record["config"]["hidden_size"] = 100000
    (run_dir / runs.RUN_FILE).write_text(json.dumps(record))
    tensors, metadata = safetensors_io.load(path)
    safetensors_io.save(path, tensors, {**metadata, "config": json.dumps(record["config"])})
    argv = ["evaluate", str(run_dir), "--stack", name, "--batches", "1"]
    err = _one_line_error(capsys, argv)
    assert err.startswith(f'rosetta evaluate: {run_dir / runs.RUN_FILE}: its "config": hidden_size is 100000, but the arrays')
    built = []
    monkeypatch.setattr(runs.validation, "check_config_fits", lambda *args: None)
    monkeypatch.setattr(stack, "build", lambda name, dtype, **config: built.append(config) or 1 / 0)
    _one_line_error(capsys, argv)
    assert built and built[0]["hidden_size"] == 100000


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


# ---- --force onto a link; a checkpoint folder placed whole ----


def test_a_forced_port_onto_a_link_writes_the_file_it_leads_to_keeping_its_mode(stack, tmp_path, capsys, monkeypatch):
    """Negative control: the link itself replaced, as before: a plain file in its place, the file it led to stale."""
    source, kept = _source(stack, tmp_path), tmp_path / "kept"
    kept.mkdir()
    target, link = _destination(stack, kept), _destination(stack, tmp_path, "latest")
    target.write_bytes(b"stale")
    target.chmod(0o600)
    link.symlink_to(target)
    assert rosetta(_port(source, link, "--force")) == 0
    assert link.is_symlink() and target.read_bytes() != b"stale" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not _staged(tmp_path) and not _staged(kept)
    target.write_bytes(b"stale")
    monkeypatch.setattr(atomic, "_place_through_link", lambda staged, path: atomic._place_file(staged, path, True))
    assert rosetta(_port(source, link, "--force")) == 0
    assert not link.is_symlink() and target.read_bytes() == b"stale"
    capsys.readouterr()


def _tf_only(stack) -> None:
    if _stack_name(stack) != "tf":
        pytest.skip("TensorFlow checkpoints and .keras files are the tf stack's")


def test_a_forced_checkpoint_onto_a_link_to_a_folder_is_one_line_naming_it(stack, tmp_path, capsys):
    _tf_only(stack)
    source, real, link = _source(stack, tmp_path), tmp_path / "real", tmp_path / "ckpt"
    assert rosetta(_port(source, real, "--to", "tf_checkpoint")) == 0
    before = {path.name: path.read_bytes() for path in real.iterdir()}
    link.symlink_to(real)
    err = _one_line_error(capsys, _port(source, link, "--to", "tf_checkpoint", "--force"))
    assert err.startswith(f"rosetta port: {link} is a symbolic link: a folder is written there whole") and "Errno" not in err
    assert link.is_symlink() and {path.name: path.read_bytes() for path in real.iterdir()} == before
    assert not _staged(tmp_path)


def test_a_checkpoint_folder_a_racer_placed_meanwhile_is_one_line_naming_it(stack, tmp_path, capsys, monkeypatch):
    """Two `--force` ports to one checkpoint folder, the other one placing its folder while this one removes the
    old (deterministic: at that moment). Negative control in tests/shared/test_trust.py (a raw [Errno 39])."""
    _tf_only(stack)
    source, out = _source(stack, tmp_path), tmp_path / "ckpt"
    assert rosetta(_port(source, out, "--to", "tf_checkpoint")) == 0
    theirs = tmp_path / "theirs"
    shutil.copytree(out, theirs)
    remove = shutil.rmtree

    def racing(path, *args, **kwargs):
        remove(path, *args, **kwargs)
        if Path(path) == out:
            shutil.copytree(theirs, out)  # the other port's folder, placed now

    monkeypatch.setattr(shutil, "rmtree", racing)
    err = _one_line_error(capsys, _port(source, out, "--to", "tf_checkpoint", "--force"))
    assert err == (f"rosetta port: {out} was written meanwhile by another process (two writes to one destination at "
                   "once): this one was not placed; run it again to replace that one")  # fmt: skip
    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in theirs.iterdir())
    assert not _staged(tmp_path)


# ---- a refused .keras archive leaves nothing behind ----

BOMB_SIZE = 300 * 2**20  # declared by the bomb's member: past Keras's extraction floor, and 100x what it stores


def _zip_bomb(path: Path) -> None:
    """`path` (a `.keras` file) with a fourth member declaring BOMB_SIZE bytes while storing a few: Keras refuses
    to extract it (past the three members a model needs, Keras extracts the rest as assets)."""
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb.bin", bytes(4096))
    blob = bytearray(path.read_bytes())
    entry = blob.rindex(b"PK\x01\x02")  # the central directory's last entry: bomb.bin's
    blob[entry + 24 : entry + 28] = BOMB_SIZE.to_bytes(4, "little")  # its uncompressed size
    path.write_bytes(bytes(blob))


def test_a_refused_zip_bomb_keras_file_leaves_nothing_in_tmpdir(stack, tmp_path, capsys, monkeypatch):
    """Negative control: Keras's own load_model, as the reader called it, leaves an empty folder in TMPDIR."""
    _tf_only(stack)
    temporary = tmp_path / "tmpdir"
    temporary.mkdir()
    bomb = tmp_path / "bomb.keras"
    model = stack.build(NAME, "float32", **catalogue.get(NAME).fixture_config)
    importlib.import_module(f"{stack.__name__}.files").save_keras(model, bomb)
    _zip_bomb(bomb)
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    err = _one_line_error(capsys, _port(bomb, _destination(stack, tmp_path)))
    assert f"{bomb}: not a loadable .keras file" in err and "decompression bomb" in err
    assert not list(temporary.iterdir())
    import keras

    with pytest.raises(ValueError, match="decompression bomb"):
        keras.saving.load_model(bomb, safe_mode=True)
    assert [path.is_dir() and not list(path.iterdir()) for path in temporary.iterdir()] == [True]
