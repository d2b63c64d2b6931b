"""The FLOP-ceiling diagnosis: how far ours/as-written could go in a mode (the FLOP ceiling, the ceiling once the step's
fixed cost, its floor, is counted, and once the profiled step's other ops are), and the table of every mode below
SPEEDUP_TARGET that a ceiling allows, each with its verdict."""

from __future__ import annotations

import math

import numpy as np

from shared import catalogue
from shared.tools.report.reading import latest_counts
from shared.tools.report.schema import LABELS, SIZES, SPEEDUP_TARGET
from shared.tools.report.selection import (
    fastest,
    fastest_row,
    in_context,
    pick_context,
    round_by_round,
    select,
    sizes_text,
    speedup,
)


def flop_ceilings(rows) -> dict[str, float]:
    """Each catalogue model's FLOP ceiling (`flop_ceiling`) from its train steps at the document's sizes on every
    machine: a count is the code's, not the machine's, and the newest holds (a machine's older run counted older code,
    or with an older counter: schema-1 files' torch counts may leave nn.LSTM out)."""
    steps = rows[(rows["task"] == "train_step") & (rows["sweep"] == "document")]
    return {name: flop_ceiling(select(steps, model=name)) for name in catalogue.CATALOGUE}


def flop_ceiling(rows) -> float:
    """As-written FLOPs over ours (torch's FLOP counter, the same work in both stacks): the speed-up the arithmetic
    alone allows; 1.0 where ours does the listing's work in fewer steps, not fewer FLOPs. nan when not counted. Each
    side's newest count (`latest_counts`): an older run counted older code."""
    counted = latest_counts(rows[rows["gflop"].notna() & (rows["gflop"] > 0)], ["impl"])
    return float(counted.get("as_written", math.nan) / counted.get("ours", math.nan))


def ceiling_after_floor(as_written_ms: float, floor_ms: float, ceiling: float, as_written_floor_ms: float = math.nan) -> float:
    """The FLOP ceiling once the step's fixed cost is counted: `as written / (floor + (as written - as-written floor) /
    ceiling)`. A floor (the same step at batch 1 and the document's lengths, same mode: `floor_rows`) is what the step
    costs with almost no arithmetic: no hoisting shortens ours's, and only the time as written spends above its own can
    fall by the FLOP ceiling. Exact where a step's time is its floor plus arithmetic that scales with the batch and ours
    does 1/ceiling of the listing's (the batch-1 arithmetic in each floor then cancels). Ours's floor stands for the
    listing's where that was not measured; the FLOP ceiling itself where neither was."""
    if math.isnan(floor_ms):
        return ceiling
    as_written_floor_ms = floor_ms if math.isnan(as_written_floor_ms) else as_written_floor_ms
    floor_ms, as_written_floor_ms = min(floor_ms, as_written_ms), min(as_written_floor_ms, as_written_ms)
    return as_written_ms / (floor_ms + (as_written_ms - as_written_floor_ms) / ceiling)


def other_ops_ceiling(ceiling: float, split) -> float:
    """The FLOP ceiling of the listing's time above its floor once the profiled step says what the FLOP ceiling speaks
    of: only its products' share (as written's `product_ms` over its `product_ms + other_ms`) falls by `ceiling`; the
    rest falls as far as ours's other ops fell below the listing's (ours / as written `other_ms`, at most 1: ours's
    elementwise work, softmax, optimizer... taking longer than the listing's counts as the listing's). Passed to
    ceiling_after_floor, what hoisting can reach while ours's other ops stay as they are: below SPEEDUP_TARGET, only a
    step with fewer or faster non-product ops could reach it. `split`: `_profiled_times`' table; nan where a side was
    not profiled."""
    if split is None:
        return math.nan
    listing, ours = split.loc["as_written"], split.loc["ours"]
    share = listing["product_ms"] / (listing["product_ms"] + listing["other_ms"])
    other_kept = min(1.0, ours["other_ms"] / listing["other_ms"])
    return 1 / (share / ceiling + (1 - share) * other_kept)


def products_at_ceiling(ceiling: float, split) -> bool:
    """Whether ours's profiled products already fell by the FLOP ceiling or more (as written / ours `product_ms` at
    least `ceiling`): no hoisting has anything left to remove, and ours as measured is what it reaches with its products
    at the FLOP ceiling and its other ops as they are. The ceiling after the floor can still allow more where the
    listing's floor (batch 1) is swollen by what a larger batch hides: its per-step products read their weights from
    memory at every step (document 004's output layer, 20 MB a step), a cost that at the document's batch is part of
    products running at full pace. `split`: `_profiled_times`' table, or None (False)."""
    if split is None:
        return False
    return bool(split.loc["as_written", "product_ms"] >= ceiling * split.loc["ours", "product_ms"])


