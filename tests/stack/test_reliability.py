"""Reliability, as a careless and a hostile user meet it (one stack per env): every CLI failure one line (exit 2,
the trace under --debug), no stray file after a kill, a full disk or a race, numeric options checked where
parsed, non-finite weights refused, and `rosetta train --resume` continuing a killed run on the same curve.

Ports here stay within the stack under test: torch `.pt` -> canonical `.safetensors`, Keras `.weights.h5` ->
`.keras`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shared import catalogue, failures
from shared.cli import main as rosetta
from shared.io import atomic, safetensors_io
from shared.train import runner, runs
from shared.verify import fixtures
from shared.verify.equality import assert_close
from tests.stack.test_runner import REVERSE_DATA, SMALL, _run, _stack_name, _trained_run

NAME = "reverse_luong_dot"
SETS = [f"--set={key}={value}" for key, value in catalogue.get(NAME).fixture_config.items()]
SUFFIXES = {"torch": (".pt", ".safetensors"), "tf": (".weights.h5", ".keras")}  # (source, destination)
REPO = Path(__file__).resolve().parents[2]


def _source(stack, folder: Path, weights: dict | None = None) -> Path:
    """A checkpoint of NAME (fixture sizes) in the stack's own format."""
    model = stack.build(NAME, "float32", **catalogue.get(NAME).fixture_config)
    stack.set_weights(model, weights or {k: np.float32(v) for k, v in fixtures.load_golden(NAME).weights.items()})
    path = folder / f"m{SUFFIXES[_stack_name(stack)][0]}"
    __import__(f"{stack.__name__}.files", fromlist=["save_native"]).save_native(model, path)
    return path


def _destination(stack, folder: Path, stem: str = "out") -> Path:
    return folder / f"{stem}{SUFFIXES[_stack_name(stack)][1]}"


def _port(source: Path, destination: Path, *extra: str) -> list[str]:
    return ["port", str(source), str(destination), "--model", NAME, *SETS, *extra]


def _staged(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.startswith(atomic.STAGED_PREFIX))


def _one_line_error(capsys, argv) -> str:
    assert rosetta(argv) == failures.EXIT_FAILED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _cli(*argv: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "shared.cli", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)  # fmt: skip


# ---- one line for every failure ----


def test_an_os_error_is_one_line_and_debug_shows_the_trace(stack, tmp_path, capsys, monkeypatch):
    source = _source(stack, tmp_path)
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    destination = _destination(stack, blocked)

    def refused(*args, **kwargs):  # what a read-only folder answers (root, as CI may run, is never refused)
        raise PermissionError(13, "Permission denied", str(destination))

    monkeypatch.setattr(atomic, "place", refused)
    err = _one_line_error(capsys, _port(source, destination))
    assert err == f"rosetta port: {destination}: permission denied"
    with pytest.raises(PermissionError):
        rosetta(["--debug", *_port(source, destination)])
    assert failures.DEBUG_VARIABLE not in os.environ
    assert not destination.exists() and not _staged(blocked)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_destination_folder_is_one_line(stack, tmp_path, capsys):
    source, blocked = _source(stack, tmp_path), tmp_path / "blocked"
    blocked.mkdir(mode=0o555)
    assert "permission denied" in _one_line_error(capsys, _port(source, _destination(stack, blocked)))


def test_a_folder_as_destination_is_refused_even_with_force(stack, tmp_path, capsys):
    source, folder = _source(stack, tmp_path), _destination(stack, tmp_path)
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    err = _one_line_error(capsys, _port(source, folder, "--force"))
    assert f"{folder} is a folder" in err and (folder / "keep.txt").read_text() == "mine"


def test_a_long_destination_name_ports(stack, tmp_path, capsys):
    """Staged names are short whatever the destination's (they once repeated it: `File name too long`)."""
    source = _source(stack, tmp_path)
    destination = _destination(stack, tmp_path, "a" * (250 - len(SUFFIXES[_stack_name(stack)][1])))
    assert rosetta(_port(source, destination)) == 0 and destination.is_file() and not _staged(tmp_path)


