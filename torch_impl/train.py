"""Training in PyTorch, following shared.verify.training.TrainSpec: torch.optim.Adam, clip_grad_norm_.

Mirrors tf_impl/train.py: the same `Trainer` (attributes and methods), and checkpoints
in the stack's own format (`.pt`, a state_dict read back with `weights_only=True`).
"""

from __future__ import annotations

import base64
import inspect
from collections.abc import Callable, Iterable, Mapping

import torch

from shared import catalogue
from shared.core import moved
from shared.core.validation import prepare
from shared.specs import TrainSpec
from torch_impl import cuda_graphs, distributed, files
from torch_impl.contract import as_tensors, model_outputs, training_loss

# compile: torch.compile over the forward and the loss (backward through AOTAutograd); cudagraph: the whole step replayed
# as one CUDA graph (torch_impl.cuda_graphs: a GPU, batches of one shape)
MODES = ("eager", "compile", "cudagraph")


def traces_recurrent_layers(device: str) -> bool:
    """Whether `compiled` lets Dynamo trace into nn.GRU/LSTM/RNN (`allow_rnn`): on the CPU, where Inductor then
    fuses the layers' steps with the rest instead of breaking the graph at each layer (faster: docs/measurements.md);
    not on a GPU, where each recurrent layer is one cuDNN call."""
    return device == "cpu"


def compiled(function: Callable, device: str) -> Callable:
    """`torch.compile(function)`, traced with `allow_rnn` as `traces_recurrent_layers` says. Dynamo reads the
    setting when it traces (the first call, a recompile), not when `torch.compile` is called: each call runs
    under it. Each call of `compiled` keeps its own graphs (`isolate_recompiles`): by default every compile of one
    function (`Trainer._forward_loss` of any model) shares Dynamo's 8 recompiles, and the ninth model in a process
    silently runs eager. A torch without the option (before 2.12, as on a GPU image the suite ran on) compiles the
    function plainly: one model a process compiles as before, and the bench still names a case that ran eager."""
    isolated = {"isolate_recompiles": True} if "isolate_recompiles" in inspect.signature(torch.compile).parameters else {}
    compiled_function = torch.compile(function, **isolated)
    allow_rnn = traces_recurrent_layers(device)

    def call(*args, **kwargs):
        with torch._dynamo.config.patch(allow_rnn=allow_rnn):
            return compiled_function(*args, **kwargs)

    return call


def _check_torch_rule(spec: TrainSpec) -> None:
    """The torch stack has only PyTorch's own rule; the Keras-only options exist to show their drift."""
    if spec.optimizer != "torch_adam" or spec.clipping != "global":
        raise ValueError(f"torch trains with torch_adam and global clipping only, got {spec.optimizer}/{spec.clipping}")


