"""Greedy and beam search with Hugging Face's rules in Keras 3: shared/generation's one algorithm traced over
`keras.ops` (`Arrays`) into one compiled loop per plan and input shape (`jit_compile` on TensorFlow, `jax.jit`
on JAX; eager on Keras's torch backend), static shapes throughout, driving any decoding object (`start`, `step`:
docs/DESIGN.md "Generation").

Mirrors torch_impl/generation.py. Decoding objects here: the catalogue's encoder-decoders (`Seq2SeqDecoding`,
documents 002 and 003) and the Hugging Face families' Keras models (tf_impl/hf/decoding.py, key/value cached).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from shared.generation import search
from shared.generation.settings import GenerationSettings, Plan, planned
from tf_impl.keras_compat import backends

__all__ = ["Arrays", "Seq2SeqDecoding", "decoding_for", "reorder", "generate", "compiled_search", "export"]
SIGNATURE = "translate"  # the exported SavedModel's serving signature


class Arrays:
    """The array namespace shared/generation is written over, in keras.ops: every scalar may be a traced tensor."""

    DTYPES = {"int": "int32", "bool": "bool", "float32": "float32"}

    def full(self, shape, value, dtype):
        return ops.full(shape, value, dtype=self.DTYPES[dtype])

    def zeros(self, shape, dtype):
        return ops.zeros(shape, dtype=self.DTYPES[dtype])

    def zeros_like(self, x):
        return ops.zeros_like(x)

    def arange(self, n):
        return ops.arange(n, dtype="int32")

    def cast(self, x, dtype):
        return ops.cast(x, self.DTYPES[dtype])

    def where(self, condition, a, b):
        return ops.where(condition, a, b)

    def expand_dims(self, x, axis):
        return ops.expand_dims(x, axis)

    def reshape(self, x, shape):
        return ops.reshape(x, shape)

    def broadcast_to(self, x, shape):
        return ops.broadcast_to(x, shape)

    def concat(self, tensors, axis):
        return ops.concatenate(tensors, axis)

    def equal(self, a, b):
        return ops.equal(a, b)

    def less(self, a, b):
        return ops.less(a, b)

    def greater(self, a, b):
        return ops.greater(a, b)

    def greater_equal(self, a, b):
        return ops.greater_equal(a, b)

    def logical_and(self, a, b):
        return ops.logical_and(a, b)

    def logical_or(self, a, b):
        return ops.logical_or(a, b)

    def logical_not(self, a):
        return ops.logical_not(a)

    def any(self, x, axis=None, keepdims=False):
        return ops.any(x, axis=axis, keepdims=keepdims)

    def all(self, x, axis=None, keepdims=False):
        return ops.all(x, axis=axis, keepdims=keepdims)

    def min(self, x, axis, keepdims=False):
        return ops.min(x, axis=axis, keepdims=keepdims)

    def max(self, x):
        return ops.max(x)

    def clip(self, x, low, high):
        return ops.clip(x, low, high)

    def argmax(self, x):
        return ops.argmax(x, axis=-1)

    def log_softmax(self, x):
        return ops.log_softmax(x, axis=-1)

    def isin(self, x, ids):
        marked = ops.zeros_like(x, dtype="bool")
        for token in ids:
            marked = ops.logical_or(marked, ops.equal(x, token))
        return marked

    def top_k(self, x, k):
        """The k largest along the last axis; TensorFlow's and XLA's top-k keep the lower index first among equals."""
        return ops.top_k(x, k, sorted=True)

    def take_along(self, x, indices, axis):
        shape = list(x.shape)
        shape[axis] = indices.shape[axis]
        return ops.take_along_axis(x, ops.broadcast_to(indices, shape), axis=axis)

    def take_column(self, x, index):
        return ops.take(x, index, axis=-1)

    def set_column(self, x, index, values):
        at = ops.equal(ops.arange(x.shape[-1], dtype="int32"), index)  # [L]
        return ops.where(at, ops.expand_dims(ops.cast(values, x.dtype), -1), x)

    def gather_constant(self, table, index):
        return ops.take(ops.convert_to_tensor(np.asarray(table, np.float32)), index)

    def mark(self, ids, valid, vocabulary: int):
        """[N, V] booleans: True where some valid position of `ids [N, M]` holds that id (a scatter-add of counts)."""
        rows = ops.broadcast_to(ops.expand_dims(ops.arange(ids.shape[0], dtype="int32"), 1), ids.shape)  # [N, M]
        indices = ops.reshape(ops.stack([rows, ops.cast(ids, "int32")], -1), (-1, 2))  # [N*M, 2]
        counts = ops.scatter(indices, ops.reshape(ops.cast(valid, "float32"), (-1,)), (ids.shape[0], vocabulary))
        return ops.greater(counts, 0.0)


def _swap_layers(hidden):
    """An RNN state `[L, B, H]` (or a tuple of them) as `[B, L, H]` and back; `[B, H]` states stay."""
    if isinstance(hidden, tuple | list):
        return type(hidden)(_swap_layers(item) for item in hidden)
    return ops.swapaxes(hidden, 0, 1) if len(hidden.shape) == 3 else hidden


class Seq2SeqDecoding:
    """A catalogue encoder-decoder (tf_impl/models/seq2seq.py `Seq2SeqBase`: documents 002 and 003) as a decoding
    object: memory is the encoder's outputs, mask and keys; state the decoder's hidden state, batch first."""

    def __init__(self, model):
        self.model = model

    def start(self, input_ids, attention_mask, max_length: int):
        lengths = ops.sum(ops.cast(attention_mask, "int32"), axis=1)  # [B]
        memory, hidden = self.model.encode(input_ids, lengths)
        return memory, _swap_layers(hidden)

    def step(self, tokens, index, state, memory):
        logits, hidden, _ = self.model.step(tokens, _swap_layers(state), memory)  # [N, V]
        return logits, _swap_layers(hidden)


def decoding_for(model):
    """The decoding object of a Keras model this module can drive (a decoding object passes through)."""
    if hasattr(model, "start") and hasattr(model, "step") and hasattr(model, "model"):
        return model
    if hasattr(model, "decoding"):  # the Hugging Face families' Keras models (tf_impl/hf/decoding.py)
        return model.decoding()
    from tf_impl.models.seq2seq import Seq2SeqBase

    if isinstance(model, Seq2SeqBase):
        return Seq2SeqDecoding(model)
    raise TypeError(
        f"{type(model).__name__} has no decoding for generation: a catalogue encoder-decoder "
        "(documents 002, 003) or a Hugging Face family's Keras model (tf_impl/hf) has one"
    )


def _map(structure, function):
    """`function` over every tensor of a nested tuple/list (None passes through)."""
    if structure is None:
        return None
    if isinstance(structure, tuple | list):
        return type(structure)(_map(item, function) for item in structure)
    return function(structure)


def reorder(state, rows):
    """The model's state rows `[B * K, ...]` in the order of the new running beams."""
    return _map(state, lambda x: ops.take(x, rows, axis=0))


