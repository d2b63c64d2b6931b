"""The report's tables: the headline, equality (per dtype, per Keras backend, the README's model table), loss,
speed and scaling, each numeric (CSV) and as printed."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from shared import catalogue
from shared.tools.report.printing import markdown_table, ordered, rank_key, sig3
from shared.tools.report.reading import latest_counts
from shared.tools.report.schema import (
    BACKENDS,
    CONTEXT,
    GPU_HEADLINE_COLUMNS,
    HEADLINE_COLUMNS,
    LABELS,
    RATIO_BAND,
    SETTING,
    SIZES,
    SPEED_COLUMNS,
    SPEEDUP_MODE,
    SPEEDUP_TARGET,
    STACKS,
    SWEEP_SIZE,
    TASKS,
    Inputs,
)
from shared.tools.reproduction import document_figures

# the bench's round-by-round ratio (as written / ours side by side: machine.paired_ratio) -> _paired's names
PAIRED = {"paired_speedup": "median", "paired_speedup_q25": "q25", "paired_speedup_q75": "q75"}


@dataclass
class Tables:
    """The report's tables by name: `numeric` (returned, written as CSV) and `shown` (as printed)."""

    numeric: dict = field(default_factory=dict)
    shown: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)  # how the columns not in KINDS are printed

    def add(self, name: str, numeric, shown=None, kind: str = "text") -> None:
        """Keep the table `name` unless it is empty; `shown` defaults to `numeric`."""
        if numeric is not None and len(numeric):
            self.numeric[name] = numeric
            self.shown[name] = numeric if shown is None else shown
            self.kinds[name] = kind

    def markdown(self, name: str) -> list[str]:
        """The table as README lines (nothing if it is empty)."""
        return [markdown_table(self.shown[name], self.kinds[name]), ""] if name in self.shown else []


def build_tables(inputs: Inputs) -> tuple[Tables, dict | None]:
    """Every table of the report, and the setting (device, machine, threads, dtype) of the headline."""
    tables = Tables()
    headline, context = headline_table(inputs.rows, inputs.equality)
    tables.add("headline", headline)
    tables.add("gpu_headline", gpu_headline_table(inputs.rows))
    tables.add("speedup_below_target", below_target_table(inputs.rows, context))
    for name, table in equality_tables(inputs.equality).items():
        tables.add(name, table, kind="err")
    tables.add("equality_backends", backend_table(inputs.backends), kind="err")
    tables.add("loss", loss_table(inputs.summaries or []))
    for task in TASKS:
        tables.add(f"speed_{task}", *speed_table(inputs.rows, task))
    if "speed_train_step" in tables.numeric:
        tables.add("speed_overhead", overhead_table(tables.numeric["speed_train_step"], inputs.rows))
    for sweep in SWEEP_SIZE:
        tables.add(f"scaling_{sweep}", *scaling_table(inputs.rows, sweep), kind="sig3")
    return tables, context


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


def headline_table(rows, equality: dict | None):
    """One row per catalogue model: best-mode train-step times of both stacks and their ratio, the
    ours/as-written speed-ups (torch eager, TF tf.function), the float64 maximum and whether greedy ids agree."""
    import pandas as pd

    base = rows[(rows["task"] == "train_step") & (rows["sweep"] == "document")]
    context = pick_context(base)
    picked, ceilings = in_context(base, context), flop_ceilings(rows)
    records = [_headline_record(spec, select(picked, model=name), equality or {}, ceilings[name])
               for name, spec in catalogue.CATALOGUE.items()]  # fmt: skip
    return pd.DataFrame(records, columns=HEADLINE_COLUMNS), context


def gpu_headline_table(rows):
    """Per GPU machine (at its most threads, float32), one row per model it timed: each stack's best mode and its
    time, torch/TF, ours/as-written in that best mode, and the lowest over every mode. Empty without GPU rows."""
    import pandas as pd

    base = rows[(rows["task"] == "train_step") & (rows["sweep"] == "document") & (rows["device"] == "gpu")]
    base = base[(base["status"] == "ok") & (base["dtype"] == "float32")]
    records = []
    for machine, on_machine in base.groupby("machine", sort=True):
        picked = on_machine[on_machine["threads"] == on_machine["threads"].max()]
        for name in [name for name in catalogue.CATALOGUE if name in set(picked["model"])]:
            records.append({"machine": machine, "model": name, **_best_modes(catalogue.get(name), select(picked, model=name))})
    return pd.DataFrame(records, columns=GPU_HEADLINE_COLUMNS)


