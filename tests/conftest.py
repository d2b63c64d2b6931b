"""Which stacks are under test: ROSETTA_STACKS (comma-separated: torch, tf). Default: both.

Naming a stack that cannot import is an error, not a silent skip (einops's habit). torch is imported
before TensorFlow, and TF32 is turned off, as Keras's own torch-interop tests do.
"""

from __future__ import annotations

import importlib
import json
import os

import pytest

from shared.stacks import PACKAGES as MODULES
from shared.stacks import STACKS as KNOWN_STACKS  # import order: torch first


def _requested() -> list[str]:
    names = [n.strip() for n in os.environ.get("ROSETTA_STACKS", "torch,tf").split(",") if n.strip()]
    unknown = sorted(set(names) - set(KNOWN_STACKS))
    if unknown:
        raise pytest.UsageError(f"ROSETTA_STACKS names unknown stacks {unknown}; known: {', '.join(KNOWN_STACKS)}")
    return [n for n in KNOWN_STACKS if n in names]


def _import(stack: str):
    try:
        module = importlib.import_module(MODULES[stack])
    except ImportError as error:
        raise pytest.UsageError(f"ROSETTA_STACKS names {stack!r}, but {MODULES[stack]} cannot import: {error}") from error
    if stack == "tf" and module.backends.name() == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)  # TF32 is on by default on GPUs
    return module


STACKS = _requested()
STACK_MODULES = {stack: _import(stack) for stack in STACKS}

# One folder per tox env: shared/ (numpy only), stack/ (each stack alone: torch and tf envs), torch/ and tf/ (one
# stack's own files), cross/ (both stacks in one process), hf/ (both, against Hugging Face's transformers: the cross
# env), keras/ (Keras on JAX or torch against torch_impl). A folder whose stacks are not under test is not collected.
FOLDERS_NEEDING = {"stack": bool(STACKS), "torch": "torch" in STACKS, "tf": "tf" in STACKS, "cross": len(STACKS) == 2}
FOLDERS_NEEDING["hf"] = FOLDERS_NEEDING["cross"]
FOLDERS_NEEDING["keras"] = FOLDERS_NEEDING["cross"] and STACK_MODULES["tf"].backends.name() != "tensorflow"
collect_ignore = [folder for folder, runs in FOLDERS_NEEDING.items() if not runs]


@pytest.fixture(params=STACKS)
def stack(request):
    """The contract module of one stack under test; test ids read `[torch-...]` / `[tf-...]`."""
    return STACK_MODULES[request.param]


@pytest.fixture(scope="session")
def keras3(tmp_path_factory):
    """TensorFlow's NMT tutorial checkpoints written by its own classes in Keras 3, in this process
    (tests/tutorials/tf_nmt_writer.py): `2020-adam/`, `2021-adam/`."""
    from tests.tutorials import tf_nmt_writer as writer

    folder = tmp_path_factory.mktemp("keras3")
    for revision in ("2020", "2021"):
        writer.write(folder / f"{revision}-adam", revision, "adam")
    return folder


@pytest.fixture(scope="session")
def keras2(tmp_path_factory):
    """The same written by Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1) in one subprocess: `2020-legacy_adam/` and
    `2021-legacy_adam/` (the optimizer of TF <= 2.10, slot variables), `2020-adam/` (that of TF 2.11-2.15)."""
    import subprocess
    import sys
    from importlib.util import find_spec
    from pathlib import Path

    from tests.tutorials import tf_nmt_writer as writer

    if find_spec("tf_keras") is None:
        pytest.skip('tf_keras cannot be imported: pip install --no-deps "tf_keras>=2.21,<2.22" (tox installs it)')
    folder = tmp_path_factory.mktemp("keras2")
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    jobs = ["2020:legacy_adam", "2020:adam", "2021:legacy_adam"]
    command = [sys.executable, str(Path(writer.__file__)), str(folder), *jobs]
    done = subprocess.run(command, env=env, cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Keras 2" in done.stdout, done.stderr[-3000:]
    return folder


MAXIMA: dict[tuple[str, str], dict[str, float]] = {}  # (model, dtype) -> max |torch - tf| per quantity


def pytest_sessionfinish(session):
    """A pytest-xdist worker hands its maxima to the controller, which prints the table."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["maxima"] = json.dumps([[list(key), value] for key, value in MAXIMA.items()])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: gather a finished worker's maxima."""
    for key, value in json.loads(getattr(node, "workeroutput", {}).get("maxima", "[]")):
        MAXIMA[tuple(key)] = value


def pytest_terminal_summary(terminalreporter):
    from shared.verify.equality import maxima_table

    if MAXIMA:
        terminalreporter.section("measured maxima of |torch - tf| (equality policy of docs/DESIGN.md)")
        for line in maxima_table(dict(sorted(MAXIMA.items()))):
            terminalreporter.write_line(line)


# The files whose tests run for tens of seconds (`--durations`: subprocesses, trainings, compiled programs), first:
# pytest-xdist hands tests out in collection order, and one of these last would leave the other worker idle
STARTED_FIRST = ("test_data_parallel.py", "test_stack_bench.py", "test_reliability.py", "test_docs.py", "test_fit.py",
                 "test_training.py", "test_porting.py")  # fmt: skip


def pytest_collection_modifyitems(items):
    """STARTED_FIRST's files first, in that order; within a file and elsewhere, the collection order."""
    rank = {name: index for index, name in enumerate(STARTED_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
