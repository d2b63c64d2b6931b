"""The generation speed benchmark's bookkeeping (shared/tools/generation_speed.py, generation_engines.py and
report/generation_speed.py) on fake engine results: no engine runs, nothing timed. The source batch is
deterministic; each row's speed and tokens are set against hf-eager's; the ids stay out of the file; ours reads
"pending" until written; the profile's parts add up to its wall time.
Negative controls: a row that stopped early is flagged as unequal work, not shown as faster; a profile that summed
every event would count a label's own ops twice; a file of another schema is named as unread; a kept row survives a
rerun of one engine only under the same settings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest

from shared.tools import generation_engines as engines
from shared.tools import generation_speed as speed
from shared.tools.report import generation_speed as report

N = 4  # new tokens in the fake runs


def _run(batch: int, ms: float, ids: list[list[int]], lengths=None) -> dict:
    return {"median_ms": ms, "q25_ms": ms * 0.9, "q75_ms": ms * 1.1, "first_call_s": ms / 1e3 + 2.0,
            "tokens_per_s": batch * N / (ms / 1e3), "lengths": lengths or sorted({len(row) for row in ids}),
            "disturbed": None, "ids": ids}  # fmt: skip


HF_IDS = {"1": [[5, 6, 7, 8]], "2": [[5, 6, 7, 8], [9, 10, 11, 12]]}


def _record(ms: dict, ids: dict | None = None, split=(100.0, 20.0)) -> dict:
    ids = ids or HF_IDS
    runs = {batch: _run(int(batch), ms[batch], ids[batch]) for batch in ms}
    return {"status": "measured", "reason": None, "runs": runs, "threads": {"intra_op": 2, "inter_op": 1},
            "step_split": {"batch": 2, "one_token_ms": split[0], "per_step_ms": split[1]}}  # fmt: skip


PROFILE = {"status": "measured", "batch": 2, "new_tokens": N, "profiled_wall_ms": 1000.0,
           "parts_ms": {"output projection (d_model x 58,101)": 400.0, "generate's loop: Python between ops": 100.0},
           "generate_ops_ms": {"aten::index_select": 50.0, "aten::topk": 10.0},
           "flops_per_step": {"rows": 8, "output_projection_gflop": 0.48, "decoder_layers_gflop": 0.35}}  # fmt: skip


def _fake_runner(calls: list, results: dict):
    """Each step answered from `results` (hf-eager's unless named), the steps recorded in order."""

    def run(step, request):
        calls.append(step)
        if step == "build":
            return {"parameters": 74_410_496}
        if step == "profile":
            return PROFILE
        return json.loads(json.dumps(results.get(step) or _record({"1": 1000.0, "2": 1600.0})))

    return run


def _measure(tmp_path, results: dict, engines=("hf-eager", "ct2-int8", "keras-jax"), **options) -> tuple[dict, list]:
    calls: list = []
    data = speed.run(tmp_path / "generation_speed.json", tmp_path / "work", engines=engines, batches=(1, 2),
                  new_tokens=N, runner=_fake_runner(calls, results), **options)  # fmt: skip
    return data, calls


def test_the_source_batch_is_deterministic_mixed_and_padded():
    ids, mask = speed.source_batch(16)
    again, _ = speed.source_batch(16)
    other, _ = speed.source_batch(16, seed=1)
    lengths = mask.sum(axis=1)  # [B]
    assert np.array_equal(ids, again) and not np.array_equal(ids, other)  # the seed decides, nothing else
    assert len(set(lengths.tolist())) > 4 and lengths.min() >= speed.SOURCE_LENGTHS[0] and lengths.max() < speed.SOURCE_LENGTHS[1]
    assert all(ids[row, length - 1] == 0 for row, length in enumerate(lengths))  # </s> last
    assert ((ids == 58100) == (mask == 0)).all() and not np.isin(ids[mask == 1][:-1], [58100]).any()
    first, first_mask = speed.rows_of(ids, mask, 1)  # batch 1: the first row, its padding columns dropped
    assert first.shape == (1, lengths[0]) and first_mask.all() and np.array_equal(first[0], ids[0, : lengths[0]])
    with pytest.raises(ValueError, match="lengths a range"):
        speed.source_batch(2, lengths=(5, 5))


def test_rows_are_set_against_hf_eager_and_the_ids_stay_out_of_the_file(tmp_path):
    ct2 = _record({"1": 250.0, "2": 400.0}, {"1": [[5, 6, 7, 8]], "2": [[5, 6, 7, 8], [9, 10, 0, 12]]})
    pending = {"status": "pending", "reason": "tf_impl.generation.generate is not written yet"}
    data, calls = _measure(tmp_path, {"ct2-int8": ct2, "keras-jax": pending})
    assert calls == ["build", "hf-eager", "ct2-int8", "keras-jax", "profile"]
    written = json.loads((tmp_path / "generation_speed.json").read_text())
    assert written == data and '"ids"' not in json.dumps(written) and "ids_for_comparison" not in json.dumps(written)
    found = written["engines"]["ct2-int8"]["runs"]
    assert found["1"]["speed_vs_hf_eager"] == pytest.approx(4.0) and found["2"]["speed_vs_hf_eager"] == pytest.approx(4.0)
    assert found["1"]["same_tokens_as_hf_eager"] == 1.0 and found["2"]["same_tokens_as_hf_eager"] == pytest.approx(7 / 8)
    assert "speed_vs_hf_eager" not in written["engines"]["hf-eager"]["runs"]["1"]  # the baseline is not its own ratio
    assert written["settings"]["new_tokens"] == N and written["environment"]["threads"] == speed.THREADS
    assert written["engines"]["ct2-int8"]["runs"]["1"]["ids_sha"] == written["engines"]["hf-eager"]["runs"]["1"]["ids_sha"]


def test_the_table_shows_speed_pending_and_failures(tmp_path):
    failed = {"status": "failed", "error": "exit 1: RuntimeError: no static cache for this model"}
    data, _ = _measure(tmp_path, {"ct2-int8": _record({"1": 250.0, "2": 400.0}), "hf-static": failed},
                       engines=("hf-eager", "hf-static", "ct2-int8", "keras-jax"))  # fmt: skip
    table = report.speed_table(data)
    print(table)
    lines = table.splitlines()
    assert lines[0].startswith("| engine | batch | tokens/s |")
    assert "| ct2-int8 | 2 | 20.0 | 0.40 (0.36-0.44) | 2.4 | 4.00x | 100% | 4 | - |" in lines
    assert "| hf-eager | 1 | 4.0 | 1.00 (0.90-1.10) | 3.0 | - | - | 4 | - |" in lines
    assert "| hf-static | - | failed: exit 1: RuntimeError: no static cache for this model |" in table
    assert "| keras-tf | - | not run |" in table  # ours, left out of the run
    section = "\n".join(report.section(data))
    assert "| hf-eager | 2 | 100 | 20.0 |" in section  # the step split
    assert "| output projection (d_model x 58,101) | 400 | 40% |" in section and "aten::index_select 50 ms" in section
    assert report.speed_table(None).startswith("Not measured")


def test_ours_reads_pending_until_written(tmp_path):
    pending = {"status": "pending", "reason": "tf_impl.generation.generate is not written yet"}
    data, _ = _measure(tmp_path, {"keras-jax": pending, "keras-tf": pending}, engines=("hf-eager", "keras-jax", "keras-tf"))
    assert "| keras-jax | - | pending |" in report.speed_table(data) and "| keras-tf | - | pending |" in report.speed_table(data)


def test_a_row_that_stopped_early_is_unequal_work_not_faster(tmp_path):
    """Negative control: a row that generated fewer tokens than asked is fast because it did less; the table says so."""
    early = _record({"1": 100.0, "2": 200.0}, {"1": [[5, 6]], "2": [[5, 6], [9, 10, 11, 12]]})
    table = report.speed_table(_measure(tmp_path, {"ct2-float32": early}, engines=("hf-eager", "ct2-float32"))[0])
    assert "| ct2-float32 | 1 | 40.0 | 0.10 (0.09-0.11) | 2.1 | 10.00x | 50% | 2 (not 4: unequal work) |" in table
    assert "| 2,4 (not 4: unequal work) |" in table and "| hf-eager | 1 |" in table and "| 4 | - |" in table


def test_a_rerun_of_one_engine_keeps_the_others_only_under_the_same_settings(tmp_path):
    _measure(tmp_path, {"ct2-int8": _record({"1": 250.0, "2": 400.0})}, engines=("hf-eager", "ct2-int8"), profile=False)
    data, calls = _measure(tmp_path, {}, engines=("hf-eager",), profile=False)
    assert calls == ["build", "hf-eager"] and set(data["engines"]) == {"hf-eager", "ct2-int8"}
    assert data["engines"]["ct2-int8"]["runs"]["1"]["same_tokens_as_hf_eager"] == 1.0  # compared through the digests
    other, _ = _measure(tmp_path, {}, engines=("hf-eager",), profile=False, repeats=5)  # other settings: nothing kept
    assert set(other["engines"]) == {"hf-eager"}


def test_bad_arguments_are_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"unknown \['ct2-float16'\]"):
        _measure(tmp_path, {}, engines=("ct2-float16",))
    with pytest.raises(ValueError, match="new_tokens must be >= 2"):
        speed.run(tmp_path / "x.json", tmp_path, new_tokens=1, runner=_fake_runner([], {}))


