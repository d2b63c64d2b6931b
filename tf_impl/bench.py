"""What `rosetta bench` (shared/tools/bench.py) needs from Keras on its backend (TensorFlow, JAX or torch: KERAS_BACKEND,
tf_impl/keras_compat/backends.py): thread and device setup, the timed calls in each mode (TensorFlow: eager, tf.function,
XLA; JAX: eager, XLA (jit); torch: eager), peak memory, a matmul peak, and which path ran (cuDNN, XLA as Keras
kept it).

Mirrors torch_impl/bench.py function for function. FLOPs are counted once, by the torch stack (the
same model computes the same products); `count_gflop` here returns None and the report fills it in. What a compiler
made of a step is costed here only: XLA's cost model of Keras on JAX's jitted train step (`compiled_cost`).
"""

from __future__ import annotations

import os
import re

import keras

from shared.tools import machine
from shared.tools.bench_profiles import BENCH_SPEC, GREEDY_MODES
from shared.verify import fixtures
from tf_impl import contract
from tf_impl.keras_compat import backends
from tf_impl.train import Trainer


def backend() -> str:
    """Keras's backend in this process (KERAS_BACKEND): tensorflow, jax or torch."""
    return backends.name()


def configure(threads: int) -> str:
    """Fix the thread pools (intra-op and inter-op `threads` each); on a GPU turn TF32 off. The device: cpu or gpu.

    Once TensorFlow has run an op its pools are fixed, and JAX's when it starts: the bench process sets
    TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS and XLA_FLAGS before importing them, and `thread_settings` records
    what holds.
    """
    backends.set_threads(threads)
    if backend() in TRAIN_STEP_PROGRAM:
        _keep_train_step_programs()
    if backends.gpu_name() is None:
        return "cpu"
    backends.full_precision_matmuls()
    return "gpu"


def gpu_name() -> str | None:
    return backends.gpu_name()


def versions() -> dict[str, str]:
    return {**backends.version(), "keras": keras.__version__}


def thread_settings() -> dict:
    return backends.thread_settings()


def matmul_gflops(device: str, n: int | None = None, repeats: int = 10) -> float:
    """The median float32 GFLOP/s of a square n x n matmul; n defaults to machine.MATMUL_SIZE: this machine's peak
    (machine.PACE_SIZE: the pace probe of machine.slow_phase)."""
    n = n or machine.MATMUL_SIZE[device]
    a = keras.random.normal((n, n), dtype="float32")

    def product() -> None:
        keras.ops.convert_to_numpy(keras.ops.matmul(a, a)[0, 0])  # one element back to the host: waits for the product

    return machine.matmul_rate(product, n, repeats)


def pace_gflops(device: str) -> float | None:
    """None: Keras's own dispatch of a machine.PACE_SIZE product (far longer than the product, and spread between
    calls: docs/measurements.md) swamps what machine.slow_phase watches, the few microseconds of waking a thread."""
    return None


def start_case(device: str) -> None:
    """Before a case: reset the peak memory counters."""
    if device == "gpu":
        backends.reset_peak_gpu_memory()
    machine.reset_peak_rss()


def peak_memory_mb(device: str) -> float | None:
    """Peak bytes since the reset: the backend's allocator on GPU (JAX's: since the process began), the
    process's RSS on CPU (MiB)."""
    if device == "gpu":
        return backends.peak_gpu_memory_mb()
    return machine.peak_rss_mb()


def build(name: str, impl: str, device: str = "cpu"):
    """The model at its document's sizes, holding the seeded canonical weights both stacks share."""
    model = contract.build(name, "float32", as_written=impl == "as_written")
    shapes = {key: array.shape for key, array in contract.get_weights(model).items()}
    contract.set_weights(model, fixtures.make_weights(name, shapes))
    return model  # Keras's backend places the variables on the GPU by itself


