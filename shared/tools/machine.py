"""The machine a benchmark runs on: timing a call fairly (warm-up, medians, quartiles), the machine's matmul
peak, its CPU, name and commit, the process's peak memory, the variables that fix thread pools, and how busy the
other processes kept the CPU while a case ran (a benchmark under load measures the load, not the model)."""

from __future__ import annotations

import math
import os
import platform
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SAMPLE_S = 0.05  # each timed sample lasts at least this long: a millisecond step timed one call at a time measures the scheduler
MAX_CALLS_PER_SAMPLE = 1000


def time_calls(fn, warmup: int, repeats: int, big_repeats: int, sample_s: float = SAMPLE_S) -> dict:
    """Call `fn` once (first call: compile/trace), `warmup - 1` more times, then time `repeats` samples.

    A case whose second call takes over a second is warm after it: `big_repeats` samples follow.
    """
    timing = time_side_by_side([fn], [warm_up(fn, warmup)], repeats, big_repeats, sample_s)[0]
    del timing["samples_ms"]  # the samples pair with another implementation's; alone, the quartiles say it all
    return timing


@dataclass(frozen=True)
class Warm:
    """How a callable's warm-up went: its first call (compile/trace included) and its second (warm) call."""

    first_s: float
    call_s: float

    @property
    def big(self) -> bool:
        """A call takes over a second: fewer samples, one call each."""
        return self.call_s > 1.0

    def calls_per_sample(self, sample_s: float) -> int:
        """How many calls one timed sample holds so that it lasts `sample_s` (at least one, at most MAX_CALLS_PER_SAMPLE)."""
        return min(max(1, math.ceil(sample_s / max(self.call_s, 1e-9))), MAX_CALLS_PER_SAMPLE)


def warm_up(fn, warmup: int) -> Warm:
    """Call `fn` `warmup` times (at least twice; twice only when its second call takes over a second)."""
    started = time.perf_counter()
    fn()
    first = time.perf_counter() - started
    started = time.perf_counter()
    fn()
    warm = Warm(first, time.perf_counter() - started)
    for _ in range(0 if warm.big else max(warmup - 2, 0)):
        fn()
    return warm


def time_side_by_side(fns: list, warms: list[Warm], repeats: int, big_repeats: int, sample_s: float = SAMPLE_S) -> list[dict]:
    """Time warm callables in turns, one sample each a round, the order reversed every other round (A B, B A, ...),
    so a drift of the machine (its clock, its caches, another process) falls on all of them alike: the ratio of two
    implementations measured side by side. A sample is as many calls as last `sample_s` (Warm.calls_per_sample), its
    time per call the sample's mean: a millisecond step timed one call at a time spreads with the scheduler's jitter.
    `big_repeats` rounds when any call takes over a second. Each timing also holds its samples in round order
    (`samples_ms`): the k-th of two implementations' were taken next to each other (`paired_ratio`)."""
    rounds = big_repeats if any(warm.big for warm in warms) else repeats
    numbers = [warm.calls_per_sample(sample_s) for warm in warms]
    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(rounds):
        order = range(len(fns)) if round_ % 2 == 0 else reversed(range(len(fns)))
        for index in order:
            started = time.perf_counter()
            for _ in range(numbers[index]):
                fns[index]()
            times[index].append((time.perf_counter() - started) / numbers[index])
    return [
        {**_timing(samples, warm, number), "samples_ms": [sample * 1e3 for sample in samples]}
        for samples, warm, number in zip(times, warms, numbers, strict=True)
    ]


def paired_ratio(numerators_ms: list[float], denominators_ms: list[float]) -> dict:
    """The ratio of two implementations timed side by side, round by round (`time_side_by_side`'s `samples_ms`): the
    median and quartiles of numerator / denominator over the rounds. Each round's two samples were taken within a
    tenth of a second of each other, so a slow phase of the machine (seconds long on a shared VM) slows both and
    leaves their ratio; the ratio of the two medians carries it whenever the phases fall unevenly on the samples."""
    ratios = [numerator / denominator for numerator, denominator in zip(numerators_ms, denominators_ms, strict=True)]
    median = statistics.median(ratios)
    q25, _, q75 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else (median,) * 3
    return {"median": median, "q25": q25, "q75": q75}


def _timing(times: list[float], warm: Warm, calls_per_sample: int) -> dict:
    median = statistics.median(times)
    q25, _, q75 = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else (median,) * 3
    return {
        "median_ms": median * 1e3,
        "q25_ms": q25 * 1e3,
        "q75_ms": q75 * 1e3,
        "min_ms": min(times) * 1e3,
        "repeats": len(times),
        "calls_per_sample": calls_per_sample,
        "compile_s": max(warm.first_s - median, 0.0),
    }


MATMUL_SIZE = {"cpu": 1024, "gpu": 8192}  # the square float32 product that measures a machine's peak
PACE_SIZE = 128  # a product small enough that waking the framework's threads is much of its time (machine.slow_phase)
PACE_REPEATS = 20
PACE_LIMIT = 0.85  # a case timed while the pace stayed below this share of the run's best is flagged


def matmul_rate(product, n: int, repeats: int = 10) -> float:
    """GFLOP/s of `product()` (one n x n matmul that waits for its result): median of `repeats` after 3 warm-ups."""

    def once() -> float:
        started = time.perf_counter()
        product()
        return time.perf_counter() - started

    for _ in range(3):
        once()
    return 2 * n**3 / statistics.median(once() for _ in range(repeats)) / 1e9


PROFILED_CALLS = 3  # the calls a case's op profile covers (`op_split`): its times are their mean