def floor_rows(rows, document):
    """The floor rows of `rows` (sweep "floor") at the lengths of `document`'s rows (batch 1, the document's source and
    target lengths), or, where none were timed so, the floors at other lengths (a schema-1 file's of 2 source and 2 target
    steps, which leave out most of a longer loop's dispatch: a ceiling after such a floor is an upper bound). Decided
    by the rows' sizes, whatever their date."""
    lengths = set(zip(document["src_len"], document["tgt_len"], strict=True))
    floors = rows[rows["sweep"] == "floor"]
    at_lengths = np.array([pair in lengths for pair in zip(floors["src_len"], floors["tgt_len"], strict=True)], dtype=bool)
    return floors.loc[at_lengths] if at_lengths.any() else floors


def below_target_table(rows, context: dict | None):
    """Every (model, stack, mode) whose ours/as-written is below SPEEDUP_TARGET although its FLOP ceiling allows it, in
    the headline setting and then on each other CPU machine at its preferred setting (`pick_context`): the ratio, the
    FLOP ceiling, as-written and floor ms, the ceiling after the floor (at the medians and at the repeats' least
    favourable quartiles), the sibling ceiling (catalogue `less_work`), and the verdict (`_verdict`). None where none."""
    import pandas as pd

    steps = rows[(rows["task"] == "train_step") & (rows["status"] == "ok")]
    machines = [] if context is None else [context]
    cpu = steps[(steps["device"] == "cpu") & (steps["sweep"] == "document")]
    for machine in sorted(set(cpu["machine"]) - {m["machine"] for m in machines}):
        machines.append(pick_context(select(cpu, machine=machine)))
    ceilings = flop_ceilings(rows)
    records = [record for setting in machines for record in _below_target_records(in_context(steps, setting), ceilings)]
    return pd.DataFrame(records) if records else None


def _below_target_records(steps, ceilings: dict[str, float]) -> list[dict]:
    """below_target_table's rows of one setting's successful train steps, with each model's FLOP ceiling
    (`flop_ceilings`)."""
    records = []
    for name, spec in catalogue.CATALOGUE.items():
        model_rows = select(steps, model=name)
        document = model_rows[model_rows["sweep"] == "document"]
        if not spec.hoists or document.empty:
            continue
        counted = ceilings[name]
        for (stack, mode), group in document.groupby(["stack", "mode"]):
            compiled = _compiled_ratios(group)
            ceiling = next((compiled[key] for key in COMPILED_COUNTS if not math.isnan(compiled[key])), counted)
            paired = round_by_round(group)
            ratio = speedup(group, paired)
            allowed = counted >= SPEEDUP_TARGET or ceiling >= SPEEDUP_TARGET  # by either count (compiled below: bounded)
            if not (ratio < SPEEDUP_TARGET and allowed):  # reached, not timed both ways, or bounded by the arithmetic
                continue
            as_written = fastest(group[group["impl"] == "as_written"])
            floors = floor_rows(select(model_rows, stack=stack, mode=mode), document)
            ours_floors, listing_floors = (floors[floors["impl"] == impl] for impl in ("ours", "as_written"))
            floor, as_written_floor = fastest(ours_floors), fastest(listing_floors)
            sibling = fastest(select(steps, model=spec.less_work, sweep="document", impl="ours", stack=stack, mode=mode))
            split = _profiled_times(group)
            medians = (as_written["median_ms"], floor["median_ms"])
            after = ceiling_after_floor(*medians, ceiling, as_written_floor["median_ms"])
            with_other_ops = (
                ratio  # hoisting has nothing left: ours, its other ops as they are, is what it reaches
                if products_at_ceiling(ceiling, split)
                else ceiling_after_floor(*medians, other_ops_ceiling(ceiling, split), as_written_floor["median_ms"])
            )
            # the spread's worst case: as written's q25, ours's floor at its q75, the listing's at its q25
            after_low = ceiling_after_floor(as_written["q25_ms"], floor["q75_ms"], ceiling, as_written_floor["q25_ms"])
            sibling_ceiling = as_written["median_ms"] / sibling["median_ms"]
            records.append({"machine": group["machine"].iloc[0], "model": name, "stack": LABELS[stack], "mode": mode,
                            "measured at": _measured_at(group[group["impl"] == "ours"]),
                            "ours/as-written": ratio, "ratio q25-q75": _range_text(paired["q25"], paired["q75"]),
                            "FLOP ceiling": ceiling, "counted by": _counted_by(compiled),
                            "bytes ratio": compiled["compiled_mb"], "as-written ms": as_written["median_ms"],
                            "floor sizes": _sizes_label(ours_floors), "floor ms": floor["median_ms"],
                            "as-written floor ms": as_written_floor["median_ms"], "ceiling after floor": after,
                            "within spread": after_low, "sibling ceiling": sibling_ceiling,
                            "ceiling with other ops": with_other_ops,
                            "verdict": _verdict(after, after_low, sibling_ceiling, spec.less_work, paired["q75"],
                                                with_other_ops),
                            **_profiled_split(split)})  # fmt: skip
    return records