def _best_modes(spec: catalogue.ModelSpec, rows) -> dict:
    """Each stack's best mode of ours, its time and ours/as-written in it; torch/TF; the lowest ratio over every mode."""
    record = {}
    for stack in STACKS:
        label, stack_rows = LABELS[stack], rows[rows["stack"] == stack]
        record[f"{label} ms"], record[f"{label} mode"] = _best(stack_rows[stack_rows["impl"] == "ours"])
        best = stack_rows[stack_rows["mode"] == record[f"{label} mode"]]
        record[f"ours/as-written {label}"] = 1.0 if not spec.hoists and len(best) else _speedup(best)
    record["torch/TF"] = record["torch ms"] / record["TF ms"]
    lowest = (1.0, "ours is the listing") if not spec.hoists else _lowest_speedup(rows)
    record["lowest ours/as-written"], record["lowest in"] = lowest
    return record


def _headline_record(spec: catalogue.ModelSpec, rows, equality: dict, ceiling: float) -> dict:
    """The headline row of one model from its rows in the headline setting and its FLOP ceiling (`flop_ceilings`)."""
    record = {"model": spec.name, "document": spec.document}
    for stack in STACKS:
        label, stack_rows = LABELS[stack], rows[rows["stack"] == stack]
        record[f"{label} ms"], record[f"{label} mode"] = _best(stack_rows[stack_rows["impl"] == "ours"])
        record[f"ours/as-written {label}"] = _speedup(stack_rows[stack_rows["mode"] == SPEEDUP_MODE[stack]])
    record["torch/TF"] = record["torch ms"] / record["TF ms"]
    record["lowest ours/as-written"], record["lowest in"] = _lowest_speedup(rows)
    record["FLOP ceiling"] = ceiling
    if not spec.hoists:  # ours is the listing's own code: 1.00x by construction, not timed twice
        record.update(dict.fromkeys([f"ours/as-written {label}" for label in LABELS.values()], 1.0))
        record.update({"lowest ours/as-written": 1.0, "lowest in": "ours is the listing", "FLOP ceiling": 1.0})
    return {**record, **_headline_equality(spec, equality)}


def _lowest_speedup(rows) -> tuple[float, str]:
    """The smallest ours/as-written ratio over both stacks' modes and where it was measured ("torch compile");
    (nan, "-") where no mode has both."""
    ratios = [(_speedup(group), f"{LABELS[stack]} {mode}{_equal_within_spread(group)}")
              for (stack, mode), group in rows.groupby(["stack", "mode"])]  # fmt: skip
    return min([(ratio, where) for ratio, where in ratios if not math.isnan(ratio)], default=(math.nan, "-"))


def _equal_within_spread(rows) -> str:
    """Where ours is slower than as written but within the repeats' spread (equal, as measured): ", within the spread"
    where the round-by-round ratio's q75 reaches 1 (`_paired`), ", IQRs overlap" where a run without it gives two
    medians whose interquartile ranges overlap; "" otherwise."""
    paired = _paired(rows)
    if not math.isnan(paired["median"]):
        return ", within the spread" if paired["median"] < 1 <= paired["q75"] else ""
    ok = rows[rows["status"] == "ok"].groupby("impl")[["median_ms", "q25_ms", "q75_ms"]].min()
    if set(ok.index) != {"ours", "as_written"} or ok.loc["ours", "median_ms"] <= ok.loc["as_written", "median_ms"]:
        return ""
    return ", IQRs overlap" if ok.loc["ours", "q25_ms"] <= ok.loc["as_written", "q75_ms"] else ""


