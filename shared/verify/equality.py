"""The equality policy of docs/DESIGN.md as code: bounds, assertions, and the cross-stack comparison.

Used by the cross tests (which assert) and by `rosetta equality` (which measures and tabulates). The
stacks are passed in as contract modules, so this module imports no framework.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from shared import catalogue
from shared.catalogue import Tolerance
from shared.verify import fixtures


def assert_close(actual, expected, atol: float, rtol: float = 0.0, what: str = "") -> float:
    """Assert |actual - expected| <= atol + rtol * |expected| everywhere; return the max |difference|."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape} != {expected.shape}")
    error = np.abs(actual - expected)
    worst = float(error.max(initial=0.0))
    if not (error <= atol + rtol * np.abs(expected)).all() or not np.isfinite(actual).all():
        raise AssertionError(f"{what}: max |diff| {worst:.3e} exceeds {atol:g} abs + {rtol:g} rel")
    return worst


def assert_all_close(actual: Mapping, expected: Mapping, bounds: tuple[float, float], what: str) -> float:
    """assert_close over every key of two dicts (same keys required); return the max over keys."""
    if set(actual) != set(expected):
        raise AssertionError(f"{what}: keys differ: {sorted(set(actual) ^ set(expected))}")
    return max(assert_close(actual[k], expected[k], *bounds, what=f"{what} {k}") for k in expected)


def output_bounds(tolerance: Tolerance, dtype: str) -> tuple[float, float]:
    """(abs, rel) bound on outputs, attention, states and the loss."""
    return (tolerance.f64_outputs, 0.0) if dtype == "float64" else (tolerance.f32_abs, tolerance.f32_rel)


def grad_bounds(tolerance: Tolerance, dtype: str) -> tuple[float, float]:
    """(abs, rel) bound on gradients of the loss."""
    return (tolerance.f64_grads, 0.0) if dtype == "float64" else (tolerance.f32_grad_abs, tolerance.f32_grad_rel)


def results(stack, name: str, dtype: str, **set_weights_options) -> dict:
    """Outputs, loss, canonical gradients (and greedy decoding) of `stack`'s model on the golden fixture:
    its weights, batch and teacher-forcing schedule."""
    spec, golden = catalogue.get(name), fixtures.load_golden(name)
    model = fixtures.golden_model(stack, name, dtype, **set_weights_options)
    loss, grads = stack.loss_and_grads(model, name, golden.batch, teacher_forcing=golden.schedule)
    outputs = stack.run(model, name, golden.batch, teacher_forcing=golden.schedule)
    greedy = stack.greedy(model, name, golden.batch, max_len=fixtures.greedy_max_len(golden)) if spec.variable_length else {}
    return {"outputs": outputs, "loss": loss, "grads": grads, "greedy": greedy}


def compare_stacks(name: str, dtype: str, reference, candidate, **candidate_options) -> dict[str, float]:
    """Assert `candidate` (a stack) equals `reference` on model `name`; return max |diff| per quantity.

    Args:
        candidate_options: passed to the candidate's set_weights (tests pass a naive `rules` table).
    """
    tolerance = catalogue.get(name).tolerance
    ref, cand = results(reference, name, dtype), results(candidate, name, dtype, **candidate_options)
    if ref["outputs"].keys() != cand["outputs"].keys():
        raise AssertionError(f"{name}: outputs differ in keys: {sorted(ref['outputs'].keys() ^ cand['outputs'].keys())}")
    bounds = output_bounds(tolerance, dtype)
    maxima = {
        key: assert_close(cand["outputs"][key], value, *bounds, what=f"{name} {key}") for key, value in ref["outputs"].items()
    }
    maxima["loss"] = assert_close(cand["loss"], ref["loss"], *bounds, what=f"{name} loss")
    maxima["grads"] = assert_all_close(cand["grads"], ref["grads"], grad_bounds(tolerance, dtype), f"{name} grads")
    if ref["greedy"]:
        assert_tokens_equal(cand["greedy"]["tokens"], ref["greedy"]["tokens"], f"{name} greedy")
        maxima["greedy attention"] = assert_close(cand["greedy"]["attention"], ref["greedy"]["attention"], *bounds)
    return maxima


def assert_tokens_equal(actual, expected, what: str) -> None:
    """Greedy token ids must be identical: same length, same ids."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or not np.array_equal(actual, expected):
        raise AssertionError(f"{what}: token ids differ:\n{actual}\nvs\n{expected}")


def maxima_table(rows: Mapping[tuple[str, str], Mapping[str, float]]) -> list[str]:
    """Markdown table of max |torch - tf| per (model, dtype) and quantity."""
    quantities = sorted({q for row in rows.values() for q in row})
    lines = ["| model | dtype | " + " | ".join(quantities) + " |", "|---|---|" + "---:|" * len(quantities)]
    for (model, dtype), row in rows.items():
        cells = " | ".join(f"{row[q]:.2e}" if q in row else "-" for q in quantities)
        lines.append(f"| {model} | {dtype} | {cells} |")
    return lines
