"""What `rosetta bench` (shared/tools/bench.py) needs from PyTorch: thread and device setup, the timed calls in
each mode (eager, torch.compile), peak memory, a matmul peak, the FLOPs of a case, and which path ran (cuDNN,
Inductor and its graph breaks, `allow_rnn`, CUDA graphs: the cudagraph mode, torch_impl.cuda_graphs).

Mirrors tf_impl/bench.py function for function.
"""

from __future__ import annotations

import math

import torch

from shared.tools import machine, native_stderr
from shared.tools.bench_profiles import BENCH_SPEC
from shared.verify import fixtures
from torch_impl import contract
from torch_impl.train import Trainer, compiled, traces_recurrent_layers

_GPU = torch.cuda.is_available()


def backend() -> str:
    """PyTorch itself (tf_impl's Keras names its backend here)."""
    return "torch"


def configure(threads: int) -> str:
    """Fix the thread count; on a GPU turn TF32 off (float32 matmuls as on the CPU). The device: cpu or gpu."""
    torch.set_num_threads(threads)
    if _GPU:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return "gpu" if _GPU else "cpu"


def gpu_name() -> str | None:
    return torch.cuda.get_device_name() if _GPU else None


def versions() -> dict[str, str]:
    return {"torch": torch.__version__, **({"cuda": torch.version.cuda} if _GPU else {})}


def thread_settings() -> dict[str, int]:
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


def matmul_gflops(device: str, n: int | None = None, repeats: int = 10) -> float:
    """The median float32 GFLOP/s of a square n x n matmul; n defaults to machine.MATMUL_SIZE: this machine's peak
    (machine.PACE_SIZE: the pace probe of machine.slow_phase)."""
    n = n or machine.MATMUL_SIZE[device]
    a = torch.randn(n, n, device="cuda" if device == "gpu" else "cpu")

    def product() -> None:
        a @ a
        if device == "gpu":
            torch.cuda.synchronize()

    return machine.matmul_rate(product, n, repeats)


def pace_gflops(device: str) -> float | None:
    """GFLOP/s on a machine.PACE_SIZE product (median of machine.PACE_REPEATS), the probe of machine.slow_phase: at
    this size waking the intra-op thread is much of the time. None on a GPU."""
    return matmul_gflops(device, machine.PACE_SIZE, machine.PACE_REPEATS) if device == "cpu" else None


def start_case(device: str) -> None:
    """Before a case: reset the peak memory counters and Dynamo's count of graph breaks."""
    if device == "gpu":
        torch.cuda.reset_peak_memory_stats()
    machine.reset_peak_rss()
    torch._dynamo.utils.counters.clear()


def peak_memory_mb(device: str) -> float | None:
    """Peak bytes since the reset: torch's allocator on GPU, the process's RSS on CPU (MiB)."""
    if device == "gpu":
        return torch.cuda.max_memory_allocated() / 2**20
    return machine.peak_rss_mb()


def build(name: str, impl: str, device: str = "cpu") -> torch.nn.Module:
    """The model at its document's sizes, holding the seeded canonical weights both stacks share."""
    model = contract.build(name, "float32", as_written=impl == "as_written")
    shapes = {key: array.shape for key, array in contract.get_weights(model).items()}
    contract.set_weights(model, fixtures.make_weights(name, shapes))
    return model.cuda() if device == "gpu" else model


def make_call(name: str, task: str, impl: str, mode: str, arrays: dict, max_len: int, device: str = "cpu"):
    """(a no-argument callable doing one case's unit of work and waiting for the device, a callable saying which
    path the calls took: `execution_path`, read after them)."""
    model = build(name, impl, device)
    path = lambda: execution_path(model, mode, device)  # noqa: E731  (read after the calls: Dynamo's counters)
    if task == "train_step":
        trainer = Trainer(model, name, BENCH_SPEC, mode=mode)
        return (lambda: trainer.step(arrays)), path  # returns a float: waits for the device
    if mode == "compile":
        model.step = compiled(model.step, device)  # the unit greedy decoding repeats
    source = {key: arrays[key] for key in ("src", "src_len")}
    return (lambda: contract.greedy(model, name, source, max_len=max_len)), path  # numpy out: waits for the device


