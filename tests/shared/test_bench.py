"""`rosetta bench` without a framework: profiles, cases, timing statistics, environment, result paths, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shared import catalogue, cli
from shared.specs import Sizes
from shared.tools import bench, bench_profiles, bench_results, bench_timing, machine
from shared.verify.fixtures import synthetic_batch


def test_the_default_profile_covers_the_reverse_task_and_the_attention_layer_in_both_stacks():
    profile = bench_profiles.get_profile("default")
    for stack in bench_profiles.STACK_MODES:
        two = bench_profiles.cases(profile, stack, threads=2)
        assert {c.model for c in two} == set(profile.models)
        assert {c.mode for c in two} == set(bench_profiles.process_modes(stack, "tensorflow")) - bench_profiles.GPU_MODES
        assert {c.impl for c in two if c.sweep == "document"} == {"ours", "as_written"}
        one = bench_profiles.cases(profile, stack, threads=1)
        assert not {c.mode for c in one} & bench_profiles.COMPILED_MODES  # compiled modes at one thread count only
        assert {c.sweep for c in two} == {"document", "seq_len", "batch", "floor"}
        # every train step again at batch 1 and the document's lengths (its floor), each impl timed at the document's
        documents = {(c.model, c.impl, c.mode, c.sizes) for c in two if c.sweep == "document" and c.task == "train_step"}
        floors = {(c.model, c.impl, c.mode, c.sizes) for c in two if c.sweep == "floor" and c.task == "train_step"}
        assert floors == {(model, impl, mode, bench_profiles.floor_sizes(sizes)) for model, impl, mode, sizes in documents}
        assert {sizes for *_, sizes in floors} == {Sizes(1, 10, 10)}  # the reverse task's 32x10x10 at batch 1
        twins = bench_profiles.side_by_side([c for c in two if c.sweep == "floor" and c.model == "reverse_bahdanau"])
        assert [case.impl for case in twins[0]] == ["ours", "as_written"]  # timed side by side


def test_keras_on_jax_and_torch_runs_its_backends_modes_and_names_them_in_rows_and_files():
    """JAX: eager and XLA (jit), greedy decoding as XLA alone (the contract jits its step in every mode: an eager row
    would time the jitted decoding); Keras's torch backend: eager. A row's mode and the result file name the backend;
    TensorFlow's keep their names (earlier result files stay valid)."""
    full = bench_profiles.get_profile("full")
    jax_cases = bench_profiles.cases(full, "tf", threads=2, backend="jax")
    assert {c.mode for c in jax_cases} == {"eager", "xla"}
    assert {c.mode for c in jax_cases if c.task == "greedy"} == {"xla"}
    assert {c.mode for c in bench_profiles.cases(full, "tf", threads=2, backend="torch")} == {"eager"}
    assert {c.mode for c in bench_profiles.cases(full, "tf", threads=2) if c.task == "greedy"} == {"eager", "function", "xla"}
    assert [bench_profiles.keras_mode(b, "xla") for b in ("tensorflow", "jax")] == ["xla", "jax-xla"]
    assert set(bench_profiles.STACK_MODES["tf"]) >= {"function", "jax-xla", "torch-eager"}
    environment = {"machine": "m", "stack": "tf", "backend": "jax", "device": "gpu", "threads": 1, "profile": "full"}
    assert bench_results.result_path("r", environment).name == "tf-jax-gpu-t1-full.json"
    assert bench_results.result_path("r", {**environment, "backend": "tensorflow"}).name == "tf-gpu-t1-full.json"
    assert bench_results.result_path("r", {**environment, "stack": "torch", "backend": "torch"}).name == "torch-gpu-t1-full.json"


