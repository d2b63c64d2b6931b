"""The report's figures (matplotlib, deterministic PNG bytes): loss curves, speed bars, cost against
sequence length, attention maps."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.io.atomic import write_atomic
from shared.tools.report.printing import ordered, setting
from shared.tools.report.schema import LABELS, MODES, STACKS, Inputs
from shared.tools.report.tables import in_context, pick_context, select, with_document_point
from shared.train import plots


@dataclass
class ReportFigure:
    """One figure of the README: its files (empty: skipped, for `skipped`)."""

    title: str
    files: list[str]
    skipped: str


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
        ReportFigure(
            "Attention maps, torch | Keras | difference",
            _attention_maps(equality.get("attention", []), folder),
            "no attention maps in the equality file",
        ),
    ]


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


def _attention_maps(entries: list[dict], folder: Path) -> list[str]:
    """One heatmap file per model: torch, Keras and |torch - Keras| side by side (shared.train.plots)."""
    files: list[str] = []
    for entry in entries:
        name = f"attention_{re.sub(r'[^A-Za-z0-9_.-]', '_', str(entry['model']))}.png"
        if name in files:
            continue
        torch, tf = (np.asarray(entry[stack], dtype=np.float64) for stack in STACKS)
        panels = [("torch", torch), ("Keras", tf), ("|torch - Keras|", np.abs(torch - tf))]
        outputs, sources = ([f"{prefix}{i}" for i in range(n)] for prefix, n in zip("ts", torch.shape, strict=True))
        plots.side_by_side_heatmaps(panels, sources, outputs, folder / name, title=f"{entry['model']}: attention")
        files.append(name)
    return files
