"""What the real-data models (documents 002, 003, 004) share: padding masks, masked recurrent layers,
masked softmax, and the two decoding loops (teacher-forced with a schedule, and greedy).

Legend: B batch, S source length, T target length, V target vocabulary. Batch-first; the documents'
time-major `forward(source [S, B], target [T, B])` is kept at the model's edge and converted once.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from shared.taps import ATTENTION_SCORES, ENCODER_OUTPUTS, ENCODER_STATE, tap
from tf_impl.serializable import CatalogueModel


def source_mask(src_len, max_len: int):
    """`(B, S)` True on real tokens, False on padding; None when the batch has no lengths."""
    if src_len is None:
        return None
    return ops.arange(max_len)[None, :] < ops.expand_dims(ops.cast(src_len, "int32"), 1)  # [B, S]


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
    mask = source_mask(lengths, inputs.shape[1])
    return rnn(inputs, initial_state=hidden, mask=mask, training=training)


def _next_input(true_token, output, forced):
    """The true token where teacher-forced (`forced` True or None), else the argmax of `output (B, V)`.

    A tensor `forced` keeps the loop traceable once by tf.function for every schedule.
    """
    if forced is None:
        return true_token
    return ops.where(forced, true_token, ops.cast(ops.argmax(output, axis=-1), true_token.dtype))  # [B]


class Seq2SeqBase(CatalogueModel, keras.Model):
    """An encoder and a decoder, and the decoding loops over `encode(src, src_len) -> (memory, hidden)`
    and a subclass's `features(x, hidden, memory) -> (features (B, *), hidden, attention (B, S))` and
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
        """Encoder outputs `(B, S, *)`, their padding mask `(B, S)` and the attention keys (None as written)."""
        tap(ENCODER_OUTPUTS, encoder_outputs)
        keys = None if self.as_written else self.decoder.attention.keys(encoder_outputs)
        return encoder_outputs, source_mask(src_len, encoder_outputs.shape[1]), keys

    def step(self, x, hidden, memory, training=False):
        """One decoder step: logits `(B, V)`, the next state, attention `(B, S)`."""
        features, hidden, weights = self.features(x, hidden, memory, training=training)
        return self.project(features), hidden, weights

    def decode(self, src, tgt_in, src_len=None, teacher_forcing=None, training=False):
        """Logits `(B, T, V)` (step t predicts the token after `tgt_in[:, t]`) and attention `(B, T, S)`.

        Args:
            teacher_forcing: `(T - 1,)` booleans from shared.teacher_forcing; entry t False feeds step
                t + 1 the argmax of step t instead of `tgt_in[:, t + 1]`. None: always the true token.
            training: dropout on (torch's train mode).
        """
        memory, hidden = self.encode(src, src_len, training=training)
        if teacher_forcing is None and not self.as_written:
            return self.decode_teacher_forced(tgt_in, hidden, memory, training=training)
        x, logits, attention = tgt_in[:, 0], [], []  # x: [B], <sos> first
        for t in range(tgt_in.shape[1]):
            output, hidden, weights = self.step(x, hidden, memory, training=training)  # [B, V], ..., [B, S]
            logits.append(output)
            attention.append(weights)
            if t + 1 < tgt_in.shape[1]:
                x = _next_input(tgt_in[:, t + 1], output, None if teacher_forcing is None else teacher_forcing[t])
        return ops.stack(logits, 1), ops.stack(attention, 1)  # [B, T, V], [B, T, S]

    def decode_teacher_forced(self, tgt_in, hidden, memory, training=False):
        """Every input known: the loop computes features only; the output layer runs once after it."""
        features, attention = [], []
        for t in range(tgt_in.shape[1]):
            feature, hidden, weights = self.features(tgt_in[:, t], hidden, memory, training=training)  # [B, *], ..., [B, S]
            features.append(feature)
            attention.append(weights)
        return self.project(ops.stack(features, 1)), ops.stack(attention, 1)  # [B, T, V], [B, T, S]

    def translate(self, src, src_len=None, *, max_len: int, sos_id: int, eos_id: int, pad_id: int):
        """Greedy decoding (document 003's `translate`, batched): token ids `(B, L)` and attention `(B, L, S)`.

        Each row stops at its `<eos>` (kept in the output); later positions hold `<pad>` and zero
        attention. L is the longest row, at most `max_len`.
        """
        memory, hidden = self.encode(src, src_len)
        x = ops.full((src.shape[0],), sos_id, dtype="int64")  # [B]
        done = ops.zeros((src.shape[0],), dtype="bool")
        tokens, attention = [], []
        for _ in range(max_len):
            output, hidden, weights = self.step(x, hidden, memory)
            x = ops.cast(ops.argmax(output, axis=-1), "int64")  # [B]
            tokens.append(ops.where(done, pad_id, x))
            attention.append(ops.where(ops.expand_dims(done, 1), ops.zeros_like(weights), weights))
            done = ops.logical_or(done, x == eos_id)
            if bool(ops.all(done)):
                break
        return ops.stack(tokens, 1), ops.stack(attention, 1)  # [B, L], [B, L, S]

    def draw_schedule(self, teacher_force_ratio: float, steps: int):
        """The documents' per-step coin flips, from this model's seeded numpy generator (never `random`)."""
        from shared.teacher_forcing import draw

        return draw(teacher_force_ratio, steps, self.schedule_rng)

    def time_major_forward(self, source, target, teacher_force_ratio):
        """The documents' `forward(source (S, B), target (T, B), ratio)` -> outputs `(T, B, V)`.

        Row 0 stays zero as in Ben Trevett's tutorial and document 003 (nothing predicts `<sos>`; the
        loss skips it); row t predicts `target[t]` from `target[t - 1]`.
        """
        schedule = self.draw_schedule(teacher_force_ratio, target.shape[0] - 2)
        logits, _ = self.decode(ops.transpose(source), ops.transpose(target[:-1]), teacher_forcing=schedule)
        return ops.transpose(ops.concatenate([ops.zeros_like(logits[:, :1]), logits], 1), (1, 0, 2))  # [T, B, V]
