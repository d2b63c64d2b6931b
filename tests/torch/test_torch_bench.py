"""What ran in a torch.compile case: Inductor, Dynamo's graph breaks of that case alone, `allow_rnn` as set; a bench
asked for nothing it can run; a killed bench resumed."""

from __future__ import annotations

import json

import pytest
import torch

from shared.tools import bench, bench_profiles, bench_results, bench_timing
from shared.verify.fixtures import synthetic_batch
from torch_impl import bench as torch_bench
from torch_impl.models.additive import AdditiveAttention


def test_a_compiled_case_counts_its_own_graph_breaks(monkeypatch):
    """luong_general compiled: no break. A break forced into additive attention's step is counted, and the next case
    does not inherit it (negative control). The forced break goes into the model that compiles in seconds: a second
    luong_general compile took half of this test's time (docs/measurements.md)."""
    call, path = _case("luong_general", "compile")
    call()
    # on the CPU Dynamo traces into nn.LSTM (allow_rnn) and the padded sources run as a masked loop: no break
    assert path() == {"cudnn": False, "compiler": "inductor", "graph_breaks": 0, "allow_rnn": True, "cuda_graphs": False}
    attend = AdditiveAttention.attend

    def attend_with_a_break(self, queries, values):
        torch._dynamo.graph_break()
        return attend(self, queries, values)

    monkeypatch.setattr(AdditiveAttention, "attend", attend_with_a_break)
    call, path = _case("additive_attention", "compile")
    call()
    assert path()["graph_breaks"] > 0
    call, path = _case("additive_attention", "eager")  # negative control: the next case does not inherit the breaks
    call()
    assert path() == {"cudnn": False, "compiler": None, "graph_breaks": None, "allow_rnn": None, "cuda_graphs": False}
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0


def _case(name: str, mode: str):
    """A fresh bench case of model `name`'s train step, ours, at the smoke sizes: (its call, its path)."""
    sizes = bench_profiles.small_sizes(bench_profiles.document_sizes(name))
    torch_bench.start_case("cpu")
    return torch_bench.make_call(name, "train_step", "ours", mode, synthetic_batch(name, sizes), sizes.tgt_len)


def _compiled_path(name: str) -> dict:
    call, path = _case(name, "compile")
    call()
    return path()


def test_each_model_in_one_process_compiles_its_own_graph_past_dynamos_recompile_limit():
    """A bench process compiles `Trainer._forward_loss` for model after model; by default they share Dynamo's 8
    recompiles and the ninth runs eager. With the limit lowered to 1, two models each still compile."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=1):
        assert [_compiled_path(name)["compiler"] for name in ("reverse_rnn", "reverse_luong_dot")] == ["inductor"] * 2


def test_negative_control_a_shared_compile_runs_the_second_model_eager_and_the_case_says_so(monkeypatch):
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda function, isolate_recompiles: real_compile(function))
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=1):
        assert _compiled_path("reverse_rnn")["compiler"] == "inductor"
        with pytest.raises(RuntimeError, match="torch.compile ran eager"):
            _compiled_path("reverse_luong_dot")


def test_the_cuda_graph_mode_alone_on_the_cpu_is_one_clear_error_and_no_file(tmp_path):
    profile = bench_profiles.restrict(bench_profiles.get_profile("smoke"), modes=["cudagraph"])
    with pytest.raises(ValueError, match="cudagraph mode runs on a GPU only"):
        bench.measure("torch", profile, 1, tmp_path)
    assert not list(tmp_path.rglob("*"))


class Killed(Exception):
    """A bench process's end mid-run (a time box, a lease running out), raised from its progress lines."""


def _killed_after(groups: int):
    """A progress callback that ends the run at its first line after group `groups` (the group it reports is written)."""
    seen = []

    def progress(line: str) -> None:
        seen.append(line)
        if len(seen) > groups * 2:  # the smoke profile's first groups: a model's ours and its listing
            raise Killed(line)

    return progress


