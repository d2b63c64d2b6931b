"""`rosetta bench`: fair speed measurements of every catalogue model in both stacks.

Fairness (docs/DESIGN.md "Speed, fairly"): one stack per process, the thread count fixed before the
framework is imported and recorded, warm-up calls discarded, the first call's extra time reported
as compile/trace time, medians and quartiles over repeats, peak memory per case (the process's peak
RSS reset before each case on CPU, the framework's own peak counter on GPU), TF32 off on GPU. Each row says what
ran (`path`: cuDNN, the compiler, graph breaks, CUDA graphs) and how busy the other processes kept the CPU before,
during and after it (`others_busy`, in cores); `disturbed` names why a row's time cannot be trusted (load or
spread beyond shared.tools.machine's limits), and the report shows it.

A case is one (model, task, impl, mode, sizes): task `train_step` (forward, backward, global-norm
clip, Adam: the stack's `Trainer`) or `greedy` (greedy decoding of `tgt_len` steps, the compiled unit
being one decoder step); impl `ours` or `as_written` (the document's own per-step computation, built
with `as_written=True`). Each stack's `bench.py` builds the callables; this module orders the cases,
times them, and writes one JSON file per run under `reports/results/<machine>/`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from shared import catalogue, documents, stacks
from shared.io.atomic import write_atomic
from shared.specs import Sizes, TrainSpec
from shared.tools.machine import (
    IDLE_WINDOW_S,
    SAMPLE_S,
    OthersMeter,
    cpu_model,
    disturbance,
    git_commit,
    machine_slug,
    others_busy,
    paired_ratio,
    slow_phase,
    thread_environment,
    time_side_by_side,
    warm_up,
)
from shared.verify.fixtures import synthetic_batch

SCHEMA = 1
# Keras's modes on each Keras 3 backend: JAX's compiled step is XLA itself (jit); Keras's torch backend runs eagerly
KERAS_MODES = {"tensorflow": ("eager", "function", "xla"), "jax": ("eager", "xla"), "torch": ("eager",)}
# Keras's greedy decoding's modes on each backend: TensorFlow's compiles its step as a tf.function where asked; on JAX
# the contract jits the encoder and the step itself (Seq2SeqBase.inference_steps), so it runs as XLA whatever the mode
GREEDY_MODES = {**KERAS_MODES, "jax": ("xla",)}
ALL_MODES = ("eager", "compile", "cudagraph", "function", "xla")  # what --modes takes


def keras_mode(backend: str, mode: str) -> str:
    """A Keras row's mode, naming its backend unless TensorFlow: "xla", "jax-xla", "torch-eager"."""
    return mode if backend == "tensorflow" else f"{backend}-{mode}"


STACK_MODES = {
    "torch": ("eager", "compile", "cudagraph"),
    "tf": tuple(keras_mode(backend, mode) for backend, modes in KERAS_MODES.items() for mode in modes),
}
COMPILED_MODES = {"compile", "xla"}  # slow to build: the default profile runs them at one thread count
# torch's train step replayed as one CUDA graph (torch_impl.cuda_graphs): on a GPU, for the models of fixed-shape batches
GPU_MODES = {"cudagraph"}
BENCH_SPEC = TrainSpec(lr=1e-3, clip_norm=1.0)  # every train step: Adam and global-norm clipping, teacher forcing on
REVERSE_MODELS = tuple(name for name in catalogue.built() if catalogue.get(name).document == "001")


def document_sizes(name: str) -> Sizes:
    """The batch shape model `name` trains at in its document (shared.documents)."""
    return documents.get(catalogue.get(name).document).sizes