class Trainer:
    """One optimiser over a catalogue model; `step` returns the loss before the update.

    Args:
        model, name: a model from `torch_impl.build` and its catalogue name.
        loss: replaces the spec's loss `(spec, outputs, tensors) -> scalar` (tests pass naive ones).
        mode: one of MODES.
        naive_shards: data-parallel only, the negative control of tests: each rank's mean weighs alike (a mean of
            the ranks' means), not by its share of the global batch's targets.
    Attributes:
        grad_norms: the global gradient norm of every step, before clipping.
        rank, ranks: this process's place under torchrun (torch_impl.distributed); (0, 1) alone. With more ranks
            each `step` takes the global batch and trains on this rank's rows through DistributedDataParallel.
    """

    def __init__(self, model: torch.nn.Module, name: str, spec: TrainSpec, loss=None, mode: str = "eager",
                 naive_shards: bool = False):  # fmt: skip
        _check_torch_rule(spec)
        if mode not in MODES:
            raise ValueError(f"torch trains in mode {' or '.join(MODES)}, got {mode!r}")
        self.model, self.name, self.spec, self.mode = model, name, spec, mode
        self.loss = loss or training_loss
        self.variables = list(model.parameters())
        # fused: one kernel per parameter for the whole update (for-each-op Adam: ~10 passes over every weight;
        # docs/measurements.md)
        # capturable: Adam's step counter and bias correction stay on the device, where a replayed graph counts them
        device = self.variables[0].device.type
        self.optimizer = torch.optim.Adam(self.variables, lr=spec.lr, betas=spec.betas, eps=spec.eps, fused=True,
                                          capturable=mode == "cudagraph")  # fmt: skip
        self.grad_norms: list[float] = []
        self._update = self._update_step
        self._forward = compiled(self._forward_loss, device) if mode == "compile" else self._forward_loss
        self.rank, self.ranks = distributed.world()
        self.naive_shards = naive_shards
        if self.ranks > 1:
            self._forward = distributed.data_parallel(model, self._forward)
        if mode == "cudagraph":
            cuda_graphs.check(name, device, self.ranks)
            self._update = cuda_graphs.GraphedStep(self._update_step, self.variables, self.optimizer)

    def step(self, batch: Mapping, teacher_forcing=None) -> float:
        """One update on `batch` (checked as `run` checks it) with the step's teacher-forcing schedule."""
        spec, arrays, schedule = self._prepare(batch, teacher_forcing)
        if self.ranks == 1:
            loss, norm = self._update(as_tensors(self.model, arrays), schedule)
        else:  # this rank's rows, its mean weighted by its share of the global batch's targets
            part = distributed.shard(arrays, self.rank, self.ranks)
            share = 1.0 / self.ranks if self.naive_shards else distributed.token_share(part, arrays, spec.pad_id)
            loss, norm = self._update(as_tensors(self.model, part), schedule, share)
            loss = distributed.all_sum(loss * share)  # the global batch's mean
        self.grad_norms.append(float(norm))
        return float(loss)

    def train_epoch(self, steps: Iterable[tuple[Mapping, object]], after_step: Callable[[float], bool]) -> None:
        """`step` on each (batch, teacher-forcing schedule) of `steps`; `after_step(loss)` after each update (its
        norm in `grad_norms[-1]`) ends the epoch by returning False. Mirrors the Keras Trainer's `fit`."""
        for batch, schedule in steps:
            if not after_step(self.step(batch, schedule)):
                return

    def _prepare(self, batch: Mapping, schedule) -> tuple:
        return prepare(self.name, self.model.rosetta_config, batch, schedule, with_targets=True)

    def _update_step(self, tensors: dict, forced, share: float = 1.0):
        """Forward in train mode (dropout on), backward, clip by the global norm, Adam step. `share`: this rank's
        share of the global batch's targets (DDP averages the ranks' gradients: each is weighted by share x ranks)."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._forward(tensors, forced)
        (loss if self.ranks == 1 else loss * (share * self.ranks)).backward()
        max_norm = float("inf") if self.spec.clip_norm is None else self.spec.clip_norm  # inf: the norm, no scaling
        norm = torch.nn.utils.clip_grad_norm_(self.variables, max_norm)
        self.optimizer.step()
        return loss.detach(), norm

    def optimizer_state(self) -> dict:
        """Adam's state in canonical layout: `step`, and `exp_avg`, `exp_avg_sq` keyed like the weights."""
        return files.adam_state(self.model, self.optimizer)

    def load_optimizer_state(self, state: Mapping) -> None:
        """Continue from another Trainer's `optimizer_state` (either stack): moments and step counter."""
        files.load_adam_state(self.model, self.optimizer, state)
        if isinstance(self._update, cuda_graphs.GraphedStep):
            self._update.forget()  # its captures hold the state tensors just replaced

    def save_checkpoint(self, path, state: Mapping | None = None) -> None:
        """The model and Adam's state in the stack's own file, as `rosetta port --with-optimizer` reads it
        (`state`: this Trainer's `optimizer_state()` where the caller holds it already)."""
        files.save_native(self.model, path, state or self.optimizer_state())

    def load_checkpoint(self, path) -> None:
        """Continue from a checkpoint file of this stack (weights, Adam's moments and step counter)."""
        self.load_optimizer_state(files.load_native(self.model, path, with_optimizer=True))

    def _forward_loss(self, tensors: dict, forced):
        spec = catalogue.get(self.name)
        return self.loss(spec, model_outputs(self.model, spec, tensors, forced), tensors)


def set_seed(seed: int) -> None:
    """Seed torch's generator: the initial weights `build` draws and the dropout masks of training."""
    torch.manual_seed(seed)


def rng_state(model: torch.nn.Module) -> dict:
    """The generators dropout draws from (torch's global ones: CPU, and every GPU's), as JSON-able text."""
    states = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states |= {f"cuda:{i}": state for i, state in enumerate(torch.cuda.get_rng_state_all())}
    return {name: base64.b64encode(state.numpy().tobytes()).decode() for name, state in states.items()}


def load_rng_state(model: torch.nn.Module, state: Mapping) -> None:
    """Restore `rng_state`'s generators (a GPU's only where that GPU is present)."""
    tensors = {name: torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8) for name, text in state.items()}
    torch.set_rng_state(tensors.pop("cpu"))
    for name, tensor in tensors.items():
        index = int(name.split(":")[1])
        if index < torch.cuda.device_count():
            torch.cuda.set_rng_state(tensor, index)


def backend() -> str:
    """PyTorch itself (tf_impl's Keras names its backend here)."""
    return "torch"


__getattr__ = moved.getattr_for(__name__)  # files and ranks moved to files.py and distributed.py: they warn
