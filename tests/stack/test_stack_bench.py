"""`rosetta bench` in each stack: the smoke profile measures every case and writes one result file."""

from __future__ import annotations

import json

from shared.tools import bench, bench_profiles
from tests import xla_profile


def test_a_smoke_bench_writes_one_result_file_with_every_case(stack, tmp_path):
    name = "torch" if stack.__name__ == "torch_impl" else "tf"
    path = bench.measure(name, bench_profiles.get_profile("smoke"), 1, tmp_path, progress=lambda line: None)
    record = json.loads(path.read_text())
    environment = record["environment"]
    backend = environment["backend"]  # Keras's (KERAS_BACKEND) for tf; the file and each row's mode name it
    label = name if backend == "tensorflow" or name == "torch" else f"tf-{backend}"
    assert path.parent.parent == tmp_path and path.name == f"{label}-{environment['device']}-t1-smoke.json"
    assert environment["threads"] == 1 and environment["matmul_gflops"] > 0
    rows = record["rows"]
    assert len(rows) == len(bench_profiles.cases(bench_profiles.get_profile("smoke"), name, 1, environment["device"], backend))
    assert {row["mode"] for row in rows} <= set(bench_profiles.STACK_MODES[name])
    assert all(row["mode"].startswith(f"{backend}-") for row in rows) == (name == "tf" and backend != "tensorflow")
    assert all(row["status"] == "ok" for row in rows), [row["error"] for row in rows if row["status"] != "ok"]
    assert all(row["median_ms"] > 0 and row["peak_mem_mb"] > 0 for row in rows)
    twinned = [row for row in rows if row["impl"] == "ours" and "as_written" in row["timed_with"]]
    assert twinned and all(row["paired_speedup_q25"] <= row["paired_speedup"] <= row["paired_speedup_q75"] for row in twinned)
    assert not any("paired_speedup" in row for row in rows if row not in twinned)  # the listing's rows, ours alone
    assert not any("samples_ms" in row for row in rows)
    assert {row["impl"] for row in rows} == {"ours", "as_written"} and {row["task"] for row in rows} == {"train_step", "greedy"}
    if name == "torch":
        assert all(row["gflop"] > 0 for row in rows)
    counted = [row["ops"] for row in rows if row["task"] == "train_step"]
    assert all(count > 0 for count in counted) if backend in ("tensorflow", "torch") else set(counted) == {None}
    assert {row["ops"] for row in rows if row["task"] == "greedy"} == {None}
    # what ran, and the load of other processes before, during and after each case (in cores; None without /proc)
    assert all(set(row["path"]) == {"cudnn", "compiler", "graph_breaks", "allow_rnn", "cuda_graphs"} for row in rows)
    assert environment["device"] == "gpu" or not any(row["path"]["cudnn"] for row in rows)  # cuDNN: GPUs only
    assert all(set(row["others_busy"]) == {"before", "during", "after"} and "disturbed" in row for row in rows)
    paces = [pace for row in rows for pace in row["pace_gflops"].values()]  # torch's small product before and after each
    probed = name == "torch" and environment["device"] == "cpu"  # Keras's dispatch swamps it: no pace (tf_impl.bench)
    assert all(pace > 0 for pace in paces) if probed else set(paces) == {None}
    profiled = [row for row in rows if row["task"] == "train_step" and row["mode"] == {"torch": "eager", "tf": "function"}[name]]
    assert bool(profiled) == (name == "torch" or backend == "tensorflow")  # Keras on JAX or torch: no profiler split
    assert all(row["product_ms"] > 0 and row["other_ms"] > 0 for row in profiled)
    assert not any("product_ms" in row for row in rows if row not in profiled)  # compiled modes, greedy decoding
    assert not list(tmp_path.rglob("*.tmp*"))


def test_the_op_count_is_every_op_of_a_train_step(stack):
    """The ops one eager train step dispatches follow the unrolled decoder: each further source and target step adds
    the same number (a count that took in one-off work, such as the first step's Adam state, would not)."""
    from shared import stacks
    from shared.specs import Sizes
    from shared.verify.fixtures import synthetic_batch

    stack_bench = stacks.import_module("torch" if stack.__name__ == "torch_impl" else "tf", "bench")
    name = "reverse_bahdanau"
    counts = [stack_bench.count_ops(name, "ours", synthetic_batch(name, Sizes(2, steps, steps))) for steps in (2, 3, 4)]
    assert counts[0] > 100 and counts[2] - counts[1] == counts[1] - counts[0] > 0, counts


def test_the_op_profile_sees_the_products_the_listing_repeats(stack):
    """reverse_bahdanau's listing projects the encoder's outputs at every decoder step, ours once: the profiler
    counts more products a call in the listing's step (torch eager, a tf.function) than in ours's, and both steps
    spend time in products and in other ops. A compiled mode gets no profile (its kernels fuse the ops)."""
    from shared import stacks
    from shared.specs import Sizes
    from shared.verify.fixtures import synthetic_batch

    stack_bench = stacks.import_module("torch" if stack.__name__ == "torch_impl" else "tf", "bench")
    name, arrays = "reverse_bahdanau", synthetic_batch("reverse_bahdanau", Sizes(16, 8, 8))
    split = {}
    mode = "eager" if stack.__name__ == "torch_impl" else "function"
    for impl in ("ours", "as_written"):
        call = stack_bench.make_call(name, "train_step", impl, mode, arrays, 8)[0]
        call()  # Adam's state, the trace
        split[impl] = stack_bench.op_profile(call, mode)
    if split["ours"] is None:  # Keras on JAX or torch: no profile
        assert split["as_written"] is None and stack_bench.backend() not in ("tensorflow", "torch")
        return
    assert xla_profile.sees_the_products_the_listing_repeats(split), split
    assert stack_bench.op_profile(call, "compile" if stack.__name__ == "torch_impl" else "eager") is None
