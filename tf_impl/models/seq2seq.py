"""What the real-data models (documents 002, 003, 004) share: padding masks, masked recurrent layers,
masked softmax, and the two decoding loops (teacher-forced with a schedule, and greedy).

Legend: B batch, S source length, T target length, V target vocabulary. Batch-first; the documents'
time-major `forward(source [S, B], target [T, B])` is kept at the model's edge and converted once.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from shared import catalogue
from shared.core.taps import ATTENTION_SCORES, ENCODER_OUTPUTS, ENCODER_STATE, is_recording, tap
from tf_impl.fitting import KerasInputs
from tf_impl.keras_compat import backends
from tf_impl.keras_compat.serializable import CatalogueModel


def source_mask(src_len, max_len):
    """`[B, S]` True on real tokens, False on padding; None when the batch has no lengths. `max_len`: S, an int
    or (in a graph whose lengths vary) a scalar tensor."""
    if src_len is None:
        return None
    return ops.arange(max_len, dtype="int32")[None, :] < ops.expand_dims(ops.cast(src_len, "int32"), 1)  # [B, S]


def over_time(step, carry, inputs):
    """`step(carry, inputs_t) -> (carry, outputs_t)` over axis 1 of `inputs` (a structure of `[B, T, ...]`
    tensors); returns the last carry and the outputs stacked on axis 1.

    A Python loop where T is known: eagerly, in a graph traced per shape, and always on JAX (shared.core.taps sees
    every step). `ops.scan` where T is known only when it runs: Keras's `fit` on TensorFlow traces with the
    lengths that vary between batches relaxed to None (and a padded `tf.data` batch has None lengths).
    """
    steps = keras.tree.flatten(inputs)[0].shape[1]
    if steps is None:
        return _scan_over_time(step, carry, inputs)
    steps_of_each = [ops.unstack(x, axis=1) for x in keras.tree.flatten(inputs)]  # one Unpack each: its gradient is one Pack
    outputs = []
    for inputs_t in zip(*steps_of_each, strict=True):
        carry, output = step(carry, keras.tree.pack_sequence_as(inputs, inputs_t))
        outputs.append(output)
    return carry, keras.tree.map_structure(lambda *per_step: ops.stack(per_step, 1), *outputs)  # [B, T, ...]


def gru_cell(input_share, hidden_share, state):
    """One GRU step from its gates' two shares `x kernel + b_ih`, `h recurrent_kernel + b_hh` `[B, 3H]`
    (Keras's gate order z, r, h; `reset_after=True`, torch's rule)."""
    input_z, input_r, input_h = ops.split(input_share, 3, axis=1)  # [B, H] each
    hidden_z, hidden_r, hidden_h = ops.split(hidden_share, 3, axis=1)
    z, r = ops.sigmoid(input_z + hidden_z), ops.sigmoid(input_r + hidden_r)
    candidate = ops.tanh(input_h + r * hidden_h)
    return z * state + (1 - z) * candidate  # as Keras's own cell computes it


def run_gru(layer: keras.layers.GRU, inputs, initial_state=None, mask=None):
    """A `torch_gru` layer over a whole sequence `inputs [B, T, I]` -> outputs `[B, T, H]`, final state `[B, H]`: what
    `layer(inputs, initial_state=..., mask=mask)` returns.

    As torch's nn.GRU: the inputs' share of the gates for every step in one product before the loop, then per step
    only the state's (Keras's GRU multiplies each step's inputs inside its loop): faster in a tf.function and under
    TensorFlow's XLA. On JAX, whose XLA runtime takes the one product slower (`backends.products_per_step`), the
    layer runs as Keras made it (docs/measurements.md). With `mask [B, T]` (False at padding) a row's state holds
    through its padded steps and its outputs there are zeros, as Keras's mask with `zero_output_for_mask` (and torch's
    packing), or, where the layer says `zero_output_for_mask=False`, the previous step's output (zeros before the
    first), as Keras's; a `go_backwards` layer runs from the last step to the first and returns its outputs in that
    order, as Keras's."""
    if backends.products_per_step():
        outputs, state = layer(inputs, initial_state=initial_state, mask=mask)
        return outputs, state
    if not layer.built:
        layer.build(inputs.shape)
    cell = layer.cell
    if initial_state is None:
        initial_state = ops.zeros((ops.shape(inputs)[0], cell.units), dtype=inputs.dtype)  # [B, H], as Keras starts
    input_shares = ops.matmul(inputs, cell.kernel) + cell.bias[0]  # [B, T, 3H]
    if layer.go_backwards:
        input_shares, mask = ops.flip(input_shares, 1), None if mask is None else ops.flip(mask, 1)

    def step(state, input_share):  # [B, H], [B, 3H]
        new_state = gru_cell(input_share, ops.matmul(state, cell.recurrent_kernel) + cell.bias[1], state)  # [B, H]
        return new_state, new_state

    def masked_step(carry, inputs_t):  # ([B, H], [B, H]), ([B, 3H], [B])
        (state, previous_output), (input_share, keep) = carry, inputs_t
        new_state, _ = step(state, input_share)  # [B, H]
        keep = ops.expand_dims(keep, 1)  # [B, 1]
        at_padding = ops.zeros_like(new_state) if layer.zero_output_for_mask else previous_output  # [B, H]
        output = ops.where(keep, new_state, at_padding)  # [B, H]
        return (ops.where(keep, new_state, state), output), output

    if mask is None:
        state, outputs = over_time(step, initial_state, input_shares)
        return outputs, state  # [B, T, H], [B, H]
    (state, _), outputs = over_time(masked_step, (initial_state, ops.zeros_like(initial_state)), (input_shares, mask))
    return outputs, state  # [B, T, H], [B, H]