def test_the_full_profile_times_every_model_and_greedy_decoding_of_the_real_data_models():
    cases = bench_profiles.cases(bench_profiles.get_profile("full"), "torch", threads=2)
    assert {c.model for c in cases} == set(catalogue.built())
    greedy = {c.model for c in cases if c.task == "greedy"}
    assert greedy == {name for name in catalogue.built() if catalogue.get(name).variable_length}
    # the listing is the baseline of every mode a user runs: torch eager and compile, Keras's every mode
    assert {c.mode for c in cases if c.impl == "as_written"} == {"eager", "compile"}
    tf_cases = bench_profiles.cases(bench_profiles.get_profile("full"), "tf", threads=2)
    assert {c.mode for c in tf_cases if c.impl == "as_written"} == {"eager", "function", "xla"}


def test_the_cuda_graph_mode_times_the_train_step_of_the_fixed_shape_models_on_a_gpu_only():
    full = bench_profiles.get_profile("full")
    on_cpu = {c.mode for c in bench_profiles.cases(full, "torch", threads=2)}
    assert not on_cpu & bench_profiles.GPU_MODES  # the CPU has no CUDA graphs
    graphed = [c for c in bench_profiles.cases(full, "torch", threads=8, device="gpu") if c.mode == "cudagraph"]
    assert {c.model for c in graphed} == {name for name in catalogue.built() if not catalogue.get(name).variable_length}
    assert {c.task for c in graphed} == {"train_step"} and {c.impl for c in graphed} == {"ours", "as_written"}
    assert {c.sweep for c in graphed} == {"document", "floor"}  # the sweeps run the best uncompiled mode
    # negative control: the other modes time greedy decoding and the models of varying length on a GPU
    eager = [c for c in bench_profiles.cases(full, "torch", threads=8, device="gpu") if c.mode == "eager"]
    assert {c.task for c in eager} == {"train_step", "greedy"} and {c.model for c in eager} == set(catalogue.built())
    assert not [c for c in bench_profiles.cases(full, "tf", threads=8, device="gpu", backend="jax") if c.mode == "cudagraph"]


def test_the_headline_profile_times_every_models_train_step_and_floor_at_two_threads_and_nothing_else():
    """What the report's headline reads, in one sitting: every model, every mode, the listing beside ours, floors; no
    sweeps or greedy decoding (the full profile's, which the headline does not read)."""
    headline, full = bench_profiles.get_profile("headline"), bench_profiles.get_profile("full")
    for stack in bench_profiles.STACK_MODES:
        cases = bench_profiles.cases(headline, stack, threads=2)
        everything = bench_profiles.cases(full, stack, threads=2)
        assert {c.sweep for c in cases} == {"document", "floor"} and {c.task for c in cases} == {"train_step"}
        assert set(cases) == {c for c in everything if c.task == "train_step" and c.sweep in ("document", "floor")}
    assert headline.threads == (2,) and not {c.task for c in bench_profiles.cases(full, "torch", 2)} <= {"train_step"}


def test_every_model_has_document_sizes_and_a_synthetic_batch_of_them():
    for name in catalogue.built():
        sizes = bench_profiles.document_sizes(name)
        batch = synthetic_batch(name, sizes)
        first = next(iter(batch.values()))
        assert first.shape[:2] == (sizes.batch, sizes.src_len if "src" in batch else sizes.tgt_len)
        if "tgt_in" in batch:
            spec = catalogue.get(name)
            assert batch["tgt_in"].shape == (sizes.batch, sizes.tgt_len)
            assert batch["tgt_out"].max() < spec.config[spec.vocab_keys[1]]


def test_time_calls_reports_first_call_as_compile_time_and_quartiles():
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            import time

            time.sleep(0.05)

    timing = machine.time_calls(fn, warmup=2, repeats=4, big_repeats=2, sample_s=0.0)
    assert len(calls) == 1 + 1 + 4 and timing["repeats"] == 4 and timing["calls_per_sample"] == 1
    assert timing["compile_s"] > 0.04
    assert timing["q25_ms"] <= timing["median_ms"] <= timing["q75_ms"]