def op_split(ops: dict, is_product, calls: int) -> dict[str, float]:
    """A profiler's record per op type (`ops`: {op type: (self time in microseconds, runs)} over `calls` calls) split
    into the matrix products (`is_product(op type)`: the work the FLOP ceiling counts) and every other op, a call:
    `product_ms`, `other_ms`, and `product_ops`, the products run. Where ours hoists products out of a loop, the first
    and the third fall; the second says what its other ops cost. The count is the program's, where the times move with
    the host's load."""
    product = [record for op, record in ops.items() if is_product(op)]
    product_us, every_us = sum(us for us, _ in product), sum(us for us, _ in ops.values())
    return {
        "product_ms": product_us / calls / 1e3,
        "other_ms": (every_us - product_us) / calls / 1e3,
        "product_ops": sum(runs for _, runs in product) / calls,
    }


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, or the text `cpuinfo`), else platform's description. A name
    without a part number (a virtual machine's "AMD EPYC") gets the CPU's family and model numbers: two hosts sold
    under that one name ran this suite at different speeds and rounded float64 sums differently (docs/measurements.md),
    so their results must not share a folder (`machine_slug`)."""
    path = Path("/proc/cpuinfo")
    if cpuinfo is None and path.is_file():
        cpuinfo = path.read_text()
    first_cpu = (cpuinfo or "").split("\n\n")[0].splitlines()
    fields = {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in first_cpu if ":" in line)}
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine()
    if re.search(r"\d", name) or "cpu family" not in fields:
        return name
    return f"{name} (family {fields['cpu family']} model {fields.get('model', '?')})"


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
    """Variables that fix a framework's thread pools before it is imported (XLA_FLAGS: whether JAX's CPU client splits
    a product over threads; TensorFlow's two pools of `threads` each, as tf_impl/keras_compat/backends.set_threads).
    XLA has no flag for its pool's size: it takes the CPUs the process may run on (backends.set_threads pins a JAX
    process to `threads` of them; the bare `intra_op_parallelism_threads=N` often passed for it is no flag, and XLA's
    parser stopped there, dropping every flag after it)."""
    count = str(threads)
    xla = f"--xla_cpu_multi_thread_eigen={str(threads > 1).lower()}"
    return {
        "OMP_NUM_THREADS": count,
        "MKL_NUM_THREADS": count,
        "TF_NUM_INTRAOP_THREADS": count,
        "TF_NUM_INTEROP_THREADS": count,
        "XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), xla])),
    }


# ---- the load of other processes ----

OTHERS_BUSY_LIMIT = 0.25  # cores the other processes may keep busy before a case counts as disturbed
SPREAD_LIMIT = 0.25  # the IQR as a share of the median beyond which a case counts as disturbed
IDLE_WINDOW_S = 0.1  # how long the probes before and after a case watch the machine while this process waits


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy ticks of the whole machine, ticks of this process and its waited-for children) from /proc; None elsewhere."""
    try:
        machine = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    idle = machine[3] + (machine[4] if len(machine) > 4 else 0)  # idle and iowait
    busy = sum(machine[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
    return busy, sum(int(field) for field in own[11:15])  # utime stime cutime cstime


@dataclass
class OthersMeter:
    """Cores the other processes kept busy between `OthersMeter.start()` and `stop()`: the machine's busy ticks less
    this process's own, over the wall time (None where /proc is absent)."""

    ticks: tuple[int, int] | None
    started: float

    @classmethod
    def start(cls) -> OthersMeter:
        return cls(_cpu_ticks(), time.perf_counter())

    def stop(self) -> float | None:
        now, seconds = _cpu_ticks(), time.perf_counter() - self.started
        if self.ticks is None or now is None or seconds <= 0:
            return None
        others = (now[0] - self.ticks[0]) - (now[1] - self.ticks[1])
        return max(others, 0) / os.sysconf("SC_CLK_TCK") / seconds


def others_busy(window_s: float = IDLE_WINDOW_S) -> float | None:
    """Cores the other processes keep busy while this one waits `window_s` (the probe before and after a case)."""
    meter = OthersMeter.start()
    time.sleep(window_s)
    return meter.stop()


def slow_phase(pace: dict | None, best: float | None) -> str | None:
    """Why a case ran in one of the machine's slow phases, or None. `pace`: the framework's GFLOP/s on a PACE_SIZE
    product just before and just after the case (None where the stack has no probe: a GPU, Keras); `best`: the run's
    highest. On a shared virtual machine, waking a framework's second thread costs more in some phases (seconds long,
    no other process busy): a millisecond step of small ops and this product then run slower while the load probes see
    nothing (docs/measurements.md).
    Flagged where both probes fall below PACE_LIMIT of the best (one slow probe alone may be noise)."""
    if not pace or best is None or any(value is None for value in pace.values()):
        return None
    share = max(pace.values()) / best
    return (
        f"slow phase: a {PACE_SIZE}x{PACE_SIZE} matmul ran at {share:.0%} of this run's best pace" if share < PACE_LIMIT else None
    )


def disturbance(timing: dict, load: dict) -> str | None:
    """Why a case's time cannot be trusted, or None: other processes busy before, during or after it (`load`:
    cores, `others_busy` and `OthersMeter`), or a spread of its repeats beyond SPREAD_LIMIT of the median."""
    reasons = [f"{when}: other processes kept {cores:.2f} cores busy" for when, cores in load.items()
               if cores is not None and cores > OTHERS_BUSY_LIMIT]  # fmt: skip
    spread = (timing["q75_ms"] - timing["q25_ms"]) / timing["median_ms"] if timing["median_ms"] > 0 else 0.0
    if spread > SPREAD_LIMIT:
        reasons.append(f"spread: IQR {spread:.0%} of the median")
    return "; ".join(reasons) or None
