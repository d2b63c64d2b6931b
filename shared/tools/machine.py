"""The machine a benchmark runs on: timing a call fairly (warm-up, medians, quartiles), the machine's matmul
peak, its CPU, name and commit, the process's peak memory, and the variables that fix thread pools."""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path


def time_calls(fn, warmup: int, repeats: int, big_repeats: int) -> dict:
    """Call `fn` once (first call: compile/trace), `warmup - 1` more times, then time `repeats` calls.

    A case whose second call takes over a second is warm after it: `big_repeats` timed calls follow.
    """
    started = time.perf_counter()
    fn()
    first = time.perf_counter() - started
    started = time.perf_counter()
    fn()
    big = time.perf_counter() - started > 1.0
    for _ in range(0 if big else max(warmup - 2, 0)):
        fn()
    times = []
    for _ in range(big_repeats if big else repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    q25, _, q75 = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else (median,) * 3
    return {
        "median_ms": median * 1e3,
        "q25_ms": q25 * 1e3,
        "q75_ms": q75 * 1e3,
        "min_ms": min(times) * 1e3,
        "repeats": len(times),
        "compile_s": max(first - median, 0.0),
    }


MATMUL_SIZE = {"cpu": 1024, "gpu": 8192}  # the square float32 product that measures a machine's peak


def matmul_rate(product, n: int) -> float:
    """GFLOP/s of `product()` (one n x n matmul that waits for its result): median of 10 after 3 warm-ups."""

    def once() -> float:
        started = time.perf_counter()
        product()
        return time.perf_counter() - started

    for _ in range(3):
        once()
    return 2 * n**3 / statistics.median(once() for _ in range(10)) / 1e9


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else platform's description."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_slug(cpu: str, cores: int, gpu: str | None) -> str:
    """A folder name for one machine: the GPU's name when there is one, else the CPU's, with the core count."""
    words = re.sub(r"\((r|tm)\)|cpu|processor|@.*$", "", (gpu or cpu).lower())
    slug = re.sub(r"[^a-z0-9]+", "-", words).strip("-")
    return f"gpu-{slug}" if gpu else f"cpu-{slug}-{cores}c"


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def reset_peak_rss() -> None:
    """Reset the kernel's high-water mark of this process's RSS (Linux `clear_refs` 5); no-op elsewhere."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_mb() -> float | None:
    """This process's peak RSS since the last reset (VmHWM), in MiB; None where /proc is absent."""
    status = Path("/proc/self/status")
    if not status.is_file():
        return None
    for line in status.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def thread_environment(threads: int) -> dict[str, str]:
    """Variables that fix a framework's thread pools before it is imported (XLA_FLAGS: JAX's CPU client)."""
    count = str(threads)
    xla = f"--xla_cpu_multi_thread_eigen={str(threads > 1).lower()} intra_op_parallelism_threads={count}"
    return {
        "OMP_NUM_THREADS": count,
        "MKL_NUM_THREADS": count,
        "TF_NUM_INTRAOP_THREADS": count,
        "TF_NUM_INTEROP_THREADS": "1",
        "XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), xla])),
    }