def _allocate_too_much(stack) -> Exception:
    """The stack's own allocator refusing 8 TiB: torch's RuntimeError, TensorFlow's ResourceExhaustedError."""
    try:
        if stack.__name__ == "torch_impl":
            import torch

            torch.empty(2**40, dtype=torch.float64)
        else:
            import tensorflow as tf

            tf.zeros((2**40,), tf.float64)
    except Exception as error:
        return error
    raise AssertionError("8 TiB were allocated")


def test_out_of_memory_is_one_line_naming_what_to_change(stack):
    error = _allocate_too_much(stack)
    line = failures.describe(error, ["train", "--set", "hidden_size=4096"])  # the hint names the flags given
    assert line.startswith(f"out of memory: {type(error).__name__}") and "--set" in line and "\n" not in line
    assert failures.describe(MemoryError()).startswith("out of memory: MemoryError")
    assert failures.describe(OSError(28, "No space left on device", "/x")) == "/x: no space left on the device"
    assert failures.describe(KeyError("k")).endswith("(rerun with --debug for the trace)")


def test_a_safetensors_header_that_is_not_an_object_is_refused(stack, tmp_path, capsys):
    header = json.dumps([1, 2]).encode()
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(len(header).to_bytes(8, "little") + header)
    err = _one_line_error(capsys, _port(bad, _destination(stack, tmp_path)))
    assert "not a safetensors file (its header is a JSON list, not an object)" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", NAME, "--batch-size", "0"], "argument --batch-size: 0 is not at least 1"),
        (["train", NAME, "--checkpoint-every", "0"], "argument --checkpoint-every: 0 is not at least 1"),
        (["train", NAME, "--eval-batches", "0"], "argument --eval-batches: 0 is not at least 1"),
        (["train", NAME, "--max-steps", "0"], "argument --max-steps: 0 is not at least 1"),
        (["train", NAME, "--seed", "-1"], "argument --seed: -1 is not at least 0"),
        (["train", NAME, "--lr", "0"], "argument --lr: 0 is not above 0.0"),
        (["train", NAME, "--lr", "nan"], "argument --lr: nan is not above 0.0"),
        (["train", NAME, "--teacher-force", "1.5"], "argument --teacher-force: 1.5 is above 1.0"),
        (["train", NAME, "--epochs", "two"], "argument --epochs: 'two' is not an integer"),
        (["evaluate", "runs/x", "--stack", "torch", "--batches", "0"], "argument --batches: 0 is not at least 1"),
    ],
)
def test_numeric_options_are_checked_where_they_are_parsed(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        rosetta(argv)
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_non_finite_weights_are_refused_naming_the_keys(stack, tmp_path, capsys):
    weights = {key: np.float32(value) for key, value in fixtures.load_golden(NAME).weights.items()}
    key = sorted(weights)[0]
    weights[key] = weights[key].copy()
    weights[key].flat[0] = np.nan
    model = stack.build(NAME, "float32", **catalogue.get(NAME).fixture_config)
    with pytest.raises(ValueError, match=rf"non-finite keys .*{key}: 1 NaN, 0 infinite"):
        stack.set_weights(model, weights)
    safetensors_io.save(tmp_path / "nan.safetensors", weights)
    assert key in _one_line_error(capsys, _port(tmp_path / "nan.safetensors", _destination(stack, tmp_path)))


def test_negative_control_finite_weights_pass_the_check(stack):
    weights = {key: np.float32(value) for key, value in fixtures.load_golden(NAME).weights.items()}
    stack.set_weights(stack.build(NAME, "float32", **catalogue.get(NAME).fixture_config), weights)


# ---- no stray files: stale staging swept, racing ports, a killed port, a full disk ----


def test_stale_staged_files_of_dead_processes_are_swept_and_live_ones_kept(stack, tmp_path):
    source = _source(stack, tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale_file = tmp_path / f"{atomic.STAGED_PREFIX}{int(dead.stdout)}-0000.pt"
    stale_folder = tmp_path / f"{atomic.STAGED_PREFIX}{int(dead.stdout)}-0001"
    live = tmp_path / f"{atomic.STAGED_PREFIX}{os.getppid()}-0002.pt"  # a running process's: not ours to remove
    other = tmp_path / ".m.pt.abcd.tmp"  # not named by us: never touched
    for path in (stale_file, live, other):
        path.write_bytes(b"partial")
    stale_folder.mkdir()
    (stale_folder / "out.pt").write_bytes(b"partial")
    assert rosetta(_port(source, _destination(stack, tmp_path))) == 0
    assert not stale_file.exists() and not stale_folder.exists() and live.exists() and other.exists()


def test_of_two_racing_ports_one_fails_cleanly(stack, tmp_path):
    source, destination = _source(stack, tmp_path), _destination(stack, tmp_path)
    racers = [_cli(*_port(source, destination)) for _ in range(2)]
    results = [(racer.wait(timeout=300), racer.stderr.read()) for racer in racers]
    assert sorted(code for code, _ in results) == [0, failures.EXIT_FAILED], results
    assert "exists" in next(err for code, err in results if code) and destination.is_file() and not _staged(tmp_path)


def test_a_destination_written_meanwhile_is_not_overwritten(stack, tmp_path, capsys, monkeypatch):
    """The claim itself, deterministic: another process's file appears after the check, before the rename."""
    source, destination = _source(stack, tmp_path), _destination(stack, tmp_path)
    real_place = atomic.place

    def late(staged, path, replace=True):
        Path(path).write_bytes(b"theirs")
        return real_place(staged, path, replace)

    monkeypatch.setattr(atomic, "place", late)
    assert "written meanwhile by another process" in _one_line_error(capsys, _port(source, destination))
    assert destination.read_bytes() == b"theirs" and not _staged(tmp_path)


def test_a_killed_port_leaves_only_its_staging_which_the_next_port_sweeps(stack, tmp_path):
    source, destination = _source(stack, tmp_path), _destination(stack, tmp_path)
    port = _cli(*_port(source, destination), start_new_session=True)
    deadline = time.monotonic() + 120
    while not _staged(tmp_path) and port.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(port.pid, signal.SIGKILL)
    port.wait()
    left = _staged(tmp_path)
    assert left and not destination.exists(), "the kill did not land while the port was writing"
    assert rosetta(_port(source, destination)) == 0 and destination.is_file() and not _staged(tmp_path)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (root on Linux), nearly filled; skipped where it cannot be mounted."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"a small filesystem cannot be mounted here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        filler = folder / "filler"
        filler.write_bytes(b"\0" * (os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize - 4096))
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_is_refused_before_writing(stack, tmp_path, small_disk, capsys):
    """Every destination format of the stack; `.weights.h5` is the one whose write crashed on a full disk."""
    source = _source(stack, tmp_path)
    for suffix in {"torch": (".safetensors", ".pt"), "tf": (".keras", ".weights.h5")}[_stack_name(stack)]:
        err = _one_line_error(capsys, _port(source, small_disk / f"out{suffix}"))
        assert f"not enough free space in {small_disk}" in err and sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_a_disk_that_fills_while_writing_is_one_line_without_a_crash(stack, tmp_path, small_disk):
    """The free-space estimate bypassed: the write itself meets ENOSPC. (Not `.weights.h5`: HDF5 then crashes the
    process, SIGSEGV, h5py/h5py#914; the free-space check above is what keeps a full disk from reaching it.)"""
    source = _source(stack, tmp_path)
    bypass = "import shared.io.atomic as a; a.check_free_space = lambda *x, **y: None; from shared.cli import main; "
    argv = _port(source, _destination(stack, small_disk))
    code = f"{bypass}raise SystemExit(main({argv!r}))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == failures.EXIT_FAILED, (done.returncode, done.stderr[-2000:])
    assert "no space left on the device" in done.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


# ---- training: resume, a killed run, translate's limits ----


def _losses(run_dir: Path, name: str) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / name / runs.LOSS_LOG).read_text().splitlines()]


