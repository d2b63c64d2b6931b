"""The main job as a newcomer meets it: a first look that is small (`tox -e report-quick`, the bench's quick
profile) and writes nowhere the committed report lives, and output that holds what a user reads (the frameworks'
native chatter left out of the bench's stderr, their warnings and errors kept)."""

from __future__ import annotations

import configparser
import contextlib
import os
import re
import subprocess
import sys

import pytest

from shared import catalogue
from shared.tools import bench, bench_profiles, native_stderr
from shared.verify import measurement
from tests.doc_blocks import REPO

# what the frameworks write, as they write it (TensorFlow's import, before and after absl is set up; torch's profiler)
CHATTER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795875867.529019    8847 port.cc:153] oneDNN custom operations are on. You may see slightly ...\n",
    "I1128 14:23:06.123456    8847 service.cc:161]   StreamExecutor [0]: Host, Default Version\n",
    "USDT:2026-11-28 14:23:06 7567:7567 SyncActivityProfilerHandler.cpp:52] profiler_start\n",
    "USDT:2026-11-28 14:23:06 7567:7567 SyncActivityProfilerHandler.cpp:59] profiler_stop\n",
]
KEPT = [  # warnings and errors, the frameworks' and Python's
    "W0000 00:00:1795875867.529019    8847 cpu_allocator_impl.cc:84] Allocation of 1610612736 exceeds 10% of memory.\n",
    "E0000 00:00:1795876082.697624   12784 util.cc:131] oneDNN supports DT_BOOL only on platforms with AVX-512.\n",
    "F0000 00:00:1795876082.697624   12784 cpu_feature_guard.cc:44] The TensorFlow library was compiled to use AVX\n",
    "ERROR:2026-11-28 14:23:06 7567:7567 CuptiActivityApi.cpp:291] CUPTI initialization failed\n",
    "Traceback (most recent call last):\n",
    "UserWarning: Layer 'decoder' was passed an input with a mask attached to it.\n",
    "I am a line a model printed\n",
]


def _tox_env(name: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "tox.ini")
    return dict(parser[f"testenv:{name}"])


def _quick_commands() -> list[str]:
    env = _tox_env("report-quick")
    return [line.replace("{[testenv:report-quick]out}", env["out"]) for line in env["commands"].strip().splitlines()]


def test_the_quick_bench_profile_times_one_model_at_one_thread_count_a_handful_of_cases():
    quick, default = bench_profiles.get_profile("quick"), bench_profiles.get_profile("default")
    assert quick.models == ("reverse_bahdanau",) and quick.threads == (2,)
    counts = {
        "torch": len(bench_profiles.cases(quick, "torch", 2)),
        "tf": len(bench_profiles.cases(quick, "tf", 2)),
        "jax": len(bench_profiles.cases(bench_profiles.restrict(quick, modes=["xla"]), "tf", 2, backend="jax")),
    }
    assert counts == {"torch": 4, "tf": 6, "jax": 2}  # ours and the listing in each mode, at the document's sizes
    assert {case.sweep for stack in ("torch", "tf") for case in bench_profiles.cases(quick, stack, 2)} == {"document"}
    every_default = sum(
        len(bench_profiles.cases(default, stack, threads)) for stack in ("torch", "tf") for threads in default.threads
    )
    assert sum(counts.values()) * 10 < every_default  # negative control: the default profile is over ten times its size


def test_the_first_look_measures_a_few_models_and_writes_nowhere_the_committed_report_lives():
    commands = _quick_commands()
    assert commands and all(" --readme" not in line and "reports/" not in line and "docs/" not in line for line in commands)
    assert all(not re.search(r"--(output|json|results|run-dir)", line) or " runs/report-quick" in line for line in commands)
    equality = next(line for line in commands if line.startswith("rosetta equality"))
    named = [word for word in equality.split()[2:] if not word.startswith("-") and word in catalogue.built()]
    every_document = {catalogue.get(name).document for name in catalogue.built()}
    assert len(named) == len(every_document) < len(catalogue.built())  # one model of each document
    assert {catalogue.get(name).document for name in named} == every_document
    assert any("--profile quick" in line for line in commands) and commands[-1].startswith("rosetta report")
    main = _tox_env("report")["commands"]  # negative control: the main job writes the committed report and README
    assert "--readme README.md" in main and "reports/equality.json" in main


