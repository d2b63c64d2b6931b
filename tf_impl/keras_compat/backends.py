"""What differs between Keras 3's backends (TensorFlow, JAX, torch), in one place: gradients outside `fit`, the
device, float64 on JAX. The models, `fit` and TorchAdam need none of it: they are Keras ops alone.

Keras picks its backend from `KERAS_BACKEND` when it is first imported (tf_impl defaults it to "tensorflow").
Stack-specific: torch_impl is torch itself.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import re
import sys
from collections.abc import Callable

import keras
import numpy as np

from shared.catalogue import KERAS_BACKENDS as BACKENDS


def name() -> str:
    """The backend Keras runs on: one of BACKENDS."""
    return keras.backend.backend()


def products_per_step() -> bool:
    """Whether a product over a whole sequence runs faster split into one per step: on JAX, whose XLA CPU runtime
    takes document 003's output layer and its LSTMs' input projections, and document 001's Luong GRUs
    (`seq2seq.run_gru`), slower as one product; TensorFlow and torch take the one product (docs/measurements.md)."""
    return name() == "jax"


def unroll_recurrences() -> bool:
    """Whether our LSTM stack (`TorchLSTM`) unrolls its loops over time (`unroll=True`): on JAX with a GPU, where every
    shape is known when JAX traces a step. There XLA's loop pays for each turn (its condition, a launch per op) where
    the unrolled steps fuse: document 003's luong_dot train step runs faster so, for a longer first compile. Our GRUs
    keep the scan: unrolled, document 001's reverse_bahdanau gained nothing beyond the spread, and Keras 3.15's
    unrolled loop on JAX ignores `zero_output_for_mask` (`TorchLSTM` zeroes its padded steps itself). On JAX's CPU the
    scan is as fast (docs/measurements.md), and TensorFlow traces lengths that vary as None, which no unrolled loop
    takes."""
    return name() == "jax" and gpu_name() is not None


def check_dtype(dtype: str) -> None:
    """Make a float64 model compute in float64 on this backend, or say why it cannot (ValueError).

    JAX computes float64 only with its x64 on (JAX_ENABLE_X64=1). And Keras 3.15's type promotion maps float64 to
    float32 on every backend but TensorFlow (`keras.backend.result_type`; keras-team/keras#23704): `ops.matmul`
    on torch and `ops.tanh` on JAX return float32 for float64 inputs, so a float64 model would silently
    compute in float32 (docs/measurements.md). For a float64 model this keeps float64 in that promotion table, a
    Keras internal; float32 models are untouched.
    """
    if dtype != "float64" or name() == "tensorflow":
        return
    if name() == "jax":
        import jax

        if not jax.config.jax_enable_x64:
            raise ValueError("float64 on Keras's JAX backend needs JAX's x64: set JAX_ENABLE_X64=1 before JAX starts")
    from keras.src.backend.common import dtypes

    table = getattr(dtypes, "BIT64_TO_BIT32_DTYPE", None)
    if not isinstance(table, dict):
        raise ValueError(
            f"float64 on Keras's {name()} backend: this Keras's type promotion is unknown (float64 may compute as float32)"
        )
    table["float64"] = "float64"


_LAST_JAX_STEP: list = []  # [(compute_loss, variable ids, jitted)]: the last one only, so nothing accumulates


def _jax_value_and_gradients(compute_loss: Callable, variables: tuple):
    """jax.jit(jax.value_and_grad) of `compute_loss` over `variables`' values, compiled once while the same
    function and variables come again (a training loop passing one function each step compiles once)."""
    key = tuple(map(id, variables))
    if _LAST_JAX_STEP and _LAST_JAX_STEP[0][0] is compute_loss and _LAST_JAX_STEP[0][1] == key:
        return _LAST_JAX_STEP[0][2]
    import jax

    def loss_of(values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
            return compute_loss()

    jitted = jax.jit(jax.value_and_grad(loss_of))
    _LAST_JAX_STEP[:] = [(compute_loss, key, jitted)]
    return jitted


def compiled_cost(compute_loss: Callable, variables: list) -> dict | None:
    """What XLA made of the compiled program of `compute_loss()` and its gradients. On JAX, its cost model of
    value_and_gradients' jitted function (lowered and compiled at the variables' values): the GFLOP of every op, not
    only the products, after XLA's own rewrites (a product computed twice is computed once), and the MB its ops read
    and write. On TensorFlow, which exposes no cost model: the GFLOP of the products (`dot`s) of its optimized program
    (`compiled_products`), merged as XLA merged them. None on torch (Inductor exposes neither)."""
    if name() == "tensorflow":
        return {"compiled_product_gflop": _tensorflow_compiled_products(compute_loss, variables)}
    if name() != "jax":
        return None
    values = [variable.value for variable in variables]
    cost = _jax_value_and_gradients(compute_loss, tuple(variables)).lower(values).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost  # older jax: one dict per device
    return {"compiled_gflop": cost["flops"] / 1e9, "compiled_mb": cost["bytes accessed"] / 1e6}


def _tensorflow_compiled_products(compute_loss: Callable, variables: list) -> float:
    """GFLOP of the products of `compute_loss()` and its gradients as TensorFlow's XLA compiles them (jit_compile)."""
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def loss_and_gradients():
        with tf.GradientTape() as tape:
            loss = compute_loss()
        return loss, tape.gradient(loss, variables)

    return compiled_products(loss_and_gradients.experimental_get_compiler_ir()(stage="optimized_hlo")) / 1e9