def flop_ceilings(rows) -> dict[str, float]:
    """Each catalogue model's FLOP ceiling (`flop_ceiling`) from its train steps at the document's sizes on every
    machine: a count is the code's, not the machine's, and the newest holds (a machine's older run counted older code,
    or with an older counter: before 2026-11-28 torch's left nn.LSTM out)."""
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
    target lengths), or, where none were timed so, at the lengths an older run took (2 source and 2 target steps,
    which leave out most of a longer loop's dispatch: a ceiling after such a floor is an upper bound)."""
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
            paired = _paired(group)
            ratio = _speedup(group, paired)
            allowed = counted >= SPEEDUP_TARGET or ceiling >= SPEEDUP_TARGET  # by either count (compiled below: bounded)
            if not (ratio < SPEEDUP_TARGET and allowed):  # reached, not timed both ways, or bounded by the arithmetic
                continue
            as_written = _fastest(group[group["impl"] == "as_written"])
            floors = floor_rows(select(model_rows, stack=stack, mode=mode), document)
            ours_floors, listing_floors = (floors[floors["impl"] == impl] for impl in ("ours", "as_written"))
            floor, as_written_floor = _fastest(ours_floors), _fastest(listing_floors)
            sibling = _fastest(select(steps, model=spec.less_work, sweep="document", impl="ours", stack=stack, mode=mode))
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
    tf.function, XLA on TensorFlow and JAX), one row per side; None where a side was not profiled (the other modes,
    runs before 2026-11-27; TensorFlow's XLA before 2026-11-28)."""
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
    fastest = _fastest_row(rows)
    return sizes_text(*(fastest[name] for name in SIZES))


def sizes_text(batch: int, src_len: int, tgt_len: int) -> str:
    """A case's sizes as the report prints them: "32x10x10"."""
    return f"{batch}x{src_len}x{tgt_len}"


def _measured_at(rows) -> str:
    """The commit and day of the fastest of `rows` ("a1864cb 2026-11-28"): another machine's rows may come from an older
    commit than the headline's, a mode below the target there from code changed since."""
    fastest = _fastest_row(rows)
    return f"{fastest.get('commit') or '-'} {str(fastest.get('created') or '')[:10]}".strip()


def _fastest(rows) -> dict:
    """The median and quartiles (ms) of the fastest of `rows`; nan each where there is none."""
    if rows.empty:
        return dict.fromkeys(("median_ms", "q25_ms", "q75_ms"), math.nan)
    return _fastest_row(rows)[["median_ms", "q25_ms", "q75_ms"]].to_dict()


def _fastest_row(rows):
    """The row of `rows` with the lowest median."""
    return rows.loc[rows["median_ms"].idxmin()]


def _range_text(low: float, high: float) -> str:
    """A ratio's quartiles as the report prints them: "1.38-1.55x"; "-" where not measured."""
    return "-" if math.isnan(low) else f"{low:.2f}-{high:.2f}x"


def _verdict(
    after: float, after_low: float, sibling_ceiling: float, sibling: str | None, ratio_q75: float, with_other_ops: float
) -> str:
    """A mode whose ratio's round-by-round q75 (`_paired`) reaches SPEEDUP_TARGET is at it "within the spread": the
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


def _best(rows) -> tuple[float, str | None]:
    """The fastest successful median and its mode; (nan, "failed") if every row failed, (nan, None) if none."""
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return math.nan, ("failed" if len(rows) else None)
    best = _fastest_row(ok)
    return float(best["median_ms"]), best["mode"]


def _speedup(rows, paired: dict | None = None) -> float:
    """As written over ours among `rows`: the round-by-round ratio of the fastest ours row where it was timed beside
    the listing (`_paired`, or `paired` where the caller read it), else the two fastest medians' ratio (runs before
    2026-11-27); nan unless both succeeded."""
    median = (paired or _paired(rows))["median"]
    if not math.isnan(median):
        return median
    medians = rows[rows["status"] == "ok"].groupby("impl")["median_ms"].min()
    return float(medians.get("as_written", math.nan) / medians.get("ours", math.nan))


def _paired(rows) -> dict:
    """The fastest successful ours row's as written / ours, round by round side by side (the bench's `paired_speedup`,
    machine.paired_ratio): median, q25, q75; nan each where it has none."""
    ours = rows[(rows["status"] == "ok") & (rows["impl"] == "ours")].reindex(columns=["median_ms", *PAIRED])
    if ours.empty:
        return dict.fromkeys(PAIRED.values(), math.nan)
    fastest = _fastest_row(ours)
    return {name: float(fastest[field]) for field, name in PAIRED.items()}


def _headline_equality(spec: catalogue.ModelSpec, equality: dict) -> dict:
    """The model's float64 maximum on logits (context for the attention-only model) and its greedy verdict."""
    quantity = "context" if spec.interface == "attention" else "logits"
    outputs = equality.get("outputs", [])
    values = [e["max_abs"] for e in outputs if (e["model"], e["dtype"], e["quantity"]) == (spec.name, "float64", quantity)]
    greedy = [e["tokens_equal"] for e in equality.get("greedy", []) if e["model"] == spec.name]
    return {
        "max abs diff float64": max(values, default=math.nan),
        "quantity": quantity if values else None,
        "greedy ids equal": all(greedy) if greedy else None,
    }


