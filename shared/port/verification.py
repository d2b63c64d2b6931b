"""What `rosetta port` compares, and how it decides: component by component, in float64.

A port is checked twice over:
1. *The mapping*: the source read into one stack's model and the written file read back into the other's,
   both built in float64 from the same float32 values (widening is exact), must agree within the float64
   port bound of the equality policy (`Tolerance.f64_port`, 1e-8 relative to the component's largest value
   where that exceeds 1: float64 rounding grows through a recurrent decoder at a trained model's magnitude, while a
   wrong mapping moves values by orders more; docs/measurements.md); the same pair in float32 is
   measured beside it and printed, never refused (float32 rounding grows with the weights' magnitude; a
   wrong mapping moves values by orders more).
2. *Against the user's model* (shared.port.references), where one can run: its components against the ported
   model's, in float64 where the reference runs in float64, else in float32 within the policy's float32
   bound plus 8 times the float32 rounding our own port shows on the same component.
Each component is compared on every batch, per decoder step where it has steps, and named with the first
step that differs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shared import catalogue
from shared.core import moved, reference_runs
from shared.core.reference_runs import ATTENTION_WEIGHTS, LOGITS
from shared.core.taps import (
    ATTENTION_SCORES,
    CONTEXT_VECTORS,
    ENCODER_OUTPUTS,
    ENCODER_STATE,
    SOURCE_EMBEDDINGS,
    TARGET_EMBEDDINGS,
)
from shared.verify.equality import output_bounds

COMPARED = (SOURCE_EMBEDDINGS, ENCODER_OUTPUTS, ENCODER_STATE, TARGET_EMBEDDINGS, ATTENTION_SCORES, ATTENTION_WEIGHTS,
            CONTEXT_VECTORS)  # fmt: skip
PER_STEP = (ATTENTION_SCORES, ATTENTION_WEIGHTS, CONTEXT_VECTORS)
INPUTS_LABEL = " (--inputs)"
GREEDY_STEPS = 12  # greedy decoding compared for this many tokens (random weights seldom stop earlier)
SCALED_BOUND = "{atol:g} x max(1, the component's largest |value|)"


def bounds(tolerance, dtype: str) -> tuple[float, float]:
    """(abs, rel) a port's component must meet under a catalogue.Tolerance: in float64 the policy's port
    bound (scaled by `close`), in float32 the policy's output bound."""
    return (tolerance.f64_port, 0.0) if dtype == "float64" else output_bounds(tolerance, dtype)


NOISE_FACTOR = 8  # a float32 reference may differ by the policy's bound plus this many times our float32 rounding


@dataclasses.dataclass
class Component:
    """One compared component: its largest |reference - candidate| (None: token ids, compared for
    equality), whether it is within the bound, and for a per-step component the maximum of each step."""

    name: str
    max_abs: float | None
    ok: bool
    steps: tuple[float, ...] = ()
    first_bad_step: int | None = None
    problem: str = ""  # why it could not be compared (a missing component, a shape mismatch)

    def value(self) -> str:
        if self.problem:
            return self.problem
        if self.max_abs is None:
            return "equal" if self.ok else "differ"
        return f"max |diff| {self.max_abs:.1e}"

    def where(self) -> str:
        """The component's name, with the first failing decoder step for a per-step one."""
        return self.name if self.first_bad_step is None else f"{self.name}, decoder step {self.first_bad_step}"


@dataclasses.dataclass
class Check:
    """One comparison: what was compared with what, at which precision and bound; `measured` holds the same
    components at another precision, printed beside them and never refused."""

    title: str
    dtype: str
    bound: str
    components: list[Component]
    measured: dict[str, Component] = dataclasses.field(default_factory=dict)
    measured_dtype: str = ""

    @property
    def ok(self) -> bool:
        return all(component.ok for component in self.components)


def compare_components(
    model: str, dtype: str, reference_stack, reference, candidate_stack, candidate, batches: list[dict]
) -> list[Component]:
    """Max |reference - candidate| per component on every batch, in the order the forward pass computes
    them (COMPARED), the logits (the context, for the attention layer), and whether greedy decoding gives
    the same ids; bounds of the equality policy at `dtype` (in float64 scaled to the component, `close`)."""
    spec = catalogue.get(model)
    atol, rtol = bounds(spec.tolerance, dtype)
    scaled = dtype == "float64"
    output = "context" if spec.interface == "attention" else LOGITS
    components = []
    for index, batch in enumerate(batches):
        label = "" if index == 0 else INPUTS_LABEL
        expected, actual = (reference_runs.traced(stack, weights, model, batch) for stack, weights in
                            ((reference_stack, reference), (candidate_stack, candidate)))  # fmt: skip
        names = [name for name in COMPARED if name in expected or name in actual] + [output]
        for name in names:
            components.append(close(name + label, actual.get(name), expected.get(name), atol, rtol, name in PER_STEP, scaled))
        if spec.variable_length:
            source = {key: batch[key] for key in ("src", "src_len") if key in batch}
            same = np.array_equal(reference_stack.greedy(reference, model, source, GREEDY_STEPS)["tokens"],
                                  candidate_stack.greedy(candidate, model, source, GREEDY_STEPS)["tokens"])  # fmt: skip
            components.append(Component(f"greedy ids{label}", None, same))
    return components