_HLO_SHAPE = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = \w+\[([\d,]*)\]\S* (\w[\w-]*)\(([^)]*)\)(.*)$")


def compiled_products(hlo: str) -> float:
    """The FLOPs of every `dot` of an HLO module's text: 2 x the output's elements x the sizes of the left operand's
    contracting dimensions (the operands' shapes read from the instructions that define them)."""
    shapes, flops = {}, 0.0
    for line in hlo.splitlines():
        found = _HLO_SHAPE.match(line)
        if not found:
            continue
        instruction, dims, opcode, operands, attributes = found.groups()
        shape = [int(size) for size in dims.split(",") if size]
        shapes[instruction] = shape
        if opcode == "dot":
            left = shapes[operands.split(",")[0].strip().lstrip("%")]
            contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", attributes).group(1)
            flops += 2.0 * math.prod(shape) * math.prod(left[int(axis)] for axis in contracting.split(",") if axis)
    return flops


def jax_inference(model, compute: Callable, key: str = "run") -> Callable:
    """`compute(tensors)` (a pure function of `model`'s variables and `tensors`, a structure of arrays: inference, no
    state changes) jitted on JAX over the variables' current values; one jitted function per model and `key`, kept on
    the model (the first `compute` of a key stands for every later one: call it with the same computation)."""
    compiled = model.__dict__.setdefault("_rosetta_jax_inference", {})  # past Keras's attribute tracking
    if key not in compiled:
        import jax

        variables = list(model.variables)

        def outputs_of(values, tensors):
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                return compute(tensors)

        compiled[key] = variables, jax.jit(outputs_of)
    variables, jitted = compiled[key]
    return lambda tensors: jitted([variable.value for variable in variables], tensors)


def value_and_gradients(compute_loss: Callable, variables: list) -> tuple[object, list]:
    """`compute_loss()` and its gradient with respect to each of `variables` (Keras variables), dense (an
    Embedding's IndexedSlices summed per row, as torch reports it); None for a variable the loss does not use."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = compute_loss()
        # an Embedding's IndexedSlices made dense, repeats summed per row (optim.dense, which imports this module)
        return loss, [None if g is None else tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
    if backend == "jax":
        return _jax_value_and_gradients(compute_loss, tuple(variables))([variable.value for variable in variables])
    if backend == "torch":
        import torch

        loss = compute_loss()
        return loss, list(torch.autograd.grad(loss, [variable.value for variable in variables], allow_unused=True))
    raise ValueError(f"Keras backend {backend!r} is not one of {', '.join(BACKENDS)}")


def gpu_name() -> str | None:
    """The first GPU this backend sees (each places its arrays there by itself), or None."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return tf.config.experimental.get_device_details(gpus[0]).get("device_name", gpus[0].name) if gpus else None
    if backend == "jax":
        import jax

        first = jax.devices()[0]
        return first.device_kind if first.platform == "gpu" else None
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def device() -> str:
    """Where Keras computes: "cpu", or "gpu (<name>)" for the first GPU the backend sees."""
    gpu = gpu_name()
    return f"gpu ({gpu})" if gpu else "cpu"


def version() -> dict[str, str]:
    """The backend's framework and its version, e.g. {"jax": "0.10.2"}."""
    module = importlib.import_module(name())
    return {name(): module.__version__}


def set_threads(threads: int) -> None:
    """Fix the backend's CPU thread pools where they can still change (TensorFlow's before its first op,
    torch's any time, JAX's before its CPU client starts, at the first op). XLA sizes JAX's pool by the CPUs the
    process may run on, as no flag can (shared.tools.machine.thread_environment): below the machine's count, the
    process is pinned to `threads` of them.

    TensorFlow gets `threads` in both of its pools, as it configures itself on a machine of that many cores: a
    tf.function's independent ops then run side by side. An inter-op pool of 1 (every op in turn, each split over
    the intra-op pool) ran the reverse task's small steps far slower (docs/measurements.md)."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # already initialised (a test process): keep and record the pools as they are
            pass
    elif backend == "torch":
        import torch

        torch.set_num_threads(threads)
    elif backend == "jax" and hasattr(os, "sched_setaffinity") and threads < len(os.sched_getaffinity(0)):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])


def thread_settings() -> dict[str, int | str]:
    """The thread pools that hold: TensorFlow's and torch's as they report them; JAX's as XLA_FLAGS and the CPUs the
    process may run on set them."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        pools = tf.config.threading
        return {"intra_op": pools.get_intra_op_parallelism_threads(), "inter_op": pools.get_inter_op_parallelism_threads()}
    if backend == "jax":
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return {"xla_flags": os.environ.get("XLA_FLAGS", ""), "cpus": cpus}
    import torch

    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