def test_a_file_of_another_schema_is_named_not_read(tmp_path):
    path = tmp_path / "generation_speed.json"
    path.write_text(json.dumps({"schema": speed.SCHEMA + 1, "engines": {}}))
    missing: list = []
    assert report.load(path, missing) is None and "is not one this report reads (1)" in missing[0]
    assert report.load(tmp_path / "absent.json", missing) is None and len(missing) == 1
    assert report.section(None)[-2].startswith("Not measured")


@dataclass
class Event:
    """What breakdown reads of a torch.profiler FunctionEvent: name, inclusive microseconds, children."""

    name: str
    cpu_time_total: float
    cpu_children: list = field(default_factory=list)


def test_the_profile_parts_add_up_to_the_wall_time():
    head = Event(engines.PARTS["lm_head"], 300.0, [Event("aten::mm", 290.0)])
    attention = Event(engines.PARTS["self_attn"], 200.0, [Event("aten::bmm", 150.0)])
    step = Event(engines.STEP, 600.0, [head, attention, Event("aten::add", 40.0)])  # 60 us of Python inside
    encoder = Event(engines.PARTS["encoder"], 500.0, [Event("aten::addmm", 450.0)])
    root = Event("generate", 1500.0, [encoder, step, Event("aten::topk", 100.0), Event("aten::index_select", 200.0)])
    events = [root, encoder, step, head, attention, *root.cpu_children[2:]]
    found = engines.breakdown(events, wall_s=1.6e-3)  # 1600 us: 100 us outside the root label too
    parts = found["parts_ms"]
    assert sum(parts.values()) == pytest.approx(1.6)
    assert parts[engines.PARTS["lm_head"]] == pytest.approx(0.3) and parts[engines.STEP_REST] == pytest.approx(0.06)
    assert parts[engines.STEP_OPS] == pytest.approx(0.04) and parts[engines.LOOP_OPS] == pytest.approx(0.3)
    assert parts[engines.LOOP_PYTHON] == pytest.approx(1.6 - 0.5 - 0.6 - 0.3)
    assert list(found["generate_ops_ms"]) == ["aten::index_select", "aten::topk"]
    naive = sum(event.cpu_time_total for event in events if event.name != "generate") / 1e3  # every event summed
    assert naive > 1.6  # negative control: a label and its own ops counted twice exceed the wall time