def test_a_killed_bench_keeps_its_finished_groups_and_resume_times_only_the_rest(tmp_path, monkeypatch):
    profile = bench_profiles.get_profile("smoke")
    with pytest.raises(Killed):
        bench.measure("torch", profile, 1, tmp_path, progress=_killed_after(1))
    partial = next(tmp_path.rglob("*.json.partial"))
    assert not list(tmp_path.rglob("*.json"))  # no result file until the run ends: the report reads none
    kept = json.loads(partial.read_text())["rows"]
    assert [(row["model"], row["impl"]) for row in kept][:2] == [("reverse_bahdanau", "ours"), ("reverse_bahdanau", "as_written")]
    timed = []
    measure_cases = bench_timing.measure_group
    monkeypatch.setattr(bench_timing, "measure_group", lambda *args: timed.append(args[2]) or measure_cases(*args))
    lines = []
    path = bench.measure("torch", profile, 1, tmp_path, progress=lines.append, resume=True)
    assert lines[0] == f"bench: resuming {partial.name}: {len(kept)} rows kept" and not partial.exists()
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == len(bench_profiles.cases(profile, "torch", 1)) == len({bench_results.case_key(row) for row in rows})
    assert all(case.model != "reverse_bahdanau" for group in timed for case in group)  # the kept group was not timed again
    assert [row["median_ms"] for row in rows[:2]] == [row["median_ms"] for row in kept[:2]]


def test_negative_control_a_partial_file_of_another_commit_is_refused_and_a_run_without_resume_times_everything(tmp_path):
    profile = bench_profiles.get_profile("smoke")
    with pytest.raises(Killed):
        bench.measure("torch", profile, 1, tmp_path, progress=_killed_after(1))
    partial = next(tmp_path.rglob("*.json.partial"))
    record = json.loads(partial.read_text())
    partial.write_text(json.dumps({**record, "environment": {**record["environment"], "commit": "0000000"}}))
    with pytest.raises(ValueError, match=r"\.json\.partial: cannot resume it: its commit is '0000000'"):
        bench.measure("torch", profile, 1, tmp_path, progress=lambda line: None, resume=True)
    lines = []
    path = bench.measure("torch", profile, 1, tmp_path, progress=lines.append)
    assert not any(line.startswith("bench: resuming") for line in lines) and not partial.exists()
    assert len(json.loads(path.read_text())["rows"]) == len(bench_profiles.cases(profile, "torch", 1))


def test_a_time_boxed_bench_writes_what_it_timed_and_resume_finishes_it(tmp_path):
    profile = bench_profiles.get_profile("smoke")
    lines = []
    path = bench.measure("torch", profile, 1, tmp_path, progress=lines.append, time_box_s=1e-9)  # one group, then stop
    record = json.loads(path.read_text())
    assert record["environment"]["stopped"] == "its time box of 1e-09 s ended it after 1 of 3 groups"
    assert [row["model"] for row in record["rows"]] == ["reverse_bahdanau"] * 2 and lines[-1].endswith("--resume continues it")
    assert bench_results.partial_path(path).exists()  # kept for --resume
    path = bench.measure("torch", profile, 1, tmp_path, progress=lines.append, resume=True)  # negative control: no box
    record = json.loads(path.read_text())
    assert "stopped" not in record["environment"] and len(record["rows"]) == len(bench_profiles.cases(profile, "torch", 1))
    assert not bench_results.partial_path(path).exists()


def test_the_flop_count_sees_the_lstm_layers_torchs_counter_does_not():
    """nn.LSTM on the CPU runs each layer as one oneDNN op (`mkldnn_rnn_layer`) that torch's FLOP counter leaves out:
    document 003's two-layer LSTMs, forward and backward, are counted by their products (`RECURRENT_LAYER_FLOPS`):
    2 x T x B x 4H x (I + H) a layer forward, twice that backward. Negative control: torch's counter alone sees none."""
    from torch.utils.flop_counter import FlopCounterMode

    lstm, inputs = torch.nn.LSTM(6, 5, num_layers=2, batch_first=True), torch.randn(3, 7, 6)  # [B, T, I]
    forward = 2 * 3 * 7 * 4 * 5 * ((6 + 5) + (5 + 5))  # both layers: inputs 6, then 5; state 5

    def counted(counter) -> int:
        with counter:
            outputs, _ = lstm(inputs)  # [B, T, H]
            outputs.sum().backward()
        return counter.get_total_flops()

    assert counted(FlopCounterMode(display=False, custom_mapping=torch_bench.RECURRENT_LAYER_FLOPS)) == 3 * forward
    assert counted(FlopCounterMode(display=False)) == 0  # negative control: torch's counter alone
    sizes = bench_profiles.document_sizes("luong_general")
    arrays = synthetic_batch("luong_general", sizes)
    counts = {impl: torch_bench.count_gflop("luong_general", "train_step", impl, arrays, sizes.tgt_len)
              for impl in ("ours", "as_written")}  # fmt: skip
    assert 1.5 < counts["as_written"] / counts["ours"] < 1.6  # its LSTMs left out, the count said far more
