"""Trust on the data-file surface, numpy only: key maps are data (no code named, validated before anything is
read, one error per file naming every bad entry, renames in bounded time), run.json checked by field, a torn
log line dropped, one training run per folder (shared.io.locks, its lock file never written through a link), and
a folder placed whole (shared.io.atomic: never through a link, never merged with a racer's). Each trap with its
negative control."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from shared.io import atomic, locks
from shared.port import endpoints, layouts, references, regex_limits
from shared.specs import RunConfig, TrainSpec
from shared.train import runs

REPO = Path(__file__).resolve().parents[2]


def _key_map(tmp_path: Path, data, name: str = "map.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _refused(path: Path) -> str:
    with pytest.raises(ValueError) as error:
        endpoints.endpoint("m.pt", key_map=str(path))
    message = str(error.value)
    assert str(path) in message and "\n" not in message
    return message


# ---- a key map names no code ----


def test_a_key_map_naming_code_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "x;touch ran;.pt"  # what `os:system` would have run on the source's path
    source.write_bytes(b"")
    for field in ("reference", "runner"):
        path = _key_map(tmp_path, {"model": "bahdanau_bigru", field: "os:system"})
        with pytest.raises(ValueError, match=rf'"{field}" \'os:system\': a key map names no code to run'):
            endpoints.endpoint(str(source), key_map=str(path))
    assert not (tmp_path / "ran").exists()


def test_a_key_map_may_name_only_the_tutorial_models_this_package_ships(monkeypatch):
    """Negative control: the same text on the command line (--reference, the user's own choice) imports."""
    monkeypatch.syspath_prepend(str(REPO))
    assert references.load_callable("tests.shared.test_trust:_key_map")  # a --reference may name any callable
    with pytest.raises(ValueError, match="may name only the tutorial models of torch_impl.references"):
        references.load_callable("tests.shared.test_trust:_key_map", "runner", shipped=True)
    parsed = layouts.parse({"runner": "torch_impl.references:in_float64"}, "map.json")  # the pattern fits ...
    assert parsed.runner == "torch_impl.references:in_float64"  # ... and loading it refuses (tests/torch)


# ---- every bad entry one line naming the file and the entry ----

BAD_KEY_MAPS = {
    "format": ({"format": "onnx"}, "\"format\" 'onnx' is not one of torch, safetensors"),
    "renames not a list": ({"renames": 5}, '"renames" must be a list, got 5'),
    "to not a string": ({"renames": [{"prefix": "a.", "to": 5}]}, 'renames[0]: "to" must be a non-empty string, got 5'),
    "swap of numbers": ({"transforms": [{"swap": [1, 2]}]}, 'transforms[0]: "swap" takes two different leaf names'),
    "blocks a string": ({"transforms": [{"swap_column_blocks": "a.weight", "blocks": "2"}]}, '"blocks" must be a whole number'),
    "missing group": ({"renames": [{"regex": "^a\\.(.*)$", "to": "b.\\2"}]}, "names group 2, which the regex"),
    "blocks zero": ({"transforms": [{"swap_column_blocks": "a.weight", "blocks": 0}]}, "of at least 2, got 0"),
    "order out of range": ({"transforms": [{"swap_column_blocks": "a.weight", "order": [0, 9]}]}, "permutation of 0..1"),
    "a field of a rename": ({"renames": [{"prefix": "a.", "to": "b.", "inverse": {}}]}, "unknown field inverse in a rename"),
}


@pytest.mark.parametrize("case", BAD_KEY_MAPS)
def test_each_bad_key_map_entry_is_one_line_naming_the_file_and_entry(tmp_path, case):
    data, message = BAD_KEY_MAPS[case]
    assert message in _refused(_key_map(tmp_path, data))


def test_every_bad_entry_of_a_key_map_is_listed_in_one_error(tmp_path):
    data = {"renames": [{"prefix": "a."}, {"prefix": "b.", "to": "c."}], "transforms": [{"swap": "x"}, {"flip": 1}], "extra": 1}
    message = _refused(_key_map(tmp_path, data))
    for part in ("unknown field extra", "renames[0]: a rename is", "transforms[0]:", "transforms[1]: a transform names one of"):
        assert part in message, message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("{}".encode("utf-16"), "not a UTF-8 text file"),
        ("npz", "not a UTF-8 text file"),
        ("{not json", "not JSON"),
    ],
    ids=["deep", "utf-16", "npz", "not-json"],
)
def test_a_file_that_is_no_key_map_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "map.json"
    if content == "npz":  # an .npz batch given as --key-map
        np.savez(tmp_path / "batch.npz", src=np.arange(12).reshape(3, 4))
        path = tmp_path / "batch.npz"
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert message in _refused(path)