def _loop(decoding, plan: Plan, input_ids, attention_mask):
    """The whole decode loop as traced ops: ids `[B * R, L]`, scores `[B * R]` (zeros for greedy), used length."""
    xp, batch, beams = Arrays(), input_ids.shape[0], plan.num_beams
    memory, state = decoding.start(input_ids, attention_mask, plan.max_length)
    repeat = lambda x: ops.repeat(x, beams, axis=0)  # noqa: E731  (each row's beams adjacent)
    memory, state = _map(memory, repeat), _map(state, repeat)
    length = ops.convert_to_tensor(1, "int32")
    if plan.beam_search:
        table = search.penalties(plan)

        def body(length, search_state, state):
            tokens = ops.reshape(xp.take_column(search_state["running"], length - 1), (-1,))  # [B*K]
            logits, state = decoding.step(tokens, length - 1, state, memory)
            search_state, rows = search.beam_advance(xp, plan, search_state, logits, length, table)
            return length + 1, search_state, reorder(state, rows)

        def going(length, search_state, state):
            return search.beam_unfinished(xp, plan, search_state)

        length, search_state, _ = ops.while_loop(going, body, (length, search.beam_start(xp, plan, batch), state))
        return search.beam_result(xp, plan, search_state)

    def greedy_body(length, search_state, state):
        logits, state = decoding.step(xp.take_column(search_state["sequences"], length - 1), length - 1, state, memory)
        return length + 1, search.greedy_advance(xp, plan, search_state, logits, length), state

    def greedy_going(length, search_state, state):
        return search.greedy_unfinished(xp, search_state)

    length, search_state, _ = ops.while_loop(greedy_going, greedy_body, (length, search.greedy_start(xp, plan, batch), state))
    return search_state["sequences"], ops.zeros((batch,), "float32"), length


def compiled_search(decoding, plan: Plan):
    """`(input_ids, attention_mask) -> (ids, scores, used length)`, compiled once per plan for the backend: XLA on
    TensorFlow (jit_compile), jax.jit on JAX over the model's variables, eager on torch."""
    backend = backends.name()
    compute = lambda tensors: _loop(decoding, plan, *tensors)  # noqa: E731
    if backend == "jax":
        return backends.jax_inference(decoding.model, compute, key=("generate", plan))
    if backend == "tensorflow":
        import tensorflow as tf

        cache = decoding.model.__dict__.setdefault("_rosetta_generate", {})  # past Keras's attribute tracking
        if plan not in cache:
            cache[plan] = tf.function(compute, jit_compile=True, reduce_retracing=False)
        return cache[plan]
    return compute


