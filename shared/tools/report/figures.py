"""The report's figures (matplotlib, deterministic PNG bytes): equality loss curves, speed bars, cost against
sequence length, trained models' attention, the real runs' training curves."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared import catalogue, documents
from shared.io.atomic import write_atomic
from shared.tools.report.printing import ordered, setting
from shared.tools.report.schema import LABELS, MODES, STACKS, Inputs
from shared.tools.report.selection import in_context, pick_context, select
from shared.tools.report.tables import with_document_point
from shared.train import plots


@dataclass
class ReportFigure:
    """One figure of the README: its files (empty: skipped, for `skipped`) and a note printed under its title."""

    title: str
    files: list[str]
    skipped: str
    note: str = ""


def write_figures(inputs: Inputs, context: dict | None, folder: Path) -> list[ReportFigure]:
    """Render every figure whose data exists into `folder`; the list says which were skipped and why."""
    equality, rows = inputs.equality or {}, inputs.rows
    return [
        ReportFigure(
            "Loss curves, torch and Keras, and their difference",
            _loss_curves(equality.get("curves", []), folder),
            "no loss curves in the equality file",
        ),
        ReportFigure(
            "Train-step time per mode",
            _speed_bars(rows, context, folder),
            "no successful train-step row at the documents' sizes",
        ),
        ReportFigure(
            "Train-step time against sequence length",
            _seq_len_lines(rows, folder),
            "no successful train-step row in a seq_len sweep",
        ),
        _trained_attention(inputs.attention, folder),
        ReportFigure(
            "Training and validation loss of the real runs",
            _training_curves(inputs.summaries or [], folder),
            "no complete training run among the summaries",
        ),
    ]


LABELS_LONG = {"torch": "torch", "tf": "Keras"}
OWN_BACKEND = {"torch": "torch", "tf": "tensorflow"}  # a run on another backend says so in its label


def _save(figure, path: Path) -> str:
    """Write `figure` to `path` as PNG (atomically); its file name."""
    write_atomic(path, plots.png_bytes(figure))
    return path.name


def _loss_curves(curves: list[dict], folder: Path) -> list[str]:
    """One grid: per curve entry, both stacks' losses above and |torch - tf| below."""
    if not curves:
        return []
    columns = min(3, len(curves))
    figure = plots.blank_figure(4.2 * columns, 3.8 * math.ceil(len(curves) / columns))
    panels = figure.subfigures(math.ceil(len(curves) / columns), columns, squeeze=False)
    for panel, entry in zip(panels.flat, curves, strict=False):
        _curve_panel(panel, entry)
    return [_save(figure, folder / "loss_curves.png")]


def _curve_panel(panel, entry: dict) -> None:
    """Both stacks' loss curves (top) and their absolute difference (bottom) on `panel`."""
    torch, tf = (np.asarray(entry[stack], dtype=np.float64) for stack in STACKS)
    length = min(len(torch), len(tf))
    steps, torch, tf = np.arange(1, length + 1), torch[:length], tf[:length]
    top, bottom = panel.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    top.plot(steps, torch, label="torch")
    top.plot(steps, tf, linestyle="--", label="Keras")
    top.set_title(f"{entry['model']} ({entry['dtype']})", fontsize="medium")
    top.set_ylabel("loss")
    top.legend(fontsize="small")
    bottom.plot(steps, np.abs(torch - tf), color="black", linewidth=0.8)
    bottom.set_ylabel("|Δ|")
    bottom.set_xlabel("step")