def make_call(name: str, task: str, impl: str, mode: str, arrays: dict, max_len: int, device: str = "cpu"):
    """(a no-argument callable doing one case's unit of work and waiting for the device, a callable saying which
    path the calls took: `execution_path`, read after them)."""
    model = build(name, impl, device)
    if task == "train_step":
        trainer = Trainer(model, name, BENCH_SPEC, mode=mode)
        kept_xla = lambda: execution_path(model, mode, trainer.keras_model.jit_compile is True)  # noqa: E731  (Keras may turn XLA off)
        return (lambda: trainer.step(arrays)), kept_xla
    keras_backend = backend()
    if mode not in GREEDY_MODES[keras_backend]:
        raise ValueError(f"greedy decoding runs in mode {' or '.join(GREEDY_MODES[keras_backend])} on Keras's "
                         f"{keras_backend} backend, not {mode!r}")  # fmt: skip
    if mode != "eager" and keras_backend == "tensorflow":  # the unit greedy decoding repeats; bypass Keras's attribute tracking
        import tensorflow as tf

        object.__setattr__(model, "step", tf.function(model.step, jit_compile=mode == "xla"))
    source = {key: arrays[key] for key in ("src", "src_len")}
    call = lambda: contract.greedy(model, name, source, max_len=max_len)  # noqa: E731  (numpy out: waits for the device)
    return call, (lambda: execution_path(model, mode, mode == "xla"))


def execution_path(model, mode: str, xla: bool) -> dict:
    """Which path the case's calls took: cuDNN for the recurrent layers (Keras's GRU on TensorFlow on a GPU, when
    its configuration allows), the compiler (`xla`: whether XLA compiled the step, as Keras kept it: Keras turns it
    off for a model that cannot take it), no graph breaks or `allow_rnn` (torch's), no CUDA graphs."""
    compilers = {"tensorflow": "xla" if xla else "tf.function", "jax": "xla (jax.jit)" if xla else "jax eager"}
    return {
        "cudnn": backends.cudnn_recurrent(model),  # False off a GPU
        "compiler": None if mode == "eager" else compilers.get(backend()),
        "graph_breaks": None,
        "allow_rnn": None,
        "cuda_graphs": False,
    }


def count_ops(name: str, impl: str, arrays: dict) -> int | None:
    """The framework ops one eager train step runs (Keras's `train_on_batch`: forward, backward, clipping, Adam), each
    one trip through TensorFlow's eager executor (counted by an op callback, as TensorFlow's debugger sees them; a
    compiled mode fuses them, the count is the eager step's). None on JAX and torch (counted on TensorFlow only)."""
    if backend() != "tensorflow":
        return None
    from tensorflow.python.framework import op_callbacks

    count = [0]

    def counted(*_, **__) -> None:
        count[0] += 1  # returning None keeps the op's outputs

    trainer = Trainer(build(name, impl), name, BENCH_SPEC, mode="eager")
    trainer.step(arrays)  # the first step builds Adam's state: count a later one
    op_callbacks.add_op_callback(counted)
    try:
        trainer.step(arrays)
    finally:
        op_callbacks.remove_op_callback(counted)
    return count[0]


def op_profile(call, mode: str) -> dict | None:
    """The profiler over machine.PROFILED_CALLS calls of a case: the self time of the matrix products and of every other
    op, in ms a call, and the products run (`machine.op_split`). TensorFlow's in a tf.function (products: `MatMul`,
    `BatchMatMul`, `Einsum` and oneDNN's forms of them); XLA's CPU runtime's in a compiled step, on TensorFlow and on
    JAX (`_xla_op_profile`). None eagerly (TensorFlow's statistics give eager ops no time) and on Keras's torch backend."""
    if mode == "xla" and backend() in TRAIN_STEP_PROGRAM:
        return _xla_op_profile(call)
    if mode != "function" or backend() != "tensorflow":
        return None
    ops = _traced(call, _framework_op_records)
    return None if ops is None else machine.op_split(ops, _is_product, machine.PROFILED_CALLS)


TRAIN_STEP_PROGRAM = {  # the XLA module of Keras's compiled train step, by backend (a regular expression)
    "jax": "jit_train_step",  # jax.jit's name
    "tensorflow": "a_inference_one_step_on_data_.*XlaMustCompile",  # the tf.function Keras compiles, as TensorFlow names it
}
_programs_folder: list[str] = []  # where XLA writes it (`_keep_train_step_programs`), once set


def _keep_train_step_programs() -> None:
    """Have XLA write each compiled train step's optimized program as text (XLA_FLAGS, which JAX reads when it starts
    its CPU client, at the first op, and TensorFlow at its first compilation) into a temporary folder removed at exit:
    `_xla_op_profile` finds its products there. A process whose XLA already read its flags writes none, and its cases go
    unprofiled."""
    if _programs_folder:
        return
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="rosetta-xla-programs-")
    atexit.register(shutil.rmtree, folder, True)
    _programs_folder.append(folder)
    dump = f"--xla_dump_to={folder} --xla_dump_hlo_as_text --xla_dump_hlo_module_re={TRAIN_STEP_PROGRAM[backend()]}"
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [dump, os.environ.get("XLA_FLAGS", "")]))


