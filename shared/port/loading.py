"""What a port's output loads into: the one Python line that rebuilds the model the written file computes.

A `.pt` state_dict, a `.weights.h5` file and a TensorFlow checkpoint name no config, so the model must be
built again with every option that is not the catalogue's default (`torch_impl.build("tf_tutorial", ...,
feed_state=True)`); `rosetta port` prints that line last, and tests run it as printed. A `.keras` file and
a port's canonical `.safetensors` carry their config too. A file written in a preset's layout loads into
that tutorial's own classes (our transcription of them is named).
"""

from __future__ import annotations

from shared import catalogue
from shared.port.port_files import Endpoint


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
    fmt = dst.format.name
    if fmt == "keras":
        return f"import tf_impl.train; model, _ = tf_impl.train.load_keras({path})"
    if fmt == "torch":
        entry = '["model"]' if with_state else ""
        return f"import torch, torch_impl; model = {build_call('torch_impl', name, config, dtype)}; model.load_state_dict(torch.load({path}){entry})"  # noqa: E501
    if fmt == "safetensors":
        build = build_call("torch_impl", name, config, dtype)
        return f"import torch_impl; from shared.port import read_weights; model = {build}; torch_impl.set_weights(model, read_weights({path}))"  # noqa: E501
    build = build_call("tf_impl", name, config, dtype)
    if fmt == "tf_checkpoint":
        return f"import tf_impl, tf_impl.checkpoints; model = {build}; tf_impl.checkpoints.read({path}, model)"
    if catalogue.get(name).interface == "attention":  # a bare layer: only Keras Models load weights files
        return f"import tf_impl, tf_impl.train; model = {build}; tf_impl.train.load_native(model, {path})"
    return f"import tf_impl; model = {build}; model.load_weights({path})"