class FakeMachine:
    """A fake clock on which the n-th call takes `duration(n)` seconds."""

    def __init__(self, duration):
        self.now, self.calls, self.duration = 0.0, 0, duration

    def perf_counter(self) -> float:
        return self.now

    def call(self) -> None:
        self.calls += 1
        self.now += self.duration(self.calls)


def drifting_machine() -> FakeMachine:
    """Every call takes longer than the one before (a machine warming up, or another process arriving): two identical
    callables timed one after the other differ, side by side they do not."""
    return FakeMachine(lambda n: 1e-3 * (1 + 0.05 * n))


def jittery_machine() -> FakeMachine:
    """A step takes 1 ms, and every third 2 ms (the scheduler, a page fault)."""
    return FakeMachine(lambda n: 2e-3 if n % 3 == 0 else 1e-3)


def test_two_identical_calls_timed_side_by_side_are_equal_where_one_after_the_other_they_are_not(monkeypatch):
    clock = drifting_machine()
    monkeypatch.setattr(machine.time, "perf_counter", clock.perf_counter)
    one_after_other = [machine.time_calls(clock.call, 3, 10, 5)["median_ms"] for _ in range(2)]
    assert one_after_other[1] / one_after_other[0] > 1.3  # the naive order: the second looks 30% slower
    warms = [machine.warm_up(clock.call, 3) for _ in range(2)]
    side_by_side = [timing["median_ms"] for timing in machine.time_side_by_side([clock.call] * 2, warms, 10, 5)]
    assert abs(side_by_side[1] / side_by_side[0] - 1) < 0.01


class PhasedMachine:
    """A shared VM's slow phases: every quarter of a second the whole machine takes 1x or 1.3x its time (seeded), and
    every call of a callable made by `callable(ms)` takes its ms at that pace."""

    def __init__(self, seed: int = 0):
        import random

        phases = random.Random(seed)
        self.now, self.paces = 0.0, [phases.choice((1.0, 1.3)) for _ in range(1000)]

    def perf_counter(self) -> float:
        return self.now

    def callable(self, ms: float):
        def call() -> None:
            self.now += ms * 1e-3 * self.paces[int(self.now / 0.25)]

        return call


def test_a_ratio_taken_round_by_round_sees_through_the_machines_slow_phases(monkeypatch):
    """ours 10% faster than as written, on a machine whose pace may change every 0.25 s: the two medians' interquartile
    ranges overlap (the naive reading: equal as measured), while the ratio taken round by round has both quartiles
    within 2% of 1.1 (each round's two samples ran in one phase, or at worst straddle one change)."""
    clock = PhasedMachine(1)
    monkeypatch.setattr(machine.time, "perf_counter", clock.perf_counter)
    fns = [clock.callable(1.0), clock.callable(1.1)]  # ours, as written
    timings = machine.time_side_by_side(fns, [machine.warm_up(fn, 3) for fn in fns], repeats=15, big_repeats=5)
    ours, as_written = timings
    assert as_written["q25_ms"] <= ours["q75_ms"]  # the negative control: the IQRs overlap
    assert len(ours["samples_ms"]) == len(as_written["samples_ms"]) == 15
    paired = machine.paired_ratio(as_written["samples_ms"], ours["samples_ms"])
    assert 1.08 < paired["q25"] <= paired["median"] <= paired["q75"] < 1.12
    assert "samples_ms" not in machine.time_calls(fns[0], 3, 4, 2)  # one callable alone: its quartiles, no samples


def test_ours_row_carries_the_round_by_round_ratio_where_the_listing_was_timed_beside_it():
    paired = bench_timing._paired_speedup({"ours": [1.0, 2.0, 1.0], "as_written": [1.2, 2.6, 1.1]})
    assert paired["paired_speedup"] == pytest.approx(1.2) and paired["paired_speedup_q75"] == pytest.approx(1.25)
    assert bench_timing._paired_speedup({"ours": [1.0, 2.0]}) == {}  # no listing beside it (reverse_rnn, a sweep)


