"""Which stacks are under test: ROSETTA_STACKS (comma-separated: torch, tf). Default: both.

Naming a stack that cannot import is an error, not a silent skip (einops's habit). torch is imported
before TensorFlow, and TF32 is turned off, as Keras's own torch-interop tests do.
"""

from __future__ import annotations

import importlib
import os

import pytest

KNOWN_STACKS = ("torch", "tf")  # import order: torch first
MODULES = {"torch": "torch_impl", "tf": "tf_impl"}


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
    if stack == "tf":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)  # TF32 is on by default on GPUs
    return module


STACKS = _requested()
STACK_MODULES = {stack: _import(stack) for stack in STACKS}

collect_ignore = []
if not STACKS:
    collect_ignore += ["test_stack.py", "test_runner.py", "test_fast_paths.py", "test_stack_bench.py"]
if "torch" not in STACKS:
    collect_ignore.append("test_torch_documents.py")
if len(STACKS) < 2:
    collect_ignore += ["test_cross.py", "test_training.py", "test_porting.py"]


@pytest.fixture(params=STACKS)
def stack(request):
    """The contract module of one stack under test; test ids read `[torch-...]` / `[tf-...]`."""
    return STACK_MODULES[request.param]


MAXIMA: dict[tuple[str, str], dict[str, float]] = {}  # (model, dtype) -> max |torch - tf| per quantity


def pytest_terminal_summary(terminalreporter):
    from shared.equality import maxima_table

    if MAXIMA:
        terminalreporter.section("measured maxima of |torch - tf| (equality policy of DESIGN.md)")
        for line in maxima_table(dict(sorted(MAXIMA.items()))):
            terminalreporter.write_line(line)