# ---- renames in bounded time ----

NESTED = r"^([a-z_]+)*\.encoder\.(.*)$"  # the reported pattern: nested repetition
KEY = "decoder_attention_projection_of_the_queries_and_the_keys_w"  # a 58-character key name


def test_the_reported_nested_repetition_renames_in_bounded_time():
    key_map = layouts.parse({"renames": [{"regex": NESTED, "to": "enc.\\2"}, {"prefix": "decoder_", "to": "d."}]}, "map.json")
    started = time.perf_counter()
    renamed = key_map.to_catalogue({f"{KEY}x": np.zeros(1), "a.encoder.w": np.zeros(1)})
    assert set(renamed) == {f"d.{KEY[len('decoder_') :]}x", "enc.w"} and time.perf_counter() - started < 2


def test_negative_control_the_standard_matcher_hangs_on_it():
    """The same pattern and key through `re`: still running after 2 s (stopped by an alarm)."""

    def stop(*_):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        with pytest.raises(TimeoutError):
            re.fullmatch(NESTED, f"{KEY}x")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_rename_past_its_time_limit_is_one_error_naming_the_entry(monkeypatch):
    monkeypatch.setattr(regex_limits, "MATCH_SECONDS", 0.2)
    key_map = layouts.parse({"renames": [{"regex": r"^(a|aa)+\.x$", "to": "y"}]}, "map.json")
    with pytest.raises(ValueError, match=r"map.json: renames\[0\] .* ran past 0.2 s on the key 'aaaa.*nested repetition"):
        key_map.to_catalogue({"a" * 60 + "!": np.zeros(1)})


# ---- run.json, logs ----


def test_a_run_json_with_fields_of_the_wrong_type_names_each(tmp_path):
    record = RunConfig(model="reverse_rnn", dataset="reverse", config={}, spec=TrainSpec()).to_json()
    record["epochs"], record["spec"]["clip_norm"] = "three", "high"
    (tmp_path / runs.RUN_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError) as error:
        runs.load_run(tmp_path)
    assert str(error.value) == (f"{tmp_path / runs.RUN_FILE}: epochs must be int, got 'three'; "
                                "spec.clip_norm must be float or None, got 'high'")  # fmt: skip
    record["epochs"], record["spec"]["clip_norm"] = 3, 1.0  # negative control: the same record, fixed, loads
    (tmp_path / runs.RUN_FILE).write_text(json.dumps(record))
    assert runs.load_run(tmp_path).epochs == 3


def test_a_torn_last_log_line_is_dropped_and_a_bad_line_within_is_named(tmp_path):
    log = tmp_path / runs.LOSS_LOG
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')  # the writer killed mid-line
    assert [record["step"] for record in runs.read_json_lines(log)] == [1, 2]
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo\n{"step": 3, "loss": 1.0}\n')
    with pytest.raises(ValueError, match=rf"{re.escape(str(log))}, line 2: not a JSON record"):
        runs.read_json_lines(log)


# ---- a run keeps what it was built from ----

REVERSE = {"train_size": 64, "val_size": 16, "test_size": 16}


def _reverse_run(folder: Path, **data) -> Path:
    runs.create_run(folder, "reverse_bahdanau", corpus_options={**REVERSE, **data}, batch_size=16, epochs=2)
    return folder


