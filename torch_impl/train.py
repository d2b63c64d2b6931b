"""Training in PyTorch, following shared.verify.training.TrainSpec: torch.optim.Adam, clip_grad_norm_.

Mirrors tf_impl/train.py: the same `Trainer` (attributes and methods), and checkpoints
in the stack's own format (`.pt`, a state_dict read back with `weights_only=True`).
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import io
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np
import torch

from shared import catalogue
from shared.core.canonical import check_weights
from shared.core.optimizer_state import MOMENTS, check_optimizer_state
from shared.core.validation import prepare
from shared.io.atomic import write_atomic
from shared.specs import TrainSpec
from torch_impl import cuda_graphs, distributed
from torch_impl.contract import as_tensors, model_outputs, training_loss
from torch_impl.weights import get_weights

NATIVE_SUFFIX = ".pt"
# compile: torch.compile over the forward and the loss (backward through AOTAutograd); cudagraph: the whole step replayed
# as one CUDA graph (torch_impl.cuda_graphs: a GPU, batches of one shape)
MODES = ("eager", "compile", "cudagraph")


def traces_recurrent_layers(device: str) -> bool:
    """Whether `compiled` lets Dynamo trace into nn.GRU/LSTM/RNN (`allow_rnn`): on the CPU, where Inductor then
    fuses the layers' steps with the rest instead of breaking the graph at each layer (reverse_bahdanau's train
    step 16.4 -> 10.5 ms, 1 thread); not on a GPU, where each recurrent layer is one cuDNN call."""
    return device == "cpu"


def compiled(function: Callable, device: str) -> Callable:
    """`torch.compile(function)`, traced with `allow_rnn` as `traces_recurrent_layers` says. Dynamo reads the
    setting when it traces (the first call, a recompile), not when `torch.compile` is called: each call runs
    under it. Each call of `compiled` keeps its own graphs (`isolate_recompiles`): by default every compile of one
    function (`Trainer._forward_loss` of any model) shares Dynamo's 8 recompiles, and the ninth model in a process
    silently runs eager. A torch without the option (2.11, as on the GPU image this was measured on) compiles the
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
        # fused: one kernel per parameter for the whole update (for-each-op Adam: ~10 passes over every weight);
        # 0.9 -> 0.4 ms a step on document 001's models, 30 -> 13 ms on document 003's (1 CPU thread)
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
        return adam_state(self.model, self.optimizer)

    def load_optimizer_state(self, state: Mapping) -> None:
        """Continue from another Trainer's `optimizer_state` (either stack): moments and step counter."""
        load_adam_state(self.model, self.optimizer, state)
        if isinstance(self._update, cuda_graphs.GraphedStep):
            self._update.forget()  # its captures hold the state tensors just replaced

    def save_checkpoint(self, path, state: Mapping | None = None) -> None:
        """The model and Adam's state in the stack's own file, as `rosetta port --with-optimizer` reads it
        (`state`: this Trainer's `optimizer_state()` where the caller holds it already)."""
        save_native(self.model, path, state or self.optimizer_state())

    def load_checkpoint(self, path) -> None:
        """Continue from a checkpoint file of this stack (weights, Adam's moments and step counter)."""
        self.load_optimizer_state(load_native(self.model, path, with_optimizer=True))

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


def ranks() -> tuple[int, int]:
    """(rank, number of ranks): this process's place among torchrun's (torch_impl.distributed), its process group
    joined; (0, 1) in a single process."""
    distributed.start()
    return distributed.world()


def on_devices(devices: int):
    """A context for training on `devices` devices in this process: torch trains data-parallel as torchrun's ranks
    (`--nproc-per-node`), one device a process, so only 1 is taken (ValueError otherwise)."""
    if devices != 1:
        raise ValueError(f"torch trains data-parallel as torchrun's ranks, one device each: pass --nproc-per-node {devices}, "
                         "not --devices")  # fmt: skip
    return contextlib.nullcontext()


