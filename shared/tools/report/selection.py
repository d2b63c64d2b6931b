"""Picking among the benchmark rows, for the tables and the FLOP-ceiling diagnosis alike: a setting and its rows, the
fastest row, and ours over as written read off them (round by round where the row holds it, else by medians)."""

from __future__ import annotations

import math

import numpy as np

from shared.tools.report.schema import CONTEXT

# the bench's round-by-round ratio (as written / ours side by side: machine.paired_ratio) -> round_by_round's names
PAIRED = {"paired_speedup": "median", "paired_speedup_q25": "q25", "paired_speedup_q75": "q75"}


def pick_context(rows) -> dict | None:
    """The setting with the most weight among `rows` that succeeded: CPU first, the most threads, float32, the most
    models timed, the newest run (a later machine's one run of every model outranks an older machine's runs of as
    many models, which may hold more rows from several profiles), then by machine name."""
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return None
    groups = ok.groupby(list(CONTEXT))
    models = {key: group["model"].nunique() for key, group in groups}
    newest = {key: group["created"].max() if "created" in group else "" for key, group in groups}  # ISO times
    recency = sorted(set(newest.values()), reverse=True)  # 0: the newest run
    best = min(models, key=lambda key: _context_preference(dict(zip(CONTEXT, key, strict=True)), models[key],
                                                            recency.index(newest[key])))  # fmt: skip
    return dict(zip(CONTEXT, best, strict=True))


def _context_preference(context: dict, models: int, recency: int) -> tuple:
    """Sort key of a setting whose successful rows time `models` models, its newest run `recency`-th of all settings'
    (0: the newest): the preferred one first."""
    device, threads, dtype = (context[name] for name in ("device", "threads", "dtype"))
    return device != "cpu", -threads, dtype != "float32", -models, recency, context["machine"]


def select(frame, **values):
    """The rows of `frame` whose columns hold `values`."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in values.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def in_context(rows, context: dict | None):
    """The rows measured in `context` (none if it is None)."""
    return rows.iloc[0:0] if context is None else select(rows, **context)


def sizes_text(batch: int, src_len: int, tgt_len: int) -> str:
    """A case's sizes as the report prints them: "32x10x10"."""
    return f"{batch}x{src_len}x{tgt_len}"


def fastest(rows) -> dict:
    """The median and quartiles (ms) of the fastest of `rows`; nan each where there is none."""
    if rows.empty:
        return dict.fromkeys(("median_ms", "q25_ms", "q75_ms"), math.nan)
    return fastest_row(rows)[["median_ms", "q25_ms", "q75_ms"]].to_dict()


def fastest_row(rows):
    """The row of `rows` with the lowest median."""
    return rows.loc[rows["median_ms"].idxmin()]


def speedup(rows, paired: dict | None = None) -> float:
    """As written over ours among `rows`: the round-by-round ratio of the fastest ours row where it holds one (timed
    beside the listing: `round_by_round`, or `paired` where the caller read it), else the two fastest medians' ratio (a
    row without `paired_speedup`: a schema-1 file's older rows, whatever its date); nan unless both succeeded."""
    median = (paired or round_by_round(rows))["median"]
    if not math.isnan(median):
        return median
    medians = rows[rows["status"] == "ok"].groupby("impl")["median_ms"].min()
    return float(medians.get("as_written", math.nan) / medians.get("ours", math.nan))


def round_by_round(rows) -> dict:
    """The fastest successful ours row's as written / ours, round by round side by side (the bench's `paired_speedup`,
    machine.paired_ratio): median, q25, q75; nan each where it has none."""
    ours = rows[(rows["status"] == "ok") & (rows["impl"] == "ours")].reindex(columns=["median_ms", *PAIRED])
    if ours.empty:
        return dict.fromkeys(PAIRED.values(), math.nan)
    row = fastest_row(ours)
    return {name: float(row[field]) for field, name in PAIRED.items()}