def _speed_bars(rows, context: dict | None, folder: Path) -> list[str]:
    """Grouped bars: per model, one bar per stack/mode, train step at the documents' sizes, ours, headline setting."""
    data = select(in_context(rows, context), task="train_step", sweep="document", impl="ours", status="ok")
    if data.empty:
        return []
    models = list(dict.fromkeys(data["model"]))
    present = set(zip(data["stack"], data["mode"], strict=True))
    series = [(stack, mode) for stack in STACKS for mode in MODES[stack] if (stack, mode) in present]
    width = 0.8 / len(series)
    figure = plots.blank_figure(max(6.0, 0.9 * len(models) + 2.0), 4.5)
    axes = figure.add_subplot()
    for index, (stack, mode) in enumerate(series):
        part = select(data, stack=stack, mode=mode)
        positions = [models.index(model) + (index - (len(series) - 1) / 2) * width for model in part["model"]]
        axes.bar(positions, part["median_ms"], width, label=f"{LABELS[stack]} {mode}")
    axes.set_xticks(range(len(models)), models, rotation=30, ha="right")
    axes.set_yscale("log")
    axes.set_ylabel("ms per training step (median)")
    axes.set_title(setting(context), fontsize="medium")
    axes.legend(fontsize="small")
    return [_save(figure, folder / "speed_train_step.png")]


def _seq_len_lines(rows, folder: Path) -> list[str]:
    """Lines per model/stack (in the mode each stack's sweep ran): train-step ms against the source length."""
    from matplotlib import colormaps

    sweep = select(with_document_point(rows, "seq_len"), task="train_step", impl="ours")
    context = pick_context(sweep)
    data = ordered(select(in_context(sweep, context), status="ok"), ["model", "stack", "mode", "src_len"])
    if data.empty:
        return []
    models = list(dict.fromkeys(data["model"]))
    figure = plots.blank_figure(8.0, 4.5)
    axes = figure.add_subplot()
    for (model, stack, mode), part in data.groupby(["model", "stack", "mode"], sort=False):
        style, colour = "-" if stack == "torch" else "--", colormaps["tab20"](models.index(model) % 20)
        axes.plot(part["src_len"], part["median_ms"], style, marker="o", color=colour, label=f"{model} {LABELS[stack]} {mode}")
    axes.set_yscale("log")
    axes.set_xlabel("source length (tokens)")
    axes.set_ylabel("ms per training step (median)")
    axes.set_title(setting(context), fontsize="medium")
    axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return [_save(figure, folder / "cost_vs_seq_len.png")]


def _trained_attention(records: list[dict], folder: Path) -> ReportFigure:
    """Per model, one trained run's attention on its record's sentences (a row each): the weights one stack
    trained, run by torch and by Keras, and |torch - Keras|; the note names the models no record covers."""
    chosen = {}
    for record in sorted(records, key=_record_rank):
        chosen.setdefault(record["model"], record)
    files = [_attention_figure(record, folder) for record in chosen.values()]
    uncovered = [name for name in catalogue.CATALOGUE if catalogue.get(name).has_attention and name not in chosen]
    note = (
        "Each row is one sentence of the run's final split (the first ones of at most 14 tokens), decoded greedily "
        "by the stack that trained the weights; torch and Keras then run those weights on that output "
        "(shared/train/attention_samples.py)."
    )
    if uncovered:
        note += " No trained attention for: " + "; ".join(f"{name} ({_why_untrained(name)})" for name in uncovered) + "."
    return ReportFigure(
        "Attention of trained models, torch | Keras | difference", files, "no attention record of a trained run", note
    )


def _record_rank(record: dict) -> tuple:
    """Which record of a model the report draws: the run named after the model, then the longest, then by stack."""
    return record["model"], record["run"] != record["model"], -record["steps"], STACKS.index(record["trained_in"])


def _why_untrained(name: str) -> str:
    spec = catalogue.get(name)
    if documents.training_for_model(name) is None:
        return f"document {spec.document} trains nothing"
    return "no run with its checkpoint has been recorded"


