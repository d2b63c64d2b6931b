"""The one door to a stack: every module and name of torch_impl/ and tf_impl/ that shared/ may call, written down as
Protocols, and the only place in shared/ that imports a stack module. `import_module(stack, "train")` returns that
module seen through its Protocol: a name the Protocol does not list is an AttributeError, so shared/ cannot grow a
second, unwritten surface. tests/shared/test_parity.py checks both stacks define every name listed here;
tests/shared/test_layout.py that no other module of shared/ names a stack module.

The stacks' names, packages and labels live in shared/specs.py (the stacks import them too); they are re-exported
here. Import order: torch before TensorFlow.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from shared.specs import FRAMEWORKS, HOST_DEVICES_FLAG, LABELS, PACKAGES, STACKS, host_devices_environment
from shared.specs import check_stack as check

__all__ = ["STACKS", "PACKAGES", "FRAMEWORKS", "LABELS", "HOST_DEVICES_FLAG", "host_devices_environment", "check", "SURFACE",
           "import_stack", "import_module", "names"]  # fmt: skip


class Contract(Protocol):
    """The package itself (torch_impl, tf_impl): the contract of docs/DESIGN.md and the Trainer."""

    Trainer: ClassVar[type]

    def build(self, name: str, dtype: str = "float32", as_written: bool = False, **overrides) -> Any: ...
    def get_weights(self, model) -> dict: ...
    def set_weights(self, model, weights: Mapping) -> None: ...
    def run(self, model, name: str, batch: Mapping, teacher_forcing=None) -> dict: ...
    def trace(self, model, name: str, batch: Mapping) -> dict: ...
    def loss_and_grads(self, model, name: str, batch: Mapping, teacher_forcing=None, training: bool = False) -> tuple: ...
    def greedy(self, model, name: str, batch: Mapping, max_len: int) -> dict: ...
    def compiles_per_shape(self) -> bool: ...


class Train(Protocol):
    """train.py: the Trainer, seeds and dropout's generators, the framework's backend."""

    Trainer: ClassVar[type]
    MODES: ClassVar[tuple[str, ...]]

    def set_seed(self, seed: int) -> None: ...
    def rng_state(self, model) -> dict: ...
    def load_rng_state(self, model, state: Mapping) -> None: ...
    def backend(self) -> str: ...


class Distributed(Protocol):
    """distributed.py: ranks and devices as the runner asks for them."""

    def accelerators(self) -> int: ...
    def ranks(self) -> tuple[int, int]: ...
    def on_devices(self, devices: int) -> Any: ...
    def gather_ranks(self, value) -> list: ...
    def wait_for_ranks(self) -> None: ...
    def leave_ranks(self) -> None: ...
    def place(self, model) -> tuple[Any, str]: ...


class TorchDistributed(Distributed, Protocol):
    def launch(self, ranks: int, argv: list[str]) -> int: ...


class Files(Protocol):
    """files.py: every file the stack reads and writes, Adam's state in them (shared/port/formats.py calls these)."""

    NATIVE_SUFFIX: ClassVar[str]

    def save_native(self, model, path, optimizer_state: Mapping | None = None) -> None: ...
    def load_native(self, model, path, with_optimizer: bool = False) -> dict | None: ...
    def adam_state(self, model, optimizer) -> dict: ...
    def load_adam_state(self, model, optimizer, state: Mapping) -> None: ...


class TorchFiles(Files, Protocol):
    def read_arrays(self, path, with_optimizer: bool = False) -> tuple[dict, dict | None]: ...
    def write_arrays(self, path, weights: Mapping, optimizer_state: Mapping | None = None) -> None: ...
    def load_own(self, model, arrays: Mapping) -> Any: ...
    def own_arrays(self, model) -> dict: ...


class TfFiles(Files, Protocol):
    KERAS_SUFFIX: ClassVar[str]

    def save_keras(self, model, path, optimizer_state: Mapping | None = None) -> None: ...
    def load_keras(self, path, with_optimizer: bool = False) -> tuple[Any, dict | None]: ...
    def archive_arrays(self, path) -> dict[str, tuple]: ...
    def load_own_keras(self, path) -> Any: ...
    def save_own_keras(self, model, path) -> None: ...


class Checkpoints(Protocol):
    """tf_impl/checkpoints.py: TensorFlow checkpoints, SavedModels and Keras weights files read by attribute path."""

    def read(self, source, model, with_optimizer: bool = False) -> dict | None: ...
    def write(self, model, folder, optimizer_state: Mapping | None = None) -> str: ...
    def canonical_shapes(self, source, model) -> dict[str, tuple]: ...
    def structure_shapes(self, held: Mapping[str, tuple], structure) -> tuple[dict, list[str]]: ...
    def left_out(self, source) -> dict[str, str]: ...