def test_a_millisecond_step_is_timed_in_samples_of_many_calls(monkeypatch):
    """One call a sample, a millisecond step's quartiles are its jitter's (half the median apart here: flagged as
    disturbed); a sample of 50 ms holds 50 calls and its mean is the step's time."""
    clock = jittery_machine()
    monkeypatch.setattr(machine.time, "perf_counter", clock.perf_counter)
    one_call = machine.time_calls(clock.call, 3, 10, 5, sample_s=0.0)
    assert (one_call["q75_ms"] - one_call["q25_ms"]) / one_call["median_ms"] > 0.4  # the naive timing: all jitter
    sampled = machine.time_calls(clock.call, 3, 10, 5)
    assert sampled["calls_per_sample"] in (25, 50)  # the warm call took 1 or 2 ms
    assert abs(sampled["median_ms"] - 4 / 3) < 0.03 and (sampled["q75_ms"] - sampled["q25_ms"]) / sampled["median_ms"] < 0.05


def test_a_model_that_is_its_listing_gets_no_as_written_twin():
    """reverse_rnn's ours is ReverseTaskV0's own code: timing it twice measures noise (docs/measurements.md)."""
    profile = bench_profiles.get_profile("default")
    timed = {(case.model, case.impl) for case in bench_profiles.cases(profile, "torch", 2)}
    assert ("reverse_rnn", "ours") in timed and ("reverse_rnn", "as_written") not in timed
    assert ("reverse_luong_dot", "as_written") in timed


def test_a_model_that_is_its_listing_on_one_keras_backend_gets_no_twin_there():
    """luong_dot's ours decodes as its listing on Keras's JAX backend (catalogue `listing_on`): no twin there, one on
    TensorFlow and in torch. Negative control: luong_general, whose keys ours hoists, has its twin on JAX too."""
    profile = bench_profiles.get_profile("headline")

    def timed(stack, backend):
        return {(case.model, case.impl) for case in bench_profiles.cases(profile, stack, 2, backend=backend)}

    assert ("luong_dot", "as_written") not in timed("tf", "jax") and ("luong_dot", "ours") in timed("tf", "jax")
    assert ("luong_dot", "as_written") in timed("tf", "tensorflow") & timed("torch", "tensorflow")
    assert ("luong_general", "as_written") in timed("tf", "jax")


def test_ours_is_timed_with_its_as_written_twin():
    profile = bench_profiles.get_profile("smoke")
    groups = bench_profiles.side_by_side(bench_profiles.cases(profile, "torch", 1))
    pairs = [[case.impl for case in group] for group in groups]
    assert ["ours", "as_written"] in pairs and all(pair in (["ours"], ["ours", "as_written"]) for pair in pairs)
    assert all(len({(c.model, c.task, c.mode, c.sizes) for c in group}) == 1 for group in groups)
    assert sum(map(len, groups)) == len(bench_profiles.cases(profile, "torch", 1))  # every case once


def test_machine_slug_and_result_path():
    assert machine.machine_slug("AMD EPYC 7R13 Processor", 2, None) == "cpu-amd-epyc-7r13-2c"
    assert machine.machine_slug("x", 16, "NVIDIA H100 80GB HBM3") == "gpu-nvidia-h100-80gb-hbm3"
    environment = {"machine": "cpu-x-2c", "stack": "tf", "device": "cpu", "threads": 2, "profile": "default"}
    assert bench_results.result_path("r", environment).as_posix() == "r/cpu-x-2c/tf-cpu-t2-default.json"