def execution_path(model: torch.nn.Module, mode: str, device: str) -> dict:
    """Which path the case's calls took, read after them: cuDNN for the recurrent layers (on a GPU, cuDNN on, a
    float32 nn.GRU/LSTM/RNN), the compiler, Dynamo's graph breaks and whether it traced into recurrent layers
    (`allow_rnn`: on the CPU; off, each nn.GRU is a break), CUDA graphs (the cudagraph mode's whole step). A compile
    case in which Dynamo compiled no graph ran eager: RuntimeError (the bench records the case as failed)."""
    recurrent = any(isinstance(module, torch.nn.RNNBase) for module in model.modules())
    is_compiled = mode == "compile"
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    if is_compiled and not torch._dynamo.utils.counters["stats"]["unique_graphs"]:
        raise RuntimeError("torch.compile ran eager: Dynamo compiled no graph for this case (its recompile limit?)")
    return {
        "cudnn": device == "gpu" and recurrent and torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled,
        "compiler": "inductor" if is_compiled else None,
        "graph_breaks": breaks if is_compiled else None,
        "allow_rnn": traces_recurrent_layers(device) if is_compiled else None,
        "cuda_graphs": mode == "cudagraph",
    }


def count_ops(name: str, impl: str, arrays: dict) -> int:
    """The framework ops one eager train step runs (forward, backward, clipping, Adam): the aten operators torch
    dispatches, each one trip through its dispatcher (a compiled mode fuses them; the count is the eager step's)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counter.count += 1
            return func(*args, **(kwargs or {}))

    trainer = Trainer(build(name, impl), name, BENCH_SPEC, mode="eager")
    trainer.step(arrays)  # the first step builds Adam's state: count a later one
    with Counter():
        trainer.step(arrays)
    return Counter.count


PRODUCT_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::mv", "aten::addmv"})


def op_profile(call, mode: str) -> dict | None:
    """torch's profiler over machine.PROFILED_CALLS calls of an eager case: the self time of the matrix products and of
    every other aten op, in ms a call, and the products run (`machine.op_split`). None in a compiled mode (Inductor's
    kernels fuse ops). The profiler's start and stop markers on stderr are left out (native_stderr.NATIVE_CHATTER)."""
    if mode != "eager":
        return None
    with native_stderr.native_stderr_filtered():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            for _ in range(machine.PROFILED_CALLS):
                call()
    events = [event for event in profiler.key_averages() if event.key.startswith("aten::")]
    aten = {event.key: (event.self_cpu_time_total, event.count) for event in events}
    return machine.op_split(aten, PRODUCT_OPS.__contains__, machine.PROFILED_CALLS)


def compiled_cost(name: str, task: str, impl: str, mode: str, arrays: dict) -> None:
    """None: Inductor exposes no cost model of what it compiled (Keras on JAX reports XLA's: tf_impl.bench)."""
    return None


def recurrent_layer_flop(inputs, weight_ih, weight_hh, *args, out_shape=None, **kwargs) -> int:
    """The products of one fused recurrent layer over a sequence (shapes): each step's inputs `[.., I]` and state
    `[.., H]` times the gates' weights `[G H, I]` and `[G H, H]`, 2 FLOPs a multiply-add."""
    rows = math.prod(inputs[:-1])  # T x B
    return 2 * rows * weight_ih[0] * (weight_ih[1] + weight_hh[1])


def recurrent_layer_backward_flop(inputs, weight_ih, weight_hh, *args, out_shape=None, **kwargs) -> int:
    """Its backward: the gates' gradient times each weight (the inputs' and the state's gradients) and each weight's
    gradient (the inputs and states times the gates' gradient): twice the forward's products."""
    return 2 * recurrent_layer_flop(inputs, weight_ih, weight_hh)


# The layers torch's CPU runs as one oneDNN op that torch's FLOP counter does not count (nn.LSTM: `mkldnn_rnn_layer`,
# forward and backward: without these the luong models' counts held their output layers and attention alone;
# docs/measurements.md). nn.GRU and nn.RNN decompose into counted products.
RECURRENT_LAYER_FLOPS = {
    torch.ops.aten.mkldnn_rnn_layer: recurrent_layer_flop,
    torch.ops.aten.mkldnn_rnn_layer_backward: recurrent_layer_backward_flop,
}


def count_gflop(name: str, task: str, impl: str, arrays: dict, max_len: int) -> float:
    """Matmul GFLOP of one case (forward and backward for a train step), counted on the CPU: torch's FLOP counter, and
    for the recurrent layers it cannot see (`RECURRENT_LAYER_FLOPS`) their products."""
    from torch.utils.flop_counter import FlopCounterMode

    model = build(name, impl)
    counter = FlopCounterMode(display=False, custom_mapping=RECURRENT_LAYER_FLOPS)
    with counter:
        if task == "train_step":
            contract.loss_and_grads(model, name, arrays)
        else:
            contract.greedy(model, name, {key: arrays[key] for key in ("src", "src_len")}, max_len=max_len)
    return counter.get_total_flops() / 1e9
