"""Keras 3 implementations of the catalogue's models (TensorFlow by default; JAX and torch too), the contract
of docs/DESIGN.md and its Trainer, and what Keras needs to train as torch does: `TorchAdam` (with `TorchClipping`,
torch's clipping for any Keras optimizer; `make_optimizer` for a TrainSpec) and `loss_for` (a model's loss for `fit`)."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before keras is first imported; jax and torch run it too
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ info lines are noise in reports

import keras  # noqa: E402

if keras.backend.backend() not in ("tensorflow", "jax", "torch"):
    raise ImportError(f"tf_impl runs on Keras's tensorflow, jax or torch backend, not {keras.backend.backend()!r}")

from tf_impl.contract import build, compiles_per_shape, generate, get_weights, greedy, loss_and_grads, run, set_weights, trace  # noqa: E402
from tf_impl.fitting import loss_for  # noqa: E402
from tf_impl.keras_compat import backends  # noqa: E402  (which Keras backend runs: tf_impl.backends.name())
from tf_impl.keras_compat.optim import TorchAdam, TorchClipping, make_optimizer  # noqa: E402
from tf_impl.train import Trainer  # noqa: E402

# the contract and the Trainer, as torch_impl's; then what Keras needs to train as torch does (torch has them built in)
__all__ = ["build", "get_weights", "set_weights", "run", "trace", "loss_and_grads", "greedy", "generate", "compiles_per_shape",
           "Trainer", "backends", "TorchAdam", "TorchClipping", "make_optimizer", "loss_for"]  # fmt: skip
