"""PyTorch implementations of the catalogue's models, and the contract of docs/DESIGN.md."""

from torch_impl.contract import build, get_weights, greedy, loss_and_grads, run, set_weights, trace

__all__ = ["build", "get_weights", "set_weights", "run", "trace", "loss_and_grads", "greedy"]
