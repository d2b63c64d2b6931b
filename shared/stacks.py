"""The one registry of stacks: their names, packages and labels. Import order: torch before TensorFlow."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

STACKS = ("torch", "tf")
PACKAGES = {"torch": "torch_impl", "tf": "tf_impl"}
LABELS = {"torch": "torch", "tf": "TF"}  # as tables and figures print them
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"  # XLA: split the host CPU into N devices


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


def host_devices_environment(devices: int) -> dict[str, str]:
    """Environment variables that give a new process `devices` CPU devices on Keras's JAX backend (XLA's host device
    count, read once, when JAX is imported; any XLA_FLAGS already set are kept). TensorFlow splits its CPU in the
    process (tf_impl.keras_compat.distributed.split_cpu); torch has no such thing (ranks are processes)."""
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if not flag.startswith(HOST_DEVICES_FLAG)]
    return {"XLA_FLAGS": " ".join([*flags, f"{HOST_DEVICES_FLAG}={int(devices)}"])}