def test_a_runs_corpus_replaced_by_another_runs_is_refused_naming_the_file(tmp_path):
    """Another run's corpus/ (the same vocabulary, other sentences: 8 steps an epoch, not 4) copied into a run: one
    error naming the file that differs. Negative control: the vocabulary check of a checkpoint, all a resume had,
    cannot tell the two corpora apart."""
    run_dir, other = _reverse_run(tmp_path / "a"), _reverse_run(tmp_path / "b", train_size=128)
    recorded = json.loads((run_dir / runs.RUN_FILE).read_text())["fingerprints"]
    assert sorted(recorded) == ["corpus", "src_vocab", "tgt_vocab"] and all(len(value) == 64 for value in recorded.values())
    run = runs.load_run(run_dir)
    runs.check_corpus(run_dir, run, runs.load_corpus(run_dir))  # its own: passes
    shutil.rmtree(run_dir / runs.CORPUS_DIR)
    shutil.copytree(other / runs.CORPUS_DIR, run_dir / runs.CORPUS_DIR)
    corpus = runs.load_corpus(run_dir)
    with pytest.raises(runs.RunError) as error:
        runs.check_corpus(run_dir, run, corpus)
    message = str(error.value)
    now = corpus.fingerprint()[:12]
    assert message == (f"{run_dir / runs.CORPUS_DIR} is not the corpus {run_dir / runs.RUN_FILE} was built from: corpus.npz "
                       f"has fingerprint {now} where run.json has {recorded['corpus'][:12]}; it was replaced or edited: "
                       "put the run's own corpus back, or start a new run in another --run-dir")  # fmt: skip
    assert corpus.src_vocab.fingerprint == recorded["src_vocab"]  # negative control: a checkpoint's vocabulary check passes it


def test_a_runs_corpus_edited_is_refused_when_the_run_is_asked_for_again(tmp_path, monkeypatch):
    """`rosetta train` (or --prepare) on a run whose corpus.npz was saved again with one id changed: the same options,
    another corpus. Negative control: the comparison create_run made before (run.json's fields) passes it."""
    run_dir = _reverse_run(tmp_path / "a")
    corpus = runs.load_corpus(run_dir)
    corpus.splits["train"][0].ids[3] += 1
    corpus.save(run_dir / runs.CORPUS_DIR)
    refused = f"^{re.escape(str(run_dir / runs.CORPUS_DIR))} is not the corpus .*: corpus.npz has fingerprint "
    with pytest.raises(runs.RunError, match=refused):
        runs.create_run(run_dir, "reverse_bahdanau", corpus_options=REVERSE, batch_size=16, epochs=2)
    monkeypatch.setattr(runs, "check_corpus", lambda *args, **kwargs: None)
    assert runs.create_run(run_dir, "reverse_bahdanau", corpus_options=REVERSE, batch_size=16, epochs=2)


def test_an_older_run_json_without_fingerprints_loads_with_a_note(tmp_path, capsys):
    run_dir = _reverse_run(tmp_path / "a")
    record = json.loads((run_dir / runs.RUN_FILE).read_text())
    del record["fingerprints"]
    (run_dir / runs.RUN_FILE).write_text(json.dumps(record))
    run = runs.load_run(run_dir)
    assert run.fingerprints == {}
    runs.check_corpus(run_dir, run, runs.load_corpus(run_dir))
    assert capsys.readouterr().err.strip() == (
        f"note: {run_dir / runs.RUN_FILE} records no fingerprints of its corpus (an older version wrote it): "
        f"{run_dir / runs.CORPUS_DIR} is checked against the checkpoints' vocabularies only"
    )
    assert runs.create_run(run_dir, "reverse_bahdanau", corpus_options=REVERSE, batch_size=16, epochs=2) == run
    assert "fingerprints" not in json.loads((run_dir / runs.RUN_FILE).read_text())  # left as it was


def test_a_corpus_fingerprint_survives_saving_and_sees_one_id(tmp_path):
    run_dir = _reverse_run(tmp_path / "a")
    corpus = runs.load_corpus(run_dir)
    assert corpus.fingerprint() == runs.load_run(run_dir).fingerprints["corpus"]
    corpus.save(tmp_path / "again")
    assert type(corpus).load(tmp_path / "again").fingerprint() == corpus.fingerprint()
    corpus.splits["val"][1].ids[5] += 1  # one target id of the validation split
    assert corpus.fingerprint() != runs.load_run(run_dir).fingerprints["corpus"]