def _xla_op_profile(call) -> dict | None:
    """The backend's profiler over machine.PROFILED_CALLS calls of a compiled train step: each op's time as XLA's CPU
    runtime ran it (its thunks' trace events), a product being a dot, or a fusion around one, in the optimized program
    XLA wrote for the step (`_program_kinds`); the loops' own thunks left out (their bodies' ops are counted). None
    where the program was not written."""
    thunks = _traced(call, _thunk_records)
    kinds = {module: _program_kinds(module, set(ops)) for module, ops in thunks.items()}
    if not thunks or None in kinds.values():
        return None
    ops = {
        (module, op): record
        for module, records in thunks.items()
        for op, record in records.items()
        if kinds[module][op] != "control"
    }
    return machine.op_split(ops, lambda key: kinds[key[0]][key[1]] == "product", machine.PROFILED_CALLS)


def _traced(call, read):
    """`read(folder)` of the trace the backend's profiler writes into a temporary `folder` over machine.PROFILED_CALLS
    calls of `call`."""
    import tempfile

    if backend() == "jax":
        import jax

        start, stop = jax.profiler.start_trace, jax.profiler.stop_trace
    else:
        import tensorflow as tf

        start, stop = tf.profiler.experimental.start, tf.profiler.experimental.stop
    with tempfile.TemporaryDirectory() as folder:
        start(folder)
        try:
            for _ in range(machine.PROFILED_CALLS):
                call()
        finally:
            stop()
        return read(folder)


def _thunk_records(folder: str) -> dict[str, dict[str, tuple[float, int]]]:
    """(time in us, runs) per op of each train-step program (TRAIN_STEP_PROGRAM) in the trace under `folder`, by
    program: JAX's trace events, or TensorFlow's XLA space (each event names its program and op)."""
    from pathlib import Path

    pattern = re.compile(TRAIN_STEP_PROGRAM[backend()])
    records: dict[str, dict[str, tuple[float, int]]] = {}
    for module, op, us in _xla_op_events(Path(folder)):
        if pattern.match(module):
            ops = records.setdefault(module, {})
            total_us, runs = ops.get(op, (0.0, 0))
            ops[op] = (total_us + us, runs + 1)
    return records


def _xla_op_events(folder):
    """(program, op, duration in us) of each XLA op event under `folder`: JAX's `*.trace.json.gz`, else TensorFlow's
    `*.xplane.pb` (the profiler's own record, read with TensorFlow's copy of its schema)."""
    import gzip
    import json

    traces = list(folder.rglob("*.trace.json.gz"))
    for path in traces:
        with gzip.open(path) as trace:
            for event in json.load(trace)["traceEvents"]:
                args = event.get("args") or {}
                if event.get("ph") == "X" and "hlo_module" in args and "hlo_op" in args:
                    yield args["hlo_module"], args["hlo_op"], float(event.get("dur", 0.0))
    if traces:
        return
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    for path in folder.rglob("*.xplane.pb"):
        space = xplane_pb2.XSpace.FromString(path.read_bytes())
        for plane in space.planes:
            for line in plane.lines:
                for event in line.events:
                    stats = _xplane_stats(plane, event)
                    if "hlo_module" in stats and "hlo_op" in stats:
                        yield stats["hlo_module"], stats["hlo_op"], event.duration_ps / 1e6


def _xplane_stats(plane, event) -> dict[str, str]:
    """An XSpace event's string statistics by name (its own and its metadata's; a reference names another metadata)."""
    stats = {}
    for stat in [*plane.event_metadata[event.metadata_id].stats, *event.stats]:
        value = plane.stat_metadata[stat.ref_value].name if stat.HasField("ref_value") else stat.str_value
        stats[plane.stat_metadata[stat.metadata_id].name] = value
    return stats