def test_a_run_of_every_model_named_in_turn_gets_a_file_name_a_file_system_takes(tmp_path):
    """A GPU lease's torch bench of all thirteen models, listed in the order to time them, died at its first write
    (OSError: File name too long): the name listed them all. A long list is named by its count and a digest; a short
    one keeps its names. Negative control: the names joined make a partial file's name past 255 bytes."""
    every = list(reversed(catalogue.built()))  # every model, in an order of the user's
    environment = {"machine": "gpu-x", "stack": "torch", "device": "gpu", "threads": 8, "profile": "headline"}
    profile = bench_profiles.restrict(bench_profiles.get_profile("headline"), every, ["eager", "cudagraph"])
    partial = bench_results.partial_path(bench_results.result_path(tmp_path, {**environment, "part": profile.tag}))
    assert len(partial.name) < 255 and f"-{len(every)}-models-" in partial.name
    partial.parent.mkdir()
    partial.write_text("{}")  # the file system takes it
    other = bench_profiles.restrict(bench_profiles.get_profile("headline"), every[1:] + every[:1], ["eager", "cudagraph"])
    assert other.tag != profile.tag  # another order is another run
    two = bench_profiles.restrict(bench_profiles.get_profile("headline"), ["luong_dot", "reverse_rnn"])
    assert two.tag == "-luong_dot-reverse_rnn"
    assert len(f"torch-gpu-t8-headline-{'-'.join(every)}-eager-cudagraph.json.partial") > 255


def test_a_gpu_case_is_not_profiled_where_a_cpu_case_is():
    """The op profiles read the host's ops (torch's and TensorFlow's CPU ops, XLA's CPU runtime): on a GPU they would
    be the launches, not the work, so a GPU row carries none. Negative control: the same case on the CPU is profiled."""
    import types

    profiled = []
    stack = types.SimpleNamespace(op_profile=lambda call, mode: profiled.append(mode) or {"product_ms": 1.0, "other_ms": 2.0})
    sizes = bench_profiles.document_sizes("reverse_bahdanau")
    case = bench_profiles.Case("reverse_bahdanau", "train_step", "ours", "xla", "document", sizes)
    assert bench_timing._op_times(stack, case, call=None, device="gpu") == {} and profiled == []
    assert bench_timing._op_times(stack, case, call=None, device="cpu") == {"product_ms": 1.0, "other_ms": 2.0}


def test_the_profiles_tell_the_listings_repeated_products_by_their_count_not_their_time():
    """`op_split` counts the products run a call, which the program fixes, where the times move with the host's
    load: a CI run's profile of reverse_bahdanau's jitted step under another test worker's load (these numbers;
    docs/measurements.md) had the listing's products no slower than ours's, but ran more of them. Negative control: the
    times, as the tests first compared them (the listing's above 1.2x ours's), miss the repeated products."""
    from tests import xla_profile

    def profile(product_ms, other_ms, product_runs):  # over machine.PROFILED_CALLS = 3 calls, one dot and one add
        calls = machine.PROFILED_CALLS
        ops = {"dot": (product_ms * calls * 1e3, product_runs * calls), "add": (other_ms * calls * 1e3, 7 * calls)}
        return machine.op_split(ops, "dot".__eq__, calls)

    split = {"ours": profile(3.65, 4.00, 116), "as_written": profile(3.59, 8.32, 172)}
    assert split["ours"] == pytest.approx({"product_ms": 3.65, "other_ms": 4.00, "product_ops": 116})
    assert xla_profile.sees_the_products_the_listing_repeats(split)
    assert not split["as_written"]["product_ms"] > 1.2 * split["ours"]["product_ms"]  # the timed comparison
    split["as_written"] = profile(3.59, 8.32, 116)  # a listing that repeated none
    assert not xla_profile.sees_the_products_the_listing_repeats(split)


