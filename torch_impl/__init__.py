"""PyTorch implementations of the catalogue's models, the contract of docs/DESIGN.md and its Trainer."""

from torch_impl.contract import build, compiles_per_shape, generate, get_weights, greedy, loss_and_grads, run, set_weights, trace
from torch_impl.train import Trainer

# the contract and the Trainer, as tf_impl's
__all__ = ["build", "get_weights", "set_weights", "run", "trace", "loss_and_grads", "greedy", "generate", "compiles_per_shape",
           "Trainer"]  # fmt: skip