def test_ct2_log_lines_and_the_stand_in_vocabulary():
    stderr = "[2026-11-28 23:25:00.074] [ctranslate2] [thread 1] [info]  - SGEMM backend: DNNL (packed: false)\nother\n"
    assert speed._ct2_log(stderr) == [" - SGEMM backend: DNNL (packed: false)"]
    vocabulary = engines._Vocabulary(58101, 58100).get_vocab()
    assert len(vocabulary) == 58101 and vocabulary["</s>"] == 0 and vocabulary["<unk>"] == 1 and vocabulary["<pad>"] == 58100


def test_a_rerun_keeps_each_batchs_faster_run_and_shows_a_failure(tmp_path):
    """A shared machine only slows a run down: of two runs of one engine, each batch keeps the faster (the tighter
    upper bound), its step split with it. Negative control: a slower rerun does not replace a faster run; a rerun
    that failed is shown, not hidden behind the older numbers."""
    _measure(tmp_path, {"hf-eager": _record({"1": 1000.0, "2": 1600.0})}, engines=("hf-eager",), profile=False)
    slower_one = _record({"1": 3000.0, "2": 1200.0}, split=(90.0, 18.0))
    data, _ = _measure(tmp_path, {"hf-eager": slower_one}, engines=("hf-eager",), profile=False)
    record = data["engines"]["hf-eager"]
    assert record["runs"]["1"]["median_ms"] == 1000.0 and record["runs"]["2"]["median_ms"] == 1200.0
    assert record["attempts"] == 2 and record["step_split"]["one_token_ms"] == 90.0
    failed = {"status": "failed", "error": "exit 1: MemoryError"}
    data, _ = _measure(tmp_path, {"hf-eager": failed}, engines=("hf-eager",), profile=False)
    assert data["engines"]["hf-eager"] == failed
