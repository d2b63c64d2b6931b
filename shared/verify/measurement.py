"""`rosetta equality`: every model measured in both stacks (outputs, gradients, greedy ids; with training, the
200-step curves and the naive Keras setups' drift), as printed tables, README blocks and the JSON `rosetta report`
reads. Keras's backend is named before tf_impl first imports Keras."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from shared import catalogue
from shared.stacks import STACKS, import_module, import_stack

DRIFT_MODELS = ("reverse_bahdanau", "luong_general", "tf_tutorial")


def use_backend(backend: str | None) -> None:
    """Name Keras's backend before tf_impl first imports Keras (JAX: x64 on, unless the caller set it)."""
    if backend is None:
        return
    if "keras" in sys.modules and sys.modules["keras"].backend.backend() != backend:
        raise SystemExit(f"rosetta: Keras already runs on {sys.modules['keras'].backend.backend()}, not {backend}")
    os.environ["KERAS_BACKEND"] = backend
    if backend == "jax":
        os.environ.setdefault("JAX_ENABLE_X64", "1")  # float64 models: JAX computes float64 only with x64


@dataclass
class Measurement:
    """What one `rosetta equality` run measured.

    Attributes:
        sections: (title, README block, {(model, dtype): {quantity: max |torch - tf|}}) in print order.
        curves: (model, dtype) -> both stacks' training losses.
        failures: the comparisons that failed, as their messages.
        backend: the Keras backend the tf stack ran on.
    """

    sections: list = field(default_factory=list)
    curves: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    backend: str = "tensorflow"

    def text(self) -> str:
        """The printed page: one maxima table per section, then the failures."""
        from shared.verify import equality

        lines = [line for title, _, table in self.sections for line in (f"# {title}", "", *equality.maxima_table(table), "")]
        return "\n".join([*lines, *(f"FAILED: {failure}" for failure in self.failures)]).rstrip() + "\n"

    def tables(self) -> list[tuple[str, str]]:
        """(README block, its markdown table) per section."""
        from shared.verify import equality

        return [(block, "\n".join(equality.maxima_table(table))) for _, block, table in self.sections]

    def record(self) -> dict:
        """What `rosetta report` reads: the maxima as tidy rows, both training curves, and the Keras backend the tf
        stack ran on (the report's attention figures come from trained runs: shared.train.attention_samples)."""

        def tidy(table):
            return [
                {"model": m, "dtype": d, "quantity": q, "max_abs": v} for (m, d), row in table.items() for q, v in row.items()
            ]

        tables = {block: table for _, block, table in self.sections}
        maxima = tables["equality"]
        greedy = [
            {"model": m, "dtype": d, "tokens_equal": True} for m, d in maxima if catalogue.get(m).variable_length
        ]  # compare_stacks asserts equal ids: a model with different ids is a failure, not a row
        return {
            "schema": 1,
            "backend": self.backend,
            "outputs": tidy(maxima),
            "greedy": greedy,
            "training": tidy(tables.get("training", {})),
            "drift": tidy(tables.get("drift", {})),
            "curves": [
                {"model": m, "dtype": d, "torch": c["reference"], "tf": c["candidate"]} for (m, d), c in self.curves.items() if c
            ],
            "failures": self.failures,
        }


def measure(names: list[str], with_training: bool = False) -> Measurement:
    """Compare both stacks on every model of `names` in both precisions; with training, their curves too."""
    from shared.verify import equality, training

    stacks = [import_stack(stack) for stack in STACKS]
    measured = Measurement(backend=import_module("tf", "train").backend())  # Keras's: tensorflow, jax or torch

    def compare(name, dtype):
        return equality.compare_stacks(name, dtype, *stacks)

    rows, measured.failures = _each_model(names, compare)
    keras_on = "" if measured.backend == "tensorflow" else f", Keras on {measured.backend}"
    title = f"Max |torch - tf| on the golden fixtures{keras_on} (outputs, loss: float64 <= 1e-12, float32 <= 1e-5 + 1e-5 rel)"
    measured.sections.append((title, "equality", rows))
    if with_training:

        def record(name, dtype):
            return training.compare_training(name, dtype, *stacks, curves=measured.curves.setdefault((name, dtype), {}))

        trained, failed = _each_model(names, record)
        trained = {key: {q: v for q, v in row.items() if q != "clipped steps"} for key, row in trained.items()}
        steps = training.EQUALITY_STEPS
        title = f"Max |torch - tf| after {steps} training steps{keras_on} (loss curve, weights: float64 <= 1e-9, float32 <= 1e-5)"
        measured.sections.append((title, "training", trained))
        measured.failures += failed
        drifting = [name for name in DRIFT_MODELS if name in names]  # a run of some models: theirs only
        if measured.backend == "tensorflow" and drifting:  # the naive setups drift by Keras's optimizer rules: on TensorFlow
            measured.sections.append(_drift_section(stacks, training, drifting))
    return measured


def _drift_section(stacks, training, names: list[str]) -> tuple[str, str, dict]:
    """How far the naive Keras setups drift from torch over the same 200 steps (float64: no rounding excuse), on the
    models `names` (of DRIFT_MODELS)."""
    rows = {}
    for setup in training.NAIVE_SETUPS:
        for name in names:
            rows[f"{name}: {setup}", "float64"] = training.drift(name, "float64", *stacks, setup)
    return f"Drift of the naive Keras setups, max |torch - tf| after {training.EQUALITY_STEPS} steps", "drift", rows


def _each_model(names: list[str], compare) -> tuple[dict, list[str]]:
    """`compare(name, dtype)` for every model and dtype: the maxima by (name, dtype), and the failures."""
    rows, failures = {}, []
    for name in names:
        for dtype in catalogue.DTYPES[::-1]:
            try:
                rows[name, dtype] = compare(name, dtype)
            except AssertionError as error:
                failures.append(str(error))
    return rows, failures