def equality_tables(equality: dict | None) -> dict:
    """The equality pivots: outputs (with the greedy verdict) and training, per model x dtype."""
    if equality is None:
        return {}
    outputs, greedy = _quantity_pivot(equality["outputs"]), _greedy_frame(equality["greedy"])
    if outputs is not None and greedy is not None:
        outputs = ordered(outputs.merge(greedy, on=["model", "dtype"], how="outer"), ["model", "dtype"])
    training = _quantity_pivot(equality["training"])
    return {"equality_outputs": outputs if outputs is not None else greedy, "equality_training": training}


def _backend_maxima(equality: dict) -> dict[tuple[str, str], float]:
    """The largest |torch - Keras| per (model, dtype) over every quantity: outputs and the 200-step training."""
    maxima: dict[tuple[str, str], float] = {}
    for entry in equality["outputs"] + equality["training"]:
        key = entry["model"], entry["dtype"]
        maxima[key] = max(maxima.get(key, 0.0), float(entry["max_abs"]))
    return maxima


def backend_table(backends: dict):
    """Per model x dtype, the largest |torch - Keras| on each Keras backend measured (a column each); None if none."""
    import pandas as pd

    if not backends:
        return None
    maxima = {backend: _backend_maxima(equality) for backend, equality in backends.items()}
    keys = sorted(
        {key for found in maxima.values() for key in found}, key=lambda k: (rank_key("model", k[0]), rank_key("dtype", k[1]))
    )
    records = [
        {"model": m, "dtype": d, **{label: maxima[b].get((m, d), math.nan) for b, label in BACKENDS.items() if b in maxima}}
        for m, d in keys
    ]
    return pd.DataFrame(records)


def models_table(backends: dict) -> str:
    """The README's model table: the catalogue, and per Keras backend the largest |torch - Keras| of each model
    (float64 · float32) over outputs, attention, loss, gradients, greedy attention and the 200-step training."""
    lines = [
        "| catalogue name | document | document classes | module (torch_impl/, tf_impl/) | "
        + " | ".join(BACKENDS.values())
        + " |",
        "|---|---|---|---|" + "---:|" * len(BACKENDS),
    ]
    maxima = {backend: _backend_maxima(equality) for backend, equality in backends.items()}
    for name, spec in catalogue.CATALOGUE.items():
        cells = [_backend_cell(name, maxima.get(backend), backends.get(backend)) for backend in BACKENDS]
        lines.append(f"| `{name}` | {spec.document} | {spec.doc_class} | `{spec.module}.py` | {' | '.join(cells)} |")
    return "\n".join(lines)


def _backend_cell(name: str, maxima: dict | None, equality: dict | None) -> str:
    """float64 · float32 maxima of one model on one backend; "failed" if a comparison of it failed."""
    if maxima is None:
        return "not measured"
    if any(failure.startswith(f"{name} ") for failure in equality["failures"]):
        return "failed"
    values = [maxima.get((name, dtype)) for dtype in ("float64", "float32")]
    return " · ".join("-" if value is None else f"{value:.1e}" for value in values)


def _quantity_pivot(entries: list[dict]):
    """max_abs per model x dtype (rows) and quantity (columns, in QUANTITIES order); None without entries."""
    import pandas as pd

    if not entries:
        return None
    frame = pd.DataFrame(entries, columns=["model", "dtype", "quantity", "max_abs"])
    pivot = frame.groupby(["model", "dtype", "quantity"])["max_abs"].max().unstack("quantity")
    pivot = pivot[sorted(pivot.columns, key=lambda name: rank_key("quantity", name))]
    pivot.columns.name = None
    return ordered(pivot.reset_index(), ["model", "dtype"])


def _greedy_frame(entries: list[dict]):
    """Whether greedy ids agree, per model x dtype; None without entries."""
    import pandas as pd

    if not entries:
        return None
    frame = pd.DataFrame(entries, columns=["model", "dtype", "tokens_equal"])
    verdict = frame.groupby(["model", "dtype"])["tokens_equal"].all().rename("greedy ids equal").reset_index()
    return ordered(verdict, ["model", "dtype"])


