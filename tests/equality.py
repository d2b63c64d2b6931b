"""The equality policy as assertions, and a record of every measured maximum for the test summary."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from shared.catalogue import Tolerance


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


def output_bounds(tolerance: Tolerance, dtype: str) -> tuple[float, float]:
    return (tolerance.f64_outputs, 0.0) if dtype == "float64" else (tolerance.f32_abs, tolerance.f32_rel)


def grad_bounds(tolerance: Tolerance, dtype: str) -> tuple[float, float]:
    return (tolerance.f64_grads, 0.0) if dtype == "float64" else (tolerance.f32_grad_abs, tolerance.f32_grad_rel)


def assert_all_close(actual: Mapping, expected: Mapping, bounds: tuple[float, float], what: str) -> float:
    """assert_close over every key of two dicts (same keys required); return the max over keys."""
    if set(actual) != set(expected):
        raise AssertionError(f"{what}: keys differ: {sorted(set(actual) ^ set(expected))}")
    return max(assert_close(actual[k], expected[k], *bounds, what=f"{what} {k}") for k in expected)


class Records:
    """Max |difference| per (model, dtype, quantity), printed at the end of the run."""

    def __init__(self):
        self.maxima: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)

    def add(self, model: str, dtype: str, quantity: str, value: float) -> None:
        self.maxima[model, dtype][quantity] = value

    def __bool__(self) -> bool:
        return bool(self.maxima)

    def table(self) -> list[str]:
        quantities = sorted({q for row in self.maxima.values() for q in row})
        lines = [f"{'model':26} {'dtype':8} " + " ".join(f"{q:>11}" for q in quantities)]
        for (model, dtype), row in sorted(self.maxima.items()):
            cells = " ".join(f"{row[q]:11.2e}" if q in row else f"{'-':>11}" for q in quantities)
            lines.append(f"{model:26} {dtype:8} {cells}")
        return lines


RECORDS = Records()