def generate(
    model,
    input_ids,
    attention_mask=None,
    settings: GenerationSettings | None = None,
    model_config: dict | None = None,
    **overrides,
) -> np.ndarray:
    """Token ids `[B * R, L]` (numpy) from source ids `[B, S]` and their padding mask (1 keeps), with `settings`
    (a model folder's: shared.generation.settings.read) updated by `overrides` in HF's field names."""
    plan = planned(settings, model_config, **overrides)
    decoding = decoding_for(model)
    input_ids = np.asarray(input_ids, np.int32)
    mask = np.ones_like(input_ids) if attention_mask is None else np.asarray(attention_mask, np.int32)
    sequences, _, used = compiled_search(decoding, plan)((ops.convert_to_tensor(input_ids), ops.convert_to_tensor(mask)))
    return keras.ops.convert_to_numpy(sequences)[:, : int(keras.ops.convert_to_numpy(used))].astype(np.int64)


def export(
    model,
    path,
    settings: GenerationSettings | None = None,
    model_config: dict | None = None,
    batch_size: int = 8,
    **overrides,
) -> Plan:
    """A TensorFlow SavedModel at `path` whose signature `translate(input_ids, attention_mask)` (int32 `[None, None]`)
    -> {"sequences": int32 `[B * R, L]`} runs the whole decode loop, XLA-compiled, with the plan fixed now: the
    model's own generation settings (tf_impl/hf/generating.py; else `settings` and `model_config`) updated by
    `overrides`. The loop runs over chunks of `batch_size` sources (the last padded with copies of the first source,
    dropped after), each chunk's result as the whole batch's would be: any batch size is served. Returns the plan."""
    import tensorflow as tf

    if backends.name() != "tensorflow":
        raise ValueError(f"export writes a TensorFlow SavedModel: run Keras on TensorFlow (KERAS_BACKEND=tensorflow), "
                         f"not {backends.name()}")  # fmt: skip
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"export: batch_size must be a positive integer, got {batch_size!r}")
    if settings is None and hasattr(model, "generation_defaults"):
        settings, own_config = model.generation_defaults()
        model_config = own_config if model_config is None else model_config
    plan = planned(settings, model_config, **overrides)
    signature = [tf.TensorSpec([None, None], tf.int32, name=name) for name in ("input_ids", "attention_mask")]
    decoding = decoding_for(model)
    translate = tf.function(_serving(decoding, plan, batch_size), input_signature=signature, jit_compile=True, autograph=False)
    translate.get_concrete_function()  # traced here: the archive takes a traced function
    archive = keras.export.ExportArchive()
    archive.track(decoding.model)  # its variables, saved with the graph
    archive.add_endpoint(SIGNATURE, translate)
    archive.write_out(str(path), verbose=False)
    return plan


def _serving(decoding, plan: Plan, chunk: int):
    """`(input_ids, attention_mask) -> {"sequences"}` over any batch: `_loop` on chunks of `chunk` sources (a static
    batch, as the loop's shapes are), their ids concatenated and cropped to the longest chunk's used length."""
    import tensorflow as tf

    rows = chunk * plan.num_return_sequences

    def one_chunk(tensors):
        sequences, _, used = _loop(decoding, plan, *tensors)  # [chunk * R, L]
        if not plan.beam_search:  # HF's greedy appends pad to finished rows; the buffer's unused tail holds the filler
            after = tf.range(plan.max_length)[None] >= used  # [1, L]
            sequences = tf.where(after, tf.constant(plan.pad_token_id, tf.int32), sequences)
        return sequences, used

    def serve(input_ids, attention_mask):
        batch = tf.shape(input_ids)[0]
        chunks = (batch + chunk - 1) // chunk
        taken = tf.range(chunks * chunk)
        taken = tf.where(taken < batch, taken, 0)  # the last chunk filled with copies of source 0
        shape = tf.stack([chunks, chunk, tf.shape(input_ids)[1]])
        ids = tf.reshape(tf.gather(input_ids, taken), shape)  # [C, chunk, S]
        mask = tf.reshape(tf.gather(attention_mask, taken), shape)  # [C, chunk, S]
        signature = (tf.TensorSpec([rows, plan.max_length], tf.int32), tf.TensorSpec([], tf.int32))
        sequences, used = tf.map_fn(one_chunk, (ids, mask), fn_output_signature=signature)  # [C, chunk * R, L], [C]
        sequences = tf.reshape(sequences, (-1, plan.max_length))[: batch * plan.num_return_sequences]  # [B * R, L]
        return {"sequences": sequences[:, : tf.reduce_max(used)]}

    return serve
