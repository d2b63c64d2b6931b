"""`rosetta bench` in each stack: the smoke profile measures every case and writes one result file."""

from __future__ import annotations

import json

from shared.tools import bench


def test_a_smoke_bench_writes_one_result_file_with_every_case(stack, tmp_path):
    name = "torch" if stack.__name__ == "torch_impl" else "tf"
    path = bench.measure(name, bench.get_profile("smoke"), 1, tmp_path, progress=lambda line: None)
    record = json.loads(path.read_text())
    environment = record["environment"]
    backend = environment["backend"]  # Keras's (KERAS_BACKEND) for tf; the file and each row's mode name it
    label = name if backend == "tensorflow" or name == "torch" else f"tf-{backend}"
    assert path.parent.parent == tmp_path and path.name == f"{label}-{environment['device']}-t1-smoke.json"
    assert environment["threads"] == 1 and environment["matmul_gflops"] > 0
    rows = record["rows"]
    assert len(rows) == len(bench.cases(bench.get_profile("smoke"), name, 1, environment["device"], backend))
    assert {row["mode"] for row in rows} <= set(bench.STACK_MODES[name])
    assert all(row["mode"].startswith(f"{backend}-") for row in rows) == (name == "tf" and backend != "tensorflow")
    assert all(row["status"] == "ok" for row in rows), [row["error"] for row in rows if row["status"] != "ok"]
    assert all(row["median_ms"] > 0 and row["peak_mem_mb"] > 0 for row in rows)
    assert {row["impl"] for row in rows} == {"ours", "as_written"} and {row["task"] for row in rows} == {"train_step", "greedy"}
    if name == "torch":
        assert all(row["gflop"] > 0 for row in rows)
    # what ran, and the load of other processes before, during and after each case (in cores; None without /proc)
    assert all(set(row["path"]) == {"cudnn", "compiler", "graph_breaks", "allow_rnn", "cuda_graphs"} for row in rows)
    assert environment["device"] == "gpu" or not any(row["path"]["cudnn"] for row in rows)  # cuDNN: GPUs only
    assert all(set(row["others_busy"]) == {"before", "during", "after"} and "disturbed" in row for row in rows)
    assert not list(tmp_path.rglob("*.tmp*"))