def run_bidirectional_gru(layer: keras.layers.Bidirectional, inputs, mask=None):
    """A Bidirectional of `torch_gru` layers (merge_mode concat) over `inputs [B, T, I]` -> outputs `[B, T, 2H]`, the
    forward and the backward final states `[B, H]`: what `layer(inputs, mask=mask)` returns, each direction through
    `run_gru` (its inputs' share of the gates in one product); on JAX (`backends.products_per_step`) the layer itself."""
    if backends.products_per_step():
        outputs, forward_state, backward_state = layer(inputs, mask=mask)
        return outputs, forward_state, backward_state
    if not layer.built:
        layer.build(inputs.shape)
    forward, forward_state = run_gru(layer.forward_layer, inputs, mask=mask)  # [B, T, H], [B, H]
    backward, backward_state = run_gru(layer.backward_layer, inputs, mask=mask)  # last step first, as Keras's
    return ops.concatenate([forward, ops.flip(backward, 1)], axis=-1), forward_state, backward_state


def masked_softmax(scores, mask):
    """Softmax over the last axis giving exactly zero weight where `mask` is False (the attention weights;
    `scores` are tapped as they come, before the mask)."""
    tap(ATTENTION_SCORES, scores)
    if mask is not None:
        scores = ops.where(mask, scores, ops.cast(float("-inf"), scores.dtype))  # [B, S]
    return ops.softmax(scores, axis=-1)


def run_rnn(rnn, inputs, lengths, hidden=None, training=False):
    """Run a batch-first Keras recurrent layer; with `lengths`, mask so each row stops at its own end.

    Keras's mask keeps the state through padded steps (so final states are those of each row's last
    real token; a Bidirectional backward pass starts there), and our layers' `zero_output_for_mask`
    zeroes their outputs: what torch's packing does.
    """
    mask = source_mask(lengths, ops.shape(inputs)[1])
    return rnn(inputs, initial_state=hidden, mask=mask, training=training)


def _scan_over_time(step, carry, inputs):
    """`over_time` as one `ops.scan` for any T >= 1. The first step runs before the scan, whose carry is then
    (carry, outputs): Keras's TensorFlow `scan` stacks outputs shaped as its carry only. The scan runs over
    the step numbers and each step takes its column of `inputs`: Keras's TensorFlow `scan` fails on two or
    more sequences of unknown length (keras 3.15: `None.assert_is_compatible_with`)."""
    first = step(carry, keras.tree.map_structure(lambda x: x[:, 0], inputs))  # (carry, outputs of step 0)
    steps = ops.shape(keras.tree.flatten(inputs)[0])[1]

    def scan_step(previous, t):
        both = step(previous[0], keras.tree.map_structure(lambda x: ops.take(x, t, axis=1), inputs))
        return both, both

    (carry, _), (_, outputs) = ops.scan(scan_step, first, ops.arange(1, steps))  # outputs: [T - 1, B, ...]
    joined = keras.tree.map_structure(lambda head, tail: ops.concatenate([head[None], tail], 0), first[1], outputs)
    return carry, keras.tree.map_structure(lambda x: ops.moveaxis(x, 0, 1), joined)  # [B, T, ...]