@pytest.mark.parametrize(
    "key, kind, value, wanted",
    [("step", "count", "two", "a whole number"), ("step", "count", "", "a whole number"),
     ("epoch", "count", "1.5", "a whole number"), ("config", "json", "{not json", "JSON")],
)  # fmt: skip
def test_a_checkpoint_field_that_does_not_read_is_one_line_naming_the_file_and_field(key, kind, value, wanted):
    """Negative control: the bare int() and json.loads errors the runner raised name neither."""
    with pytest.raises(ValueError) as error:
        runs.checkpoint_field("run/torch/checkpoint.safetensors", {key: value}, key, kind)
    assert str(error.value) == f'run/torch/checkpoint.safetensors: metadata "{key}" must be {wanted}, got {value!r}'
    with pytest.raises(ValueError) as naive:
        int(value) if kind == "count" else json.loads(value)
    assert "checkpoint.safetensors" not in str(naive.value) and key not in str(naive.value)
    assert runs.checkpoint_field("c", {key: "12"}, key, kind) == 12
    with pytest.raises(ValueError, match="^c: metadata \"step\" must be a whole number, got '-3'$"):
        runs.checkpoint_field("c", {"step": "-3"}, "step", "count")  # int() would take it
    with pytest.raises(ValueError, match='^c: metadata "step" is missing'):
        runs.checkpoint_field("c", {}, "step", "count")


def test_a_log_record_whose_numbers_are_not_numbers_is_named_with_its_line(tmp_path):
    log = tmp_path / runs.LOSS_LOG
    log.write_text('{"step": 1, "seconds": 0.5}\n{"step": "two", "seconds": 0.5}\n')
    assert len(runs.read_json_lines(log)) == 2  # negative control: read without the fields checked
    with pytest.raises(ValueError, match=rf"^{re.escape(str(log))}, line 2: its field 'step' must be a number, got 'two'$"):
        runs.read_json_lines(log, ("step", "seconds"))
    (tmp_path / runs.EVAL_FILE).write_text('{"loss": 1.')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / runs.EVAL_FILE))}: not a JSON file"):
        runs.read_json(tmp_path / runs.EVAL_FILE)


# ---- one process per run folder ----