def against_reference(model: str, reference: reference_runs.Reference, candidates: dict, candidate_stack, batch: dict) -> Check:
    """`reference`'s components against the candidate's on `batch`: in float64 where the reference ran in
    float64; otherwise against the float32 candidate within the float32 bound plus NOISE_FACTOR times the
    float32 rounding of the candidate itself (its float32 minus its float64 run)."""
    spec = catalogue.get(model)
    expected = reference.run(batch)
    exact = reference.dtype == "float64"
    found = {dtype: reference_runs.traced(candidate_stack, candidates[dtype], model, batch) for dtype in candidates}
    actual = found["float64" if exact else "float32"]
    atol, rtol = bounds(spec.tolerance, "float64" if exact else "float32")
    components = []
    for name in [name for name in (*COMPARED, LOGITS) if name in expected]:
        noise = 0.0 if exact else _difference(found["float32"].get(name), found["float64"].get(name))
        bound = atol + NOISE_FACTOR * noise
        components.append(close(name, actual.get(name), expected[name], bound, rtol, name in PER_STEP, scaled=exact))
    if exact:
        bound = SCALED_BOUND.format(atol=atol)
    else:
        bound = f"{atol:g} abs + {rtol:g} rel + {NOISE_FACTOR} x our own float32 rounding"
    title = f"against {reference.title} ({reference.dtype}), on full-length sentences"
    return Check(title, "float64" if exact else "float32", bound, components)


def _difference(a, b) -> float:
    if a is None or b is None or np.shape(a) != np.shape(b):
        return 0.0
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max(initial=0.0))


def compare_optimizer_states(expected: dict, actual: dict, moments: tuple[str, ...]) -> list[Component]:
    """Adam's moments (max |diff| over every weight; a port must give them back exactly) and step counter."""
    components = []
    for moment in moments:
        same_keys = expected[moment].keys() == actual[moment].keys()
        errors = [np.abs(np.asarray(actual[moment][key], np.float64) - np.asarray(value, np.float64)).max(initial=0.0)
                  for key, value in expected[moment].items() if same_keys]  # fmt: skip
        problem = "" if same_keys else "keys differ"
        worst = float(max(errors, default=0.0)) if same_keys else float("inf")
        components.append(Component(f"Adam {moment}", worst, same_keys and worst == 0.0, problem=problem))
    same_step = int(expected["step"]) == int(actual["step"])
    problem = "" if same_step else f"step {actual['step']} != {expected['step']}"
    components.append(Component("Adam step", None, same_step, problem=problem))
    return components


def close(name: str, actual, expected, atol: float, rtol: float, per_step: bool = False, scaled: bool = False) -> Component:
    """Compare one component; per step, the maximum of each decoder step (axis 1) too. `scaled`: `atol`
    counts relative to the component's largest |value| where that exceeds 1."""
    if actual is None or expected is None:
        return Component(name, float("inf"), False, problem=f"only in the {'source' if actual is None else 'port'}")
    if np.shape(actual) != np.shape(expected):
        return Component(name, float("inf"), False, problem=f"shape {np.shape(actual)} != {np.shape(expected)}")
    expected = np.asarray(expected, np.float64)
    if scaled:
        atol *= max(1.0, float(np.abs(expected).max(initial=0.0)))
    error = np.abs(np.asarray(actual, np.float64) - expected)
    within = (error <= atol + rtol * np.abs(expected)) & np.isfinite(actual)
    if not per_step:
        return Component(name, float(error.max(initial=0.0)), bool(within.all()))
    step_error = error.reshape(error.shape[0], error.shape[1], -1).max(axis=(0, 2), initial=0.0)  # [T]
    step_ok = within.reshape(within.shape[0], within.shape[1], -1).all(axis=(0, 2))  # [T]
    bad = np.flatnonzero(~step_ok)
    return Component(name, float(step_error.max(initial=0.0)), bool(step_ok.all()), tuple(map(float, step_error)),
                     int(bad[0]) if bad.size else None)  # fmt: skip


def render_check(check: Check) -> list[str]:
    """A check's lines: its title, then one line per component (per step: each step's maximum)."""
    beside = f"; {check.measured_dtype} beside it, information only" if check.measured else ""
    lines = [f"{check.title}: {check.dtype} (bound {check.bound}{beside}):"]
    for component in check.components:
        measured = check.measured.get(component.name)
        extra = f"  {check.measured_dtype} {measured.value()}" if measured is not None else ""
        steps = f"  per step {' '.join(f'{error:.0e}' for error in component.steps)}" if component.steps else ""
        lines.append(f"  {component.name:30s} {component.value():20s} {'ok' if component.ok else 'FAILED'}{extra}{steps}")
    return lines


__getattr__ = moved.getattr_for(__name__)  # traced, moved to shared.core.reference_runs, warns