def gather_ranks(value) -> list:
    """Every rank's `value`, in rank order (`[value]` alone)."""
    return distributed.gather(value)


def wait_for_ranks() -> None:
    """Until every rank gets here (nothing alone)."""
    distributed.barrier()


def leave_ranks() -> None:
    """Leave torchrun's process group (nothing alone)."""
    distributed.stop()


def backend() -> str:
    """PyTorch itself (tf_impl's Keras names its backend here)."""
    return "torch"


def place(model: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """The model on the GPU when one is present (the contract follows the model's device); its device name."""
    if not torch.cuda.is_available():
        return model, "cpu"
    return model.cuda(), f"cuda ({torch.cuda.get_device_name()})"


def adam_state(model: torch.nn.Module, optimizer: torch.optim.Adam) -> dict:
    """`optimizer`'s state over `model`'s parameters in canonical layout: `step`, `exp_avg` and `exp_avg_sq`
    keyed like the weights (zeros for a parameter never updated), and the hyperparameters `lr`, `betas`, `eps`."""
    group = optimizer.param_groups[0]
    state, step = {name: {} for name in MOMENTS}, 0
    for key, param in model.named_parameters():
        found = optimizer.state.get(param, {})
        step = max(step, int(found.get("step", 0)))
        for name in MOMENTS:
            state[name][key] = found.get(name, torch.zeros_like(param)).detach().cpu().numpy().copy()
    hyper = {"lr": float(group["lr"]), "betas": tuple(map(float, group["betas"])), "eps": float(group["eps"])}
    return {"step": step, **state, **hyper}


def load_adam_state(model: torch.nn.Module, optimizer: torch.optim.Adam, state: Mapping) -> None:
    """Set `optimizer`'s moments and step counter from a canonical state (strict on keys and shapes)."""
    step = _check_moments(model, state)
    for key, param in model.named_parameters():
        moments = {name: _adam_moment(state[name][key], param) for name in MOMENTS}
        # the step on the weight's device in float32, as Adam's own load_state_dict puts it for its fused kernel
        optimizer.state[param] = {"step": torch.tensor(float(step), dtype=torch.float32, device=param.device), **moments}


def _adam_moment(array, param: torch.Tensor) -> torch.Tensor:
    """A moment for Adam's state: a contiguous copy in `param`'s dtype and device. The fused kernel walks memory
    as contiguous (a transposed view, as Keras's kernels arrive, would be read in the wrong order), and updates
    in place (a tensor sharing the caller's array would change it)."""
    return torch.tensor(np.ascontiguousarray(array), dtype=param.dtype, device=param.device)


def _check_moments(model: torch.nn.Module, state: Mapping) -> int:
    """A canonical optimizer state's step counter, after checking its moments' keys and shapes against `model`."""
    step = check_optimizer_state(state)
    shapes = {name: tuple(param.shape) for name, param in model.named_parameters()}
    for name in MOMENTS:
        check_weights(shapes, state[name], f"{type(model).__name__} ({name})")
    return step


def save_native(model: torch.nn.Module, path: str | Path, optimizer_state: Mapping | None = None) -> None:
    """The model's state_dict as a `.pt` file, written atomically; with a canonical `optimizer_state`, the
    usual checkpoint `{"model": state_dict, "optimizer": torch.optim.Adam(model.parameters()).state_dict()}`."""
    write_arrays(path, get_weights(model), optimizer_state)


def write_arrays(path: str | Path, weights: Mapping[str, np.ndarray], optimizer_state: Mapping | None = None) -> None:
    """`weights` as a `.pt` state_dict in their order, written atomically; with an optimizer state keyed like
    them, the checkpoint `{"model", "optimizer"}` that `Adam(model.parameters())` over those weights saves."""
    tensors = {key: torch.as_tensor(np.ascontiguousarray(value)) for key, value in weights.items()}
    saved: dict = tensors
    if optimizer_state is not None:
        parameters = [torch.nn.Parameter(tensor.clone()) for tensor in tensors.values()]
        hyper = {key: optimizer_state[key] for key in ("lr", "betas", "eps") if optimizer_state.get(key) is not None}
        optimizer = torch.optim.Adam(parameters, **hyper)
        step = check_optimizer_state(optimizer_state)
        for key, param in zip(tensors, parameters, strict=True):
            moments = {name: _adam_moment(optimizer_state[name][key], param) for name in MOMENTS}
            optimizer.state[param] = {"step": torch.tensor(float(step)), **moments}
        saved = {"model": tensors, "optimizer": optimizer.state_dict()}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    write_atomic(path, buffer.getvalue())


def read_arrays(path: str | Path, with_optimizer: bool = False) -> tuple[dict[str, np.ndarray], dict | None]:
    """A `.pt` state_dict, or a checkpoint `{"model", "optimizer"}`, as numpy arrays in the file's order and
    names (tensors only: `weights_only=True` refuses pickled code); with `with_optimizer`, Adam's state keyed
    by those names (the optimizer's parameter i is the state_dict's entry i, as `Adam(model.parameters())`
    saves for a model without buffers)."""
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        raise ValueError(f"{path}: not a loadable torch state_dict ({type(error).__name__}: {error})") from None
    checkpoint = isinstance(loaded, dict) and {"model", "optimizer"} <= set(loaded)
    weights = loaded["model"] if checkpoint else loaded
    if not isinstance(weights, dict) or not all(isinstance(value, torch.Tensor) for value in weights.values()):
        raise ValueError(f"{path}: not a torch state_dict (a dict of tensors, or a checkpoint {{'model', 'optimizer'}})")
    arrays = {key: value.numpy() for key, value in weights.items()}
    if not with_optimizer:
        return arrays, None
    if not checkpoint:
        raise ValueError(f"{path}: holds no optimizer state (a checkpoint {{'model': ..., 'optimizer': ...}} does)")
    return arrays, _adam_state_by_key(path, weights, loaded["optimizer"])


def _adam_state_by_key(path, weights: Mapping[str, torch.Tensor], saved: Mapping) -> dict:
    """A saved Adam state_dict over parameters in `weights`' order, in canonical layout keyed by their names."""
    parameters = [torch.nn.Parameter(tensor.clone()) for tensor in weights.values()]
    optimizer = torch.optim.Adam(parameters)
    try:
        optimizer.load_state_dict(saved)
    except (KeyError, ValueError, TypeError) as error:
        count = len(parameters)
        raise ValueError(f"{path}: its optimizer state is not Adam's over the file's {count} weights ({error})") from None
    group, state, step = optimizer.param_groups[0], {name: {} for name in MOMENTS}, 0
    for key, param in zip(weights, parameters, strict=True):
        found = optimizer.state.get(param, {})
        step = max(step, int(found.get("step", 0)))
        for name in MOMENTS:
            moment = found.get(name, torch.zeros_like(param)).detach()
            if moment.shape != param.shape:
                shapes = f"{tuple(moment.shape)}, the weight {tuple(param.shape)}"
                raise ValueError(f"{path}: Adam's {name} of {key} has shape {shapes}")
            state[name][key] = moment.numpy().copy()
    hyper = {"lr": float(group["lr"]), "betas": tuple(map(float, group["betas"])), "eps": float(group["eps"])}
    return {"step": step, **state, **hyper}


def load_native(model: torch.nn.Module, path: str | Path, with_optimizer: bool = False) -> dict | None:
    """Load a `.pt` state_dict, or a checkpoint `{"model", "optimizer"}`, into `model`, strictly (see
    `read_arrays`); with `with_optimizer`, return Adam's state in canonical layout."""
    from torch_impl.weights import set_weights

    weights, state = read_arrays(path, with_optimizer)
    set_weights(model, weights)
    if state is not None:
        _check_moments(model, state)
    return state
