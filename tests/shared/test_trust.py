"""Trust on the data-file surface, numpy only: key maps are data (no code named, validated before anything is
read, one error per file naming every bad entry, renames in bounded time), run.json checked by field, a torn
log line dropped, and one training run per folder (shared.io.locks). Each trap with its negative control."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shared.io import locks
from shared.port import layouts, port_files, references
from shared.specs import RunConfig, TrainSpec
from shared.train import runs

REPO = Path(__file__).resolve().parents[2]


def _key_map(tmp_path: Path, data, name: str = "map.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _refused(path: Path) -> str:
    with pytest.raises(ValueError) as error:
        port_files.endpoint("m.pt", key_map=str(path))
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
            port_files.endpoint(str(source), key_map=str(path))
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
    monkeypatch.setattr(layouts, "MATCH_SECONDS", 0.2)
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