def _interrupt_at(monkeypatch, step: int) -> None:
    real_after_step = runner._Steps.after_step

    def interrupted(self, loss):
        if self.step == step - 1:
            raise KeyboardInterrupt
        return real_after_step(self, loss)

    monkeypatch.setattr(runner._Steps, "after_step", interrupted)


@pytest.mark.parametrize("stop_at", [5, 7], ids=["after_an_epoch_checkpoint", "mid_epoch"])
def test_a_resumed_run_follows_the_uninterrupted_curve(stack, tmp_path, tmp_path_factory, monkeypatch, stop_at):
    """float64; checkpoints every 3 steps and at each 4-step epoch's end: stopped at step 5 it resumes from 4 (the
    epoch's evaluation redone), at 7 from 6 (two batches of epoch 2 skipped)."""
    name = _stack_name(stack)
    whole, expected = _trained_run(name, tmp_path_factory)  # the uninterrupted float64 run
    run_dir = _run(tmp_path / "stopped", dtype="float64")
    with monkeypatch.context() as patch:
        _interrupt_at(patch, stop_at)
        with pytest.raises(KeyboardInterrupt):
            runner.train(run_dir, name, progress=False)
    assert len(_losses(run_dir, name)) < 8
    resumed = runner.train(run_dir, name, progress=False, resume=True)
    assert_close(_losses(run_dir, name), _losses(whole, name), 1e-12, what="resumed loss curve")
    assert [json.loads(line)["epoch"] for line in (run_dir / name / runs.EVAL_LOG).read_text().splitlines()] == [0, 1]
    assert resumed["loss"] == pytest.approx(expected["loss"], abs=1e-12)
    assert runner.train(run_dir, name, progress=False, resume=True) == json.loads((run_dir / name / runs.EVAL_FILE).read_text())
    logged = [json.loads(line)["seconds"] for line in (run_dir / name / runs.LOSS_LOG).read_text().splitlines()]
    assert resumed["train_seconds"] == pytest.approx(sum(logged), rel=1e-12)  # both segments, not the last one only
    resumed_from = {5: 4, 7: 6}[stop_at]  # the checkpoint's step
    assert resumed["train_seconds"] > sum(logged[resumed_from:])  # negative control: the resumed segment's steps alone


