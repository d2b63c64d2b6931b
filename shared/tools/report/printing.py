"""Ordering rows and printing numbers: the markdown tables of the README (the CSV files keep the numbers)."""

from __future__ import annotations

import math

import numpy as np

from shared.tools.report.schema import FORMATS, KINDS, ORDER


def rank_key(column: str, value) -> str:
    """A sort key putting known values of `column` in their ORDER, unknown ones after, by name."""
    order = ORDER.get(column, ())
    return f"{order.index(value):04d}" if value in order else f"9999{value}"


def _rank(series):
    """sort_values key: ORDER ranks for the columns that have one, the values themselves otherwise."""
    if series.name not in ORDER:
        return series
    return series.map(lambda value: rank_key(series.name, value))


def ordered(frame, columns: list[str]):
    """`frame` sorted by `columns` (those it has), known values in ORDER; a fresh index."""
    present = [column for column in columns if column in frame.columns]
    return frame.sort_values(present, key=_rank, kind="stable").reset_index(drop=True)


def sig3(value: float) -> str:
    """Three significant digits without an exponent: 1234, 12.3, 0.0123."""
    if value == 0:
        return "0"
    return f"{value:.{max(0, 2 - math.floor(math.log10(abs(value))))}f}"


def _format(value, kind: str) -> str:
    """One cell as printed: "-" for nothing, yes/no, text as is, numbers by `kind` (see KINDS)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    value = float(value)
    if kind == "sig3":
        return sig3(value)
    if kind == "share":
        value, kind = 100 * value, "pct"
    return FORMATS[kind].format(value)


def _is_numeric(value) -> bool:
    """A number that a table cell right-aligns (not a bool, not text, not a missing value)."""
    return isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_) and not np.isnan(value)


def _escape(text) -> str:
    """A cell or header safe inside a markdown table."""
    return str(text).replace("|", "\\|")


def markdown_table(frame, default: str = "text") -> str:
    """`frame` as a markdown table: cells printed by KINDS (else `default`), numbers right-aligned."""
    import pandas as pd

    kinds = [KINDS.get(column, default) for column in frame.columns]
    cells = {
        _escape(column): [_escape(_format(value, kind)) for value in frame[column]]
        for column, kind in zip(frame.columns, kinds, strict=True)
    }
    align = ["right" if any(_is_numeric(value) for value in frame[column]) else "left" for column in frame.columns]
    return pd.DataFrame(cells).to_markdown(index=False, disable_numparse=True, colalign=align)


def setting(context: dict) -> str:
    """A measurement setting in words: machine (device, threads, dtype)."""
    return "{machine} ({device}, threads {threads}, {dtype})".format(**context)