HOLDER = """
import sys, time
from shared.io import locks
with locks.folder_lock(sys.argv[1], "a training run"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(folder: Path) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True, cwd=REPO,
                               env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_folder_held_by_a_live_process_is_refused_naming_it_and_a_dead_ones_lock_is_taken_over(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(ValueError, match=rf"{re.escape(str(tmp_path))} is in use: a training run in process {holder.pid}"):
            with locks.folder_lock(tmp_path, "a training run"):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / locks.LOCK_NAME).read_text().strip() == str(holder.pid)  # killed: its lock file stays ...
    with locks.folder_lock(tmp_path, "a training run"):  # ... and is taken over
        assert (tmp_path / locks.LOCK_NAME).read_text().strip() == str(os.getpid())
    assert not (tmp_path / locks.LOCK_NAME).exists()


def test_a_process_enters_the_folders_it_holds_and_its_children_do_too(tmp_path):
    with locks.folder_lock(tmp_path, "a training run"):
        with locks.folder_lock(tmp_path, "a training run"):  # the runner inside `rosetta train`
            pass
        child = subprocess.run([sys.executable, "-c", HOLDER.replace("time.sleep(60)", "pass"), str(tmp_path)],
                               capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        assert child.returncode == 0 and child.stdout.strip() == "held"
    assert locks.HELD_VARIABLE not in os.environ


def test_a_lock_file_that_is_a_link_is_refused_naming_it_and_what_it_leads_to_stays_intact(tmp_path, monkeypatch):
    """Negative control: the lock opened as it was, following the link, empties the user's notes and writes its pid
    there."""
    notes, run = tmp_path / "notes.txt", tmp_path / "run"
    notes.write_text("my notes\n")
    run.mkdir()
    (run / locks.LOCK_NAME).symlink_to(notes)
    with pytest.raises(ValueError) as error:
        with locks.folder_lock(run, "a training run"):
            pass
    assert str(error.value) == (f"{run / locks.LOCK_NAME} is a symbolic link, not the lock file rosetta writes there (it is "
                                "never written through): remove it, then run again")  # fmt: skip
    assert notes.read_text() == "my notes\n" and (run / locks.LOCK_NAME).is_symlink()
    monkeypatch.setattr(locks, "_open_plain", lambda path: os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
    with locks.folder_lock(run, "a training run"):
        assert notes.read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_path_that_is_no_plain_file_is_refused_naming_it(tmp_path, monkeypatch, kind):
    """Negative control: opened as it was, a raw OSError (a folder's EISDIR, a FIFO's EINVAL when emptied)."""
    path = tmp_path / locks.LOCK_NAME
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} is not a plain file, not the lock file rosetta"):
        with locks.folder_lock(tmp_path, "a training run"):
            pass
    monkeypatch.setattr(locks, "_open_plain", lambda path: os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
    with pytest.raises(OSError):
        with locks.folder_lock(tmp_path, "a training run"):
            pass


# ---- a folder (a TF checkpoint) is placed whole ----


def _staged_folder(folder: Path) -> Path:
    """A staged checkpoint folder beside `folder / "ckpt"`, as tf_impl.checkpoints.write leaves it."""
    staged = atomic.staged_name(folder / "ckpt")
    staged.mkdir()
    (staged / "ckpt-1.index").write_bytes(b"ours")
    return staged


def test_a_folder_onto_a_link_is_refused_naming_it_and_the_folder_it_leads_to_stays(tmp_path):
    """Negative control: the rename that placed it, as it was, fails with a raw [Errno 20] naming no destination."""
    real, link = tmp_path / "real", tmp_path / "ckpt"
    real.mkdir()
    (real / "ckpt-1.index").write_bytes(b"theirs")
    link.symlink_to(real)
    staged = _staged_folder(tmp_path)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(link))} is a symbolic link: a folder is written there whole"):
        atomic.place(staged, link)
    assert link.is_symlink() and (real / "ckpt-1.index").read_bytes() == b"theirs"
    with pytest.raises(NotADirectoryError):
        os.replace(staged, link)


@pytest.mark.parametrize("moment", ["before the rename", "before the removal ends"])
def test_a_folder_written_meanwhile_by_another_process_is_one_line_naming_it(tmp_path, monkeypatch, moment):
    """Two `--force` ports to one checkpoint folder: the other one places its folder while this one replaces the
    old one (this one's removal then meets it, or its rename does). Negative control: the removal and rename as
    they were raise a raw [Errno 39]."""
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "ckpt-1.index").write_bytes(b"old")
    staged, remove = _staged_folder(tmp_path), shutil.rmtree

    def racing(path, *args, **kwargs):
        remove(path, *args, **kwargs)
        Path(path).mkdir()
        (Path(path) / "ckpt-1.index").write_bytes(b"theirs")  # the other port's folder, placed now
        if moment == "before the removal ends":
            os.rmdir(path)  # this removal's last step

    monkeypatch.setattr(shutil, "rmtree", racing)
    with pytest.raises(ValueError) as error:
        atomic.place(staged, out)
    assert str(error.value) == (f"{out} was written meanwhile by another process (two writes to one destination at "
                                "once): this one was not placed; run it again to replace that one")  # fmt: skip
    assert (out / "ckpt-1.index").read_bytes() == b"theirs" and (staged / "ckpt-1.index").read_bytes() == b"ours"
    with pytest.raises(OSError) as raw:
        shutil.rmtree(out)
        os.replace(staged, out)
    assert raw.value.errno == errno.ENOTEMPTY and not isinstance(raw.value, ValueError)


def test_what_a_library_leaves_in_tmpdir_goes_with_the_block(tmp_path, monkeypatch):
    """What Keras does refusing a zip-bomb `.keras` (tests/stack/test_trust.py): a folder made in TMPDIR, then an error
    before it is removed. Negative control: outside the block, the folder stays."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again

    def refusing():
        tempfile.mkdtemp()
        raise ValueError("refusing to extract a potential decompression bomb")

    with pytest.raises(ValueError), atomic.contained_temporaries():
        refusing()
    assert not list(tmp_path.iterdir()) and tempfile.gettempdir() == str(tmp_path)
    with pytest.raises(ValueError):
        refusing()
    assert len(list(tmp_path.iterdir())) == 1