@dataclasses.dataclass(frozen=True)
class Profile:
    """What a bench run measures.

    Attributes:
        models: the catalogue models at their document sizes.
        threads: CPU thread counts, one process each.
        compiled_threads: the thread counts at which compiled modes (torch.compile, XLA) run.
        sweep_models: models also timed over `seq_lens` (at the document batch) and `batches`.
        as_written_modes: the modes in which the as-written baseline runs (per stack, the mode names).
        greedy: also time greedy decoding of the models that have it (those of variable-length data).
    """

    name: str
    models: tuple[str, ...]
    threads: tuple[int, ...]
    compiled_threads: tuple[int, ...]
    sweep_models: tuple[str, ...]
    seq_lens: tuple[int, ...] = (5, 10, 20, 40)
    batches: tuple[int, ...] = (8, 32, 128)
    as_written_modes: tuple[str, ...] = ALL_MODES  # the listing as the baseline of every mode
    modes: tuple[str, ...] | None = None  # only these modes (None: every mode of the stack)
    floor: bool = True  # also each model's train step at floor_sizes in every mode: its fixed cost
    greedy: bool = True
    tag: str = ""  # appended to the result file's name, for a run restricted to part of a profile
    warmup: int = 3
    repeats: int = 10
    big_repeats: int = 5  # for cases whose warm call takes over a second
    sample_s: float = SAMPLE_S  # each timed sample holds as many calls as last this long (machine.time_side_by_side)
    load_window_s: float = IDLE_WINDOW_S  # how long the load probes before and after each case watch


PROFILES = {
    "default": Profile(
        name="default",
        models=("additive_attention", *REVERSE_MODELS),
        threads=(1, 2),
        compiled_threads=(2,),
        sweep_models=("reverse_bahdanau", "reverse_luong_general"),
    ),
    "full": Profile(
        name="full",
        models=tuple(catalogue.built()),
        threads=(1, 2),
        compiled_threads=(2,),
        sweep_models=("reverse_bahdanau", "reverse_luong_general", "luong_general"),
    ),
    # what the report's headline reads, every model in one sitting: hours on 2 cores (the Intel host of 2026-11-27: torch
    # 16-48 minutes, Keras on TensorFlow 26-50, on JAX 13-14, as its phases went; the AMD host before it took 79 minutes
    # for torch alone)
    "headline": Profile(
        name="headline",
        models=tuple(catalogue.built()),
        threads=(2,),
        compiled_threads=(2,),
        sweep_models=(),
        greedy=False,
    ),
    # the first look (tox -e report-quick): one model of document 001 beside its listing in every mode at 2 threads, its
    # train step at the document's sizes alone, repeated less
    "quick": Profile(
        name="quick",
        models=("reverse_bahdanau",),
        threads=(2,),
        compiled_threads=(2,),
        sweep_models=(),
        floor=False,
        greedy=False,
        warmup=2,
        repeats=5,
        big_repeats=3,
    ),
    "smoke": Profile(  # tests: seconds, not minutes
        name="smoke",
        models=("reverse_bahdanau", "luong_dot"),
        threads=(1,),
        compiled_threads=(),
        sweep_models=(),  # a sweep is the same call at other sizes; each Keras case traces a tf.function (seconds)
        warmup=1,
        repeats=2,
        big_repeats=2,
        sample_s=0.0,  # one call a sample
        load_window_s=0.01,
        floor=False,
    ),
}


def floor_sizes(document: Sizes) -> Sizes:
    """The floor: the document's train step at batch 1. Its ops are the document step's, one for one (every decoder
    step's dispatch, the optimizer's per-variable work, Keras's train_on_batch plumbing), its arithmetic 1/B of it: its
    time is the step's fixed cost and little more. (Runs before 2026-11-27 timed ours's floor alone, at 2 source and 2
    target steps, which leaves out most of a 10-step loop's dispatch: the report prefers floors at the document's
    lengths.)"""
    return dataclasses.replace(document, batch=1)


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    task: str  # train_step | greedy
    impl: str  # ours | as_written
    mode: str
    sweep: str  # document | seq_len | batch | floor
    sizes: Sizes


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown bench profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]


def small_sizes(sizes: Sizes) -> Sizes:
    """Sizes for the smoke profile: the document's shape shrunk so a case takes milliseconds."""
    return Sizes(min(sizes.batch, 4), min(sizes.src_len, 6), min(sizes.tgt_len, 5))


