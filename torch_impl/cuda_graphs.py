"""torch's `cudagraph` training mode: the whole train step (forward, loss, backward, global-norm clipping, fused
Adam) captured once as a CUDA graph for each batch shape, then replayed for every batch of that shape.

Why: on a GPU the reverse task's steps (document 001) are hundreds of small kernels, each launched from Python;
replayed as one graph, a step takes a fraction of its time eagerly or under torch.compile (with
`mode="reduce-overhead"` as well): docs/measurements.md.

A replay runs what the capture recorded, not the Python that recorded it:
- the batch is copied into the captured input tensors before each replay; a batch of another shape is captured anew;
- nothing may wait for the device while capturing (`.item()`, `.cpu()`, lengths packed on the host): models whose
  batches vary in length (documents 002-004) are refused up front (`check`), as is torchrun's data parallelism;
- Adam keeps its step counter and bias correction on the device (`capturable`), so every replay counts its step;
- CUDA's libraries set up their workspaces on a step's first run, so one real step runs before capturing. That step
  is rolled back (weights, Adam's state, the random generators), so the replays give the eager mode's steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

import torch

from shared import catalogue


def check(name: str, device: str, ranks: int) -> None:
    """ValueError unless model `name` can train as replayed CUDA graphs here: on a CUDA device, in one process, on
    batches of fixed shape."""
    if device != "cuda":
        raise ValueError(f"torch's cudagraph mode captures the train step as a CUDA graph: the model must be on a CUDA "
                         f"device, not {device}; use eager or compile")  # fmt: skip
    if catalogue.get(name).variable_length:
        raise ValueError(f"{name} trains on batches of varying length, packed by lengths read on the host, which a "
                         f"CUDA graph cannot capture; train it eagerly or compiled")  # fmt: skip
    if ranks > 1:
        raise ValueError("torch's cudagraph mode trains in one process: run torchrun's ranks eagerly or compiled")


class CudaGraphs:
    """Capture and replay by torch.cuda: warm a function up on a side stream, record it as a graph."""

    @staticmethod
    def warm(function: Callable) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            function()
        torch.cuda.current_stream().wait_stream(side)

    @staticmethod
    def capture(function: Callable) -> Callable:
        """A callable replaying `function`'s kernels, returning the tensors `function` returned (rewritten by each
        replay)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = function()

        def replay():
            graph.replay()
            return outputs

        return replay


class GraphedStep:
    """`update(tensors, schedule) -> outputs`, one train step, replayed from a capture per batch shape.

    Args:
        update: the step (Trainer._update_step): it reads the batch from `tensors` and writes the weights, their
            gradients and `optimizer`'s state in place.
        params, optimizer: what `update` writes, rolled back after the warm-up run (`optimizer` capturable).
        graphs: how to warm up and capture (default CudaGraphs; the tests' stand-in reruns the function).
    """

    def __init__(self, update: Callable, params: list[torch.Tensor], optimizer: torch.optim.Optimizer, graphs=None):
        self.update, self.params, self.optimizer, self.graphs = update, params, optimizer, graphs or CudaGraphs
        self.captured: dict[tuple, tuple[dict, Callable]] = {}  # batch shape -> (captured inputs, replay)

    def __call__(self, tensors: Mapping[str, torch.Tensor], schedule=None):
        if schedule is not None:
            raise ValueError("a teacher-forcing schedule is drawn on the host: a CUDA graph would replay the first one")
        key = tuple(sorted((name, tuple(tensor.shape), tensor.dtype) for name, tensor in tensors.items()))
        if key not in self.captured:
            self.captured[key] = self._capture(tensors)
        inputs, replay = self.captured[key]
        for name, tensor in tensors.items():
            inputs[name].copy_(tensor)
        return replay()

    def forget(self) -> None:
        """Drop every capture: the optimizer's state tensors were replaced (a loaded checkpoint)."""
        self.captured.clear()

    def _capture(self, tensors: Mapping[str, torch.Tensor]) -> tuple[dict, Callable]:
        inputs = {name: tensor.clone() for name, tensor in tensors.items()}
        step = lambda: self.update(inputs, None)  # noqa: E731
        with _rolled_back(self.params, self.optimizer):
            self.graphs.warm(step)
        self.optimizer.zero_grad(set_to_none=True)  # the capture allocates the gradients in its own memory
        try:
            return inputs, self.graphs.capture(step)
        except RuntimeError as error:  # CUDA's own words, often only "a previous error during capture"
            shapes = ", ".join(f"{name} {list(tensor.shape)}" for name, tensor in tensors.items())
            raise RuntimeError(f"the train step on a batch of {shapes} could not be captured as a CUDA graph ({error}); "
                               "train this model eagerly or compiled") from error  # fmt: skip


@contextlib.contextmanager
def _rolled_back(params: list[torch.Tensor], optimizer: torch.optim.Optimizer):
    """Undo what the block does to `params`, `optimizer`'s state (created by the block if absent: zeroed, as Adam
    creates it) and the random generators, keeping the tensors the block created (a capture refers to them)."""
    saved = [param.detach().clone() for param in params]
    state = {param: {key: value.clone() for key, value in optimizer.state[param].items()} for param in optimizer.state}
    devices = sorted({param.device.index for param in params if param.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices):
        yield
    with torch.no_grad():
        for param, value in zip(params, saved, strict=True):
            param.copy_(value)
            for key, tensor in optimizer.state[param].items():
                tensor.copy_(state[param][key]) if param in state else tensor.zero_()
