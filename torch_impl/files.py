"""Every file PyTorch's side reads and writes: `.pt` state_dicts and checkpoints `{"model", "optimizer"}` (read with
`weights_only=True`: a file holding pickled code is refused, never run), Adam's state in them in canonical layout,
and a user's own model as `.pt` or canonical `.safetensors` (`rosetta port --torch-model`).

Mirrors tf_impl/files.py (Keras's `.weights.h5`, `.keras` and TensorFlow checkpoints); shared/port/formats.py
registers each format and calls these functions.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from shared.core.canonical import check_weights
from shared.core.optimizer_state import MOMENTS, check_optimizer_state
from shared.io.atomic import write_atomic
from torch_impl.weights import get_weights, set_weights

NATIVE_SUFFIX = ".pt"


def adam_state(model: torch.nn.Module, optimizer: torch.optim.Adam) -> dict:
    """`optimizer`'s state over `model`'s parameters in canonical layout: `step`, `exp_avg` and `exp_avg_sq`
    keyed like the weights (zeros for a parameter never updated), and the hyperparameters `lr`, `betas`, `eps`."""
    group = optimizer.param_groups[0]
    state, step = {name: {} for name in MOMENTS}, 0
    for key, param in model.named_parameters():
        found = optimizer.state.get(param, {})
        step = max(step, int(found.get("step", 0)))
        for name in MOMENTS:
            state[name][key] = found.get(name, torch.zeros_like(param)).detach().cpu().numpy().copy()
    hyper = {"lr": float(group["lr"]), "betas": tuple(map(float, group["betas"])), "eps": float(group["eps"])}
    return {"step": step, **state, **hyper}


def load_adam_state(model: torch.nn.Module, optimizer: torch.optim.Adam, state: Mapping) -> None:
    """Set `optimizer`'s moments and step counter from a canonical state (strict on keys and shapes)."""
    step = _check_moments(model, state)
    for key, param in model.named_parameters():
        moments = {name: _adam_moment(state[name][key], param) for name in MOMENTS}
        # the step on the weight's device in float32, as Adam's own load_state_dict puts it for its fused kernel
        optimizer.state[param] = {"step": torch.tensor(float(step), dtype=torch.float32, device=param.device), **moments}


def _adam_moment(array, param: torch.Tensor) -> torch.Tensor:
    """A moment for Adam's state: a contiguous copy in `param`'s dtype and device. The fused kernel walks memory
    as contiguous (a transposed view, as Keras's kernels arrive, would be read in the wrong order), and updates
    in place (a tensor sharing the caller's array would change it)."""
    return torch.tensor(np.ascontiguousarray(array), dtype=param.dtype, device=param.device)


def _check_moments(model: torch.nn.Module, state: Mapping) -> int:
    """A canonical optimizer state's step counter, after checking its moments' keys and shapes against `model`."""
    step = check_optimizer_state(state)
    shapes = {name: tuple(param.shape) for name, param in model.named_parameters()}
    for name in MOMENTS:
        check_weights(shapes, state[name], f"{type(model).__name__} ({name})")
    return step


def save_native(model: torch.nn.Module, path: str | Path, optimizer_state: Mapping | None = None) -> None:
    """The model's state_dict as a `.pt` file, written atomically; with a canonical `optimizer_state`, the
    usual checkpoint `{"model": state_dict, "optimizer": torch.optim.Adam(model.parameters()).state_dict()}`."""
    write_arrays(path, get_weights(model), optimizer_state)


def write_arrays(path: str | Path, weights: Mapping[str, np.ndarray], optimizer_state: Mapping | None = None) -> None:
    """`weights` as a `.pt` state_dict in their order, written atomically; with an optimizer state keyed like
    them, the checkpoint `{"model", "optimizer"}` that `Adam(model.parameters())` over those weights saves."""
    tensors = {key: torch.as_tensor(np.ascontiguousarray(value)) for key, value in weights.items()}
    saved: dict = tensors
    if optimizer_state is not None:
        parameters = [torch.nn.Parameter(tensor.clone()) for tensor in tensors.values()]
        hyper = {key: optimizer_state[key] for key in ("lr", "betas", "eps") if optimizer_state.get(key) is not None}
        optimizer = torch.optim.Adam(parameters, **hyper)
        step = check_optimizer_state(optimizer_state)
        for key, param in zip(tensors, parameters, strict=True):
            moments = {name: _adam_moment(optimizer_state[name][key], param) for name in MOMENTS}
            optimizer.state[param] = {"step": torch.tensor(float(step)), **moments}
        saved = {"model": tensors, "optimizer": optimizer.state_dict()}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    write_atomic(path, buffer.getvalue())