def loss_table(summaries: list[dict]):
    """One row per training summary: what ran, the final metrics, and the document's own figures."""
    import pandas as pd

    frame = pd.DataFrame([_loss_record(summary) for summary in summaries])
    return ordered(frame, ["document", "model", "run", "stack", "device"]) if len(frame) else None


def _loss_record(summary: dict) -> dict:
    """The loss-table row of one summary."""
    final = summary.get("final") or {}
    document = summary.get("document") or getattr(catalogue.CATALOGUE.get(summary["model"]), "document", "-")
    return {
        "model": summary["model"],
        "run": summary.get("run", summary["model"]),
        "document": document,
        "stack": summary["stack"],
        "dataset": summary["dataset"],
        "device": summary.get("device", "unknown"),
        "dtype": summary.get("dtype", "-"),
        "steps": summary["steps"],
        "epochs": f"{summary.get('epochs_finished', '?')}/{summary.get('epochs', '?')}",
        "complete": bool(summary.get("complete")),
        "split": final.get("split"),
        "final loss": final.get("loss"),
        "final ppl": final.get("perplexity"),
        "token acc": final.get("token_accuracy"),
        "seq acc": final.get("sequence_accuracy"),
        "BLEU": final.get("bleu"),
        "doc-protocol loss": final.get("document_loss"),
        "doc-protocol ppl": final.get("document_perplexity"),
        "document reports": document_figures(summary["model"], document, summary["dataset"]),
    }


def _group_min(rows, keys: list[str], mask):
    """Per row of `rows`: the smallest median among the rows of its `keys` group where `mask` holds."""
    picked = rows[mask].groupby(keys)["median_ms"].min().rename("_picked")
    return rows.join(picked, on=keys)["_picked"].to_numpy(dtype=float)


def speed_table(rows, task: str):
    """Times of `task` at the documents' sizes with the ratio columns (numeric), and as printed."""
    frame = rows[(rows["task"] == task) & (rows["sweep"] == "document")].copy()
    if frame.empty:
        return None, None
    median = frame["median_ms"].to_numpy(dtype=float)
    best = {stack: _group_min(frame, [*SETTING, "impl"], frame["stack"] == stack) for stack in STACKS}
    frame["torch/TF"] = best["torch"] / best["tf"]
    as_written = _group_min(frame, [*SETTING, "stack", "mode"], frame["impl"] == "as_written")
    paired = frame.reindex(columns=["paired_speedup"])["paired_speedup"].to_numpy(dtype=float)  # round by round
    frame["ours/as-written"] = np.where(frame["impl"] == "ours", np.where(np.isnan(paired), as_written / median, paired), np.nan)
    backend_and_mode = frame["mode"].str.rpartition("-")  # Keras's backend named in the mode ("jax-xla"), else ""
    frame["_backend"], eager = backend_and_mode[0], backend_and_mode[2] == "eager"
    frame["mode/eager"] = _group_min(frame, [*SETTING, "stack", "_backend", "impl"], eager) / median  # same backend
    frame["% matmul peak"] = 100 * frame["gflop"] / (frame["median_ms"] / 1000) / frame["matmul_gflops"]
    frame["sizes"] = [sizes_text(*sizes) for sizes in zip(*(frame[name] for name in SIZES), strict=True)]
    numeric = frame[list(SPEED_COLUMNS)].rename(columns=SPEED_COLUMNS).reset_index(drop=True)
    return numeric, _speed_shown(numeric)


def outside_band(table):
    """The rows of a speed table (one per setting and impl) whose torch/TF best-mode ratio is beyond RATIO_BAND."""
    ratios = table.dropna(subset=["torch/TF"]).drop_duplicates([*SETTING[:-3], "sizes", "impl"])
    return ratios[(ratios["torch/TF"] > RATIO_BAND) | (ratios["torch/TF"] < 1 / RATIO_BAND)]