def _profiled_times(rows):
    """A mode's profiled step, each side's newest `product_ms` and `other_ms` (the stack's profiler: torch eager,
    tf.function, XLA on TensorFlow and JAX), one row per side; None where a side was not profiled: its rows hold no
    `product_ms` (the other modes, and schema-1 files' rows of a profiler not yet run, whatever their date)."""
    times = _newest_per_side(rows, ["product_ms", "other_ms"])
    return None if times is None or times.isna().any(axis=None) else times


def _profiled_split(times) -> dict:
    """`_profiled_times`' table as the table prints it, "as written / ours" ms a step for the products and for every
    other op; "-" where a side was not profiled."""
    if times is None:
        return {"products ms": "-", "other ops ms": "-"}
    return {f"{label} ms": f"{times.loc['as_written', column]:.3g} / {times.loc['ours', column]:.3g}"
            for label, column in (("products", "product_ms"), ("other ops", "other_ms"))}  # fmt: skip


COMPILED_COUNTS = {  # a compiled train step's FLOP count, the first found, and what the table calls it
    "compiled_gflop": "XLA, compiled",  # Keras on JAX: XLA's cost model, every op
    "compiled_product_gflop": "XLA, compiled products",  # TensorFlow's XLA: the dots of its optimized program
}


def _compiled_ratios(rows) -> dict:
    """As written over ours of what the compiler made of the train step (`compiled_gflop`, `compiled_mb`: XLA's cost
    model, Keras on JAX; `compiled_product_gflop`: the products of TensorFlow's XLA program) among one mode's `rows`;
    nan each where a side was not costed."""
    columns = ["compiled_gflop", "compiled_mb", "compiled_product_gflop"]
    costs = _newest_per_side(rows, columns)
    if costs is None:
        return dict.fromkeys(columns, math.nan)
    return (costs.loc["as_written"] / costs.loc["ours"]).to_dict()


def _newest_per_side(rows, columns: list[str]):
    """The last value of each of `columns` that ours's rows and the listing's hold (nan where a side has none; a bare
    table may lack the columns), one row per side; None where a side has no rows."""
    values = rows.reindex(columns=["impl", *columns]).groupby("impl")[columns].last()
    return values if set(values.index) == {"ours", "as_written"} else None


def _counted_by(compiled: dict) -> str:
    """Whose count a mode's FLOP ceiling is: the compiled program's (COMPILED_COUNTS: XLA's cost model, every op after
    its rewrites; or the products of TensorFlow's XLA program) where it was counted, else torch's count of the
    products."""
    return next((label for key, label in COMPILED_COUNTS.items() if not math.isnan(compiled[key])), "torch, products")


def _sizes_label(rows) -> str:
    """The sizes (BxSxT) of the fastest of `rows`; "-" where there is none."""
    if rows.empty:
        return "-"
    row = fastest_row(rows)
    return sizes_text(*(row[name] for name in SIZES))


def _measured_at(rows) -> str:
    """The commit and day of the fastest of `rows` ("<commit> <YYYY-MM-DD>"): another machine's rows may come from an
    older commit than the headline's, a mode below the target there from code changed since."""
    row = fastest_row(rows)
    return f"{row.get('commit') or '-'} {str(row.get('created') or '')[:10]}".strip()


def _range_text(low: float, high: float) -> str:
    """A ratio's quartiles as the report prints them: "1.38-1.55x"; "-" where not measured."""
    return "-" if math.isnan(low) else f"{low:.2f}-{high:.2f}x"


def _verdict(
    after: float, after_low: float, sibling_ceiling: float, sibling: str | None, ratio_q75: float, with_other_ops: float
) -> str:
    """A mode whose ratio's round-by-round q75 (`round_by_round`) reaches SPEEDUP_TARGET is at it "within the spread": the
    repeats cannot tell it from the target. Below it, a mode is a target only where every ceiling allows it: "bounded" by the
    ceiling after the floor at the medians; "bounded within the spread" where it allows it at the medians but not at
    the quartiles least favourable to it (a slow as-written q25, a floor's q75: the repeats cannot tell it from
    bounded); "bounded by <sibling>" where as written over ours of the model with less work (measured in the same mode)
    does not allow it; "bounded by other ops" where the ceiling with the profiled step's other ops
    (ceiling_after_floor with `other_ops_ceiling`, or the ratio itself where `products_at_ceiling`) does not."""
    if ratio_q75 >= SPEEDUP_TARGET:
        return f"{SPEEDUP_TARGET}x within the spread"
    if not after >= SPEEDUP_TARGET:
        return "bounded"
    if sibling_ceiling < SPEEDUP_TARGET:  # nan (no sibling, or not measured in this mode) bounds nothing
        return f"bounded by {sibling}"
    if with_other_ops < SPEEDUP_TARGET:  # nan (not profiled) bounds nothing
        return "bounded by other ops"
    if not after_low >= SPEEDUP_TARGET:
        return "bounded within the spread"
    return "target"