def test_a_cpu_sold_under_a_bare_name_is_told_apart_by_its_family_and_model():
    """Two virtual hosts both named "AMD EPYC" (a Zen 3 with AVX2 and a faster one) get two result folders; a name with
    a part number is kept as it is; the bare name alone (negative control) would put both in one folder."""

    def cpuinfo(name, model):
        return f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: {model}\nmodel name\t: {name}\n\n"

    zen3, zen4 = machine.cpu_model(cpuinfo("AMD EPYC", 1)), machine.cpu_model(cpuinfo("AMD EPYC", 17))
    assert (zen3, zen4) == ("AMD EPYC (family 25 model 1)", "AMD EPYC (family 25 model 17)")
    assert machine.machine_slug(zen3, 2, None) == "cpu-amd-epyc-family-25-model-1-2c" != machine.machine_slug(zen4, 2, None)
    assert machine.cpu_model(cpuinfo("AMD EPYC 7R13 Processor", 1)) == "AMD EPYC 7R13 Processor"
    assert machine.machine_slug("AMD EPYC", 2, None) == "cpu-amd-epyc-2c"  # both hosts' folder without the numbers


def test_peak_rss_resets_and_reads():
    machine.reset_peak_rss()
    assert machine.peak_rss_mb() > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--models", "no_such_model"], "unknown model"),
        (["bench", "--threads", "0"], "positive"),
        (["bench", "--time-box", "0"], "--time-box takes a positive number of seconds, got 0"),
    ],
)
def test_bad_bench_requests_fail_with_one_clear_error(capsys, argv, message):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_bench_takes_its_models_comma_or_space_separated_as_it_takes_its_modes(monkeypatch):
    """`--modes a,b` is comma-separated; `--models a,b` once named one unknown model "a,b"."""
    asked = []
    monkeypatch.setattr(bench, "run", lambda profile, stacks, results, threads, models, modes, **_: asked.append(models))
    for argv in (
        ["reverse_rnn,additive_attention"],
        ["reverse_rnn", "additive_attention"],
        ["reverse_rnn,", "additive_attention"],
    ):
        assert cli.main(["bench", "--models", *argv]) == 0
    assert asked == [["reverse_rnn", "additive_attention"]] * 3


def test_the_progress_line_gives_ours_ratio_round_by_round_where_the_listing_ran_beside_it():
    row = {"stack": "torch", "model": "reverse_bahdanau", "task": "train_step", "impl": "ours", "mode": "eager",
           "sweep": "document", "batch": 32, "src_len": 10, "tgt_len": 10, "threads": 2, "status": "ok",
           "median_ms": 27.8, "compile_s": 0.0}  # fmt: skip
    assert bench_timing.progress_line(row).endswith("27.80 ms  (compile 0.0 s)")  # alone: no ratio
    paired = {**row, **bench_timing._paired_speedup({"ours": [27.0, 28.0, 27.8], "as_written": [39.0, 40.0, 40.5]})}
    assert bench_timing.progress_line(paired).endswith("1.44x over as written (1.44-1.45)")


def test_an_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="unknown bench profile 'huge'"):
        bench_profiles.get_profile("huge")
    with pytest.raises(SystemExit):
        cli.main(["bench", "--profile", "huge"])


def test_the_load_of_other_processes_is_measured_and_our_own_work_is_not(monkeypatch):
    """The meter reads the machine's busy CPU time less this process's own: our own spin never counts, a spinner beside
    us counts at least the CPU time the kernel gave it. Both are CPU time the kernel accounts, not wall time, so they
    hold however busy the cores are (a reading compared with a quiet one, as first written, failed beside two saturated
    cores: a spinner there adds no busy core). Negative controls: a meter that counts our work as the others' and one
    that sees no other process fail the same checks."""
    if machine.others_busy(0.05) is None:
        pytest.skip("no /proc: the load cannot be measured here")
    real = machine._cpu_ticks
    assert _own_spin_unseen(real) and _spinner_seen(real)
    monkeypatch.setattr(machine, "_cpu_ticks", lambda: (real()[0], 0))  # our own work counted as the others'
    assert not _own_spin_unseen(real)
    monkeypatch.setattr(machine, "_cpu_ticks", lambda: (real()[1], real()[1]))  # no other process seen
    assert not _spinner_seen(real)


SPUN_TICKS, SLACK_TICKS = 40, 5  # CPU time spun (clock ticks) and the rounding of the kernel's tick counts


