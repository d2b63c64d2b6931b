"""What differs between Keras 3's backends (TensorFlow, JAX, torch), in one place: gradients outside `fit`, the
device, float64 on JAX. The models, `fit` and TorchAdam need none of it: they are Keras ops alone.

Keras picks its backend from `KERAS_BACKEND` when it is first imported (tf_impl defaults it to "tensorflow").
Stack-specific: torch_impl is torch itself.
"""

from __future__ import annotations

from collections.abc import Callable

import keras

from shared.catalogue import KERAS_BACKENDS as BACKENDS


def name() -> str:
    """The backend Keras runs on: one of BACKENDS."""
    return keras.backend.backend()


def check_dtype(dtype: str) -> None:
    """Make a float64 model compute in float64 on this backend, or say why it cannot (ValueError).

    JAX computes float64 only with its x64 on (JAX_ENABLE_X64=1). And Keras 3.15's type promotion maps float64 to
    float32 on every backend but TensorFlow (`keras.backend.result_type`; keras-team/keras#23704): `ops.matmul`
    on torch and `ops.tanh` on JAX return float32 for float64 inputs, so a float64 model would silently
    compute in float32 (measured: 1e-7 from torch's float64 logits). For a float64 model this keeps float64 in
    that promotion table, a Keras internal; float32 models are untouched.
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


def value_and_gradients(compute_loss: Callable, variables: list) -> tuple[object, list]:
    """`compute_loss()` and its gradient with respect to each of `variables` (Keras variables), dense (an
    Embedding's IndexedSlices summed per row, as torch reports it); None for a variable the loss does not use."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        from tf_impl.optim import dense

        with tf.GradientTape() as tape:
            loss = compute_loss()
        return loss, [dense(g) for g in tape.gradient(loss, variables)]
    if backend == "jax":
        import jax

        def loss_of(values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                return compute_loss()

        return jax.jit(jax.value_and_grad(loss_of))([variable.value for variable in variables])
    if backend == "torch":
        import torch

        loss = compute_loss()
        return loss, list(torch.autograd.grad(loss, [variable.value for variable in variables], allow_unused=True))
    raise ValueError(f"Keras backend {backend!r} is not one of {', '.join(BACKENDS)}")


def device() -> str:
    """Where Keras computes: "cpu", or "gpu (<name>)" for the first GPU the backend sees (each backend places
    its arrays there by itself)."""
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return f"gpu ({tf.config.experimental.get_device_details(gpus[0]).get('device_name', gpus[0].name)})" if gpus else "cpu"
    if backend == "jax":
        import jax

        first = jax.devices()[0]
        return f"gpu ({first.device_kind})" if first.platform == "gpu" else "cpu"
    import torch

    return f"gpu ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu"
