"""`rosetta bench`: fair speed measurements of every catalogue model in both stacks.

Fairness (docs/DESIGN.md "Speed, fairly"): one stack per process, the thread count fixed before the
framework is imported and recorded, warm-up calls discarded, the first call's extra time reported
as compile/trace time, medians and quartiles over repeats, peak memory per case (the process's peak
RSS reset before each case on CPU, the framework's own peak counter on GPU), TF32 off on GPU. Each row says what
ran (`path`: cuDNN, the compiler, graph breaks, CUDA graphs) and how busy the other processes kept the CPU before,
during and after it (`others_busy`, in cores); `disturbed` names why a row's time cannot be trusted (load or
spread beyond shared.tools.machine's limits), and the report shows it.

This module is the command: `run` starts one child process per (stack, thread count), and each child (`main`)
`measure`s its stack, the one place that imports a stack's `bench.py`. What is timed: shared.tools.bench_profiles;
timing a group of cases: shared.tools.bench_timing; the result files: shared.tools.bench_results.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from shared import stacks
from shared.core import moved
from shared.tools import bench_profiles, bench_results, bench_timing, native_stderr
from shared.tools.machine import thread_environment

# --- one stack process ---------------------------------------------------------------------------


def measure(stack: str, profile: bench_profiles.Profile, threads: int, results_dir, progress=print, resume: bool = False,
            time_box_s: float | None = None) -> Path:  # fmt: skip
    """Time every case of `profile` in `stack` (imported here, after the thread count is fixed); write
    the run's JSON file atomically under `results_dir` (bench_results.result_path) and return its path. After each group
    of cases the rows so far are written to the file's `partial_path`, which a killed run leaves behind and `resume`
    continues: its groups that ran are kept, the others timed. Past `time_box_s` no group is started: the result file
    holds what was timed (its environment's `stopped` says so) and the partial file stays for `resume`."""
    if stack not in bench_profiles.STACK_MODES:
        raise ValueError(f"unknown stack {stack!r}; known: {', '.join(bench_profiles.STACK_MODES)}")
    bench = stacks.import_module(stack, "bench")
    device = bench.configure(threads)
    environment = bench_results.run_environment(bench, stack, profile, threads, device)
    found = bench_profiles.cases(profile, stack, threads, device, bench.backend())
    if not found:
        gpu_only = ", ".join(sorted(bench_profiles.GPU_MODES))
        raise ValueError(f"nothing to time in the {stack} bench on the {device} at {threads} thread(s): profile "
                         f"{profile.name}{profile.tag} has no case here (the {gpu_only} mode runs on a GPU only)")  # fmt: skip
    output = bench_results.result_path(results_dir, environment)
    partial = bench_results.partial_path(output)
    kept = bench_results.resumed_rows(partial, environment) if resume else {}
    if kept:
        progress(f"bench: resuming {partial.name}: {len(kept)} rows kept")
    rows, groups, started = [], bench_profiles.side_by_side(found), time.monotonic()
    for index, group in enumerate(groups):
        if index and time_box_s is not None and time.monotonic() - started > time_box_s:
            environment["stopped"] = f"its time box of {time_box_s:g} s ended it after {index} of {len(groups)} groups"
            progress(f"bench: {environment['stopped']}; --resume continues it")
            break
        keys = [bench_results.case_key(bench_timing.case_row(bench, stack, case, threads, device)) for case in group]
        if all(key in kept for key in keys):  # every case of the group ran and timed: kept as timed together
            rows += [kept[key] for key in keys]
            continue
        rows += bench_timing.measure_group(bench, stack, group, profile, threads, device)
        bench_results.write_results(partial, environment, rows)  # as timed: slow phases flagged against the whole run's pace
        for row in rows[-len(group) :]:
            progress(bench_timing.progress_line(row))
    bench_results.write_results(output, environment, bench_timing.flag_slow_phases(rows))
    if "stopped" not in environment:  # a stopped run keeps its partial file for --resume
        partial.unlink(missing_ok=True)
    return output


# --- the orchestrator ----------------------------------------------------------------------------


def run(profile_name: str, stacks: list[str], results_dir, threads: list[int] | None = None, models=None, modes=None,
        progress=print, keras_backend: str | None = None, resume: bool = False,
        time_box_s: float | None = None) -> int:  # fmt: skip
    """One child process per (stack, thread count), each writing its own result file; how many ran. `keras_backend`:
    the tf stack's Keras 3 backend (default: KERAS_BACKEND as set, else TensorFlow); `resume`: each child continues
    the partial file a killed run of it left; `time_box_s`: each child's time box (`measure`)."""
    profile = bench_profiles.restrict(bench_profiles.get_profile(profile_name), models, modes)
    unknown = sorted(set(stacks) - set(bench_profiles.STACK_MODES))
    if unknown:
        raise ValueError(f"unknown stack(s) {', '.join(unknown)}; known: {', '.join(bench_profiles.STACK_MODES)}")
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


def _run_child(argv: list[str], env: dict) -> int:
    """Run a bench process; its return code. Its stderr is passed on line by line as it comes, less the native chatter
    (shared.tools.native_stderr; all of it where TF_CPP_MIN_LOG_LEVEL=0 asks for TensorFlow's INFO lines): read here to
    its end, so a crash's last lines are shown too."""
    keep_all = env.get("TF_CPP_MIN_LOG_LEVEL") == "0"
    with subprocess.Popen(argv, env=env, stderr=subprocess.PIPE) as child:
        try:
            for line in child.stderr:
                text = line.decode(errors="replace")
                if keep_all or not native_stderr.is_chatter(text):
                    sys.stderr.write(text)
                    sys.stderr.flush()
        except BaseException:  # Ctrl-C or a closed stderr: the child does not outlive this process
            child.kill()
            raise
    return child.returncode


def _kept(results_dir, since: float) -> str:
    """Where a failed child's timed groups are (its partial file, written since `since`), and how to go on; "" if none."""
    root = Path(results_dir)
    written = [path for path in root.rglob("*.json.partial") if path.stat().st_mtime >= since] if root.is_dir() else []
    if not written:
        return ""
    return f" (the groups it timed are in {written[0]}: the same command with --resume continues from them)"


def _names(text: str | None) -> list[str] | None:
    return text.split(",") if text else None


def main(argv: list[str] | None = None) -> int:
    """The child: `python -m shared.tools.bench STACK --threads N --profile P --results DIR [--models a,b]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shared.tools.bench")
    parser.add_argument("stack", choices=list(bench_profiles.STACK_MODES))
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
        profile = bench_profiles.restrict(bench_profiles.get_profile(args.profile), _names(args.models), _names(args.modes))
        path = measure(args.stack, profile, args.threads, args.results, report, args.resume, args.time_box)
    except ValueError as error:  # a bad request: one line (the parent adds that its file was not written)
        print(f"rosetta bench: {error}", file=sys.stderr, flush=True)
        return 2
    print(f"bench: wrote {path}", flush=True)
    return 0


# the names that moved to the modules above, kept here for one release (each use warns, naming its new place); named,
# not __name__: the child runs this module as __main__
__getattr__ = moved.getattr_for("shared.tools.bench")

if __name__ == "__main__":
    sys.exit(main())
