"""The contract of docs/DESIGN.md for PyTorch: build, get_weights, set_weights, run, loss_and_grads."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F

from shared import catalogue
from shared.core import taps
from shared.core.validation import check_max_len, prepare
from shared.generation import requests
from torch_impl import generation
from torch_impl.weights import get_grads, get_weights, set_weights

__all__ = ["build", "get_weights", "set_weights", "run", "trace", "loss_and_grads", "greedy", "generate",
           "compiles_per_shape"]  # fmt: skip

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def build(name: str, dtype: str = "float32", as_written: bool = False, **overrides) -> torch.nn.Module:
    """The catalogue model `name` at the document's sizes (or `overrides`), in eval mode.

    `as_written=True` computes as the document's listing does, step by step (the speed baseline of
    `rosetta bench`); the default hoists what does not depend on the decoder step (same function).

    torch modules start in train mode (dropout on); Keras calls default to training=False. Building in
    eval mode makes both stacks start alike; training code switches modes explicitly.
    """
    spec = catalogue.get(name)
    config = catalogue.resolve_config(spec, dtype, overrides)
    factory = getattr(importlib.import_module(f"torch_impl.models.{spec.module}"), spec.factory)
    model = factory(**config).to(_DTYPES[dtype]).eval()
    model.rosetta_name, model.rosetta_config = name, config
    for module in model.modules():
        if hasattr(module, "as_written"):
            module.as_written = bool(as_written)
    return model


def as_tensors(model: torch.nn.Module, arrays: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Arrays as tensors on the model's device: floats in its dtype, ids as int64."""
    weight = next(model.parameters())
    dtype_of = {True: weight.dtype, False: torch.long}  # is the array floating-point?
    return {key: torch.as_tensor(a, dtype=dtype_of[a.dtype.kind == "f"], device=weight.device) for key, a in arrays.items()}


def model_outputs(model: torch.nn.Module, spec: catalogue.ModelSpec, tensors: dict, schedule=None) -> dict[str, torch.Tensor]:
    """The model's outputs on `tensors`, in its current mode (`model.train()` turns dropout on)."""
    if spec.interface == "attention":
        context, attention = model.attend(tensors["query"], tensors["values"])  # [B, T, De], [B, T, S]
        return {"context": context, "attention": attention}
    extras = {"src_len": tensors.get("src_len"), "teacher_forcing": schedule} if spec.variable_length else {}
    logits, attention = model.decode(tensors["src"], tensors["tgt_in"], **extras)  # [B, T, V], [B, T, S]
    return {"logits": logits} if attention is None else {"logits": logits, "attention": attention}


def training_loss(spec: catalogue.ModelSpec, outputs: dict, tensors: dict) -> torch.Tensor:
    """Cross-entropy from logits, mean over non-pad targets; for the bare attention layer, mean(context^2)."""
    if spec.interface == "attention":
        return outputs["context"].square().mean()
    logits = outputs["logits"]  # [B, T, V]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tensors["tgt_out"].reshape(-1), ignore_index=spec.pad_id)


def run(model: torch.nn.Module, name: str, batch: Mapping, teacher_forcing=None) -> dict[str, np.ndarray]:
    """Inference outputs (eval mode, no grad) as numpy, batch-first: logits/context and attention."""
    spec, arrays, schedule = prepare(name, model.rosetta_config, batch, teacher_forcing)
    with torch.no_grad(), _mode(model, False):
        outputs = model_outputs(model, spec, as_tensors(model, arrays), schedule)
    return {key: value.cpu().numpy() for key, value in outputs.items()}


def trace(model, name: str, batch: Mapping) -> dict[str, np.ndarray]:
    """`run`'s outputs and the components tapped on the way (shared.core.taps: embeddings, encoder outputs and
    state, attention scores, context vectors) as numpy, batch-first, every decoder step joined along time."""
    with taps.recording() as recorded:
        outputs = run(model, name, batch)
    return {**taps.collect(recorded, lambda tensor: tensor.detach().cpu().numpy()), **outputs}