def _program_kinds(module: str, ops: set[str]) -> dict[str, str] | None:
    """Each op of the newest optimized program XLA wrote for `module` that holds every op in `ops`
    (`_keep_train_step_programs`): "product", "control" or "other" (`hlo_kinds`); None where no written program holds
    them."""
    from pathlib import Path

    if not _programs_folder:
        return None
    written = Path(_programs_folder[0]).glob(f"*.{module}.*after_optimizations.txt")
    for path in sorted(written, key=lambda path: path.stat().st_mtime, reverse=True):
        kinds = hlo_kinds(path.read_text())
        if ops <= kinds.keys():
            return kinds
    return None


_HLO_OP = re.compile(r"^\s+(?:ROOT )?%?([\w.\-]+) = .*? ([a-z][\w\-]*)\(")
_CALLED = re.compile(r"calls=%?([\w.\-]+)")
CONTROL_OPCODES = {"while", "conditional", "call"}


def hlo_kinds(program: str) -> dict[str, str]:
    """Each instruction of an HLO `program` (XLA's text) by what it is: "product" (a dot or convolution, a fusion whose
    computation holds one, a custom call to a matmul), "control" (a loop, conditional or call: their computations'
    instructions are listed too) or "other"."""
    computations: dict[str, list[tuple[str, str, str]]] = {}
    body: list[tuple[str, str, str]] = []
    for line in program.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            body = computations.setdefault(line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%"), [])
        elif found := _HLO_OP.match(line):
            body.append((found[1], found[2], line))
    has_product: dict[str, bool] = {}

    def is_product(opcode: str, line: str) -> bool:
        if opcode in ("dot", "convolution"):
            return True
        if opcode == "custom-call":
            return "matmul" in line.lower()
        called = _CALLED.search(line)
        return opcode == "fusion" and called is not None and computation_has_product(called[1])

    def computation_has_product(name: str) -> bool:
        if name not in has_product:
            has_product[name] = any(is_product(opcode, line) for _, opcode, line in computations.get(name, ()))
        return has_product[name]

    return {
        name: "product" if is_product(opcode, line) else "control" if opcode in CONTROL_OPCODES else "other"
        for instructions in computations.values()
        for name, opcode, line in instructions
    }


def _is_product(op_type: str) -> bool:
    """Whether a TensorFlow op type is a matrix product: `MatMul`, `BatchMatMulV2`, `Einsum`, oneDNN's `_Mkl...` forms."""
    return "MatMul" in op_type or "Einsum" in op_type


def _framework_op_records(folder: str) -> dict[str, tuple[float, int]] | None:
    """(self time in us, runs) per op type of the trace under `folder`, from TensorFlow's own conversion of it (the profiler
    plugin's framework op statistics; None where this TensorFlow lacks it). The idle time is left out."""
    import json
    from pathlib import Path

    try:
        from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin
    except ImportError:
        return None
    traces = [str(path) for path in Path(folder).rglob("*.xplane.pb")]
    if not traces:
        return None
    data, ok = plugin.xspace_to_tools_data(traces, "framework_op_stats", {})
    if not ok:
        return None
    table = json.loads(data)[0]
    columns = [column["id"] for column in table["cols"]]
    records: dict[str, tuple[float, int]] = {}
    for row in table["rows"]:
        cells = dict(zip(columns, (cell.get("v") for cell in row["c"]), strict=True))
        if cells["type"] != "IDLE":
            self_us, runs = records.get(cells["type"], (0.0, 0))
            records[cells["type"]] = (self_us + cells["total_self_time"], runs + int(cells["occurrences"]))
    return records


def compiled_cost(name: str, task: str, impl: str, mode: str, arrays: dict) -> dict | None:
    """What XLA made of a train step's compiled forward and backward (`backends.compiled_cost`) in mode xla: on JAX its
    cost model (GFLOP after XLA's rewrites, MB read and written), on TensorFlow the GFLOP of its optimized program's
    products; None for other cases and on Keras's torch backend. Costed with
    every recurrent layer unrolled: XLA's cost model counts a loop's body once, whatever its trip count (a 10-step
    scan costs what one step does), while unrolled every step is counted, and merged where XLA merges it."""
    if task != "train_step" or mode != "xla":
        return None
    model = build(name, impl)
    for layer in backends.all_layers(model):
        if isinstance(layer, keras.layers.RNN):
            layer.unroll = True
    return backends.compiled_cost(*contract.loss_closure(model, name, arrays))


def count_gflop(name: str, task: str, impl: str, arrays: dict, max_len: int) -> None:
    """Not counted here: the torch stack counts each case's FLOPs (the report shares them)."""
    return None