def full_precision_matmuls() -> None:
    """On a GPU, float32 matmuls in float32 (TF32 off), as on the CPU and as torch_impl's bench sets."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
    elif backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    else:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def reset_peak_gpu_memory() -> None:
    """Start the GPU's peak-memory count again (JAX's cannot be reset: its peak is the process's)."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats("GPU:0")
    elif backend == "torch":
        import torch

        torch.cuda.reset_peak_memory_stats()


def peak_gpu_memory_mb() -> float | None:
    """The GPU allocator's peak bytes in MiB (JAX: since the process began, as its allocator counts them)."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    if backend == "jax":
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        return stats["peak_bytes_in_use"] / 2**20 if "peak_bytes_in_use" in stats else None
    import torch

    return torch.cuda.max_memory_allocated() / 2**20


def cudnn_recurrent(model) -> bool:
    """Whether a Keras GRU of `model` runs cuDNN's kernel: Keras's TensorFlow backend on a GPU, a layer allowed it
    (`use_cudnn`, no recurrent dropout) and the configuration cuDNN computes (tanh, sigmoid, bias, reset after, not
    unrolled). Our LSTM and RNN cells keep torch's two biases: cuDNN's Keras path is never theirs."""
    if name() != "tensorflow" or gpu_name() is None:
        return False
    grus = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.GRU)]
    return any(_cudnn_gru(layer) for layer in grus)


def _cudnn_gru(layer) -> bool:
    cell = layer.cell
    activations = (keras.activations.serialize(cell.activation), keras.activations.serialize(cell.recurrent_activation))
    allowed = layer.use_cudnn in ("auto", True) and not cell.recurrent_dropout and not layer.unroll
    return allowed and activations == ("tanh", "sigmoid") and cell.use_bias and cell.reset_after


def all_layers(model) -> list:
    """Every layer under `model`, itself included."""
    return [model, *model._flatten_layers(include_self=False)] if hasattr(model, "_flatten_layers") else [model]


def exact_float64(model) -> int:
    """Every float64 layer under `model` whose Keras arithmetic rounds a constant to float32, given the float64
    constant; returns how many it changed (float32 layers are left as they are: they round alike).

    On TensorFlow, Keras casts Python floats to a tensor's dtype through a float32 tensor first
    (tensorflow/tensorflow#35938, #64548), so a float64 model computes with float32-rounded constants:
    - `keras.layers.MultiHeadAttention` scales its queries by `ops.cast(1/sqrt(key_dim))` (1/sqrt(5) is no float32
      number): 7e-9 off torch's float64 attention;
    - `keras.activations.gelu` runs `tf.nn.gelu`, whose 1/sqrt(2) is cast alike: 5e-9 off torch's exact gelu;
    - on JAX, MultiHeadAttention's fused path is `jax.nn.dot_product_attention`, whose softmax always runs in
      float32: 1e-8 off. A float64 layer there takes Keras's explicit path (its attention scores computed and
      dropped), the one it takes anyway when asked for the scores.
    Any is enough to hide a real mismatch in a 1e-12 proof. A numpy float64 scale casts exactly; the gelu is
    given in float64 (`exact_gelu`).
    """
    changed = 0
    for layer in (layer for layer in all_layers(model) if str(layer.compute_dtype) == "float64"):
        if isinstance(layer, keras.layers.MultiHeadAttention):
            layer._inverse_sqrt_key_dim = np.float64(1.0) / np.sqrt(np.float64(layer.key_dim))
            if name() == "jax":
                layer._compute_attention = _explicit_attention(layer._compute_attention)
            changed += 1
        if isinstance(layer, keras.layers.Dense) and layer.activation is keras.activations.gelu:
            layer.activation = exact_gelu
            changed += 1
    return changed


def _explicit_attention(compute):
    """A MultiHeadAttention's `_compute_attention` that always takes the explicit path (scores asked for)."""

    def explicit(query, key, value, attention_mask=None, training=None, return_attention_scores=False, **options):
        output, scores = compute(query, key, value, attention_mask=attention_mask, training=training,
                                 return_attention_scores=True, **options)  # fmt: skip
        return output, scores if return_attention_scores else None

    return explicit


def exact_gelu(x):
    """`gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))` with its constant in float64 (torch's `F.gelu`)."""
    x = keras.ops.convert_to_tensor(x)
    return 0.5 * x * (1.0 + keras.ops.erf(x * np.sqrt(np.float64(0.5))))


@contextlib.contextmanager
def float64_policy():
    """Keras 3's dtype policy and floatx (a `keras.Input`'s default dtype), and legacy tf_keras's floatx where
    loaded, set to float64 inside."""
    previous, previous_floatx = keras.config.dtype_policy(), keras.config.floatx()
    legacy = sys.modules.get("tf_keras")
    legacy_previous = legacy.backend.floatx() if legacy else None
    keras.config.set_dtype_policy("float64")
    keras.config.set_floatx("float64")
    if legacy:
        legacy.backend.set_floatx("float64")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
        keras.config.set_floatx(previous_floatx)
        if legacy:
            legacy.backend.set_floatx(legacy_previous)
