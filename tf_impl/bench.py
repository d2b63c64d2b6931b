"""What `rosetta bench` (shared/bench.py) needs from TensorFlow/Keras: thread and device setup, the timed
calls in each mode (eager, tf.function, XLA), peak memory and a matmul peak.

Mirrors torch_impl/bench.py function for function. FLOPs are counted once, by the torch stack (the
same model computes the same products); `count_gflop` here returns None and the report fills it in.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from shared import bench as shared_bench
from shared import fixtures
from tf_impl import contract
from tf_impl.train import Trainer

_GPUS = tf.config.list_physical_devices("GPU")


def configure(threads: int) -> str:
    """Fix the thread pools (intra-op `threads`, inter-op 1); on a GPU turn TF32 off. The device: cpu or gpu.

    Once TensorFlow has run an op its pools are fixed: the bench process sets TF_NUM_INTRAOP_THREADS
    before importing it, and `thread_settings` records what holds.
    """
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # already initialised (a test process): keep and record the pools as they are
        pass
    if _GPUS:
        tf.config.experimental.enable_tensor_float_32_execution(False)
    return "gpu" if _GPUS else "cpu"


def gpu_name() -> str | None:
    return tf.config.experimental.get_device_details(_GPUS[0]).get("device_name", _GPUS[0].name) if _GPUS else None


def versions() -> dict[str, str]:
    return {"tensorflow": tf.__version__, "keras": keras.__version__}


def thread_settings() -> dict[str, int]:
    threading = tf.config.threading
    return {"intra_op": threading.get_intra_op_parallelism_threads(), "inter_op": threading.get_inter_op_parallelism_threads()}


def matmul_gflops(device: str) -> float:
    """The median float32 GFLOP/s of a square matmul (shared.bench.MATMUL_SIZE): this machine's peak."""
    n = shared_bench.MATMUL_SIZE[device]
    a = tf.random.normal((n, n))

    def product() -> None:
        tf.linalg.matmul(a, a)[0, 0].numpy()  # one element back to the host: waits for the product

    return shared_bench.matmul_rate(product, n)


def reset_peak_memory(device: str) -> None:
    if device == "gpu":
        tf.config.experimental.reset_memory_stats("GPU:0")
    shared_bench.reset_peak_rss()


def peak_memory_mb(device: str) -> float | None:
    """Peak bytes since the reset: TensorFlow's allocator on GPU, the process's RSS on CPU (MiB)."""
    if device == "gpu":
        return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    return shared_bench.peak_rss_mb()


def build(name: str, impl: str, device: str = "cpu"):
    """The model at its document's sizes, holding the seeded canonical weights both stacks share."""
    model = contract.build(name, "float32", as_written=impl == "as_written")
    shapes = {key: array.shape for key, array in contract.get_weights(model).items()}
    contract.set_weights(model, fixtures.make_weights(name, shapes))
    return model  # TensorFlow places the variables on the GPU by itself


def make_call(name: str, task: str, impl: str, mode: str, arrays: dict, max_len: int, device: str = "cpu"):
    """A no-argument callable doing one case's unit of work (and waiting for the device)."""
    model = build(name, impl, device)
    if task == "train_step":
        trainer = Trainer(model, name, shared_bench.BENCH_SPEC, mode=mode)
        return lambda: trainer.step(arrays)  # returns a float: waits for the device
    if mode != "eager":  # the unit greedy decoding repeats; bypass Keras's attribute tracking
        object.__setattr__(model, "step", tf.function(model.step, jit_compile=mode == "xla"))
    source = {key: arrays[key] for key in ("src", "src_len")}
    return lambda: contract.greedy(model, name, source, max_len=max_len)  # numpy out: waits for the device


def count_gflop(name: str, task: str, impl: str, arrays: dict, max_len: int) -> None:
    """Not counted here: the torch stack counts each case's FLOPs (the report shares them)."""
    return None
