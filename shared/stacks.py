"""The one registry of stacks: their names, packages and labels. Import order: torch before TensorFlow."""

from __future__ import annotations

import importlib
from types import ModuleType

STACKS = ("torch", "tf")
PACKAGES = {"torch": "torch_impl", "tf": "tf_impl"}
LABELS = {"torch": "torch", "tf": "TF"}  # as tables and figures print them


def check(stack: str) -> str:
    """`stack` if it is one; ValueError naming the known ones otherwise."""
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; known: {', '.join(STACKS)}")
    return stack


def import_stack(stack: str) -> ModuleType:
    """The contract package of `stack` (torch_impl or tf_impl)."""
    return importlib.import_module(PACKAGES[check(stack)])


def import_module(stack: str, module: str) -> ModuleType:
    """One module of a stack's package, e.g. `import_module("tf", "train")` is tf_impl.train."""
    return importlib.import_module(f"{PACKAGES[check(stack)]}.{module}")
