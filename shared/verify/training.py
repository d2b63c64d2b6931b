"""Training equality: both stacks trained step for step on the fixtures under one spec, and their curves compared.

Adam with PyTorch's update rule (`torch.optim.Adam`: bias-corrected moments, epsilon added to
sqrt(v_hat)), gradient clipping by the global norm with `torch.nn.utils.clip_grad_norm_` semantics
(scale max_norm / (norm + 1e-6), capped at 1), cross-entropy from logits averaged over non-pad targets,
and a teacher-forcing schedule per step drawn here. Keras's stock Adam (epsilon-hat placement, float32
beta powers) and per-variable `clipnorm` are *not* this spec: tf_impl offers stock Adam as an option
so the drift can be shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from shared import catalogue
from shared.core import teacher_forcing as schedules
from shared.specs import TrainSpec
from shared.verify import fixtures


def fixture_batches(name: str, steps: int, seed: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """`steps` batches shaped like the model's fixture batch, each drawn from its own seeded generator."""
    spec = catalogue.get(name)
    for step in range(steps):
        yield fixtures.make_batch(spec, rng=np.random.default_rng([seed, step]))


def step_schedules(name: str, spec: TrainSpec, batches: list[dict]) -> list[np.ndarray | None]:
    """One teacher-forcing schedule per batch (None for models that always teacher-force, or ratio 1)."""
    if not catalogue.get(name).variable_length or spec.teacher_force_ratio == 1.0:
        return [None] * len(batches)
    rng = np.random.default_rng([spec.seed, 1])
    return [schedules.draw(spec.teacher_force_ratio, batch["tgt_in"].shape[1] - 1, rng) for batch in batches]


# The spec of the training-equality tests: the documents' Adam (lr 1e-3), a clip that engages on the
# fixtures (their global gradient norm starts above 0.5), and coin-flip teacher forcing.
EQUALITY_SPEC = TrainSpec(lr=1e-3, clip_norm=0.5, teacher_force_ratio=0.5)
EQUALITY_STEPS = 200


def train_fixture(stack, name: str, dtype: str, steps: int, spec: TrainSpec, loss=None) -> dict:
    """Train `stack`'s fixture model from the golden weights on `steps` fixture batches, dropout off.

    Returns the loss curve, the weights after training, and the global gradient norm of every step.
    """
    trainer = fixture_trainer(stack, name, dtype, spec, loss)
    curve = _train_steps(trainer, name, spec, 0, steps)
    return {"curve": np.array(curve), "weights": stack.get_weights(trainer.model), "grad_norms": np.array(trainer.grad_norms)}


def fixture_trainer(stack, name: str, dtype: str, spec: TrainSpec, loss=None, weights=None, **trainer_options):
    """`stack`'s Trainer over the fixture-size model holding `weights` (default: the golden ones), dropout off;
    `trainer_options` go to the Trainer (`mode`)."""
    config = {**catalogue.get(name).fixture_config}
    if "dropout" in config:
        config["dropout"] = 0.0  # dropout masks cannot match across stacks: equality is proved without them
    model = stack.build(name, dtype, **config)
    stack.set_weights(model, fixtures.load_golden(name).weights if weights is None else weights)
    return stack.Trainer(model, name, spec, loss, **trainer_options)


def _train_steps(trainer, name: str, spec: TrainSpec, start: int, stop: int) -> list[float]:
    """Steps `start` to `stop` of the fixture sequence (batches and schedules as one run from step 0 sees them)."""
    batches = list(fixture_batches(name, stop))
    schedules = step_schedules(name, spec, batches)
    return [trainer.step(batches[i], schedules[i]) for i in range(start, stop)]


def continue_in(name: str, dtype: str, first, second, steps: int, more: int, port_state: bool = True) -> dict:
    """Train `first` for `steps` steps, hand its weights (and, if `port_state`, Adam's moments and step
    counter) to `second`, and train `more` steps there; the curve of those, and the weights at the end."""
    before = fixture_trainer(first, name, dtype, EQUALITY_SPEC)
    _train_steps(before, name, EQUALITY_SPEC, 0, steps)
    after = fixture_trainer(second, name, dtype, EQUALITY_SPEC, weights=first.get_weights(before.model))
    if port_state:
        after.load_optimizer_state(before.optimizer_state())
    curve = _train_steps(after, name, EQUALITY_SPEC, steps, steps + more)
    return {"curve": np.array(curve), "weights": second.get_weights(after.model)}


