"""The contract of docs/DESIGN.md for Keras: build, get_weights, set_weights, run, loss_and_grads (on any Keras 3
backend: tf_impl/keras_compat/backends.py holds what differs)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import keras
import numpy as np

from shared import catalogue
from shared.core import taps
from shared.core.validation import check_max_len, prepare
from shared.generation import requests
from tf_impl import generation
from tf_impl.keras_compat import backends, serializable
from tf_impl.weights import get_grads, get_weights, leaves, set_weights

__all__ = ["build", "get_weights", "set_weights", "run", "trace", "loss_and_grads", "greedy", "generate",
           "compiles_per_shape"]  # fmt: skip


def build(name: str, dtype: str = "float32", as_written: bool = False, **overrides) -> keras.Layer:
    """The catalogue model `name` at the document's sizes (or `overrides`), its variables created.

    `as_written=True` computes as the document's listing does, step by step (the speed baseline of
    `rosetta bench`); the default hoists what does not depend on the decoder step (same function).
    The variables are created by one call as written, where every layer is called: ours uses some
    kernels by column block (`kernel[:H]`) without calling their layer.
    """
    spec = catalogue.get(name)
    config = catalogue.resolve_config(spec, dtype, overrides)
    backends.check_dtype(dtype)
    factory = getattr(importlib.import_module(f"tf_impl.models.{spec.module}"), spec.factory)
    model = factory(**config, dtype=dtype)
    model.rosetta_name, model.rosetta_config = name, config
    _set_as_written(model, True)
    _without_symbolic_builds(model)
    model_outputs(model, spec, as_tensors(model, _dummy_batch(spec, config)))  # one call creates every variable
    backends.exact_float64(model)  # a float64 MultiHeadAttention's scale exactly (Keras rounds it to float32 on TF)
    for layer in model._flatten_layers(include_self=True, recursive=True):
        layer.built = True  # so a later model(...) does not build again, nor Keras's trainers re-trace the model at
        # every train_on_batch for a layer called only through its methods (the decoders' decode and step)
    _set_as_written(model, as_written)
    return model


serializable.register_builder(build)


def _without_symbolic_builds(model) -> None:
    """Marks built every layer under `model` that has no `build` of its own (our encoders, decoders, attention
    layers), before the eager call that creates the variables. Keras would first trace such a layer's `call`
    symbolically (`compute_output_spec`: a scratch graph on TensorFlow, `eval_shape` on JAX) to create its sublayers'
    state, which the eager call then creates anyway; the sublayers with a `build` (Dense, GRU, Embedding...) still
    build at their first call. Builds are faster so (docs/measurements.md)."""
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if keras.src.utils.is_default(layer.build):
            layer.built = True


def _set_as_written(model, as_written: bool) -> None:
    """`as_written` on the model and on every layer under it having that attribute."""
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if hasattr(layer, "as_written"):
            layer.as_written = bool(as_written)


def _dummy_batch(spec: catalogue.ModelSpec, config: dict) -> dict[str, np.ndarray]:
    if spec.interface == "attention":
        return {"query": np.zeros((1, 1, config["decoder_dim"])), "values": np.zeros((1, 2, config["encoder_dim"]))}
    return {"src": np.zeros((1, 2), np.int64), "tgt_in": np.zeros((1, 1), np.int64)}


def as_tensors(model, arrays: Mapping[str, np.ndarray]) -> dict:
    """Arrays as tensors of the backend: floats in the model's compute dtype, ids as int64."""
    return {
        key: keras.ops.convert_to_tensor(a, model.compute_dtype if a.dtype.kind == "f" else "int64") for key, a in arrays.items()
    }


def model_outputs(model, spec: catalogue.ModelSpec, tensors: dict, schedule=None, training=False) -> dict:
    """The model's outputs on `tensors`; `training` turns dropout on (torch's train mode)."""
    if spec.interface == "attention":
        context, attention = model.attend(tensors["query"], tensors["values"])  # [B, T, De], [B, T, S]
        return {"context": context, "attention": attention}
    extras = {"src_len": tensors.get("src_len"), "teacher_forcing": schedule} if spec.variable_length else {}
    logits, attention = model.decode(tensors["src"], tensors["tgt_in"], **extras, training=training)  # [B, T, V], [B, T, S]
    return {"logits": logits} if attention is None else {"logits": logits, "attention": attention}


def training_loss(spec: catalogue.ModelSpec, outputs: dict, tensors: dict):
    """Cross-entropy from logits, mean over non-pad targets; for the bare attention layer, mean(context^2).

    `from_logits=True` (the models return logits, as torch's cross_entropy expects) and `ignore_class`
    (Keras then divides by the number of non-pad targets, as torch's `ignore_index` does).
    """
    if spec.interface == "attention":
        return keras.ops.mean(keras.ops.square(outputs["context"]))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=spec.pad_id, dtype=outputs["logits"].dtype)
    return loss(tensors["tgt_out"], outputs["logits"])