def _tasks(name: str) -> tuple[str, ...]:
    return ("train_step", "greedy") if catalogue.get(name).variable_length else ("train_step",)


def _impls(name: str, stack: str, backend: str) -> tuple[str, ...]:
    """What is timed of model `name`: ours, and the listing as written where ours differs from it (not where ours is the
    listing on this Keras backend: `ModelSpec.listing_on`)."""
    spec = catalogue.get(name)
    is_listing = not spec.hoists or (stack == "tf" and backend in spec.listing_on)
    return ("ours",) if is_listing else ("ours", "as_written")


def _sweep_sizes(profile: Profile, name: str) -> list[tuple[str, Sizes]]:
    base = document_sizes(name)
    by_length = [("seq_len", Sizes(base.batch, n, n)) for n in profile.seq_lens if n != base.src_len]
    by_batch = [("batch", dataclasses.replace(base, batch=b)) for b in profile.batches if b != base.batch]
    return by_length + by_batch


def _runs(name: str, task: str, stack: str, backend: str, mode: str) -> bool:
    """Whether `mode` runs `task` of model `name`: Keras's greedy decoding in its backend's GREEDY_MODES; the CUDA
    graph mode trains the models of fixed-shape batches (a graph replays one shape, and packing reads lengths on
    the host)."""
    if task == "greedy" and stack == "tf":
        return mode in GREEDY_MODES[backend]
    if mode in GPU_MODES:
        return task == "train_step" and not catalogue.get(name).variable_length
    return True


def process_modes(stack: str, backend: str) -> tuple[str, ...]:
    """The modes one bench process runs: torch's, or Keras's on its backend (plain names: eager, xla...)."""
    return KERAS_MODES[backend] if stack == "tf" else STACK_MODES[stack]


def cases(profile: Profile, stack: str, threads: int, device: str = "cpu", backend: str = "tensorflow") -> list[Case]:
    """Every case of `profile` for one stack process (compiled modes only at `compiled_threads` on CPU); `backend`:
    Keras's, for the tf stack."""
    compiled_here = device != "cpu" or threads in profile.compiled_threads
    modes = [m for m in process_modes(stack, backend) if compiled_here or m not in COMPILED_MODES]
    modes = [m for m in modes if (profile.modes is None or m in profile.modes) and (device != "cpu" or m not in GPU_MODES)]
    found = []
    for name in profile.models:
        document = document_sizes(name) if profile.name != "smoke" else small_sizes(document_sizes(name))
        for task in _tasks(name) if profile.greedy else ("train_step",):
            for mode in modes:
                if not _runs(name, task, stack, backend, mode):
                    continue
                timed = _impls(name, stack, backend) if mode in profile.as_written_modes and task == "train_step" else ("ours",)
                found += [Case(name, task, impl, mode, "document", document) for impl in timed]
                if profile.floor and task == "train_step":  # each impl's, side by side as at the document's sizes
                    found += [Case(name, task, impl, mode, "floor", floor_sizes(document)) for impl in timed]
        if name in profile.sweep_models:
            for mode in [m for m in modes if m in ("eager", "function")][-1:]:  # the best uncompiled mode
                for sweep, sizes in _sweep_sizes(profile, name):
                    found += [Case(name, "train_step", impl, mode, sweep, sizes) for impl in _impls(name, stack, backend)]
    return found


# --- one stack process ---------------------------------------------------------------------------


