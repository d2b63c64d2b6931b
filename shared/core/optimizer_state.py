"""Adam's state in canonical form, the same for both stacks: `{"step", "exp_avg", "exp_avg_sq", "lr", "betas",
"eps"}` with the moments keyed as the canonical weights (torch's names), its check, and its safetensors entries
(`exp_avg/<key>`, `exp_avg_sq/<key>`, the step and hyperparameters as metadata) beside the weights."""

from __future__ import annotations

import numpy as np

MOMENTS = ("exp_avg", "exp_avg_sq")  # Adam's per-weight state (torch's names), ported by the weights' leaf rules


def check_optimizer_state(state) -> int:
    """The step counter of a canonical optimizer state `{"step", "exp_avg", "exp_avg_sq"}`; ValueError if malformed."""
    missing = [key for key in ("step", *MOMENTS) if key not in state]
    if missing:
        raise ValueError(f"optimizer state lacks {', '.join(missing)}")
    step = state["step"]
    if isinstance(step, bool) or not float(step).is_integer() or int(step) < 0:
        raise ValueError(f"optimizer state step must be a non-negative integer, got {step!r}")
    return int(step)


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


def optimizer_from_tensors(tensors, metadata) -> dict | None:
    """The canonical optimizer state `optimizer_tensors` wrote (None when the file holds none)."""
    if "optimizer_step" not in metadata:
        return None
    state = {moment: {key.removeprefix(f"{moment}/"): value for key, value in tensors.items() if key.startswith(f"{moment}/")}
             for moment in MOMENTS}  # fmt: skip
    hyper = {key: float(metadata[f"optimizer_{key}"]) if f"optimizer_{key}" in metadata else None for key in ("lr", "eps")}
    betas = metadata.get("optimizer_betas")
    betas = None if betas is None else tuple(float(beta) for beta in betas.split(","))
    return {"step": int(metadata["optimizer_step"]), **state, **hyper, "betas": betas}


def weights_without_optimizer(tensors) -> dict:
    """A canonical file's weights: its entries but Adam's moments."""
    return {key: value for key, value in tensors.items() if not key.startswith(OPTIMIZER_PREFIXES)}