def compare_training(name: str, dtype: str, reference, candidate, steps: int = EQUALITY_STEPS, candidate_spec=None,
                     candidate_loss=None, curves: dict | None = None) -> dict[str, float]:  # fmt: skip
    """Assert both stacks follow the same loss curve and end at the same weights; return the maxima.

    The reference trains with EQUALITY_SPEC; the candidate with `candidate_spec` / `candidate_loss`
    when given (the negative controls pass Keras's stock Adam, per-variable clipping, a naive loss).
    Weights listed in the catalogue's `zero_gradient_weights` are compared to `lr * steps` in float32.
    `curves`, when given, receives both loss curves (keys "reference", "candidate") for the report.
    """
    ref, cand = _train_pair(name, dtype, reference, candidate, steps, candidate_spec, candidate_loss)
    if curves is not None:
        curves.update(reference=ref["curve"].tolist(), candidate=cand["curve"].tolist())
    return assert_trained_alike(name, dtype, ref, cand, steps)


def assert_trained_alike(name: str, dtype: str, ref: dict, cand: dict, steps: int) -> dict[str, float]:
    """Assert two trainings (`curve`, `weights`; the reference's `grad_norms` too) agree within the catalogue's
    bounds; return the maxima (compare_training's, for a candidate trained elsewhere: Keras's `fit`)."""
    from shared.verify.equality import assert_close

    tolerance = catalogue.get(name).tolerance
    bound = tolerance.f64_curve if dtype == "float64" else tolerance.f32_curve
    maxima = {"loss curve": assert_close(cand["curve"], ref["curve"], bound, what=f"{name} loss curve")}
    zero_gradient = catalogue.get(name).zero_gradient_parts(ref["weights"]) if dtype == "float32" else {}
    weight_bounds = (bound, 0.0) if dtype == "float64" else (tolerance.f32_grad_abs, tolerance.f32_grad_rel)
    maxima["trained weights"] = 0.0
    for key, value in ref["weights"].items():
        zero = _part_mask(value.shape, *zero_gradient.get(key, (0, 0)))  # True on the zero-gradient part
        close = assert_close(cand["weights"][key][~zero], value[~zero], *weight_bounds, what=f"{name} {key} after {steps} steps")
        maxima["trained weights"] = max(maxima["trained weights"], close)
        assert_close(cand["weights"][key][zero], value[zero], EQUALITY_SPEC.lr * steps, what=f"{name} {key} (zero gradient)")
    maxima["clipped steps"] = float((ref["grad_norms"] > EQUALITY_SPEC.clip_norm).sum())
    return maxima


def _part_mask(shape: tuple, block: int, blocks: int) -> np.ndarray:
    """True on part `block` of `blocks` equal parts of the first axis of an array of `shape`; none for `blocks` 0."""
    mask = np.zeros(shape, bool)
    if blocks:
        size = shape[0] // blocks
        mask[block * size : (block + 1) * size] = True
    return mask


def _train_pair(name, dtype, reference, candidate, steps, candidate_spec=None, candidate_loss=None) -> tuple[dict, dict]:
    ref = train_fixture(reference, name, dtype, steps, EQUALITY_SPEC)
    return ref, train_fixture(candidate, name, dtype, steps, candidate_spec or EQUALITY_SPEC, candidate_loss)


# The naive Keras setups whose drift the report measures (each caught by a negative control in the tests).
NAIVE_SETUPS = {
    "stock Keras Adam": {"optimizer": "keras_adam"},
    "Keras clipnorm (per variable)": {"clipping": "per_variable"},
    "Keras global_clipnorm": {"clipping": "keras_global"},
}


def drift(name: str, dtype: str, reference, candidate, setup: str, steps: int = EQUALITY_STEPS) -> dict[str, float]:
    """Max |reference - candidate| of the loss curve and the trained weights when the candidate trains
    with one of NAIVE_SETUPS instead of the spec: how far the usual Keras port drifts (no assertion)."""
    ref, cand = _train_pair(name, dtype, reference, candidate, steps, replace(EQUALITY_SPEC, **NAIVE_SETUPS[setup]))
    weights = max(float(np.abs(cand["weights"][key] - value).max()) for key, value in ref["weights"].items())
    return {"loss curve": float(np.abs(cand["curve"] - ref["curve"]).max()), "trained weights": weights}