def test_equality_of_some_models_shows_the_naive_setups_drift_on_those_models_only(monkeypatch):
    """`rosetta equality reverse_bahdanau --training` trains the drift of reverse_bahdanau, not of every drift model
    (the first look's equality would have trained luong_general and tf_tutorial nine times more)."""
    import types

    from shared.verify import equality, training

    stack = types.SimpleNamespace(backend=lambda: "tensorflow")
    monkeypatch.setattr(measurement, "import_stack", lambda name: stack)
    monkeypatch.setattr(measurement, "import_module", lambda name, module: stack)
    monkeypatch.setattr(equality, "compare_stacks", lambda *args: {"logits": 0.0})
    monkeypatch.setattr(training, "compare_training", lambda *args, **kwargs: {"loss curve": 0.0})
    drifted = []
    monkeypatch.setattr(training, "drift", lambda name, *args: drifted.append(name) or {"loss curve": 1.0})
    measurement.measure(["reverse_bahdanau", "additive_attention"], with_training=True)
    assert set(drifted) == {"reverse_bahdanau"} and len(drifted) == len(training.NAIVE_SETUPS)
    drifted.clear()
    assert not any(block == "drift" for _, block, _ in measurement.measure(["additive_attention"], True).sections)
    assert drifted == []
    measurement.measure(list(catalogue.built()), with_training=True)  # negative control: every model, every drift model
    assert set(drifted) == set(measurement.DRIFT_MODELS)


@pytest.mark.parametrize("line", CHATTER)
def test_the_frameworks_chatter_is_told_apart(line):
    assert native_stderr.is_chatter(line)


@pytest.mark.parametrize("line", KEPT)
def test_warnings_errors_and_everything_else_are_kept(line):
    assert not native_stderr.is_chatter(line)


def _child(crash: bool = False) -> list[str]:
    """A bench process stand-in: a progress line on stdout, then every line of CHATTER and KEPT on stderr (and a
    crash right after them)."""
    lines = "".join(CHATTER + KEPT)
    code = f"import os, sys; print('bench: a progress line', flush=True); os.write(2, {lines.encode()!r})"
    return [sys.executable, "-c", code + ("; os.abort()" if crash else "")]


def test_a_bench_process_stderr_comes_without_the_chatter_and_with_all_else(capfd):
    assert bench._run_child(_child(), {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}) == 0
    out, err = capfd.readouterr()
    assert out == "bench: a progress line\n" and err == "".join(KEPT)


def test_a_crashing_bench_process_last_lines_are_shown():
    """Read by the parent to the end: nothing the child wrote before it died is lost."""
    run = subprocess.run([sys.executable, "-c", f"from shared.tools import bench; import os, sys; "
                          f"sys.exit(bench._run_child({_child(crash=True)!r}, dict(os.environ)))"],
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert run.returncode != 0 and run.stderr == "".join(KEPT)


def test_negative_control_a_bench_process_run_as_before_or_asked_for_info_lines_writes_the_chatter(capfd):
    subprocess.run(_child(), env=dict(os.environ))  # how run() started it before
    assert capfd.readouterr().err == "".join(CHATTER + KEPT)
    bench._run_child(_child(), {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})  # TensorFlow's INFO lines asked for
    assert capfd.readouterr().err == "".join(CHATTER + KEPT)


def test_native_lines_within_the_filter_come_without_the_chatter_even_when_the_block_fails(capfd):
    with pytest.raises(RuntimeError, match="the block failed"), native_stderr.native_stderr_filtered():
        os.write(2, "".join(CHATTER + KEPT).encode())
        raise RuntimeError("the block failed")
    assert capfd.readouterr().err == "".join(KEPT)
    with contextlib.nullcontext():  # negative control: the same lines unfiltered
        os.write(2, "".join(CHATTER).encode())
    assert capfd.readouterr().err == "".join(CHATTER)
