"""The report's vocabulary: the fields a result row, an equality file and a summary must hold, the order
and print format of every column, and `Inputs`, everything read."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared import catalogue, stacks
from shared.tools.bench_profiles import ALL_MODES, STACK_MODES

STACKS, LABELS = stacks.STACKS, stacks.LABELS
MODES = STACK_MODES
# the mode the headline compares ours with as written in: how each stack's code usually runs (PyTorch
# eagerly, as the documents' listings; Keras in a tf.function, as the TF tutorial's train_step)
SPEEDUP_MODE = {"torch": "eager", "tf": "function"}
TASKS = ("train_step", "greedy")
CHOICES = {
    "stack": STACKS,
    "impl": ("ours", "as_written"),
    "task": TASKS,
    "device": ("cpu", "gpu"),
    "sweep": ("document", "seq_len", "batch", "floor"),  # floor: the step at batch 1, the framework's fixed cost
    "status": ("ok", "failed"),
}
SIZES = ("batch", "src_len", "tgt_len")
ROW_FIELDS = ("model", "stack", "mode", "impl", "task", "device", "threads", "dtype", "sweep", *SIZES, "status")
INTEGER_FIELDS = ("threads", "batch", "src_len", "tgt_len")
NUMBER_FIELDS = ("median_ms", "q25_ms", "q75_ms", "min_ms", "repeats", "calls_per_sample", "compile_s", "tokens_per_s",
                 "peak_mem_mb", "gflop", "ops", "compiled_gflop", "compiled_mb", "compiled_product_gflop",
                 "product_ms", "other_ms", "product_ops",
                 "paired_speedup", "paired_speedup_q25", "paired_speedup_q75")  # fmt: skip
FILE_FIELDS = ("machine", "profile", "matmul_gflops", "created", "commit", "file")  # taken from the row's file
# what a row says of its own measurement: why it is disturbed ("" when it is not, None in a row without the load
# probes' `others_busy`: a schema-1 file's older rows) and which path ran (the bench's `path`, as text)
RUN_NOTES = ("disturbed", "ran")
COLUMNS = (*ROW_FIELDS, *NUMBER_FIELDS, "error", *RUN_NOTES, *FILE_FIELDS)
RUN_KEY = [name for name in COLUMNS if name not in (*NUMBER_FIELDS, "status", "error", *RUN_NOTES, *FILE_FIELDS[1:])]
CONTEXT = ("device", "machine", "threads", "dtype")  # one measurement setting (profiles only choose the cases)
SETTING = ["model", "machine", "device", "threads", "dtype", *SIZES]  # what two compared times share
SWEEP_SIZE = {"seq_len": "src_len", "batch": "batch"}  # the size a sweep varies
QUANTITIES = ("logits", "attention", "context", "loss", "grads", "greedy attention")
QUANTITIES += ("loss curve", "trained weights", "clipped steps")  # after training
ORDER = {
    "model": tuple(catalogue.CATALOGUE),
    "stack": STACKS,
    "mode": ALL_MODES,
    "impl": CHOICES["impl"],
    "task": TASKS,
    "device": CHOICES["device"],
    "dtype": ("float64", "float32"),
    "quantity": QUANTITIES,
}
RATIO_BAND = 1.25  # torch/TF best-mode ratios beyond this, either way, are listed
EQUALITY_FIELDS = {
    "outputs": ("model", "dtype", "quantity", "max_abs"),
    "greedy": ("model", "dtype", "tokens_equal"),
    "training": ("model", "dtype", "quantity", "max_abs"),
    "curves": ("model", "dtype", "torch", "tf"),
    "attention": ("model", "torch", "tf"),
}
SUMMARY_FIELDS = ("model", "stack", "dataset", "steps")
RECORD_FIELDS = ("run", "model", "document", "trained_in", "steps", "split", "stacks", "sentences")
BACKENDS = dict(zip(catalogue.KERAS_BACKENDS, ("Keras on TensorFlow", "Keras on JAX", "Keras on torch"), strict=True))
NO_RESULTS = "No benchmark results: no readable result file was found."
NO_GPU = "No GPU results: no run on a machine with a GPU has been recorded."

# How each column is printed in the README (the CSV files keep the numbers); text passes through.
KINDS = {
    "threads": "int",
    "batch": "int",
    "src_len": "int",
    "tgt_len": "int",
    "steps": "int",
    "median ms": "sig3",
    "q25 ms": "sig3",
    "q75 ms": "sig3",
    "torch ms": "sig3",
    "TF ms": "sig3",
    "tokens/s": "int",
    "compile s": "f2",
    "peak MB": "int",
    "torch/TF": "ratio",
    "ours/as-written": "ratio",
    "floor torch ms": "sig3",
    "floor TF ms": "sig3",
    "slower floor / faster step": "ratio",
    "floors' share of the gap": "share",
    "ops torch": "int",
    "ops TF": "int",
    "µs/op torch": "sig3",
    "µs/op TF": "sig3",
    "GEMM GFLOP/s torch": "int",
    "GEMM GFLOP/s TF": "int",
    "ours/as-written torch": "ratio",
    "ours/as-written TF": "ratio",
    "FLOP ceiling": "ratio",
    "bytes ratio": "ratio",
    "ceiling after floor": "ratio",
    "within spread": "ratio",
    "sibling ceiling": "ratio",
    "ceiling with other ops": "ratio",
    "as-written ms": "sig3",
    "floor ms": "sig3",
    "as-written floor ms": "sig3",
    "lowest ours/as-written": "ratio",
    "mode/eager": "ratio",
    "% matmul peak": "pct",
    "max abs diff float64": "err",
    "final loss": "sig3",
    "final ppl": "f3",
    "token acc": "share",
    "seq acc": "share",
    "BLEU": "f1",
    "beam BLEU": "f1",
    "doc-protocol loss": "f3",
    "doc-protocol ppl": "f2",
}
FORMATS = {"err": "{:.1e}", "ratio": "{:.2f}x", "pct": "{:.1f}%", "int": "{:.0f}", "f1": "{:.1f}", "f2": "{:.2f}"}
FORMATS.update(f3="{:.3f}", f4="{:.4f}", text="{:g}")
HEADLINE_COLUMNS = ["model", "document", "torch ms", "torch mode", "TF ms", "TF mode", "torch/TF"]
HEADLINE_COLUMNS += ["ours/as-written torch", "ours/as-written TF", "lowest ours/as-written", "lowest in", "FLOP ceiling"]
HEADLINE_COLUMNS += ["max abs diff float64", "quantity", "greedy ids equal"]
# each GPU machine's headline: the models it timed, each stack's best mode and ours/as-written in it
GPU_HEADLINE_COLUMNS = ["machine", "model", "torch ms", "torch mode", "TF ms", "TF mode", "torch/TF", "ours/as-written torch",
                        "ours/as-written TF", "lowest ours/as-written", "lowest in"]  # fmt: skip
SPEEDUP_TARGET = 1.5  # ours/as-written wanted wherever the FLOP ceiling, after the step's floor, allows it
SPEED_COLUMNS = {
    "model": "model",
    "stack": "stack",
    "mode": "mode",
    "impl": "impl",
    "device": "device",
    "machine": "machine",
    "threads": "threads",
    "dtype": "dtype",
    "sizes": "sizes",
    "median_ms": "median ms",
    "q25_ms": "q25 ms",
    "q75_ms": "q75 ms",
    "tokens_per_s": "tokens/s",
    "compile_s": "compile s",
    "peak_mem_mb": "peak MB",
    "torch/TF": "torch/TF",
    "ours/as-written": "ours/as-written",
    "mode/eager": "mode/eager",
    "% matmul peak": "% matmul peak",
    "status": "status",
    "error": "error",
    "disturbed": "flag",
    "ran": "ran",
}


@dataclass
class Inputs:
    """Everything read: the benchmark rows (one DataFrame), their files' environments, the equality
    measurements (None: no file), the training summaries (None: no folder) and the notes on what was
    missing or unreadable."""

    rows: object
    environments: list[dict]
    equality: dict | None
    equality_name: str
    summaries: list[dict] | None
    missing: list[str]
    backends: dict = field(default_factory=dict)  # Keras backend -> its equality measurements (TensorFlow's too)
    attention: list[dict] = field(default_factory=list)  # trained runs' attention records (shared.train.attention_samples)
