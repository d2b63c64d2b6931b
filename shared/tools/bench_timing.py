"""Timing one group of bench cases in a stack process: each case built and warmed, all timed side by side, one row
each (its medians and quartiles, peak memory, FLOPs and ops, the path that ran, the load of other processes and the
machine's pace around it), and the progress line a row prints.

`bench` below is a stack's bench module (torch_impl.bench, tf_impl.bench), passed in by the caller that imported it.
"""

from __future__ import annotations

import dataclasses

from shared import catalogue
from shared.tools.bench_profiles import Case, Profile, keras_mode
from shared.tools.machine import (
    OthersMeter,
    disturbance,
    others_busy,
    paired_ratio,
    slow_phase,
    time_side_by_side,
    warm_up,
)
from shared.verify.fixtures import synthetic_batch


def measure_group(bench, stack: str, group: list[Case], profile: Profile, threads: int, device: str) -> list[dict]:
    """One row per case of `group`: each built and warmed in turn (its peak memory and execution path read after its
    warm-up), then all timed in turns. A case that fails is a result too (e.g. a mode the model cannot compile in)."""
    rows = [case_row(bench, stack, case, threads, device) for case in group]
    warmed = {}  # index in group -> (call, Warm, the row's measurements)
    for index, case in enumerate(group):
        try:
            warmed[index] = _warm_case(bench, case, profile, device)
        except Exception as error:
            rows[index] = _failed(rows[index], error)
    if not warmed:
        return rows
    try:
        load, pace = {"before": others_busy(profile.load_window_s)}, {"before": bench.pace_gflops(device)}
        during = OthersMeter.start()
        calls, warms = [call for call, _, _ in warmed.values()], [warm for _, warm, _ in warmed.values()]
        timings = time_side_by_side(calls, warms, profile.repeats, profile.big_repeats, profile.sample_s)
        samples = {group[index].impl: timing.pop("samples_ms") for index, timing in zip(warmed, timings, strict=True)}
        load |= {"during": during.stop(), "after": others_busy(profile.load_window_s)}
        pace["after"] = bench.pace_gflops(device)
    except Exception as error:
        return [_failed(row, error) if index in warmed else row for index, row in enumerate(rows)]
    for (index, (_, _, measured)), timing in zip(warmed.items(), timings, strict=True):
        case = group[index]
        tokens = case.sizes.batch * case.sizes.tgt_len
        rows[index] = {
            **rows[index],
            **timing,
            "tokens_per_s": tokens / (timing["median_ms"] / 1e3),
            **measured,
            "others_busy": load,
            "pace_gflops": pace,
            "disturbed": disturbance(timing, load),
            "timed_with": [other.impl for other in group if other is not case],
            **(_paired_speedup(samples) if case.impl == "ours" else {}),
            "status": "ok",
            "error": None,
        }
    return rows


def _paired_speedup(samples: dict[str, list[float]]) -> dict:
    """Ours's row's share of a side-by-side timing: as written over ours, round by round (machine.paired_ratio); {}
    where the listing was not timed beside it."""
    if "as_written" not in samples:
        return {}
    ratio = paired_ratio(samples["as_written"], samples["ours"])
    return {"paired_speedup": ratio["median"], "paired_speedup_q25": ratio["q25"], "paired_speedup_q75": ratio["q75"]}


def flag_slow_phases(rows: list[dict]) -> list[dict]:
    """`rows`, each timed in one of the machine's slow phases (its pace before and after it below the run's best by
    more than machine.PACE_LIMIT) flagged as disturbed, with the reason added to any it had."""
    paces = [max(row["pace_gflops"].values()) for row in rows if None not in row.get("pace_gflops", {None: None}).values()]
    best = max(paces, default=None)
    flagged = []
    for row in rows:
        reasons = [row.get("disturbed"), slow_phase(row.get("pace_gflops"), best)]
        flagged.append({**row, "disturbed": "; ".join(filter(None, reasons)) or None} if "disturbed" in row else row)
    return flagged