def test_negative_control_a_resume_without_adams_state_leaves_the_curve(stack, tmp_path, tmp_path_factory, monkeypatch):
    name = _stack_name(stack)
    whole, _ = _trained_run(name, tmp_path_factory)  # the uninterrupted float64 run
    run_dir = _run(tmp_path / "stopped", dtype="float64")
    with monkeypatch.context() as patch:
        _interrupt_at(patch, 7)
        with pytest.raises(KeyboardInterrupt):
            runner.train(run_dir, name, progress=False)
    trainer_class = __import__(f"{stack.__name__}.train", fromlist=["Trainer"]).Trainer
    monkeypatch.setattr(trainer_class, "load_optimizer_state", lambda self, state: None)  # the naive resume
    runner.train(run_dir, name, progress=False, resume=True)
    assert np.max(np.abs(np.subtract(_losses(run_dir, name), _losses(whole, name)))) > 1e-6


def _dropout_mask(stack, model) -> np.ndarray:
    """A mask drawn from the generator the model's dropout draws from: torch's global one, or the model's first
    Keras Dropout layer's SeedGenerator."""
    if stack.__name__ == "torch_impl":
        import torch

        return torch.nn.functional.dropout(torch.ones(64, dtype=torch.float64), 0.5, training=True).numpy()
    import keras

    layer = next(layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout))
    return keras.ops.convert_to_numpy(layer(np.ones(64), training=True))


