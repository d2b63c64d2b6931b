"""Reading the report's inputs: benchmark result files, the equality measurements and the training summaries;
what is unreadable is skipped and named in `missing`, never fatal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from shared import catalogue
from shared.tools.bench_results import SCHEMAS, schema_version, unknown_schema
from shared.tools.report.printing import ordered, rank_key
from shared.tools.report.schema import (
    BACKENDS,
    CHOICES,
    COLUMNS,
    EQUALITY_FIELDS,
    INTEGER_FIELDS,
    MODES,
    NUMBER_FIELDS,
    RECORD_FIELDS,
    ROW_FIELDS,
    RUN_KEY,
    SIZES,
    STACKS,
    SUMMARY_FIELDS,
    Inputs,
)
from shared.train import attention_samples


def read_inputs(results_dir, equality_path=None, training_dir=None, backend_paths=()) -> Inputs:
    """Read every input; what cannot be used is skipped and noted in `missing`."""
    missing: list[str] = []
    rows, environments = load_results(results_dir, missing)
    equality = load_equality(equality_path, missing)
    summaries = load_summaries(training_dir, missing)
    name = Path(equality_path).name if equality_path is not None else ""
    measured = [equality, *(load_equality(path, missing) for path in backend_paths)]
    backends = {found["backend"]: found for found in measured if found is not None}
    records = load_records(training_dir, missing)
    return Inputs(rows, environments, equality, name, summaries, missing, backends, records)


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


def is_number(value) -> bool:
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
        environment, schema = data["environment"], SCHEMAS[schema_version(data)]
        environments.append({**environment, "file": name})
        for index, row in enumerate(data["rows"]):
            problem = _row_problem(row, schema.ok_row_fields)
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
    """Why a parsed result file cannot be used, or None: one of a schema this suite does not read (bench_results.SCHEMAS:
    a newer bench's) is refused whole, by one line naming the file."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if unknown := unknown_schema(schema_version(data)):
        return unknown
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


def _row_problem(row, ok_row_fields: tuple[str, ...] = ()) -> str | None:
    """Why a benchmark row cannot be used (missing fields, unknown values), or None. `ok_row_fields`: what its file's
    schema says every successful row holds, besides ROW_FIELDS and a positive median_ms (bench_results.Schema)."""
    if not isinstance(row, dict):
        return "not a JSON object"
    absent = [name for name in ROW_FIELDS if row.get(name) is None]
    if row.get("status") == "ok":
        timed = is_number(row.get("median_ms")) and row["median_ms"] > 0
        absent += ([] if timed else ["median_ms"]) + [name for name in ok_row_fields if name not in row]
    if absent:
        return f"missing field(s) {', '.join(absent)}"
    if not isinstance(row["model"], str) or not isinstance(row["dtype"], str):
        return "model and dtype must be text"
    allowed = {**CHOICES, "mode": MODES.get(row["stack"], ())}
    bad = [f"{name}={row[name]!r}" for name, values in allowed.items() if row[name] not in values]
    bad += [f"{name}={row[name]!r}" for name in INTEGER_FIELDS if not (is_number(row[name]) and row[name] == int(row[name]))]
    return f"unknown value(s) {', '.join(bad)}" if bad else None


def _record(row: dict, environment: dict, name: str) -> dict:
    """One row, flat, with its file's machine, matmul peak, creation time and commit."""
    record = {key: row.get(key) for key in (*ROW_FIELDS, *NUMBER_FIELDS)}
    record.update({key: int(row[key]) for key in INTEGER_FIELDS}, error=None if row.get("error") is None else str(row["error"]))
    record.update(disturbed=str(row.get("disturbed") or "") if "others_busy" in row else None, ran=path_text(row.get("path")))
    peak, profile = environment.get("matmul_gflops"), environment.get("profile")
    record.update(machine=environment["machine"], profile=str(profile or "-"), matmul_gflops=peak if is_number(peak) else None)
    return {
        **record,
        "created": str(environment.get("created") or ""),
        "commit": str(environment.get("commit") or "-"),
        "file": name,
    }


def path_text(path) -> str | None:
    """A row's `path` in a few words ("inductor, 2 graph breaks, allow_rnn off", "xla, cuDNN"); None: not recorded."""
    if not isinstance(path, dict):
        return None
    words = [str(path.get("compiler") or "eager")]
    if is_number(path.get("graph_breaks")):
        words.append(f"{int(path['graph_breaks'])} graph break{'s' * (path['graph_breaks'] != 1)}")
    if path.get("allow_rnn") is not None:
        words.append(f"allow_rnn {'on' if path['allow_rnn'] else 'off'}")
    words += [name for key, name in (("cudnn", "cuDNN"), ("cuda_graphs", "CUDA graphs")) if path.get(key) is True]
    return ", ".join(words)


def latest_counts(rows, keys: list[str]):
    """`rows`' GFLOP count per `keys`, from the newest row (by creation time, then file): the count of the code as it
    is, where runs of several commits sit side by side (the largest would keep an older, heavier form's count)."""
    newest_last = [column for column in ("created", "file") if column in rows]  # a bare table: its own order
    return rows.sort_values(newest_last, kind="stable").groupby(keys)["gflop"].last()


def _listing_twin_of_a_listing(row) -> bool:
    """Whether `row` times the listing of a model whose ours is the listing on the row's Keras backend (catalogue
    `listing_on`, the backend named by the mode: `jax-xla`): a twin timed by a run before ours took the listing's
    form there, which newer runs do not time (ratio 1.00x by construction), so no ratio pairs it with ours."""
    if row["impl"] != "as_written" or row["stack"] != "tf" or "-" not in str(row["mode"]):
        return False
    model = catalogue.CATALOGUE.get(row["model"])
    return model is not None and str(row["mode"]).split("-")[0] in model.listing_on


def _finish_rows(records: list[dict]):
    """The rows as a DataFrame: numbers as floats, re-runs of the same measurement reduced to the latest
    (by creation time, then file name), the missing TF work counts filled in, sorted."""
    import pandas as pd

    rows = pd.DataFrame(records, columns=list(COLUMNS))
    for name in (*NUMBER_FIELDS, "matmul_gflops"):
        rows[name] = pd.to_numeric(rows[name], errors="coerce").astype(float)
    rows = rows.sort_values(["created", "file"], kind="stable").drop_duplicates(RUN_KEY, keep="last")
    rows = rows[~rows.apply(_listing_twin_of_a_listing, axis=1)] if len(rows) else rows
    if len(rows):
        work = ["model", "impl", "task", *SIZES]
        counted = latest_counts(rows[(rows["stack"] == "torch") & rows["gflop"].notna()], work).rename("_counted")
        rows["gflop"] = rows["gflop"].fillna(rows.join(counted, on=work)["_counted"])
    return ordered(rows, [*RUN_KEY, "status"])


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
    return sorted(usable, key=lambda entry: (rank_key("model", entry["model"]), rank_key("dtype", entry.get("dtype"))))


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
    if "max_abs" in entry and not is_number(entry["max_abs"]):
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
    if not all(isinstance(data[name], str) for name in ("model", "stack", "dataset")) or not is_number(data["steps"]):
        return "model, stack and dataset must be text, steps a number"
    if not isinstance(data.get("final") or {}, dict):
        return "final is not a JSON object"
    return None


def load_records(training_dir, missing: list[str]) -> list[dict]:
    """The attention records in `training_dir/attention/` (shared.train.attention_samples), sorted by file name."""
    folder = Path(training_dir) / attention_samples.RECORDS_DIR if training_dir is not None else None
    records = []
    for path in sorted(folder.glob("*.json")) if folder is not None and folder.is_dir() else []:
        data, reason = _read_json(path)
        reason = reason or _record_problem(data)
        if reason:
            missing.append(f"attention record {path.name}: {reason}")
        else:
            records.append(data)
    return records


def _record_problem(data) -> str | None:
    """Why a parsed attention record cannot be drawn, or None."""
    if not isinstance(data, dict) or data.get("format") != attention_samples.FORMAT:
        return f"not an attention record (format {attention_samples.FORMAT})"
    absent = [name for name in RECORD_FIELDS if data.get(name) is None]
    if absent:
        return f"missing field(s) {', '.join(absent)}"
    for number, sentence in enumerate(data["sentences"]):
        try:
            shapes = {np.asarray(sentence["attention"][stack], dtype=np.float64).shape for stack in data["stacks"]}
            expected = (len(sentence["output"]), len(sentence["source"]))
        except (KeyError, TypeError, ValueError) as error:
            return f"sentence {number} is malformed ({error!r})"
        if shapes != {expected}:
            return f"sentence {number}: attention {sorted(shapes)}, but {expected[0]} output and {expected[1]} source tokens"
    return None
