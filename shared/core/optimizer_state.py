"""Adam's state in canonical form, the same for both stacks: `{"step", "exp_avg", "exp_avg_sq", "lr", "betas",
"eps"}` with the moments keyed as the canonical weights (torch's names), its check, and its safetensors entries
(`exp_avg/<key>`, `exp_avg_sq/<key>`, the step and hyperparameters as metadata) beside the weights."""

from __future__ import annotations

import math

import numpy as np

from shared.failures import shown

MOMENTS = ("exp_avg", "exp_avg_sq")  # Adam's per-weight state (torch's names), ported by the weights' leaf rules


def check_optimizer_state(state) -> int:
    """The step counter of a canonical optimizer state `{"step", "exp_avg", "exp_avg_sq"}`; ValueError if malformed."""
    missing = [key for key in ("step", *MOMENTS) if key not in state]
    if missing:
        raise ValueError(f"optimizer state lacks {', '.join(missing)}")
    step = state["step"]
    if isinstance(step, bool) or not float(step).is_integer() or int(step) < 0:
        raise ValueError(f"optimizer state step must be a non-negative integer, got {shown(step)}")
    return int(step)


STEP_LIMIT = 2**63  # Adam's step counter as the stacks keep it (Keras's iterations: an int64)
OPTIMIZER_PREFIXES = tuple(f"{moment}/" for moment in MOMENTS)


def optimizer_tensors(state) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A canonical optimizer state as safetensors entries: `exp_avg/<key>`, `exp_avg_sq/<key>`, and the
    step counter and hyperparameters (those known) as metadata."""
    tensors = {f"{moment}/{key}": value for moment in MOMENTS for key, value in state[moment].items()}
    metadata = {"optimizer": "adam", "optimizer_step": str(check_optimizer_state(state))}
    for key in ("lr", "eps"):
        if state.get(key) is not None:
            metadata[f"optimizer_{key}"] = repr(float(state[key]))
    if state.get("betas") is not None:
        metadata["optimizer_betas"] = ",".join(repr(float(beta)) for beta in state["betas"])
    return tensors, metadata


def optimizer_from_tensors(tensors, metadata, source: str = "the file") -> dict | None:
    """The canonical optimizer state `optimizer_tensors` wrote (None when the file holds none); a metadata field
    that does not parse raises one ValueError naming `source` (the file), the field and its value."""
    if "optimizer_step" not in metadata:
        return None
    state = {moment: {key.removeprefix(f"{moment}/"): value for key, value in tensors.items() if key.startswith(f"{moment}/")}
             for moment in MOMENTS}  # fmt: skip
    hyper = {key: _field(metadata, f"optimizer_{key}", _number, "a finite number", source) for key in ("lr", "eps")}
    betas = _field(metadata, "optimizer_betas", _betas, 'two numbers in [0, 1) as "beta1,beta2"', source)
    step = _field(metadata, "optimizer_step", _count, "an integer in [0, 2**63)", source)
    return {"step": step, **state, **hyper, "betas": betas}


def _field(metadata, key: str, parse, wanted: str, source: str):
    """`metadata[key]` parsed (None where absent); one line naming the file and the field where it does not parse."""
    if key not in metadata:
        return None
    value = metadata[key]
    try:
        return parse(value)
    except (TypeError, ValueError):
        raise ValueError(f'{source}: metadata "{key}" must be {wanted}, got {shown(value)}') from None


def _text(value) -> str:
    if not isinstance(value, str):  # safetensors metadata holds text; a hand-edited header may hold anything
        raise TypeError("not a string")
    return value


def _count(value) -> int:
    count = int(_text(value))
    if not 0 <= count < STEP_LIMIT:
        raise ValueError("out of range")
    return count


def _number(value) -> float:
    number = float(_text(value))
    if not math.isfinite(number):
        raise ValueError("not finite")
    return number


def _betas(value) -> tuple[float, float]:
    betas = tuple(_number(beta) for beta in _text(value).split(","))
    if len(betas) != 2 or not all(0 <= beta < 1 for beta in betas):
        raise ValueError("not two betas")
    return betas


def weights_without_optimizer(tensors) -> dict:
    """A canonical file's weights: its entries but Adam's moments."""
    return {key: value for key, value in tensors.items() if not key.startswith(OPTIMIZER_PREFIXES)}
