"""The bench's result files: their schema versions (what a file of each holds, for the report and --resume), their
names, the environment a run records, the atomic write, and the partial file a killed run leaves for --resume.

One JSON file per run, `{"schema": SCHEMA, "environment": {...}, "rows": [...]}`, under `<results>/<machine>/`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
from pathlib import Path

import numpy as np

from shared import catalogue
from shared.io.atomic import write_atomic
from shared.tools.bench_profiles import Profile
from shared.tools.machine import cpu_model, git_commit, machine_slug


@dataclasses.dataclass(frozen=True)
class Schema:
    """What a result file of one version holds: in words, and the fields each successful row has beyond a case's own
    (the report's ROW_FIELDS) and `median_ms`."""

    holds: str
    ok_row_fields: tuple[str, ...] = ()


SCHEMA = 2  # the version this bench writes
# Every version a reader takes: a file of another (a newer bench's) is refused, naming it. What a version may lack is
# read by the presence of the field or by the row's sizes, never by the file's date.
SCHEMAS = {
    1: Schema(
        "rows as the bench wrote them while fields were added under one version: past a case's own fields, status and "
        "median_ms, any field may be absent (the round-by-round ratio paired_speedup*, the op profile product_ms, "
        "other_ms and product_ops, the compiled_* costs, the load and pace probes, the path that ran); floors may be of "
        "ours alone at 2 source and 2 target steps; torch's FLOP count of nn.LSTM may be missing"
    ),
    2: Schema(
        "every field the bench writes, on each row where it applies: each successful row its timing, memory, work counts, "
        "path, load and pace probes and its side-by-side partners (ok_row_fields); ours timed beside its listing "
        "paired_speedup*; a profiled step product_ms, other_ms and product_ops; a costed compiled step compiled_*; floors "
        "of ours and the listing at the document's lengths; torch's FLOP count with nn.LSTM's layers",
        ok_row_fields=("q25_ms", "q75_ms", "min_ms", "repeats", "calls_per_sample", "compile_s", "tokens_per_s",
                       "peak_mem_mb", "gflop", "ops", "path", "others_busy", "pace_gflops", "disturbed", "timed_with"),
    ),
}  # fmt: skip


def schema_version(data: dict):
    """The schema version a parsed result file states (a file without one: 1, the first)."""
    return data.get("schema", 1)


def unknown_schema(version) -> str | None:
    """Why a file of schema `version` cannot be read here (SCHEMAS does not list it: a newer bench's), or None."""
    if version in SCHEMAS:
        return None
    return f"schema {version!r} is not one this suite reads ({', '.join(map(str, SCHEMAS))}): a newer bench wrote it?"


def result_path(results_dir, environment: dict) -> Path:
    """`<results_dir>/<machine>/<stack>-<device>-t<threads>-<profile>.json`: one file per run and machine; Keras on a
    backend other than TensorFlow names it after the stack (`tf-jax-gpu-...`)."""
    stack = catalogue.stack_label(environment["stack"], environment.get("backend"))
    name = f"{stack}-{environment['device']}-t{environment['threads']}-{environment['profile']}"
    return Path(results_dir) / environment["machine"] / f"{name}{environment.get('part', '')}.json"


def partial_path(output: Path) -> Path:
    """Where a run writes its rows as it goes: beside its result file, named so the report does not read it."""
    return output.with_name(output.name + ".partial")


RESUME_FIELDS = ("machine", "stack", "backend", "device", "threads", "profile", "part", "commit")  # a run's identity
CASE_FIELDS = ("model", "task", "impl", "mode", "sweep", "batch", "src_len", "tgt_len")  # a case's, in a row


def resumed_rows(partial: Path, environment: dict) -> dict[tuple, dict]:
    """The rows of a killed run's partial file that timed (a failed case is timed again), by case; none if there
    is no such file. ValueError if its run differs from this one (another schema, commit or machine)."""
    if not partial.is_file():
        return {}
    data = json.loads(partial.read_text())
    theirs = data.get("environment", {})
    differences = [("schema", schema_version(data), SCHEMA)]
    differences += [(field, theirs.get(field), environment[field]) for field in RESUME_FIELDS]
    for field, their, ours in differences:
        if their != ours:
            raise ValueError(f"{partial}: cannot resume it: its {field} is {their!r}, this run's {ours!r}; run without "
                             "--resume to time every case afresh")  # fmt: skip
    return {case_key(row): row for row in data["rows"] if row.get("status") == "ok"}


def case_key(row: dict) -> tuple:
    """The case a row timed (CASE_FIELDS), as a key."""
    return tuple(row[field] for field in CASE_FIELDS)


def write_results(path: Path, environment: dict, rows: list[dict]) -> None:
    """A result file of `rows`, written atomically."""
    payload = {"schema": SCHEMA, "environment": environment, "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(payload, indent=1, allow_nan=False) + "\n").encode())


def run_environment(bench, stack: str, profile: Profile, threads: int, device: str) -> dict:
    """What a run's file records of where it ran: the machine, the stack's versions and threads, the commit, the time,
    the profile and the machine's matmul peak. `bench`: the stack's bench module."""
    gpu = bench.gpu_name()
    cores = os.cpu_count() or 1
    return {
        "machine": machine_slug(cpu_model(), cores, gpu),
        "cpu": cpu_model(),
        "cores": cores,
        "gpu": gpu,
        "device": device,
        "stack": stack,
        "backend": bench.backend(),
        "versions": {"python": platform.python_version(), "numpy": np.__version__, **bench.versions()},
        "threads": threads,
        "thread_settings": bench.thread_settings(),
        "commit": git_commit(),
        "created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "profile": profile.name,
        "part": profile.tag,
        "matmul_gflops": bench.matmul_gflops(device),
    }