def test_the_dropout_generators_are_restored(stack):
    """What --resume saves besides the weights: the next dropout masks come out as they would have."""
    train = __import__(f"{stack.__name__}.train", fromlist=["rng_state"])
    name = "luong_general"  # dropout 0.2 in its fixture config
    train.set_seed(3)
    model = stack.build(name, "float64", **catalogue.get(name).fixture_config)
    state = json.loads(json.dumps(train.rng_state(model)))  # as the checkpoint's metadata holds it
    first, second = _dropout_mask(stack, model), _dropout_mask(stack, model)
    assert not np.array_equal(first, second)  # the control: each draw differs
    train.load_rng_state(model, state)
    np.testing.assert_array_equal(_dropout_mask(stack, model), first)


def test_a_killed_training_run_resumes_on_the_same_curve(stack, tmp_path):
    name = _stack_name(stack)
    settings = {"batch_size": 8, "epochs": 2, "checkpoint_every": 2, "dtype": "float64"}  # 16 steps
    whole = _run(tmp_path / "whole", **settings)
    runner.train(whole, name, progress=False)
    run_dir = _run(tmp_path / "killed", **settings)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "shared.train.runner", str(run_dir), name, "--quiet"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    log, deadline = run_dir / name / runs.LOSS_LOG, time.monotonic() + 300
    while (not log.is_file() or len(log.read_text().splitlines()) < 6) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert len(_losses(run_dir, name)) < 16, "the run ended before the kill"
    dead = run_dir / name / f"{atomic.STAGED_PREFIX}999999999-dead.tmp"  # what a kill mid-checkpoint leaves
    dead.write_bytes(b"partial")
    with open(run_dir / name / runs.LOSS_LOG, "a") as log:  # and a kill mid-line: a torn last line, dropped
        log.write('{"step": 99, "epoch": 3, "lo')
    assert rosetta(["train", "reverse_bahdanau", "--run-dir", str(run_dir), "--stack", name, "--resume", "--quiet"]) == 0
    assert_close(_losses(run_dir, name), _losses(whole, name), 1e-12, what="the killed run's resumed curve")
    assert not [path.name for path in (run_dir / name).iterdir() if path.name.startswith(".")]


def test_translate_refuses_what_it_cannot_do_in_one_line(stack, tmp_path, tmp_path_factory, capsys):
    name = _stack_name(stack)
    run_dir, _ = _trained_run(name, tmp_path_factory)
    missing = tmp_path / "no" / "such" / "folder" / "a.png"
    err = _one_line_error(capsys, ["translate", str(run_dir), "3 4 5", "--stack", name, "--heatmap", str(missing)])
    assert "does not exist: create it first" in err
    long = " ".join(["3"] * 51)  # the reverse task re-runs its decoder per output token: a length limit
    assert "at most 50 (the run's max_len)" in _one_line_error(capsys, ["translate", str(run_dir), long, "--stack", name])


def test_training_options_are_carried_by_the_run_not_retyped_on_resume(stack, tmp_path, capsys):
    name, run_dir = _stack_name(stack), tmp_path / "run"
    sizes = [item for key, value in SMALL.items() for item in ("--set", f"{key}={value}")]
    options = [item for key, value in REVERSE_DATA.items() for item in ("--data-option", f"{key}={value}")]
    argv = ["train", NAME, "--stack", name, "--run-dir", str(run_dir), "--batch-size", "16", "--epochs", "1", "--quiet"]
    assert rosetta(argv + sizes[:4] + options) == 0
    assert rosetta(["train", NAME, "--stack", name, "--run-dir", str(run_dir), "--resume", "--quiet"]) == 0
    assert "is a run of reverse_luong_dot" in _one_line_error(
        capsys, ["train", "reverse_rnn", "--stack", name, "--run-dir", str(run_dir), "--resume"]
    )
