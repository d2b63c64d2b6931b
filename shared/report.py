"""The comparison report: speed of both stacks, their equality, and the reproduction runs, on one page.

`write_report` reads the benchmark result files (`<results_dir>/**/*.json`, one run each), the equality
file (`rosetta equality`'s measurements: maxima, greedy ids, loss curves, attention maps) and the training
summaries (`shared.reproduction`), and writes `README.md`, one CSV per table (`csv/`) and the figures
(`figures/`), all atomically. Nothing in the page depends on the clock, the folder it is written to or
the order files are listed in, so the same inputs give byte-identical README.md and CSV files.

An unreadable file, a file without rows, or a row without the fields it needs never stops the report:
it is skipped and listed under "Missing or unreadable results". pandas, matplotlib and tabulate are
imported inside the functions, so `import shared` stays numpy-only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shared import catalogue, plots, stacks
from shared.atomic import write_atomic
from shared.bench import ALL_MODES, STACK_MODES
from shared.reproduction import document_figures

STACKS, LABELS = stacks.STACKS, stacks.LABELS
MODES = STACK_MODES
# the mode the headline compares ours with as written in: how each stack's code usually runs (PyTorch
# eagerly, as the documents' listings; Keras in a tf.function, as the TF tutorial's train_step)
SPEEDUP_MODE = {"torch": "eager", "tf": "function"}
TASKS = ("train_step", "greedy")
CHOICES = {
    "stack": STACKS,
    "impl": ("ours", "as_written"),
    "task": TASKS,
    "device": ("cpu", "gpu"),
    "sweep": ("document", "seq_len", "batch"),
    "status": ("ok", "failed"),
}
SIZES = ("batch", "src_len", "tgt_len")
ROW_FIELDS = ("model", "stack", "mode", "impl", "task", "device", "threads", "dtype", "sweep", *SIZES, "status")
INTEGER_FIELDS = ("threads", "batch", "src_len", "tgt_len")
NUMBER_FIELDS = ("median_ms", "q25_ms", "q75_ms", "min_ms", "repeats", "compile_s", "tokens_per_s", "peak_mem_mb", "gflop")
FILE_FIELDS = ("machine", "profile", "matmul_gflops", "created", "file")  # taken from the row's file
COLUMNS = (*ROW_FIELDS, *NUMBER_FIELDS, "error", *FILE_FIELDS)
RUN_KEY = [name for name in COLUMNS if name not in (*NUMBER_FIELDS, "status", "error", *FILE_FIELDS[1:])]  # same measurement
CONTEXT = ("device", "machine", "threads", "dtype")  # one measurement setting (profiles only choose the cases)
SETTING = ["model", "machine", "device", "threads", "dtype", *SIZES]  # what two compared times share
SWEEP_SIZE = {"seq_len": "src_len", "batch": "batch"}  # the size a sweep varies
QUANTITIES = ("logits", "attention", "context", "loss", "grads", "greedy attention")
QUANTITIES += ("loss curve", "trained weights", "clipped steps")  # after training
ORDER = {
    "model": tuple(catalogue.CATALOGUE),
    "stack": STACKS,
    "mode": ALL_MODES,
    "impl": CHOICES["impl"],
    "task": TASKS,
    "device": CHOICES["device"],
    "dtype": ("float64", "float32"),
    "quantity": QUANTITIES,
}
RATIO_BAND = 1.25  # torch/TF best-mode ratios beyond this, either way, are listed
EQUALITY_FIELDS = {
    "outputs": ("model", "dtype", "quantity", "max_abs"),
    "greedy": ("model", "dtype", "tokens_equal"),
    "training": ("model", "dtype", "quantity", "max_abs"),
    "curves": ("model", "dtype", "torch", "tf"),
    "attention": ("model", "torch", "tf"),
}
SUMMARY_FIELDS = ("model", "stack", "dataset", "steps")
BACKENDS = dict(zip(catalogue.KERAS_BACKENDS, ("Keras on TensorFlow", "Keras on JAX", "Keras on torch"), strict=True))
NO_RESULTS = "No benchmark results: no readable result file was found."
NO_GPU = "No GPU results: no run on a machine with a GPU has been recorded."

# How each column is printed in the README (the CSV files keep the numbers); text passes through.
KINDS = {
    "threads": "int",
    "batch": "int",
    "src_len": "int",
    "tgt_len": "int",
    "steps": "int",
    "median ms": "sig3",
    "q25 ms": "sig3",
    "q75 ms": "sig3",
    "torch ms": "sig3",
    "TF ms": "sig3",
    "tokens/s": "int",
    "compile s": "f2",
    "peak MB": "int",
    "torch/TF": "ratio",
    "ours/as-written": "ratio",
    "ours/as-written torch": "ratio",
    "ours/as-written TF": "ratio",
    "mode/eager": "ratio",
    "% matmul peak": "pct",
    "max abs diff float64": "err",
    "final loss": "sig3",
    "final ppl": "f3",
    "token acc": "share",
    "seq acc": "share",
    "BLEU": "f1",
    "doc-protocol loss": "f3",
    "doc-protocol ppl": "f2",
}
FORMATS = {"err": "{:.1e}", "ratio": "{:.2f}x", "pct": "{:.1f}%", "int": "{:.0f}", "f1": "{:.1f}", "f2": "{:.2f}"}
FORMATS.update(f3="{:.3f}", f4="{:.4f}", text="{:g}")
HEADLINE_COLUMNS = ["model", "document", "torch ms", "torch mode", "TF ms", "TF mode", "torch/TF"]
HEADLINE_COLUMNS += ["ours/as-written torch", "ours/as-written TF", "max abs diff float64", "quantity", "greedy ids equal"]
SPEED_COLUMNS = {
    "model": "model",
    "stack": "stack",
    "mode": "mode",
    "impl": "impl",
    "device": "device",
    "machine": "machine",
    "threads": "threads",
    "dtype": "dtype",
    "sizes": "sizes",
    "median_ms": "median ms",
    "q25_ms": "q25 ms",
    "q75_ms": "q75 ms",
    "tokens_per_s": "tokens/s",
    "compile_s": "compile s",
    "peak_mem_mb": "peak MB",
    "torch/TF": "torch/TF",
    "ours/as-written": "ours/as-written",
    "mode/eager": "mode/eager",
    "% matmul peak": "% matmul peak",
    "status": "status",
    "error": "error",
}


@dataclass
class Inputs:
    """Everything read: the benchmark rows (one DataFrame), their files' environments, the equality
    measurements (None: no file), the training summaries (None: no folder) and the notes on what was
    missing or unreadable."""

    rows: object
    environments: list[dict]
    equality: dict | None
    equality_name: str
    summaries: list[dict] | None
    missing: list[str]
    backends: dict = field(default_factory=dict)  # Keras backend -> its equality measurements (TensorFlow's too)


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
        return [_markdown(self.shown[name], self.kinds[name]), ""] if name in self.shown else []


def write_report(results_dir, output_dir, *, equality_path=None, training_dir=None, backend_paths=()) -> dict:
    """Write the comparison report to `output_dir` (README.md, csv/<table>.csv, figures/*.png).

    Args:
        results_dir: the folder of benchmark result files (`**/*.json`); it may be missing.
        output_dir: where the report goes; created if needed.
        equality_path: the equality measurements (JSON); None or missing: "not measured".
        training_dir: the folder of training summaries (`*.json`); None: no loss section data.
        backend_paths: equality measurements on Keras's other backends (`rosetta equality --backend`).
    Returns:
        {"headline": the headline table as markdown, "tables": {name: DataFrame}, "missing": [notes],
        "models": the README's model table (markdown), a column per Keras backend}.
    """
    output = Path(output_dir)
    for folder in (output / "csv", output / "figures"):
        folder.mkdir(parents=True, exist_ok=True)
    inputs = read_inputs(results_dir, equality_path, training_dir, backend_paths)
    tables, context = build_tables(inputs)
    figures = write_figures(inputs, context, output / "figures")
    for name, table in tables.numeric.items():
        text = table.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        write_atomic(output / "csv" / f"{name}.csv", text.encode())
    write_atomic(output / "README.md", render_readme(inputs, tables, context, figures).encode())
    headline = _markdown(tables.shown["headline"])
    models = models_table(inputs.backends)
    return {"headline": headline, "tables": dict(tables.numeric), "missing": list(inputs.missing), "models": models}


# ---------------------------------------------------------------- reading


def read_inputs(results_dir, equality_path=None, training_dir=None, backend_paths=()) -> Inputs:
    """Read every input; what cannot be used is skipped and noted in `missing`."""
    missing: list[str] = []
    rows, environments = load_results(results_dir, missing)
    equality = load_equality(equality_path, missing)
    summaries = load_summaries(training_dir, missing)
    name = Path(equality_path).name if equality_path is not None else ""
    measured = [equality, *(load_equality(path, missing) for path in backend_paths)]
    backends = {found["backend"]: found for found in measured if found is not None}
    return Inputs(rows, environments, equality, name, summaries, missing, backends)


def _read_json(path: Path) -> tuple[object, str | None]:
    """The parsed content of `path`, or None and why it cannot be read (no absolute paths in the reason)."""
    try:
        return json.loads(path.read_bytes().decode("utf-8")), None
    except json.JSONDecodeError as error:
        return None, f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except OSError as error:
        return None, f"cannot be read ({error.strerror})"


def _is_number(value) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def load_results(results_dir, missing: list[str]):
    """The usable rows of every result file under `results_dir` as one DataFrame, and the files' environments."""
    root = Path(results_dir)
    records, environments = [], []
    paths = sorted(path for path in root.rglob("*.json") if path.is_file()) if root.is_dir() else []
    for path in paths:
        name = path.relative_to(root).as_posix()
        data, reason = _read_json(path)
        reason = reason or _results_file_problem(data)
        if reason:
            missing.append(f"{name}: {reason}")
            continue
        environment = data["environment"]
        environments.append({**environment, "file": name})
        for index, row in enumerate(data["rows"]):
            problem = _row_problem(row)
            if problem:
                missing.append(f"{name}, row {index}: {problem}")
            else:
                records.append(_record(row, environment, name))
    if not root.is_dir():
        missing.append(f"no benchmark results: the folder {root.name or str(root)} does not exist")
    elif not records:
        missing.append(f"no benchmark results: no usable row in any result file under {root.name or str(root)}")
    return _finish_rows(records), environments


def _results_file_problem(data) -> str | None:
    """Why a parsed result file cannot be used, or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("schema", 1) != 1:
        return f"schema {data['schema']!r} is not 1"
    absent = [key for key in ("environment", "rows") if key not in data]
    if absent:
        return f"lacks {' and '.join(absent)}"
    if not isinstance(data["environment"], dict) or not isinstance(data["environment"].get("machine"), str):
        return "its environment names no machine"
    if not isinstance(data["rows"], list) or not data["rows"]:
        return "no rows"
    if data["environment"].get("profile") == "smoke":
        return "smoke profile (the tests' shrunk sizes): not reported"
    return None


def _row_problem(row) -> str | None:
    """Why a benchmark row cannot be used (missing fields, unknown values), or None."""
    if not isinstance(row, dict):
        return "not a JSON object"
    absent = [name for name in ROW_FIELDS if row.get(name) is None]
    if row.get("status") == "ok" and not (_is_number(row.get("median_ms")) and row["median_ms"] > 0):
        absent.append("median_ms")
    if absent:
        return f"missing field(s) {', '.join(absent)}"
    if not isinstance(row["model"], str) or not isinstance(row["dtype"], str):
        return "model and dtype must be text"
    allowed = {**CHOICES, "mode": MODES.get(row["stack"], ())}
    bad = [f"{name}={row[name]!r}" for name, values in allowed.items() if row[name] not in values]
    bad += [f"{name}={row[name]!r}" for name in INTEGER_FIELDS if not (_is_number(row[name]) and row[name] == int(row[name]))]
    return f"unknown value(s) {', '.join(bad)}" if bad else None


def _record(row: dict, environment: dict, name: str) -> dict:
    """One row, flat, with its file's machine, matmul peak and creation time."""
    record = {key: row.get(key) for key in (*ROW_FIELDS, *NUMBER_FIELDS)}
    record.update({key: int(row[key]) for key in INTEGER_FIELDS}, error=None if row.get("error") is None else str(row["error"]))
    peak, profile = environment.get("matmul_gflops"), environment.get("profile")
    record.update(machine=environment["machine"], profile=str(profile or "-"), matmul_gflops=peak if _is_number(peak) else None)
    return {**record, "created": str(environment.get("created") or ""), "file": name}


def _finish_rows(records: list[dict]):
    """The rows as a DataFrame: numbers as floats, re-runs of the same measurement reduced to the latest
    (by creation time, then file name), the missing TF work counts filled in, sorted."""
    import pandas as pd

    rows = pd.DataFrame(records, columns=list(COLUMNS))
    for name in (*NUMBER_FIELDS, "matmul_gflops"):
        rows[name] = pd.to_numeric(rows[name], errors="coerce").astype(float)
    rows = rows.sort_values(["created", "file"], kind="stable").drop_duplicates(RUN_KEY, keep="last")
    if len(rows):
        work = ["model", "impl", "task", *SIZES]
        counted = rows[rows["stack"] == "torch"].groupby(work)["gflop"].max().rename("_counted")
        rows["gflop"] = rows["gflop"].fillna(rows.join(counted, on=work)["_counted"])
    return _ordered(rows, [*RUN_KEY, "status"])


def load_equality(path, missing: list[str]) -> dict | None:
    """The equality measurements, each section a list of usable entries sorted by model; None: not measured."""
    if path is None:
        return None
    path = Path(path)
    data, reason = _read_json(path) if path.is_file() else (None, "not found")
    if reason is None and not isinstance(data, dict):
        reason = "not a JSON object"
    if reason:
        missing.append(f"equality file {path.name}: {reason}")
        return None
    sections = {section: _section_entries(section, data.get(section), missing) for section in EQUALITY_FIELDS}
    backend = data.get("backend", "tensorflow")  # files before the backends were measured: TensorFlow's
    if backend not in BACKENDS:
        missing.append(f"equality file {path.name}: backend {backend!r} is not one of {', '.join(BACKENDS)}")
        return None
    return {**sections, "backend": backend, "failures": [str(f) for f in data.get("failures") or []]}


def _section_entries(section: str, entries, missing: list[str]) -> list[dict]:
    """The usable entries of one equality section, sorted by model and dtype."""
    entries = entries if isinstance(entries, list) else [entries] if entries else []
    usable = [entry for index, entry in enumerate(entries) if _usable_entry(section, index, entry, missing)]
    return sorted(usable, key=lambda entry: (_rank_key("model", entry["model"]), _rank_key("dtype", entry.get("dtype"))))


def _usable_entry(section: str, index: int, entry, missing: list[str]) -> bool:
    """Whether an equality entry is usable; if not, say why in `missing`."""
    problem = "not a JSON object" if not isinstance(entry, dict) else _entry_problem(section, entry)
    if problem:
        missing.append(f"equality file, {section} entry {index}: {problem}")
    return problem is None


def _entry_problem(section: str, entry: dict) -> str | None:
    """Why an equality entry (a dict) cannot be used, or None."""
    absent = [name for name in EQUALITY_FIELDS[section] if entry.get(name) is None]
    if absent:
        return f"missing field(s) {', '.join(absent)}"
    if not all(isinstance(entry[name], str) for name in ("model", "dtype", "quantity") if name in EQUALITY_FIELDS[section]):
        return "model, dtype and quantity must be text"
    if "max_abs" in entry and not _is_number(entry["max_abs"]):
        return f"max_abs={entry['max_abs']!r} is not a number"
    if "tokens_equal" in entry and not isinstance(entry["tokens_equal"], bool):
        return f"tokens_equal={entry['tokens_equal']!r} is not true or false"
    if section in ("curves", "attention"):
        return _pair_problem(entry, 1 if section == "curves" else 2)
    return None


def _pair_problem(entry: dict, ndim: int) -> str | None:
    """Why the entry's torch and tf arrays are not finite `ndim`-d arrays (the attention maps: of one shape)."""
    arrays = []
    for stack in STACKS:
        try:
            array = np.asarray(entry[stack], dtype=np.float64)
        except (TypeError, ValueError):
            return f"{stack} is not an array of numbers"
        if array.ndim != ndim or not array.size or not np.isfinite(array).all():
            return f"{stack} is not a non-empty finite {ndim}-d array"
        arrays.append(array)
    if ndim == 2 and arrays[0].shape != arrays[1].shape:
        return f"torch {arrays[0].shape} and tf {arrays[1].shape} differ in shape"
    return None


def load_summaries(training_dir, missing: list[str]) -> list[dict] | None:
    """The training summaries in `training_dir` (sorted by document, model, run, stack); None: not given."""
    if training_dir is None:
        return None
    folder = Path(training_dir)
    summaries = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data, reason = _read_json(path)
        if reason is None:
            reason = _summary_problem(data)
        if reason:
            missing.append(f"training summary {path.name}: {reason}")
        else:
            summaries.append(data)
    if not folder.is_dir():
        missing.append(f"training summaries: the folder {folder.name} does not exist")
    return summaries


def _summary_problem(data) -> str | None:
    """Why a parsed training summary cannot be used, or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    absent = [name for name in SUMMARY_FIELDS if data.get(name) is None]
    if absent:
        return f"missing field(s) {', '.join(absent)}"
    if not all(isinstance(data[name], str) for name in ("model", "stack", "dataset")) or not _is_number(data["steps"]):
        return "model, stack and dataset must be text, steps a number"
    if not isinstance(data.get("final") or {}, dict):
        return "final is not a JSON object"
    return None


# ---------------------------------------------------------------- ordering and printing


def _rank_key(column: str, value) -> str:
    """A sort key putting known values of `column` in their ORDER, unknown ones after, by name."""
    order = ORDER.get(column, ())
    return f"{order.index(value):04d}" if value in order else f"9999{value}"


def _rank(series):
    """sort_values key: ORDER ranks for the columns that have one, the values themselves otherwise."""
    if series.name not in ORDER:
        return series
    return series.map(lambda value: _rank_key(series.name, value))


def _ordered(frame, columns: list[str]):
    """`frame` sorted by `columns` (those it has), known values in ORDER; a fresh index."""
    present = [column for column in columns if column in frame.columns]
    return frame.sort_values(present, key=_rank, kind="stable").reset_index(drop=True)


def _sig3(value: float) -> str:
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
        return _sig3(value)
    if kind == "share":
        value, kind = 100 * value, "pct"
    return FORMATS[kind].format(value)


def _is_numeric(value) -> bool:
    """A number that a table cell right-aligns (not a bool, not text, not a missing value)."""
    return isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_) and not np.isnan(value)


def _escape(text) -> str:
    """A cell or header safe inside a markdown table."""
    return str(text).replace("|", "\\|")


def _markdown(frame, default: str = "text") -> str:
    """`frame` as a markdown table: cells printed by KINDS (else `default`), numbers right-aligned."""
    import pandas as pd

    kinds = [KINDS.get(column, default) for column in frame.columns]
    cells = {
        _escape(column): [_escape(_format(value, kind)) for value in frame[column]]
        for column, kind in zip(frame.columns, kinds, strict=True)
    }
    align = ["right" if any(_is_numeric(value) for value in frame[column]) else "left" for column in frame.columns]
    return pd.DataFrame(cells).to_markdown(index=False, disable_numparse=True, colalign=align)


# ---------------------------------------------------------------- tables


def build_tables(inputs: Inputs) -> tuple[Tables, dict | None]:
    """Every table of the report, and the setting (device, machine, threads, dtype) of the headline."""
    tables = Tables()
    headline, context = headline_table(inputs.rows, inputs.equality)
    tables.add("headline", headline)
    for name, table in equality_tables(inputs.equality).items():
        tables.add(name, table, kind="err")
    tables.add("equality_backends", backend_table(inputs.backends), kind="err")
    tables.add("loss", loss_table(inputs.summaries or []))
    for task in TASKS:
        tables.add(f"speed_{task}", *speed_table(inputs.rows, task))
    for sweep in SWEEP_SIZE:
        tables.add(f"scaling_{sweep}", *scaling_table(inputs.rows, sweep), kind="sig3")
    return tables, context


def _pick_context(rows) -> dict | None:
    """The setting with the most weight among `rows` that succeeded: CPU first, the most threads,
    float32, the most rows, then by machine name."""
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return None
    counts = ok.groupby(list(CONTEXT)).size()
    best = min(counts.items(), key=lambda item: _context_preference(dict(zip(CONTEXT, item[0], strict=True)), item[1]))
    return dict(zip(CONTEXT, best[0], strict=True))


def _context_preference(context: dict, rows: int) -> tuple:
    """Sort key of a setting with `rows` successful rows: the preferred one first."""
    device, threads, dtype = (context[name] for name in ("device", "threads", "dtype"))
    return device != "cpu", -threads, dtype != "float32", -rows, context["machine"]


def _select(frame, **values):
    """The rows of `frame` whose columns hold `values`."""
    mask = np.ones(len(frame), dtype=bool)
    for column, value in values.items():
        mask &= (frame[column] == value).to_numpy()
    return frame[mask]


def _in_context(rows, context: dict | None):
    """The rows measured in `context` (none if it is None)."""
    return rows.iloc[0:0] if context is None else _select(rows, **context)


def headline_table(rows, equality: dict | None):
    """One row per catalogue model: best-mode train-step times of both stacks and their ratio, the
    ours/as-written speed-ups (torch eager, TF tf.function), the float64 maximum and whether greedy ids agree."""
    import pandas as pd

    base = rows[(rows["task"] == "train_step") & (rows["sweep"] == "document")]
    context = _pick_context(base)
    picked = _in_context(base, context)
    records = [_headline_record(spec, _select(picked, model=name), equality or {}) for name, spec in catalogue.CATALOGUE.items()]
    return pd.DataFrame(records, columns=HEADLINE_COLUMNS), context


def _headline_record(spec: catalogue.ModelSpec, rows, equality: dict) -> dict:
    """The headline row of one model from its rows in the headline setting."""
    record = {"model": spec.name, "document": spec.document}
    for stack in STACKS:
        label, stack_rows = LABELS[stack], rows[rows["stack"] == stack]
        record[f"{label} ms"], record[f"{label} mode"] = _best(stack_rows[stack_rows["impl"] == "ours"])
        record[f"ours/as-written {label}"] = _speedup(stack_rows[stack_rows["mode"] == SPEEDUP_MODE[stack]])
    record["torch/TF"] = record["torch ms"] / record["TF ms"]
    return {**record, **_headline_equality(spec, equality)}


def _best(rows) -> tuple[float, str | None]:
    """The fastest successful median and its mode; (nan, "failed") if every row failed, (nan, None) if none."""
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return math.nan, ("failed" if len(rows) else None)
    best = ok.loc[ok["median_ms"].idxmin()]
    return float(best["median_ms"]), best["mode"]


def _speedup(rows) -> float:
    """as-written median / ours median among `rows` (nan unless both succeeded)."""
    medians = rows[rows["status"] == "ok"].groupby("impl")["median_ms"].min()
    return float(medians.get("as_written", math.nan) / medians.get("ours", math.nan))


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
        outputs = _ordered(outputs.merge(greedy, on=["model", "dtype"], how="outer"), ["model", "dtype"])
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
        {key for found in maxima.values() for key in found}, key=lambda k: (_rank_key("model", k[0]), _rank_key("dtype", k[1]))
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
    pivot = pivot[sorted(pivot.columns, key=lambda name: _rank_key("quantity", name))]
    pivot.columns.name = None
    return _ordered(pivot.reset_index(), ["model", "dtype"])


def _greedy_frame(entries: list[dict]):
    """Whether greedy ids agree, per model x dtype; None without entries."""
    import pandas as pd

    if not entries:
        return None
    frame = pd.DataFrame(entries, columns=["model", "dtype", "tokens_equal"])
    verdict = frame.groupby(["model", "dtype"])["tokens_equal"].all().rename("greedy ids equal").reset_index()
    return _ordered(verdict, ["model", "dtype"])


def loss_table(summaries: list[dict]):
    """One row per training summary: what ran, the final metrics, and the document's own figures."""
    import pandas as pd

    frame = pd.DataFrame([_loss_record(summary) for summary in summaries])
    return _ordered(frame, ["document", "model", "run", "stack", "device"]) if len(frame) else None


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
    frame["ours/as-written"] = np.where(frame["impl"] == "ours", as_written / median, np.nan)
    frame["_backend"] = frame["mode"].str.rpartition("-")[0]  # Keras's backend named in the mode ("jax-xla"), else ""
    eager = frame["mode"].str.rpartition("-")[2] == "eager"
    frame["mode/eager"] = _group_min(frame, [*SETTING, "stack", "_backend", "impl"], eager) / median  # same backend
    frame["% matmul peak"] = 100 * frame["gflop"] / (frame["median_ms"] / 1000) / frame["matmul_gflops"]
    frame["sizes"] = [f"{b}x{s}x{t}" for b, s, t in zip(frame["batch"], frame["src_len"], frame["tgt_len"], strict=True)]
    numeric = frame[list(SPEED_COLUMNS)].rename(columns=SPEED_COLUMNS).reset_index(drop=True)
    return numeric, _speed_shown(numeric)


def _speed_shown(numeric):
    """The speed table as printed: IQR as one "q25-q75" column, "failed" for the median of a failed row."""
    shown = numeric.drop(columns=["q25 ms", "q75 ms", "status", "error"])
    bounds = zip(numeric["q25 ms"], numeric["q75 ms"], strict=True)
    iqr = ["-" if math.isnan(low) or math.isnan(high) else f"{_sig3(low)}–{_sig3(high)}" for low, high in bounds]
    shown.insert(shown.columns.get_loc("median ms") + 1, "IQR ms", iqr)
    shown["median ms"] = shown["median ms"].astype(object).where(numeric["status"] == "ok", "failed")
    return shown


def scaling_table(rows, sweep: str):
    """ms per step against the size `sweep` varies (one column per size), per model/stack/mode/setting:
    numeric (failed: empty), and as printed (failed: "failed")."""
    import pandas as pd

    frame = _with_document_point(rows, sweep)
    if frame.empty:
        return None, None
    size = SWEEP_SIZE[sweep]
    fixed = [name for name in SIZES if name != size and not (sweep == "seq_len" and name == "tgt_len")]
    index = ["model", "stack", "mode", "impl", "task", "device", "machine", "threads", "dtype", *fixed]
    frame = frame.drop_duplicates([*index, size], keep="last")
    cells = frame["median_ms"].astype(object).where(frame["status"] == "ok", "failed").rename("cell")
    shown = pd.concat([frame[[*index, size]], cells], axis=1).set_index([*index, size])["cell"].unstack(size)
    shown.columns = [f"{size} {value}" for value in shown.columns]
    shown = _ordered(shown.reset_index(), index)
    numeric = shown.copy()
    numeric[shown.columns[len(index) :]] = shown[shown.columns[len(index) :]].apply(pd.to_numeric, errors="coerce")
    return numeric, shown


def _with_document_point(rows, sweep: str):
    """The rows of `sweep` and, for what it varies, the document-size rows: the point a sweep skips."""
    import pandas as pd

    frame = rows[rows["sweep"] == sweep]
    same = ["model", "stack", "mode", "impl", "task", "machine", "device", "threads", "dtype"]
    document = rows[rows["sweep"] == "document"].merge(frame[same].drop_duplicates(), on=same)
    return frame if document.empty else pd.concat([frame, document], ignore_index=True)


# ---------------------------------------------------------------- figures


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
    data = _select(_in_context(rows, context), task="train_step", sweep="document", impl="ours", status="ok")
    if data.empty:
        return []
    models = list(dict.fromkeys(data["model"]))
    present = set(zip(data["stack"], data["mode"], strict=True))
    series = [(stack, mode) for stack in STACKS for mode in MODES[stack] if (stack, mode) in present]
    width = 0.8 / len(series)
    figure = plots.blank_figure(max(6.0, 0.9 * len(models) + 2.0), 4.5)
    axes = figure.add_subplot()
    for index, (stack, mode) in enumerate(series):
        part = _select(data, stack=stack, mode=mode)
        positions = [models.index(model) + (index - (len(series) - 1) / 2) * width for model in part["model"]]
        axes.bar(positions, part["median_ms"], width, label=f"{LABELS[stack]} {mode}")
    axes.set_xticks(range(len(models)), models, rotation=30, ha="right")
    axes.set_yscale("log")
    axes.set_ylabel("ms per training step (median)")
    axes.set_title(_setting(context), fontsize="medium")
    axes.legend(fontsize="small")
    return [_save(figure, folder / "speed_train_step.png")]


def _seq_len_lines(rows, folder: Path) -> list[str]:
    """Lines per model/stack (in the mode each stack's sweep ran): train-step ms against the source length."""
    from matplotlib import colormaps

    sweep = _select(_with_document_point(rows, "seq_len"), task="train_step", impl="ours")
    context = _pick_context(sweep)
    data = _ordered(_select(_in_context(sweep, context), status="ok"), ["model", "stack", "mode", "src_len"])
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
    axes.set_title(_setting(context), fontsize="medium")
    axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return [_save(figure, folder / "cost_vs_seq_len.png")]


def _attention_maps(entries: list[dict], folder: Path) -> list[str]:
    """One heatmap file per model: torch, Keras and |torch - Keras| side by side (shared.plots)."""
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


# ---------------------------------------------------------------- README


def render_readme(inputs: Inputs, tables: Tables, context: dict | None, figures: list[ReportFigure]) -> str:
    """The README page, section by section."""
    sections = [
        _title_section(inputs),
        _headline_section(inputs, tables, context),
        _equality_section(inputs, tables),
        _loss_section(inputs, tables),
        _speed_section(inputs, tables),
        _scaling_section(inputs, tables),
        _figures_section(figures),
        _missing_section(inputs.missing),
        [f"CSV files (one per table above): {', '.join(f'`csv/{name}.csv`' for name in tables.numeric)}."],
    ]
    return "\n".join(line for section in sections for line in section) + "\n"


def _title_section(inputs: Inputs) -> list[str]:
    """Title, what was measured, and the machines the result files come from."""
    rows = inputs.rows
    lines = [
        "# PyTorch and TensorFlow/Keras, model by model",
        "",
        f"What was measured: the time of one training step and of greedy decoding of the {len(catalogue.CATALOGUE)} "
        f"catalogue models in both stacks ({len(rows)} benchmark rows from {len(inputs.environments)} result files), "
        "the largest differences between the two stacks' outputs, gradients and training curves, and the "
        "reproduction runs beside the figures their documents report.",
        "",
    ]
    machines = sorted({env["machine"] for env in inputs.environments})
    lines += ["Machines:", ""] if machines else ["Machines: none (no benchmark results).", ""]
    lines += [_machine_line(name, [env for env in inputs.environments if env["machine"] == name]) for name in machines]
    return lines + ([""] if machines else [])


def _values(environments: list[dict], key: str, form: str = "{}") -> str:
    """The distinct values of `key` over `environments`, numbers (printed by `form`) in order then text,
    comma-separated ("-" if none)."""
    found = {env.get(key) for env in environments if isinstance(env.get(key), str) or _is_number(env.get(key))}
    ordered = sorted(found, key=lambda value: (isinstance(value, str), 0 if isinstance(value, str) else value, str(value)))
    return ", ".join(value if isinstance(value, str) else form.format(value) for value in ordered) or "-"


def _machine_line(machine: str, environments: list[dict]) -> str:
    """One bullet: the machine's CPU, cores, GPU, stack versions, threads, commits and recording times."""
    versions = {f"{name} {value}" for env in environments for name, value in sorted((env.get("versions") or {}).items())}
    created = sorted({str(env["created"]) for env in environments if env.get("created")})
    recorded = " to ".join(dict.fromkeys([created[0], created[-1]])) if created else "-"
    return (
        f"- `{machine}`: {_values(environments, 'cpu')}, {_values(environments, 'cores')} cores, "
        f"GPU: {_values(environments, 'gpu') if any(env.get('gpu') for env in environments) else 'none'}; "
        f"stacks {_values(environments, 'stack')}; versions {', '.join(sorted(versions)) or '-'}; "
        f"threads {_values(environments, 'threads')}; commits {_values(environments, 'commit')}; "
        f"matmul peak {_values(environments, 'matmul_gflops', '{:.0f}')} GFLOP/s; recorded {recorded}."
    )


def _setting(context: dict) -> str:
    """A measurement setting in words: machine (device, threads, dtype)."""
    return "{machine} ({device}, threads {threads}, {dtype})".format(**context)


def _headline_section(inputs: Inputs, tables: Tables, context: dict | None) -> list[str]:
    """The headline table and the sentence saying which setting it shows."""
    if context is None:
        why = "no benchmark results" if inputs.rows.empty else "no successful train-step row at the documents' sizes"
        where = f"No train-step times: {why}."
    else:
        preferred = "a CPU at its highest thread count" if context["device"] == "cpu" else "a GPU (no CPU rows)"
        where = (
            f"Times are train-step medians (ms) at the documents' sizes, our implementation, best mode of each stack, "
            f"on {_setting(context)}: "
            f"{preferred}. torch/TF = torch ms / TF ms (above 1: torch slower); ours/as-written = as-written ms / "
            "ours ms, torch eager and TF tf.function (how each stack's code usually runs; above 1: ours faster)."
        )
    return ["## Headline", "", where, "", *tables.markdown("headline")]


def _equality_section(inputs: Inputs, tables: Tables) -> list[str]:
    """Max |torch - TF| per quantity and dtype, greedy verdicts, and training maxima."""
    lines = ["## Equality", ""]
    if inputs.equality is None:
        return [*lines, "Equality: not measured (no readable equality file).", ""]
    lines += [f"Max |torch - TF| per quantity on the golden fixtures, from `{inputs.equality_name}`.", ""]
    lines += tables.markdown("equality_outputs") or ["No output or greedy comparisons in the equality file.", ""]
    lines += ["### After training (both stacks from the same weights and batches)", ""]
    lines += tables.markdown("equality_training") or ["No training comparisons in the equality file.", ""]
    return lines + _backends_section(inputs, tables)


def _backends_section(inputs: Inputs, tables: Tables) -> list[str]:
    """The same comparisons with the Keras models on each Keras 3 backend, a column each, and their failures."""
    lines = ["### On each Keras 3 backend", ""]
    if "equality_backends" not in tables.numeric:
        return [*lines, "No backend measured.", ""]
    lines += [
        "The same tf_impl models with Keras on each backend (`rosetta equality --backend`): the largest |torch - "
        "Keras| over outputs, attention, loss, gradients, greedy attention and the 200-step training, per model.",
        "",
        *tables.markdown("equality_backends"),
    ]
    failed = [f"{BACKENDS[b]}: {failure}" for b, equality in inputs.backends.items() for failure in equality["failures"]]
    return lines + ([f"Failed: {'; '.join(failed)}.", ""] if failed else [])


def _loss_section(inputs: Inputs, tables: Tables) -> list[str]:
    """The reproduction runs' final metrics beside the documents' figures."""
    lines = ["## Loss", ""]
    if "loss" not in tables.numeric:
        return [*lines, "No training summaries.", ""]
    return [
        *lines,
        "Final metrics of each training run (teacher-forced loss and perplexity on the final split, greedy "
        "accuracies and BLEU); doc-protocol: the loss as the document computed the figure it reports.",
        "",
        *tables.markdown("loss"),
    ]


def _speed_section(inputs: Inputs, tables: Tables) -> list[str]:
    """Times per model/stack/mode/device/threads/impl, train step and greedy separately."""
    lines = ["## Speed", ""]
    if inputs.rows.empty:
        return [*lines, NO_RESULTS, ""]
    lines += [
        "Medians over repeats at the documents' sizes (batch x source x target length in `sizes`). torch/TF: the "
        "best mode of each stack, same machine, device and threads; ours/as-written: as-written ms / ours ms, "
        "same stack and mode; mode/eager: eager ms / this mode's ms (same backend); % matmul peak: the step's GFLOP "
        "per second over the machine's measured matmul GFLOP/s. A TF row whose mode starts with jax- or torch- ran "
        "Keras on that Keras 3 backend (`rosetta bench --keras-backend`); the other TF rows, on TensorFlow.",
        "",
    ]
    if not (inputs.rows["device"] == "gpu").any():
        lines += [NO_GPU, ""]
    for task in TASKS:
        name = f"speed_{task}"
        lines += [f"### {task}", ""]
        if name not in tables.numeric:
            lines += [f"No {task} rows at the documents' sizes.", ""]
            continue
        lines += [*tables.markdown(name), _outside_band(tables.numeric[name]), ""]
        lines += _failures(tables.numeric[name])
    return lines


def _outside_band(table) -> str:
    """The sentence listing the settings whose torch/TF best-mode ratio is beyond RATIO_BAND either way."""
    ratios = table.dropna(subset=["torch/TF"]).drop_duplicates([*SETTING[:-3], "sizes", "impl"])
    if ratios.empty:
        return "torch/TF: no setting was measured in both stacks."
    outside = ratios[(ratios["torch/TF"] > RATIO_BAND) | (ratios["torch/TF"] < 1 / RATIO_BAND)]
    where = "{0[model]} ({0[impl]}, {0[machine]} {0[device]}, threads {0[threads]}, {0[dtype]})"
    items = [f"{where.format(row)} {row['torch/TF']:.2f}x" for _, row in outside.iterrows()]
    return f"outside {RATIO_BAND}x: {'; '.join(items)}." if items else f"torch/TF: every best-mode ratio is within {RATIO_BAND}x."


def _failures(table) -> list[str]:
    """The failed rows of a speed table with their errors (nothing if none failed)."""
    failed = table[table["status"] == "failed"]
    where = "{0[model]} {0[stack]} {0[mode]} {0[impl]} ({0[machine]} {0[device]}, threads {0[threads]})"
    items = [f"{where.format(row)}: {row['error'] or 'no reason given'}" for _, row in failed.iterrows()]
    return [f"Failed: {'; '.join(items)}.", ""] if items else []


def _scaling_section(inputs: Inputs, tables: Tables) -> list[str]:
    """ms per step against the size each sweep varies."""
    lines = ["## Scaling", ""]
    if inputs.rows.empty:
        return [*lines, NO_RESULTS, ""]
    for sweep, size in SWEEP_SIZE.items():
        lines += [f"### {sweep} sweep: median ms per step against {size}", ""]
        lines += tables.markdown(f"scaling_{sweep}") or [f"No {sweep} sweep recorded.", ""]
    return lines


def _figures_section(figures: list[ReportFigure]) -> list[str]:
    """Each figure embedded by relative link, or the reason it was skipped."""
    lines = ["## Figures", ""]
    for figure in figures:
        lines += [f"### {figure.title}", ""]
        lines += [f"![{figure.title}](figures/{name})" for name in figure.files] or [f"Skipped: {figure.skipped}."]
        lines.append("")
    return lines


def _missing_section(missing: list[str]) -> list[str]:
    """What could not be read or used, if anything."""
    if not missing:
        return []
    return ["## Missing or unreadable results", "", *(f"- {note}" for note in missing), ""]
