"""The report's tables: the headline, equality (per dtype, per Keras backend, the README's model table), loss,
speed and scaling, each numeric (CSV) and as printed; the table of modes below the target is the FLOP-ceiling
diagnosis's (shared.tools.report.ceilings)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from shared import catalogue
from shared.core import moved
from shared.tools.report import ceilings, selection
from shared.tools.report.printing import markdown_table, ordered, rank_key, sig3
from shared.tools.report.schema import (
    BACKENDS,
    GPU_HEADLINE_COLUMNS,
    HEADLINE_COLUMNS,
    LABELS,
    RATIO_BAND,
    SETTING,
    SIZES,
    SPEED_COLUMNS,
    SPEEDUP_MODE,
    STACKS,
    SWEEP_SIZE,
    TASKS,
    Inputs,
)
from shared.tools.reproduction import document_figures


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
    tables.add("speedup_below_target", ceilings.below_target_table(inputs.rows, context))
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


def headline_table(rows, equality: dict | None):
    """One row per catalogue model: best-mode train-step times of both stacks and their ratio, the
    ours/as-written speed-ups (torch eager, TF tf.function), the float64 maximum and whether greedy ids agree."""
    import pandas as pd

    base = rows[(rows["task"] == "train_step") & (rows["sweep"] == "document")]
    context = selection.pick_context(base)
    picked, ceiling_of = selection.in_context(base, context), ceilings.flop_ceilings(rows)
    records = [_headline_record(spec, selection.select(picked, model=name), equality or {}, ceiling_of[name])
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
            modes = _best_modes(catalogue.get(name), selection.select(picked, model=name))
            records.append({"machine": machine, "model": name, **modes})
    return pd.DataFrame(records, columns=GPU_HEADLINE_COLUMNS)


def _best_modes(spec: catalogue.ModelSpec, rows) -> dict:
    """Each stack's best mode of ours, its time and ours/as-written in it; torch/TF; the lowest ratio over every mode."""
    record = {}
    for stack in STACKS:
        label, stack_rows = LABELS[stack], rows[rows["stack"] == stack]
        record[f"{label} ms"], record[f"{label} mode"] = _best(stack_rows[stack_rows["impl"] == "ours"])
        best = stack_rows[stack_rows["mode"] == record[f"{label} mode"]]
        record[f"ours/as-written {label}"] = 1.0 if not spec.hoists and len(best) else selection.speedup(best)
    record["torch/TF"] = record["torch ms"] / record["TF ms"]
    lowest = (1.0, "ours is the listing") if not spec.hoists else _lowest_speedup(rows)
    record["lowest ours/as-written"], record["lowest in"] = lowest
    return record


def _headline_record(spec: catalogue.ModelSpec, rows, equality: dict, ceiling: float) -> dict:
    """The headline row of one model from its rows in the headline setting and its FLOP ceiling (`ceilings.flop_ceilings`)."""
    record = {"model": spec.name, "document": spec.document}
    for stack in STACKS:
        label, stack_rows = LABELS[stack], rows[rows["stack"] == stack]
        record[f"{label} ms"], record[f"{label} mode"] = _best(stack_rows[stack_rows["impl"] == "ours"])
        record[f"ours/as-written {label}"] = selection.speedup(stack_rows[stack_rows["mode"] == SPEEDUP_MODE[stack]])
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
    ratios = [(selection.speedup(group), f"{LABELS[stack]} {mode}{_equal_within_spread(group)}")
              for (stack, mode), group in rows.groupby(["stack", "mode"])]  # fmt: skip
    return min([(ratio, where) for ratio, where in ratios if not math.isnan(ratio)], default=(math.nan, "-"))


def _equal_within_spread(rows) -> str:
    """Where ours is slower than as written but within the repeats' spread (equal, as measured): ", within the spread"
    where the round-by-round ratio's q75 reaches 1 (`selection.round_by_round`), ", IQRs overlap" where a row without it gives
    medians whose interquartile ranges overlap; "" otherwise."""
    paired = selection.round_by_round(rows)
    if not math.isnan(paired["median"]):
        return ", within the spread" if paired["median"] < 1 <= paired["q75"] else ""
    ok = rows[rows["status"] == "ok"].groupby("impl")[["median_ms", "q25_ms", "q75_ms"]].min()
    if set(ok.index) != {"ours", "as_written"} or ok.loc["ours", "median_ms"] <= ok.loc["as_written", "median_ms"]:
        return ""
    return ", IQRs overlap" if ok.loc["ours", "q25_ms"] <= ok.loc["as_written", "q75_ms"] else ""


def _best(rows) -> tuple[float, str | None]:
    """The fastest successful median and its mode; (nan, "failed") if every row failed, (nan, None) if none."""
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return math.nan, ("failed" if len(rows) else None)
    best = selection.fastest_row(ok)
    return float(best["median_ms"]), best["mode"]


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
        "beam BLEU": final.get("bleu_beam"),
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
    frame["sizes"] = [selection.sizes_text(*sizes) for sizes in zip(*(frame[name] for name in SIZES), strict=True)]
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
        document = selection.select(rows, sweep="document", status="ok", task="train_step", impl="ours", **setting_of)
        floor = ceilings.floor_rows(selection.select(rows, status="ok", impl="ours", **setting_of), document)
        if set(floor["stack"]) != set(STACKS):
            continue
        steps = selection.select(table, status="ok", impl="ours", **setting_of).groupby("stack")["median ms"].min()
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
            record[f"GEMM GFLOP/s {LABELS[stack]}"] = selection.fastest_row(ran)["matmul_gflops"] if len(ran) else np.nan
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


# the names that moved to ceilings.py and selection.py, kept here for one release (each use warns, naming its new place)
__getattr__ = moved.getattr_for(__name__)
