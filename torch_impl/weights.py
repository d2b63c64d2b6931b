"""Canonical weights <-> torch modules. The canonical layout *is* our modules' state_dict, so this side
is a strict copy with the shared key/shape check; the leaf rules of shared.core.canonical are the Keras side's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from shared.core.canonical import check_weights


def get_weights(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """Canonical weights of `model`: its state_dict as numpy arrays (copies)."""
    return {key: value.detach().cpu().numpy().copy() for key, value in model.state_dict().items()}


def set_weights(model: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Copy canonical `weights` into `model`, cast to its dtype; strict (see shared.core.canonical.check_weights)."""
    state = model.state_dict()
    check_weights({key: tuple(value.shape) for key, value in state.items()}, weights, type(model).__name__)
    with torch.no_grad():
        for key, value in state.items():
            value.copy_(torch.as_tensor(np.asarray(weights[key])))


def get_grads(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """Gradients of every canonical weight after a backward pass (zeros for an unused parameter)."""
    return {
        key: (param.grad if param.grad is not None else torch.zeros_like(param)).detach().cpu().numpy().copy()
        for key, param in model.named_parameters()
    }