def _warm_case(bench, case: Case, profile: Profile, device: str) -> tuple:
    arrays = synthetic_batch(case.model, case.sizes)
    bench.start_case(device)
    call, execution_path = bench.make_call(case.model, case.task, case.impl, case.mode, arrays, case.sizes.tgt_len, device)
    warm = warm_up(call, profile.warmup)
    measured = {"peak_mem_mb": bench.peak_memory_mb(device), "gflop": _gflop(bench, case, arrays), "path": execution_path()}
    return (
        call,
        warm,
        {
            **measured,
            "ops": _ops(bench, case, arrays),
            **_compiled_cost(bench, case, arrays),
            **_op_times(bench, case, call, device),
        },
    )


def _op_times(bench, case: Case, call, device: str) -> dict:
    """Where a train step's time goes at the document's sizes, by the stack's profiler (`op_profile`: `product_ms`,
    `other_ms` and `product_ops` a call: torch eager, tf.function, XLA on TensorFlow and on JAX); {} for other cases. On
    the CPU only: each profile reads the host's ops (torch's and TensorFlow's CPU ops, XLA's CPU runtime), which on a
    GPU would be the launches, not the work."""
    if case.task != "train_step" or case.sweep != "document" or device != "cpu":
        return {}
    return bench.op_profile(call, case.mode) or {}


def _compiled_cost(bench, case: Case, arrays: dict) -> dict:
    """The compiler's own cost of a train step at the document's sizes (`compiled_gflop`, `compiled_mb`: the stack's
    `compiled_cost`, Keras on JAX jitted only); {} for other cases, or where the stack has no cost model."""
    if case.sweep != "document":
        return {}
    return bench.compiled_cost(case.model, case.task, case.impl, case.mode, arrays) or {}


def case_row(bench, stack: str, case: Case, threads: int, device: str) -> dict:
    """What a row says of its case before it is timed: the model, stack, mode (naming Keras's backend), impl, task, the
    process's device and threads, the dtype, the sweep and the sizes."""
    return {
        "model": case.model,
        "document": catalogue.get(case.model).document,
        "stack": stack,
        "mode": keras_mode(bench.backend(), case.mode) if stack == "tf" else case.mode,
        "impl": case.impl,
        "task": case.task,
        "device": device,
        "threads": threads,
        "dtype": "float32",
        "sweep": case.sweep,
        **dataclasses.asdict(case.sizes),
    }


def _failed(row: dict, error: Exception) -> dict:
    message = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
    return {**row, "status": "failed", "error": message}


_COUNTS: dict[tuple, float | None] = {}  # one count per (what, model, task, impl, sizes) and process: the modes share it


def _counted(what: str, case: Case, count):
    """`count()` once per case's work whatever its mode (FLOPs and ops do not depend on how a step is run)."""
    key = (what, case.model, case.task, case.impl, case.sizes)
    if key not in _COUNTS:
        _COUNTS[key] = count()
    return _COUNTS[key]


def _gflop(bench, case: Case, arrays: dict) -> float | None:
    return _counted("gflop", case, lambda: bench.count_gflop(case.model, case.task, case.impl, arrays, case.sizes.tgt_len))


def _ops(bench, case: Case, arrays: dict) -> int | None:
    """The ops one eager train step dispatches (the stack's `count_ops`), at the document's sizes and the floor's: with
    the floor's time, what one op costs the framework. None for other cases."""
    if case.task != "train_step" or case.sweep not in ("document", "floor"):
        return None
    return _counted("ops", case, lambda: bench.count_ops(case.model, case.impl, arrays))


def progress_line(row: dict) -> str:
    """The line a timed row prints: what ran, its sizes, its median and compile time, ours's ratio round by round."""
    what = f"{row['stack']:5s} {row['model']:26s} {row['task']:10s} {row['impl']:10s} {row['mode']:8s} {row['sweep']:8s}"
    sizes = f"B{row['batch']} S{row['src_len']} T{row['tgt_len']} x{row['threads']}"
    if row["status"] != "ok":
        return f"{what} {sizes}  FAILED {row['error']}"
    line = f"{what} {sizes}  {row['median_ms']:9.2f} ms  (compile {row['compile_s']:.1f} s)"
    if "paired_speedup" not in row:
        return line
    return (
        f"{line}  {row['paired_speedup']:.2f}x over as written ({row['paired_speedup_q25']:.2f}-{row['paired_speedup_q75']:.2f})"
    )