def overhead_table(table, rows):
    """Where the time goes in each train-step setting of ours outside RATIO_BAND: each stack's best step, its floor
    (`floor_rows`: what the step costs with almost no arithmetic), the slower stack's floor over the faster's step
    (beyond RATIO_BAND: no kernel work closes the gap at these sizes), the floors' difference over the steps' (1 or
    more: the whole gap is fixed cost per step; near 0: it is the work), the ops an eager step dispatches, what
    one op costs at the eager floor (µs), and the GEMM pace of each stack's best step's process (GFLOP/s of a 1024x1024
    float32 product: where the gap is in the work, how fast each framework's own products run on this machine). None
    where no outside-band setting has floors in both stacks."""
    import pandas as pd

    records = []
    for _, row in outside_band(table[table["impl"] == "ours"]).iterrows():
        setting_of = {key: row[key] for key in ("model", "machine", "device", "threads", "dtype")}
        document = select(rows, sweep="document", status="ok", task="train_step", impl="ours", **setting_of)
        floor = floor_rows(select(rows, status="ok", impl="ours", **setting_of), document)
        if set(floor["stack"]) != set(STACKS):
            continue
        steps = select(table, status="ok", impl="ours", **setting_of).groupby("stack")["median ms"].min()
        slower, faster = ("torch", "tf") if row["torch/TF"] > 1 else ("tf", "torch")
        floors = floor.groupby("stack")["median_ms"].min()
        record = {"model": row["model"], "machine": row["machine"], "threads": row["threads"], "torch/TF": row["torch/TF"]}
        record |= {f"{LABELS[stack]} ms": steps[stack] for stack in STACKS}
        record |= {f"floor {LABELS[stack]} ms": floors[stack] for stack in STACKS}
        record["slower floor / faster step"] = floors[slower] / steps[faster]
        record["floors' share of the gap"] = (floors[slower] - floors[faster]) / (steps[slower] - steps[faster])
        for stack in STACKS:
            eager, ran = floor[(floor["stack"] == stack) & (floor["mode"] == "eager")], document[document["stack"] == stack]
            record[f"ops {LABELS[stack]}"] = ran["ops"].max()
            record[f"µs/op {LABELS[stack]}"] = 1000 * (eager["median_ms"] / eager["ops"]).min() if len(eager) else np.nan
            record[f"GEMM GFLOP/s {LABELS[stack]}"] = _fastest_row(ran)["matmul_gflops"] if len(ran) else np.nan
        records.append(record)
    return pd.DataFrame(records) if records else None


def _speed_shown(numeric):
    """The speed table as printed: IQR as one "q25-q75" column, "failed" for the median of a failed row, why a row was
    disturbed ("ok": it was not; "-": its file measured no load), what ran in the CSV only."""
    shown = numeric.drop(columns=["q25 ms", "q75 ms", "status", "error", "ran"])
    shown["flag"] = [flag if isinstance(flag, str) and flag else "ok" if flag == "" else "-" for flag in numeric["flag"]]
    bounds = zip(numeric["q25 ms"], numeric["q75 ms"], strict=True)
    iqr = ["-" if math.isnan(low) or math.isnan(high) else f"{sig3(low)}–{sig3(high)}" for low, high in bounds]
    shown.insert(shown.columns.get_loc("median ms") + 1, "IQR ms", iqr)
    shown["median ms"] = shown["median ms"].astype(object).where(numeric["status"] == "ok", "failed")
    return shown


def scaling_table(rows, sweep: str):
    """ms per step against the size `sweep` varies (one column per size), per model/stack/mode/setting:
    numeric (failed: empty), and as printed (failed: "failed")."""
    import pandas as pd

    frame = with_document_point(rows, sweep)
    if frame.empty:
        return None, None
    size = SWEEP_SIZE[sweep]
    fixed = [name for name in SIZES if name != size and not (sweep == "seq_len" and name == "tgt_len")]
    index = ["model", "stack", "mode", "impl", "task", "device", "machine", "threads", "dtype", *fixed]
    frame = frame.drop_duplicates([*index, size], keep="last")
    cells = frame["median_ms"].astype(object).where(frame["status"] == "ok", "failed").rename("cell")
    shown = pd.concat([frame[[*index, size]], cells], axis=1).set_index([*index, size])["cell"].unstack(size)
    shown.columns = [f"{size} {value}" for value in shown.columns]
    shown = ordered(shown.reset_index(), index)
    numeric = shown.copy()
    numeric[shown.columns[len(index) :]] = shown[shown.columns[len(index) :]].apply(pd.to_numeric, errors="coerce")
    return numeric, shown


def with_document_point(rows, sweep: str):
    """The rows of `sweep` and, for what it varies, the document-size rows: the point a sweep skips."""
    import pandas as pd

    frame = rows[rows["sweep"] == sweep]
    same = ["model", "stack", "mode", "impl", "task", "machine", "device", "threads", "dtype"]
    document = rows[rows["sweep"] == "document"].merge(frame[same].drop_duplicates(), on=same)
    return frame if document.empty else pd.concat([frame, document], ignore_index=True)