def run(model, name: str, batch: Mapping, teacher_forcing=None) -> dict[str, np.ndarray]:
    """Inference outputs (training=False) as numpy, batch-first: logits/context and attention. On JAX jitted (one
    XLA program per input shape; eagerly, JAX dispatches and compiles op by op, far slower for document 001's
    evaluation, which reruns the decoder once per output step: docs/measurements.md), except while taps record."""
    spec, arrays, schedule = prepare(name, model.rosetta_config, batch, teacher_forcing)
    tensors = as_tensors(model, arrays)
    if backends.name() == "jax" and schedule is None and not taps.is_recording():
        outputs = backends.jax_inference(model, lambda inputs: model_outputs(model, spec, inputs))(tensors)
    else:
        outputs = model_outputs(model, spec, tensors, schedule)
    return {key: keras.ops.convert_to_numpy(value) for key, value in outputs.items()}


def trace(model, name: str, batch: Mapping) -> dict[str, np.ndarray]:
    """`run`'s outputs and the components tapped on the way (shared.core.taps: embeddings, encoder outputs and
    state, attention scores, context vectors) as numpy, batch-first, every decoder step joined along time."""
    with taps.recording() as recorded:
        outputs = run(model, name, batch)
    return {**taps.collect(recorded, keras.ops.convert_to_numpy), **outputs}


def greedy(model, name: str, batch: Mapping, max_len: int = 50) -> dict[str, np.ndarray]:
    """Greedy decoding from `batch["src"]` (and `src_len`): token ids `[B, L]`, attention `[B, L, S]`."""
    spec, arrays, _ = prepare(name, model.rosetta_config, batch, with_tgt_in=False)
    max_len = _check_decodes(spec, name, max_len)
    tensors = as_tensors(model, arrays)
    tokens, attention = model.translate(
        tensors["src"], tensors.get("src_len"), max_len=max_len, sos_id=spec.sos_id, eos_id=spec.eos_id, pad_id=spec.pad_id
    )
    return {"tokens": keras.ops.convert_to_numpy(tokens), "attention": keras.ops.convert_to_numpy(attention)}


def _check_decodes(spec: catalogue.ModelSpec, name: str, max_len: int) -> int:
    """`max_len` checked, for a model that decodes token by token (documents 002-004); else the one error."""
    max_len = check_max_len(max_len)
    if not spec.variable_length:
        raise ValueError(f"model {name!r} has no greedy decoding (document {spec.document} gives none)")
    return max_len


def generate(model, name: str, batch: Mapping, max_len: int = 50, **overrides) -> dict[str, np.ndarray]:
    """Greedy or beam search with Hugging Face's rules (tf_impl.generation; `overrides` in HF's field names:
    num_beams, length_penalty...) from `batch["src"]` (and `src_len`): token ids `[B * R, L]` as `greedy` gives them,
    at most `max_len` tokens, each row's `<eos>` kept and `<pad>` after it."""
    spec, arrays, _ = prepare(name, model.rosetta_config, batch, with_tgt_in=False)
    max_len = _check_decodes(spec, name, max_len)
    mask, settings = requests.catalogue_request(spec, arrays, max_len)  # [B, S], the spec's tokens
    ids = generation.generate(model, arrays["src"], mask, settings, **overrides)  # [B * R, 1 + L]
    return requests.greedy_shaped(ids, spec)


def compiles_per_shape() -> bool:
    """Whether `run` compiles a program for each new input shape (a caller that reruns it should keep shapes
    fixed): on JAX, where it is jitted; TensorFlow's and torch's `run` are eager."""
    return backends.name() == "jax"


def loss_and_grads(model, name: str, batch: Mapping, teacher_forcing=None, training: bool = False):
    """The loss of `batch` and its gradient w.r.t. every canonical weight; `training`: dropout on. Dense (an
    Embedding's repeated rows summed, as torch reports them; backends.value_and_gradients on Keras's backend)."""
    compute_loss, variables = loss_closure(model, name, batch, teacher_forcing, training)
    loss, gradients = backends.value_and_gradients(compute_loss, variables)
    by_variable = dict(zip(map(id, variables), gradients, strict=True))
    return float(keras.ops.convert_to_numpy(loss)), get_grads(
        model, lambda variable: _dense_gradient(by_variable[id(variable)], variable)
    )


def loss_closure(model, name: str, batch: Mapping, teacher_forcing=None, training: bool = False) -> tuple:
    """`compute_loss()` of `batch` (no argument: the tensors are bound) and the canonical weights it differentiates
    against, as `loss_and_grads` and the bench's compiled cost (`backends.compiled_cost`) take them."""
    spec, arrays, schedule = prepare(name, model.rosetta_config, batch, teacher_forcing, with_targets=True)
    tensors = as_tensors(model, arrays)
    variables = [var for _, _, found in leaves(model) for var in found.values()]
    return (lambda: training_loss(spec, model_outputs(model, spec, tensors, schedule, training), tensors)), variables


def _dense_gradient(gradient, variable) -> np.ndarray:
    """A gradient as a numpy array (None, for an unused weight, as 0)."""
    if gradient is None:
        return np.zeros(variable.shape, variable.dtype)
    return np.asarray(keras.ops.convert_to_numpy(gradient))
