"""Keras's ranks and devices as the runner asks for them (the same functions as torch_impl/distributed.py): Keras
trains data-parallel in one process over several devices through `fit` (keras_compat/distributed.py:
keras.distribution on JAX, MirroredStrategy on TensorFlow), so it has one rank."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from tf_impl.keras_compat import backends, distributed
from tf_impl.keras_compat.distributed import accelerators

__all__ = ["accelerators", "ranks", "on_devices", "gather_ranks", "wait_for_ranks", "leave_ranks", "place"]


def ranks() -> tuple[int, int]:
    """(0, 1): Keras trains data-parallel in one process over several devices, not as torchrun's ranks."""
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        raise ValueError("Keras trains data-parallel in one process over its devices, not under torchrun: "
                         "rosetta train --stack tf --devices N")  # fmt: skip
    return 0, 1


@contextlib.contextmanager
def on_devices(devices: int) -> Iterator[None]:
    """Inside, `tf_impl.build` and `Trainer` train data-parallel on `devices` devices through `fit`
    (keras_compat/distributed.data_parallel): the GPUs, or on a CPU-only machine the host split into `devices`
    devices (TensorFlow: logical CPUs, made here, before its first op; JAX: XLA's host devices, which the process
    must have been started with: shared.specs.host_devices_environment). 1: this process as it is."""
    if devices == 1:
        yield
        return
    if not distributed.accelerators():
        distributed.split_cpu(devices)
    with distributed.data_parallel(devices):
        yield


def gather_ranks(value) -> list:
    """`[value]`: one process."""
    return [value]


def wait_for_ranks() -> None:
    """Nothing to wait for: one process."""


def leave_ranks() -> None:
    """Nothing to leave: one process."""


def place(model) -> tuple[object, str]:
    """Keras's backend places arrays on the GPU by itself when one is visible; the model and that device's name."""
    return model, backends.device()
