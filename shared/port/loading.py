"""What a port's output loads into: the one Python line that rebuilds the model the written file computes.

A `.pt` state_dict, a `.weights.h5` file and a TensorFlow checkpoint name no config, so the model must be
built again with every option that is not the catalogue's default (`torch_impl.build("tf_tutorial", ...,
feed_state=True)`); `rosetta port` prints that line last, and tests run it as printed. A `.keras` file and
a port's canonical `.safetensors` carry their config too. A file written in a preset's layout loads into
that tutorial's own classes (our transcription of them is named).
"""

from __future__ import annotations

from shared import catalogue, stacks
from shared.port.endpoints import Endpoint


def build_call(stack: str, name: str, config: dict, dtype: str) -> str:
    """`torch_impl.build("NAME", ...)` with the dtype (where float64) and every option that is not the default."""
    spec = catalogue.get(name)
    options = [f"{key}={value!r}" for key, value in config.items() if spec.config.get(key) != value]
    precision = ['dtype="float64"'] if dtype == "float64" else []
    return f'{stack}.build("{name}"' + "".join(f", {item}" for item in precision + options) + ")"


def load_line(dst: Endpoint, name: str, config: dict, dtype: str, with_state: bool) -> str:
    """The line that loads the file written at `dst` into the model it computes (see the module docstring)."""
    path = repr(str(dst.path))
    if dst.layout.reference is not None:
        module, _, builder = dst.layout.reference.partition(":")
        return (f"import {module}; model = {module}.{builder}({path})  # {dst.layout.title}'s own classes, as our "
                f"transcription of them loads it ({dst.layout.source})")  # fmt: skip
    if not dst.layout.identity:
        return f"None  # with the code whose layout {dst.layout.title} describes: its model, not the catalogue's"
    package = stacks.PACKAGES[dst.format.stack or "torch"]  # a port's canonical safetensors loads into torch_impl
    return dst.format.load_line(path, name, build_call(package, name, config, dtype), with_state)