def _own_spin_unseen(ticks) -> bool:
    """The meter's reading while we spin SPUN_TICKS of CPU time is at most the machine's busy ticks around it less ours."""
    import time

    hz, busy = os.sysconf("SC_CLK_TCK"), ticks()[0]
    meter, spun = machine.OthersMeter.start(), time.process_time()
    while (time.process_time() - spun) * hz < SPUN_TICKS:  # CPU time: as long as the kernel takes to give it
        pass
    spun_ticks, reading = (time.process_time() - spun) * hz, meter.stop()
    window_ticks = (time.perf_counter() - meter.started) * hz  # at least the meter's own window
    return reading * window_ticks <= ticks()[0] - busy - spun_ticks + SLACK_TICKS


def _spinner_seen(ticks) -> bool:
    """The meter's reading while a spinner takes SPUN_TICKS of CPU time counts at least those ticks."""
    import subprocess
    import sys
    import time

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = _wait_for_ticks(spinner.pid, 1)  # spinning
        meter = machine.OthersMeter.start()
        _wait_for_ticks(spinner.pid, first + SPUN_TICKS)
        window_s, reading = time.perf_counter() - meter.started, meter.stop()  # at most the meter's own window
        given = _process_ticks(spinner.pid) - first
    finally:
        spinner.kill()
        spinner.wait()
    return reading * window_s * os.sysconf("SC_CLK_TCK") >= given - SLACK_TICKS