def read_arrays(path: str | Path, with_optimizer: bool = False) -> tuple[dict[str, np.ndarray], dict | None]:
    """A `.pt` state_dict, or a checkpoint `{"model", "optimizer"}`, as numpy arrays in the file's order and
    names (tensors only: `weights_only=True` refuses pickled code); with `with_optimizer`, Adam's state keyed
    by those names (the optimizer's parameter i is the state_dict's entry i, as `Adam(model.parameters())`
    saves for a model without buffers)."""
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        raise ValueError(f"{path}: not a loadable torch state_dict ({type(error).__name__}: {error})") from None
    checkpoint = isinstance(loaded, dict) and {"model", "optimizer"} <= set(loaded)
    weights = loaded["model"] if checkpoint else loaded
    if not isinstance(weights, dict) or not all(isinstance(value, torch.Tensor) for value in weights.values()):
        raise ValueError(f"{path}: not a torch state_dict (a dict of tensors, or a checkpoint {{'model', 'optimizer'}})")
    arrays = {key: value.numpy() for key, value in weights.items()}
    if not with_optimizer:
        return arrays, None
    if not checkpoint:
        raise ValueError(f"{path}: holds no optimizer state (a checkpoint {{'model': ..., 'optimizer': ...}} does)")
    return arrays, _adam_state_by_key(path, weights, loaded["optimizer"])


def _adam_state_by_key(path, weights: Mapping[str, torch.Tensor], saved: Mapping) -> dict:
    """A saved Adam state_dict over parameters in `weights`' order, in canonical layout keyed by their names."""
    parameters = [torch.nn.Parameter(tensor.clone()) for tensor in weights.values()]
    optimizer = torch.optim.Adam(parameters)
    try:
        optimizer.load_state_dict(saved)
    except (KeyError, ValueError, TypeError) as error:
        count = len(parameters)
        raise ValueError(f"{path}: its optimizer state is not Adam's over the file's {count} weights ({error})") from None
    group, state, step = optimizer.param_groups[0], {name: {} for name in MOMENTS}, 0
    for key, param in zip(weights, parameters, strict=True):
        found = optimizer.state.get(param, {})
        step = max(step, int(found.get("step", 0)))
        for name in MOMENTS:
            moment = found.get(name, torch.zeros_like(param)).detach()
            if moment.shape != param.shape:
                shapes = f"{tuple(moment.shape)}, the weight {tuple(param.shape)}"
                raise ValueError(f"{path}: Adam's {name} of {key} has shape {shapes}")
            state[name][key] = moment.numpy().copy()
    hyper = {"lr": float(group["lr"]), "betas": tuple(map(float, group["betas"])), "eps": float(group["eps"])}
    return {"step": step, **state, **hyper}


def load_native(model: torch.nn.Module, path: str | Path, with_optimizer: bool = False) -> dict | None:
    """Load a `.pt` state_dict, or a checkpoint `{"model", "optimizer"}`, into `model`, strictly (see
    `read_arrays`); with `with_optimizer`, return Adam's state in canonical layout."""
    weights, state = read_arrays(path, with_optimizer)
    set_weights(model, weights)
    if state is not None:
        _check_moments(model, state)
    return state


# ---- the user's own model (rosetta port --torch-model): its state_dict, strict ----


def load_own(model: torch.nn.Module, arrays: Mapping[str, np.ndarray]) -> torch.nn.Module:
    """`model` holding `arrays` (a `.pt` or canonical `.safetensors` file's), strictly: every key of the model, none
    more, each of its shape."""
    set_weights(model, arrays)
    return model


def own_arrays(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """`model`'s state_dict as numpy arrays, for a `.pt` (`write_arrays`) or `.safetensors` file."""
    return get_weights(model)