def measure(stack: str, profile: Profile, threads: int, results_dir, progress=print, resume: bool = False,
            time_box_s: float | None = None) -> Path:  # fmt: skip
    """Time every case of `profile` in `stack` (imported here, after the thread count is fixed); write
    the run's JSON file atomically under `results_dir` (see `result_path`) and return its path. After each group of
    cases the rows so far are written to the file's `partial_path`, which a killed run leaves behind and `resume`
    continues: its groups that ran are kept, the others timed. Past `time_box_s` no group is started: the result file
    holds what was timed (its environment's `stopped` says so) and the partial file stays for `resume`."""
    if stack not in STACK_MODES:
        raise ValueError(f"unknown stack {stack!r}; known: {', '.join(STACK_MODES)}")
    bench = stacks.import_module(stack, "bench")
    device = bench.configure(threads)
    environment = _environment(bench, stack, profile, threads, device)
    found = cases(profile, stack, threads, device, bench.backend())
    if not found:
        gpu_only = ", ".join(sorted(GPU_MODES))
        raise ValueError(f"nothing to time in the {stack} bench on the {device} at {threads} thread(s): profile "
                         f"{profile.name}{profile.tag} has no case here (the {gpu_only} mode runs on a GPU only)")  # fmt: skip
    output = result_path(results_dir, environment)
    partial = partial_path(output)
    kept = resumed_rows(partial, environment) if resume else {}
    if kept:
        progress(f"bench: resuming {partial.name}: {len(kept)} rows kept")
    rows, groups, started = [], side_by_side(found), time.monotonic()
    for index, group in enumerate(groups):
        if index and time_box_s is not None and time.monotonic() - started > time_box_s:
            environment["stopped"] = f"its time box of {time_box_s:g} s ended it after {index} of {len(groups)} groups"
            progress(f"bench: {environment['stopped']}; --resume continues it")
            break
        keys = [_case_key(_row(bench, stack, case, threads, device)) for case in group]
        if all(key in kept for key in keys):  # every case of the group ran and timed: kept as timed together
            rows += [kept[key] for key in keys]
            continue
        rows += _measure_cases(bench, stack, group, profile, threads, device)
        _write_results(partial, environment, rows)  # as timed: the slow phases are flagged against the whole run's pace
        for row in rows[-len(group) :]:
            progress(_progress_line(row))
    _write_results(output, environment, flag_slow_phases(rows))
    if "stopped" not in environment:  # a stopped run keeps its partial file for --resume
        partial.unlink(missing_ok=True)
    return output


def partial_path(output: Path) -> Path:
    """Where a run writes its rows as it goes: beside its result file, named so the report does not read it."""
    return output.with_name(output.name + ".partial")


def resumed_rows(partial: Path, environment: dict) -> dict[tuple, dict]:
    """The rows of a killed run's partial file that timed (a failed case is timed again), by case; none if there
    is no such file. ValueError if its run differs from this one (another commit or machine)."""
    if not partial.is_file():
        return {}
    data = json.loads(partial.read_text())
    theirs = data.get("environment", {})
    for field in RESUME_FIELDS:
        if theirs.get(field) != environment[field]:
            raise ValueError(f"{partial}: cannot resume it: its {field} is {theirs.get(field)!r}, this run's "
                             f"{environment[field]!r}; run without --resume to time every case afresh")  # fmt: skip
    return {_case_key(row): row for row in data["rows"] if row.get("status") == "ok"}


RESUME_FIELDS = ("machine", "stack", "backend", "device", "threads", "profile", "part", "commit")  # a run's identity
CASE_FIELDS = ("model", "task", "impl", "mode", "sweep", "batch", "src_len", "tgt_len")  # a case's, in a row


def _case_key(row: dict) -> tuple:
    return tuple(row[field] for field in CASE_FIELDS)