def _process_ticks(pid: int) -> int:
    """utime + stime of process `pid` (clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _wait_for_ticks(pid: int, ticks: int) -> int:
    """Sleep until process `pid` has run `ticks` of CPU time (a hang guard of a minute, not a measurement)."""
    import time

    for _ in range(1200):
        if (now := _process_ticks(pid)) >= ticks:
            return now
        time.sleep(0.05)
    raise AssertionError(f"process {pid} ran under {ticks} ticks of CPU time in a minute")


def test_a_case_is_flagged_for_load_or_spread_and_a_quiet_one_is_not():
    timing = {"median_ms": 10.0, "q25_ms": 9.5, "q75_ms": 10.5}
    assert machine.disturbance(timing, {"before": 0.0, "during": 0.1, "after": None}) is None
    loaded = machine.disturbance(timing, {"before": 0.0, "during": 0.93, "after": 0.4})
    assert loaded == "during: other processes kept 0.93 cores busy; after: other processes kept 0.40 cores busy"
    spread = machine.disturbance({"median_ms": 10.0, "q25_ms": 8.0, "q75_ms": 13.0}, {"during": 0.0})
    assert spread == "spread: IQR 50% of the median"


def test_a_case_timed_in_a_slow_phase_of_the_machine_is_flagged_and_one_slow_probe_alone_is_not():
    """A shared machine has phases, seconds long, in which waking a framework's second thread costs more: a 128x128
    matmul and a millisecond step of small ops run slower while no other process runs (docs/measurements.md). A case whose pace
    probes, before and after it, both stay below 85% of the run's best is flagged, its other reasons kept; one slow
    probe is not enough (noise), a GPU's rows carry no pace. Negative control: the load and spread checks alone pass
    the slow case."""

    def row(before, after, disturbed=None):
        return {"median_ms": 17.0, "q25_ms": 16.8, "q75_ms": 17.2, "pace_gflops": {"before": before, "after": after},
                "others_busy": {"before": 0.0, "during": 0.0, "after": 0.0}, "disturbed": disturbed}  # fmt: skip

    slow, noisy, fast, spread = row(123.0, 121.0), row(120.0, 160.0), row(161.0, 158.0), row(124.0, 125.0, "spread: IQR 30%")
    failed, gpu = {"status": "failed"}, row(None, None)
    flagged = bench_timing.flag_slow_phases([slow, noisy, fast, spread, failed, gpu])
    assert flagged[0]["disturbed"] == "slow phase: a 128x128 matmul ran at 76% of this run's best pace"
    assert flagged[3]["disturbed"] == "spread: IQR 30%; slow phase: a 128x128 matmul ran at 78% of this run's best pace"
    assert [row["disturbed"] for row in (flagged[1], flagged[2], flagged[5])] == [None, None, None]
    assert flagged[4] == failed
    assert machine.disturbance(slow, slow["others_busy"]) is None  # what the bench flagged before: nothing


def test_a_failed_bench_process_says_where_its_timed_rows_are_and_how_to_continue(monkeypatch, tmp_path):
    def child(argv, env, partial=None):  # a bench process that fails, having written `partial` or nothing
        if partial:
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text("{}")
        return 1

    monkeypatch.setattr(bench, "_run_child", child)  # negative control: nothing timed, no word of a partial file
    with pytest.raises(RuntimeError, match=r"torch bench process failed; its result file was not written$"):
        bench.run("smoke", ["torch"], tmp_path, threads=[1], progress=lambda line: None)
    partial, argvs = tmp_path / "m" / "torch-cpu-t1-smoke.json.partial", []
    monkeypatch.setattr(bench, "_run_child", lambda argv, env: argvs.append(argv) or child(argv, env, partial))
    with pytest.raises(RuntimeError, match=r"the groups it timed are in .*torch-cpu-t1-smoke\.json\.partial: .*--resume"):
        bench.run("smoke", ["torch"], tmp_path, threads=[1], resume=True, progress=lambda line: None)
    assert argvs[0][-1] == "--resume"  # the child is asked to continue too


def test_a_bench_child_asked_for_an_unknown_mode_says_so_in_one_line(capsys):
    assert bench.main(["torch", "--threads", "1", "--results", "r", "--modes", "turbo"]) == 2
    assert capsys.readouterr().err == (f"rosetta bench: unknown mode(s) turbo; known: {', '.join(bench_profiles.ALL_MODES)}\n")


def test_a_bench_process_gives_tensorflow_both_of_its_pools_at_the_thread_count():
    """TensorFlow as it sets itself up on that many cores: an inter-op pool of 1 ran a tf.function's independent ops
    in turn, slower than with both pools at the thread count (docs/measurements.md)."""
    for threads in (1, 2):
        variables = machine.thread_environment(threads)
        assert variables["TF_NUM_INTRAOP_THREADS"] == variables["TF_NUM_INTEROP_THREADS"] == str(threads)


def test_a_partial_file_of_another_schema_is_not_resumed_and_one_of_this_schema_is(tmp_path):
    """--resume continues only a partial file of the schema this bench writes: one of schema 1 (an older bench at the same
    commit, whose rows may lack fields) or of a schema no bench here knows is refused, by one error naming the file and
    its schema. Negative control: the same file at SCHEMA resumes its timed row. A result file states SCHEMA."""
    assert bench_results.SCHEMA == max(bench_results.SCHEMAS) == 2
    environment = dict.fromkeys(bench_results.RESUME_FIELDS, "x")
    row = {"model": "reverse_rnn", "task": "train_step", "impl": "ours", "mode": "eager", "sweep": "document", "batch": 32,
           "src_len": 10, "tgt_len": 10, "status": "ok"}  # fmt: skip
    partial = tmp_path / "torch-cpu-t1-smoke.json.partial"
    for schema in (1, 99):
        partial.write_text(json.dumps({"schema": schema, "environment": environment, "rows": [row]}))
        with pytest.raises(ValueError, match=rf"smoke\.json\.partial: cannot resume it: its schema is {schema}, this run's 2;"):
            bench_results.resumed_rows(partial, environment)
    bench_results.write_results(partial, environment, [row])
    assert json.loads(partial.read_text())["schema"] == bench_results.SCHEMA
    assert bench_results.resumed_rows(partial, environment) == {bench_results.case_key(row): row}