def greedy(model: torch.nn.Module, name: str, batch: Mapping, max_len: int = 50) -> dict[str, np.ndarray]:
    """Greedy decoding from `batch["src"]` (and `src_len`): token ids `[B, L]`, attention `[B, L, S]`."""
    spec, arrays, _ = prepare(name, model.rosetta_config, batch, with_tgt_in=False)
    max_len = _check_decodes(spec, name, max_len)
    tensors = as_tensors(model, arrays)
    with torch.no_grad(), _mode(model, False):
        tokens, attention = model.translate(
            tensors["src"], tensors.get("src_len"), max_len=max_len, sos_id=spec.sos_id, eos_id=spec.eos_id, pad_id=spec.pad_id
        )
    return {"tokens": tokens.cpu().numpy(), "attention": attention.cpu().numpy()}


def _check_decodes(spec: catalogue.ModelSpec, name: str, max_len: int) -> int:
    """`max_len` checked, for a model that decodes token by token (documents 002-004); else the one error."""
    max_len = check_max_len(max_len)
    if not spec.variable_length:
        raise ValueError(f"model {name!r} has no greedy decoding (document {spec.document} gives none)")
    return max_len


def generate(model, name: str, batch: Mapping, max_len: int = 50, **overrides) -> dict[str, np.ndarray]:
    """Greedy or beam search with Hugging Face's rules (torch_impl.generation; `overrides` in HF's field names:
    num_beams, length_penalty...) from `batch["src"]` (and `src_len`): token ids `[B * R, L]` as `greedy` gives them,
    at most `max_len` tokens, each row's `<eos>` kept and `<pad>` after it."""
    spec, arrays, _ = prepare(name, model.rosetta_config, batch, with_tgt_in=False)
    max_len = _check_decodes(spec, name, max_len)
    mask, settings = requests.catalogue_request(spec, arrays, max_len)  # [B, S], the spec's tokens
    with _mode(model, False):
        ids = generation.generate(model, arrays["src"], mask, settings, **overrides)  # [B * R, 1 + L]
    return requests.greedy_shaped(ids, spec)


def compiles_per_shape() -> bool:
    """Whether `run` compiles a program for each new input shape (a caller that reruns it should keep shapes
    fixed): not in torch, whose `run` is eager."""
    return False


@contextlib.contextmanager
def _mode(model: torch.nn.Module, training: bool):
    """`model` in train mode (`training`) or eval mode for the block, then in its own mode again."""
    was_training = model.training
    try:
        yield model.train(training)
    finally:
        model.train(was_training)


def loss_and_grads(model: torch.nn.Module, name: str, batch: Mapping, teacher_forcing=None, training: bool = False):
    """The loss of `batch` and its gradient w.r.t. every canonical weight; `training`: dropout on (train mode),
    else eval mode, whatever mode the model is in."""
    compute_loss, _ = loss_closure(model, name, batch, teacher_forcing, training)
    model.zero_grad(set_to_none=True)
    loss = compute_loss()
    loss.backward()
    return float(loss.detach()), get_grads(model)


def loss_closure(model: torch.nn.Module, name: str, batch: Mapping, teacher_forcing=None, training: bool = False) -> tuple:
    """`compute_loss()` of `batch` (no argument: the tensors are bound; train mode where `training`, else eval mode) and
    the parameters it differentiates against, as `loss_and_grads` takes them (tf_impl.contract.loss_closure's twin)."""
    spec, arrays, schedule = prepare(name, model.rosetta_config, batch, teacher_forcing, with_targets=True)
    tensors = as_tensors(model, arrays)

    def compute_loss():
        with _mode(model, training):
            return training_loss(spec, model_outputs(model, spec, tensors, schedule), tensors)

    return compute_loss, list(model.parameters())