def _write_results(path: Path, environment: dict, rows: list[dict]) -> None:
    """A result file of `rows`, written atomically."""
    payload = {"schema": SCHEMA, "environment": environment, "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(payload, indent=1, allow_nan=False) + "\n").encode())


def _environment(bench, stack: str, profile: Profile, threads: int, device: str) -> dict:
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


def side_by_side(found: list[Case]) -> list[list[Case]]:
    """`found` in groups timed together: each `ours` case with its `as_written` twin (same model, task, mode and
    sizes), so their ratio is measured side by side (machine.time_side_by_side); every other case alone."""
    twins = {_twin_key(case): case for case in found if case.impl == "as_written"}
    ours = {_twin_key(case) for case in found if case.impl == "ours"}
    groups = []
    for case in found:
        if case.impl == "ours":
            groups.append([case, twins[_twin_key(case)]] if _twin_key(case) in twins else [case])
        elif _twin_key(case) not in ours:
            groups.append([case])
    return groups


def _twin_key(case: Case) -> tuple:
    return case.model, case.task, case.mode, case.sweep, case.sizes


def _measure_cases(bench, stack: str, group: list[Case], profile: Profile, threads: int, device: str) -> list[dict]:
    """One row per case of `group`: each built and warmed in turn (its peak memory and execution path read after its
    warm-up), then all timed in turns. A case that fails is a result too (e.g. a mode the model cannot compile in)."""
    rows = [_row(bench, stack, case, threads, device) for case in group]
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


def _row(bench, stack: str, case: Case, threads: int, device: str) -> dict:
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


def _progress_line(row: dict) -> str:
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


# --- the orchestrator ----------------------------------------------------------------------------


def restrict(profile: Profile, models=None, modes=None) -> Profile:
    """`profile` over `models` and `modes` only (unknown names raise ValueError); the result file's name says so."""
    if models:
        unknown = sorted(set(models) - set(catalogue.built()))
        if unknown:
            raise ValueError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(catalogue.built())}")
        sweep = tuple(m for m in profile.sweep_models if m in models)
        profile = dataclasses.replace(profile, models=tuple(models), sweep_models=sweep, tag=profile.tag + _models_tag(models))
    if modes:
        unknown = sorted(set(modes) - set(ALL_MODES))
        if unknown:
            raise ValueError(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(ALL_MODES)}")
        profile = dataclasses.replace(profile, modes=tuple(modes), tag=profile.tag + "-" + "-".join(modes))
    return profile


def run(profile_name: str, stacks: list[str], results_dir, threads: list[int] | None = None, models=None, modes=None,
        progress=print, keras_backend: str | None = None, resume: bool = False,
        time_box_s: float | None = None) -> int:  # fmt: skip
    """One child process per (stack, thread count), each writing its own result file; how many ran. `keras_backend`:
    the tf stack's Keras 3 backend (default: KERAS_BACKEND as set, else TensorFlow); `resume`: each child continues
    the partial file a killed run of it left; `time_box_s`: each child's time box (`measure`)."""
    profile = restrict(get_profile(profile_name), models, modes)
    unknown = sorted(set(stacks) - set(STACK_MODES))
    if unknown:
        raise ValueError(f"unknown stack(s) {', '.join(unknown)}; known: {', '.join(STACK_MODES)}")
    runs = 0
    for stack in stacks:
        for count in threads or profile.threads:
            progress(f"bench: {stack}, {count} thread(s), profile {profile.name}")
            argv = [sys.executable, "-m", "shared.tools.bench", stack, "--threads", str(count), "--profile", profile.name]
            argv += ["--results", str(results_dir)] + (["--models", ",".join(models)] if models else [])
            argv += (["--modes", ",".join(modes)] if modes else []) + (["--resume"] if resume else [])
            argv += ["--time-box", str(time_box_s)] if time_box_s is not None else []
            env = {"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ, **thread_environment(count)}  # quiet TF unless asked
            env |= {"KERAS_BACKEND": keras_backend} if keras_backend else {}
            started = time.time()
            if _run_child(argv, env) != 0:
                raise RuntimeError(
                    f"the {stack} bench process failed; its result file was not written{_kept(results_dir, started)}"
                )
            runs += 1
    return runs


# What the frameworks' native libraries write to stderr that no bench user acts on (their warnings and errors pass):
# absl's notice that it logs before being set up and absl's INFO lines (TensorFlow's oneDNN notice at import, before
# TF_CPP_MIN_LOG_LEVEL applies), and the start and stop markers torch's profiler (kineto) writes whatever its log level
NATIVE_CHATTER = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    r"|I\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\] "  # absl's INFO line: before absl is set up, its time is the epoch's
    r"|USDT:\S+ \S+ \d+:\d+ \w+\.cpp:\d+\] profiler_(start|stop)$"
)