def _forced_steps(teacher_forcing, tgt_in):
    """A schedule `[T - 1]`, or one per row `[B, T - 1]`, as `[B, T]` booleans: entry t says whether step t + 1
    reads the true token; the last column, whose next input nothing reads, True. None stays None.

    A tensor schedule keeps the loop traceable once by tf.function for every schedule.
    """
    if teacher_forcing is None:
        return None
    forced = ops.convert_to_tensor(teacher_forcing, "bool")
    if len(forced.shape) == 1:
        forced = ops.broadcast_to(forced[None, :], (ops.shape(tgt_in)[0], forced.shape[0]))  # [B, T - 1]
    return ops.concatenate([forced, ops.ones_like(forced[:, :1])], axis=1)  # [B, T]


def _next_input(true_token, output, forced):
    """The true token where teacher-forced (`forced` True, or None), else the argmax of `output [B, V]`."""
    if forced is None:
        return true_token
    return ops.where(forced, true_token, ops.cast(ops.argmax(output, axis=-1), true_token.dtype))  # [B]


class Seq2SeqBase(KerasInputs, CatalogueModel, keras.Model):
    """An encoder and a decoder, and the decoding loops over `encode(src, src_len) -> (memory, hidden)`
    and a subclass's `features(x, hidden, memory) -> (features [B, *], hidden, attention [B, S])` and
    `project(features) -> logits` (the output layer).

    Args:
        seed: of the generator the documents' `teacher_force_ratio` coin flips are drawn from.
    Attributes:
        as_written: decode as the document's listing, everything at every step (the speed baseline);
            False (ours): the attention's encoder share once (`memory` keys), and when every decoder
            input is known (no schedule) the output layer once after the loop.
    """

    as_written = False

    def __init__(self, encoder, decoder, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.schedule_rng = np.random.default_rng(seed)

    def encode(self, src, src_len=None, training=False):
        """The memory and the decoder's first state."""
        encoder_outputs, hidden = self.encoder(src, src_len, training=training)
        return self.memory(encoder_outputs, src_len), tap(ENCODER_STATE, hidden)

    def memory(self, encoder_outputs, src_len):
        """Encoder outputs `[B, S, *]`, their padding mask `[B, S]` and the attention keys (None as written)."""
        tap(ENCODER_OUTPUTS, encoder_outputs)
        keys = None if self.decodes_as_written() else self.decoder.attention.keys(encoder_outputs)
        return encoder_outputs, source_mask(src_len, ops.shape(encoder_outputs)[1]), keys

    def step(self, x, hidden, memory, training=False):
        """One decoder step: logits `[B, V]`, the next state, attention `[B, S]`."""
        features, hidden, weights = self.features(x, hidden, memory, training=training)
        return self.project(features), hidden, weights

    def decode(self, src, tgt_in, src_len=None, teacher_forcing=None, training=False):
        """Logits `[B, T, V]` (step t predicts the token after `tgt_in[:, t]`) and attention `[B, T, S]`.

        Args:
            teacher_forcing: `[T - 1]` booleans from shared.core.teacher_forcing (or `[B, T - 1]`, one schedule
                per row); entry t False feeds step t + 1 the argmax of step t instead of `tgt_in[:, t + 1]`.
                None: always the true token.
            training: dropout on (torch's train mode).
        """
        memory, hidden = self.encode(src, src_len, training=training)
        if teacher_forcing is None and not self.decodes_as_written():
            return self.decode_teacher_forced(tgt_in, hidden, memory, training=training)
        forced = _forced_steps(teacher_forcing, tgt_in)  # [B, T] or None
        true_next = ops.concatenate([tgt_in[:, 1:], tgt_in[:, :1]], axis=1)  # [B, T]: the last column is never read

        def step(carry, inputs):
            x, hidden = carry
            output, hidden, weights = self.step(x, hidden, memory, training=training)  # [B, V], ..., [B, S]
            return (_next_input(inputs[0], output, None if forced is None else inputs[1]), hidden), (output, weights)

        inputs = (true_next,) if forced is None else (true_next, forced)
        _, (logits, attention) = over_time(step, (tgt_in[:, 0], hidden), inputs)  # <sos> first
        return logits, attention  # [B, T, V], [B, T, S]

    def decodes_as_written(self) -> bool:
        """Whether every input known still decodes step by step as the listing: as written, and where ours has nothing
        left to hoist on this Keras backend (the catalogue entry's `listing_on`: luong_dot on JAX)."""
        spec = catalogue.CATALOGUE.get(getattr(self, "rosetta_name", ""))
        return self.as_written or (spec is not None and backends.name() in spec.listing_on)

    def decode_teacher_forced(self, tgt_in, hidden, memory, training=False):
        """Every input known: the loop computes features only; the output layer runs once after it."""

        def step(hidden, x):
            feature, hidden, weights = self.features(x, hidden, memory, training=training)  # [B, *], ..., [B, S]
            return hidden, (feature, weights)

        _, (features, attention) = over_time(step, hidden, tgt_in)
        return self.project(features), attention  # [B, T, V], [B, T, S]

    def project_over_time(self, features):
        """The output layer over every step's features `[B, T, H]` -> `[B, T, V]`: one product, except on JAX, where
        XLA's CPU runtime takes longer for document 003's wide output layer as one product than as one per step, as
        its listing does. Document 004's narrower layer is faster as one product: there `project` stays one
        (docs/measurements.md)."""
        if not backends.products_per_step():
            return self.project(features)
        return ops.stack([self.project(step) for step in ops.unstack(features, axis=1)], axis=1)  # [B, T, V]

    def translate(self, src, src_len=None, *, max_len: int, sos_id: int, eos_id: int, pad_id: int):
        """Greedy decoding (document 003's `translate`, batched): token ids `[B, L]` and attention `[B, L, S]`.

        Each row stops at its `<eos>` (kept in the output); later positions hold `<pad>` and zero
        attention. L is the longest row, at most `max_len`.
        """
        encode, step = self.inference_steps()
        memory, hidden = encode(src, src_len)
        x = ops.full((src.shape[0],), sos_id, dtype="int64")  # [B]
        done = ops.zeros((src.shape[0],), dtype="bool")
        tokens, attention = [], []
        for _ in range(max_len):
            output, hidden, weights = step(x, hidden, memory)
            x = ops.cast(ops.argmax(output, axis=-1), "int64")  # [B]
            tokens.append(ops.where(done, pad_id, x))
            attention.append(ops.where(ops.expand_dims(done, 1), ops.zeros_like(weights), weights))
            done = ops.logical_or(done, x == eos_id)
            if bool(ops.all(done)):
                break
        return ops.stack(tokens, 1), ops.stack(attention, 1)  # [B, L], [B, L, S]

    def inference_steps(self):
        """`encode` and `step` for greedy decoding: on JAX each jitted over the current weights, one program per shape,
        so a decoding step dispatches one program, not each of its ops (far faster once compiled: docs/measurements.md),
        except while taps record; elsewhere the methods themselves."""
        if backends.name() != "jax" or is_recording():
            return self.encode, self.step
        encode = backends.jax_inference(self, lambda inputs: self.encode(*inputs), key="encode")
        step = backends.jax_inference(self, lambda inputs: self.step(*inputs), key="step")
        return (lambda src, src_len: encode((src, src_len))), (lambda x, hidden, memory: step((x, hidden, memory)))

    def draw_schedule(self, teacher_force_ratio: float, steps: int):
        """The documents' per-step coin flips, from this model's seeded numpy generator (never `random`)."""
        from shared.core.teacher_forcing import draw

        return draw(teacher_force_ratio, steps, self.schedule_rng)

    def time_major_forward(self, source, target, teacher_force_ratio, training=False):
        """The documents' `forward(source [S, B], target [T, B], ratio)` -> outputs `[T, B, V]`.

        Row 0 stays zero as in Ben Trevett's tutorial and document 003 (nothing predicts `<sos>`; the
        loss skips it); row t predicts `target[t]` from `target[t - 1]`. `training`: dropout on (torch: the
        module's train mode).
        """
        schedule = self.draw_schedule(teacher_force_ratio, target.shape[0] - 2)
        src, tgt_in = ops.transpose(source), ops.transpose(target[:-1])
        logits, _ = self.decode(src, tgt_in, teacher_forcing=schedule, training=training)
        return ops.transpose(ops.concatenate([ops.zeros_like(logits[:, :1]), logits], 1), (1, 0, 2))  # [T, B, V]
