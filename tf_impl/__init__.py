"""TensorFlow 2 / Keras 3 implementations of the catalogue's models, and the contract of DESIGN.md."""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"  # before keras is first imported
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ info lines are noise in reports

import keras  # noqa: E402

if keras.backend.backend() != "tensorflow":
    raise ImportError(f"tf_impl needs Keras on TensorFlow, but Keras was already imported with {keras.backend.backend()!r}")

from tf_impl.contract import build, get_weights, greedy, loss_and_grads, run, set_weights, trace  # noqa: E402

__all__ = ["build", "get_weights", "set_weights", "run", "trace", "loss_and_grads", "greedy"]