def is_chatter(line: str) -> bool:
    """Whether `line` (a line of stderr) is NATIVE_CHATTER."""
    return NATIVE_CHATTER.match(line.rstrip("\r\n")) is not None


def _run_child(argv: list[str], env: dict) -> int:
    """Run a bench process; its return code. Its stderr is passed on line by line as it comes, less NATIVE_CHATTER
    (all of it where TF_CPP_MIN_LOG_LEVEL=0 asks for TensorFlow's INFO lines): read here to its end, so a crash's
    last lines are shown too."""
    keep_all = env.get("TF_CPP_MIN_LOG_LEVEL") == "0"
    with subprocess.Popen(argv, env=env, stderr=subprocess.PIPE) as child:
        try:
            for line in child.stderr:
                text = line.decode(errors="replace")
                if keep_all or not is_chatter(text):
                    sys.stderr.write(text)
                    sys.stderr.flush()
        except BaseException:  # Ctrl-C or a closed stderr: the child does not outlive this process
            child.kill()
            raise
    return child.returncode


@contextlib.contextmanager
def native_stderr_filtered():
    """Within it, what this process writes to stderr's file descriptor (where native libraries write) is held in a
    temporary file, then passed on less NATIVE_CHATTER: for short calls into a framework's native code (a profiler)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()  # Python's own lines of the block, in order with the native ones
                os.dup2(saved, 2)
                held.seek(0)
                kept = [line for line in held.read().decode(errors="replace").splitlines(True) if not is_chatter(line)]
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
    finally:
        os.close(saved)


def _kept(results_dir, since: float) -> str:
    """Where a failed child's timed groups are (its partial file, written since `since`), and how to go on; "" if none."""
    root = Path(results_dir)
    written = [path for path in root.rglob("*.json.partial") if path.stat().st_mtime >= since] if root.is_dir() else []
    if not written:
        return ""
    return f" (the groups it timed are in {written[0]}: the same command with --resume continues from them)"


def result_path(results_dir, environment: dict) -> Path:
    """`<results_dir>/<machine>/<stack>-<device>-t<threads>-<profile>.json`: one file per run and machine; Keras on a
    backend other than TensorFlow names it after the stack (`tf-jax-gpu-...`)."""
    stack = catalogue.stack_label(environment["stack"], environment.get("backend"))
    name = f"{stack}-{environment['device']}-t{environment['threads']}-{environment['profile']}"
    return Path(results_dir) / environment["machine"] / f"{name}{environment.get('part', '')}.json"


MODELS_TAG_CHARS = 120  # a result file's name lists its models up to this long (a file name holds 255 bytes)


def _models_tag(models) -> str:
    """The part of a result file's name that says which models it holds: their names, or where they would make the
    name too long for a file system (every model named: 200 characters), their count and a digest of their names."""
    joined = "-".join(models)
    if len(joined) <= MODELS_TAG_CHARS:
        return "-" + joined
    return f"-{len(models)}-models-{hashlib.sha1(joined.encode()).hexdigest()[:8]}"


def _names(text: str | None) -> list[str] | None:
    return text.split(",") if text else None


def main(argv: list[str] | None = None) -> int:
    """The child: `python -m shared.tools.bench STACK --threads N --profile P --results DIR [--models a,b]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shared.tools.bench")
    parser.add_argument("stack", choices=list(STACK_MODES))
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--results", required=True)
    parser.add_argument("--models")
    parser.add_argument("--modes")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--time-box", type=float)
    args = parser.parse_args(argv)
    report = lambda line: print(line, flush=True)  # noqa: E731
    try:
        profile = restrict(get_profile(args.profile), _names(args.models), _names(args.modes))
        path = measure(args.stack, profile, args.threads, args.results, report, args.resume, args.time_box)
    except ValueError as error:  # a bad request: one line (the parent adds that its file was not written)
        print(f"rosetta bench: {error}", file=sys.stderr, flush=True)
        return 2
    print(f"bench: wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