class Conversion(Protocol):
    """conversion.py: a user's model as leaves of the conversion rules, run and built (`convert`, `rosetta port`)."""

    SUPPORTED: ClassVar[str]

    def leaves(self, model, rules=None) -> list: ...
    def run(self, model, inputs) -> Any: ...
    def numpy(self, value) -> Any: ...
    def build(self, factory, dtype: str, inputs=None) -> Any: ...
    def float64_twin(self, model, factory=None, inputs=None) -> Any: ...


class References(Protocol):
    """references.py: the tutorials' own classes, which a port's reference runs."""

    SHIPPED: ClassVar[tuple[str, ...]]

    def in_float64(self, model, builder, source: str) -> tuple[Any, str]: ...


class TfReferences(References, Protocol):
    def keras_file_reference(self, path: Path, name: str) -> Any: ...


class Bench(Protocol):
    """bench.py: what `rosetta bench` times, counts and profiles in the stack."""

    def configure(self, threads: int, device: str) -> None: ...
    def thread_settings(self) -> dict: ...
    def versions(self) -> dict: ...
    def backend(self) -> str: ...
    def gpu_name(self) -> str | None: ...
    def build(self, *args, **kwargs) -> Any: ...
    def make_call(self, *args, **kwargs) -> Any: ...
    def start_case(self, *args, **kwargs) -> Any: ...
    def peak_memory_mb(self, *args, **kwargs) -> Any: ...
    def matmul_gflops(self, *args, **kwargs) -> float: ...
    def pace_gflops(self, *args, **kwargs) -> float: ...
    def op_profile(self, *args, **kwargs) -> Any: ...
    def count_ops(self, *args, **kwargs) -> Any: ...
    def count_gflop(self, *args, **kwargs) -> Any: ...
    def compiled_cost(self, *args, **kwargs) -> Any: ...
    def execution_path(self, *args, **kwargs) -> Any: ...


_COMMON = {"": Contract, "train": Train, "distributed": Distributed, "files": Files, "conversion": Conversion,
           "references": References, "bench": Bench}  # fmt: skip
# stack -> module ("" the package) -> its Protocol: all shared/ may call there
SURFACE: dict[str, dict[str, type]] = {
    "torch": {**_COMMON, "distributed": TorchDistributed, "files": TorchFiles},
    "tf": {**_COMMON, "files": TfFiles, "checkpoints": Checkpoints, "references": TfReferences},
}


@functools.cache
def names(protocol: type) -> frozenset[str]:
    """The names a Protocol lists: its methods and annotated attributes, its bases' included (read once per Protocol)."""
    found = set()
    for cls in protocol.__mro__:
        if cls is object or cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        found |= {name for name in vars(cls) if not name.startswith("_")}
        found |= {name for name in getattr(cls, "__annotations__", {}) if not name.startswith("_")}
    return frozenset(found)


class Door:
    """A stack module seen through its Protocol: the names it lists, read live from the module (so a test's
    monkeypatch of the module shows); any other name is an AttributeError naming the surface."""

    def __init__(self, module, protocol: type, stack_name: str):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "stack_name", stack_name)  # the stack it belongs to: "torch" or "tf"
        object.__setattr__(self, "_allowed", names(protocol))
        object.__setattr__(self, "__name__", module.__name__)

    def __getattr__(self, name: str):
        if name not in self._allowed:
            raise AttributeError(f"{self.__name__}.{name} is not on the stack surface shared/ may call (shared/stacks.py)")
        return getattr(self._module, name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"{self.__name__} is seen through shared/stacks.py: set names on the module itself")

    def __dir__(self) -> Iterator[str]:
        return iter(sorted(self._allowed))

    def __repr__(self) -> str:
        return f"<{self.__name__}, through shared/stacks.py>"


def import_module(stack: str, module: str = "") -> Door:
    """One module of a stack's package through its Protocol, e.g. `import_module("tf", "train")` is tf_impl.train's
    Trainer, seeds and backend; "" is the package (the contract)."""
    surface = SURFACE[check(stack)]
    if module not in surface:
        listed = ", ".join(name or "(the package)" for name in surface)
        raise ValueError(f"{PACKAGES[stack]}.{module} is not on the stack surface; shared/ may call: {listed}")
    path = ".".join(part for part in (PACKAGES[stack], module) if part)
    return Door(importlib.import_module(path), surface[module], stack)


def import_stack(stack: str) -> Door:
    """The contract package of `stack` (torch_impl or tf_impl)."""
    return import_module(stack, "")
