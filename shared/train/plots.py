"""Attention heatmaps as PNG files: rows are output tokens, columns source tokens (document 003's `plot_attention`).

matplotlib is imported inside the functions, and only its object API (`Figure` + the Agg canvas): pyplot is
never imported, so the process's backend is left as the user set it. The PNG is rendered in memory and
written with `write_atomic`, with no "Software" metadata, so the same input gives byte-identical files and a
failed render leaves no file behind.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from shared.io.atomic import write_atomic

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CELL_INCHES = 0.35  # side of one attention cell
DPI = 100


def attention_heatmap(attention, source_tokens: list[str], output_tokens: list[str], path, title: str | None = None) -> Path:
    """Write the heatmap of `attention` [L, S] (rows `output_tokens`, columns `source_tokens`) to the PNG `path`."""
    return side_by_side_heatmaps([(title or "", attention)], source_tokens, output_tokens, path)


def side_by_side_heatmaps(
    panels: list[tuple[str, np.ndarray]],
    source_tokens: list[str],
    output_tokens: list[str],
    path,
    title: str | None = None,
) -> Path:
    """Write heatmaps of the same shape next to each other (e.g. torch | Keras | |diff|) to the PNG `path`.

    Args:
        panels: (panel title, array [L, S]) pairs; each panel has its own colour scale and colorbar.
        source_tokens: S column labels; output_tokens: L row labels.
        path: the PNG file to write; its folder must exist.
        title: the figure's title above all panels.
    Returns:
        `path` as a Path.
    """
    return heatmap_rows([HeatmapRow(panels, source_tokens, output_tokens)], path, title)


@dataclass(frozen=True)
class HeatmapRow:
    """One row of a heatmap figure: panels of one shape [L, S], their column and row labels, a caption."""

    panels: list[tuple[str, np.ndarray]]
    source_tokens: list[str]
    output_tokens: list[str]
    caption: str = ""


def heatmap_rows(rows: list[HeatmapRow], path, title: str | None = None) -> Path:
    """Write rows of side-by-side heatmaps (e.g. one sentence per row) to the PNG `path`; each row has its own
    tokens and shape. Returns `path` as a Path."""
    path = _png_path(path)
    if isinstance(rows, HeatmapRow) or not isinstance(rows, list | tuple) or not rows:
        raise ValueError(f"rows must be a non-empty list of HeatmapRow, got {rows!r}")
    checked = []
    for row in rows:
        _check_labels(row.source_tokens, "source_tokens")
        _check_labels(row.output_tokens, "output_tokens")
        arrays = _check_panels(row.panels, len(row.output_tokens), len(row.source_tokens))
        checked.append(replace(row, panels=[(name, array) for (name, _), array in zip(row.panels, arrays, strict=True)]))
    write_atomic(path, _render(checked, title))
    return path


def _png_path(path) -> Path:
    """`path` as a Path ending in .png whose folder exists, or an error naming what is wrong."""
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"path must be a str or a path, got {path!r}")
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png, got {str(path)!r}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"the folder {str(path.parent)!r} of {str(path)!r} does not exist")
    return path


def _check_panels(panels, rows: int, columns: int) -> list[np.ndarray]:
    """The panels' arrays as finite float64 [rows, columns], or ValueError naming the bad panel."""
    if isinstance(panels, str | bytes) or not hasattr(panels, "__len__") or not len(panels):
        raise ValueError(f"panels must be a non-empty list of (title, array) pairs, got {panels!r}")
    arrays = []
    for index, panel in enumerate(panels):
        if not isinstance(panel, tuple | list) or len(panel) != 2 or not isinstance(panel[0], str):
            raise ValueError(f"panel {index} must be a (title, array) pair, got {type(panel).__name__}")
        array = np.asarray(panel[1])
        if array.dtype.kind not in "biuf":
            raise ValueError(f"panel {index} ({panel[0]!r}) must hold real numbers, got dtype {array.dtype}")
        if array.shape != (rows, columns) or 0 in array.shape:
            raise ValueError(
                f"panel {index} ({panel[0]!r}) has shape {array.shape}, but the labels give {rows} output tokens (rows) "
                f"and {columns} source tokens (columns); neither may be 0"
            )
        if not np.isfinite(array).all():
            raise ValueError(f"panel {index} ({panel[0]!r}) holds NaN or inf values")
        arrays.append(array.astype(np.float64))
    return arrays


def _check_labels(tokens, what: str) -> None:
    """ValueError unless `tokens` is a list (or tuple) of strings."""
    if not isinstance(tokens, list | tuple) or not all(isinstance(token, str) for token in tokens):
        raise ValueError(f"{what} must be a list of strings, got {tokens!r}")


def _render(rows: list[HeatmapRow], title: str | None) -> bytes:
    """The PNG bytes of the figure, one subfigure per row; no pyplot, no global state touched."""
    widths = [len(row.panels) * (CELL_INCHES * len(row.source_tokens) + 2.5) for row in rows]  # + row labels, colorbar
    heights = [CELL_INCHES * len(row.output_tokens) + 2.0 for row in rows]  # + room for the rotated column labels
    figure = blank_figure(max(*widths, 3.0), max(sum(heights) + (0.4 if title else 0.0), 2.5))
    body = figure
    if title:  # its own strip: a figure title over subfigures would overlap the first row's caption
        heading, body = figure.subfigures(2, 1, height_ratios=[0.4, sum(heights)])
        heading.suptitle(title, parse_math=False)
    subfigures = body.subfigures(len(rows), 1, squeeze=False, height_ratios=heights)[:, 0]
    for subfigure, row in zip(subfigures, rows, strict=True):
        _render_row(subfigure, row)
    return png_bytes(figure)


def _render_row(subfigure, row: HeatmapRow) -> None:
    """The row's panels side by side on `subfigure`, each with its colorbar, tokens on both axes."""
    rows, columns = len(row.output_tokens), len(row.source_tokens)
    for index, (name, array) in enumerate(row.panels):
        axes = subfigure.add_subplot(1, len(row.panels), index + 1)
        image = axes.imshow(array, cmap="bone", aspect="equal", interpolation="nearest")  # [L, S]
        axes.set_xticks(range(columns), row.source_tokens, rotation=60, ha="right", rotation_mode="anchor", parse_math=False)
        axes.set_yticks(range(rows), row.output_tokens, parse_math=False)
        if name:
            axes.set_title(name, parse_math=False)
        subfigure.colorbar(image, ax=axes, shrink=0.8)
    if row.caption:
        subfigure.supylabel(row.caption, fontsize="medium", parse_math=False)  # left of the row: clear of panel titles


def blank_figure(width: float, height: float):
    """A matplotlib `Figure` of `width` x `height` inches at DPI, constrained layout, on its own Agg canvas.

    No pyplot: the figure is not registered anywhere, so nothing global is touched and it is freed with
    its last reference.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_bytes(figure) -> bytes:
    """The PNG bytes of `figure`, without the "Software" metadata: the same figure gives the same bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