def _attention_figure(record: dict, folder: Path) -> str:
    """The record's sentences as rows of torch | Keras | |torch - Keras| heatmaps, tokens on the axes."""
    rows = []
    for sentence in record["sentences"]:
        arrays = {stack: np.asarray(sentence["attention"][stack], dtype=np.float64) for stack in record["stacks"]}
        panels = [(LABELS_LONG[stack], array) for stack, array in arrays.items()]
        if len(arrays) == 2:
            panels.append(("|torch - Keras|", np.abs(arrays["torch"] - arrays["tf"])))
        caption = f"{record['split']} sentence {sentence['index']}"
        rows.append(plots.HeatmapRow(panels, sentence["source"], sentence["output"], caption))
    trained = LABELS_LONG[record["trained_in"]]
    title = (
        f"{record['model']} (document {record['document']}): trained in {trained}, {record['steps']} steps (run {record['run']})"
    )
    name = f"attention_{re.sub(r'[^A-Za-z0-9_.-]', '_', str(record['model']))}.png"
    plots.heatmap_rows(rows, folder / name, title=title)
    return name


def _training_curves(summaries: list[dict], folder: Path) -> list[str]:
    """One panel per complete run: each stack's training loss (window means) and validation loss per epoch on
    one axis, with the figure its document reports and ours measured the document's way."""
    runs = {}
    for summary in summaries:
        if summary.get("complete") and summary.get("loss_curve"):
            runs.setdefault(summary.get("run", summary["model"]), []).append(summary)
    if not runs:
        return []
    columns = min(3, len(runs))
    figure = plots.blank_figure(4.6 * columns, 3.6 * math.ceil(len(runs) / columns))
    grid = figure.subplots(math.ceil(len(runs) / columns), columns, squeeze=False)
    for axes, (run, group) in zip(grid.flat, runs.items(), strict=False):
        _curve_axes(axes, run, group)
    for axes in list(grid.flat)[len(runs) :]:
        axes.set_axis_off()
    return [_save(figure, folder / "training_curves.png")]


def run_label(summary: dict) -> str:
    """A run's legend label ("torch cpu", "Keras cuda", "Keras on jax cuda"): stack, backend if not its own, device."""
    backend = summary.get("backend")
    on_backend = f" on {backend}" if backend not in (None, OWN_BACKEND[summary["stack"]]) else ""
    return f"{LABELS_LONG[summary['stack']]}{on_backend} {summary['device'].split(' ')[0]}"


def _curve_axes(axes, run: str, group: list[dict]) -> None:
    """One run's curves: per summary, its training loss line and its validation markers; the document's figure."""
    group = sorted(group, key=lambda summary: (STACKS.index(summary["stack"]), summary["device"]))  # torch first, blue
    for index, summary in enumerate(group):
        label = run_label(summary)
        colour, curve = f"C{index}", summary["loss_curve"]
        axes.plot(curve["step"], curve["loss"], color=colour, linewidth=0.9, label=f"{label} train")
        val = [(entry["step"], entry["loss"]) for entry in summary.get("val_by_epoch") or []]
        if val:
            axes.plot(*zip(*val, strict=True), "o", color=colour, markersize=3, label=f"{label} val")
        ours = (summary.get("final") or {}).get("document_loss")
        if ours is not None:
            axes.plot(
                [summary["steps"]], [ours], "*", color=colour, markersize=9, label=f"{label} test, as the document measured"
            )
    reported = _reported_loss(group[0])
    if reported is not None:
        value, text = reported
        axes.axhline(value, color="black", linestyle=":", linewidth=1, label=text)
    axes.set_yscale("log")
    axes.set_title(f"{group[0]['model']} ({run})" if run != group[0]["model"] else run, fontsize="medium")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.legend(fontsize="xx-small")


def _reported_loss(summary: dict) -> tuple[float, str] | None:
    """The document's reported test loss for the summary's model (from its perplexity where it gives only that)."""
    reported = documents.get(summary["document"]).reported
    if reported is None or reported.model != summary["model"]:
        return None
    figures = reported.figures
    if "test loss" in figures:
        return figures["test loss"], f"document {summary['document']}: test loss {figures['test loss']}"
    if "test perplexity" in figures:
        perplexity = figures["test perplexity"]
        return math.log(
            perplexity
        ), f"document {summary['document']}: test perplexity {perplexity} (loss {math.log(perplexity):.2f})"
    return None
