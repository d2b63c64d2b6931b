"""What the real-data models (documents 002, 003, 004) share: padding masks, packed recurrent layers,
masked softmax, and the two decoding loops (teacher-forced with a schedule, and greedy).

Legend: B batch, S source length, T target length, V target vocabulary. Batch-first; the documents'
time-major `forward(source [S, B], target [T, B])` is kept at the model's edge and converted once.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from shared.core.taps import ATTENTION_SCORES, ENCODER_OUTPUTS, ENCODER_STATE, tap


def source_mask(src_len: torch.Tensor | None, max_len: int) -> torch.Tensor | None:
    """`[B, S]` True on real tokens, False on padding; None when the batch has no lengths."""
    if src_len is None:
        return None
    return torch.arange(max_len, device=src_len.device) < src_len.unsqueeze(1)  # [B, S]


def gru_cell(input_share: torch.Tensor, hidden_share: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """One GRU step from its gates' two shares `x W_ih^T + b_ih`, `h W_hh^T + b_hh` `[B, 3H]` (order r, z, n)."""
    input_r, input_z, input_n = input_share.chunk(3, dim=1)  # [B, H] each
    hidden_r, hidden_z, hidden_n = hidden_share.chunk(3, dim=1)
    r, z = torch.sigmoid(input_r + hidden_r), torch.sigmoid(input_z + hidden_z)
    n = torch.tanh(input_n + r * hidden_n)
    return n + z * (state - n)  # (1 - z) n + z h, as torch's own cell computes it


def takes_row_bias(device: torch.device) -> bool:
    """Whether `torch.gru_cell` on `device` adds an input bias with a row per example: on the CPU it adds `b_ih` as
    `linear` does; CUDA's fused kernel takes 1-D biases only (`Expected 1-dimensional tensor ... 'input_bias'
    ... _thnn_fused_gru_cell_cuda`, seen on an H100)."""
    return device.type == "cpu"


def gru_cell_row_bias(inputs, state, input_weight, hidden_weight, input_bias_rows, hidden_bias) -> torch.Tensor:
    """torch's GRU cell with an input bias per row `input_bias_rows` `[B, 3H]`: its own C++ cell where the device
    takes such a bias (`takes_row_bias`), else the cell from its gates' two shares (the same sums)."""
    if takes_row_bias(inputs.device):
        return torch.gru_cell(inputs, state, input_weight, hidden_weight, input_bias_rows, hidden_bias)  # [B, H]
    input_share = torch.addmm(input_bias_rows, inputs, input_weight.t())  # [B, 3H]
    return gru_cell(input_share, F.linear(state, hidden_weight, hidden_bias), state)  # [B, H]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis giving exactly zero weight where `mask` is False (the attention weights;
    `scores` are tapped as they come, before the mask)."""
    tap(ATTENTION_SCORES, scores)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # [B, S]
    return torch.softmax(scores, dim=-1)


def run_rnn(rnn: nn.RNNBase, inputs: torch.Tensor, lengths: torch.Tensor | None, hidden=None):
    """Run a batch-first recurrent layer; with `lengths`, pack so each row stops at its own end.

    Packing makes the final states those of each row's last real token (a bidirectional layer's
    backward pass starts there too) and zeroes the outputs at padded steps: what Keras's masking does.
    Where torch.compile traces into recurrent layers (`allow_rnn`: torch_impl.train.compiled, on the CPU), the same
    as `run_masked`'s loop: packing would break the graph there.
    """
    if lengths is None:
        return rnn(inputs, hidden)
    if traces_recurrent_loops() and not getattr(rnn, "proj_size", 0):
        return run_masked(rnn, inputs, lengths, hidden)  # traced whole; off the CPU each layer stays one cuDNN call
    packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
    outputs, hidden = rnn(packed, hidden)
    outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=inputs.shape[1])  # [B, S, D*H]
    return outputs, hidden


def traces_recurrent_loops() -> bool:
    """Whether this runs under torch.compile with Dynamo tracing into recurrent layers (`allow_rnn`:
    torch_impl.train.compiled, on the CPU): there a masked loop stays in the graph where packing breaks it."""
    return torch.compiler.is_compiling() and torch._dynamo.config.allow_rnn


def run_masked(rnn: nn.RNNBase, inputs: torch.Tensor, lengths: torch.Tensor, hidden=None):
    """What `run_rnn` computes by packing, as a loop over steps that holds each row's state past its end and zeroes
    its outputs there: torch.compile traces this loop (packing breaks its graph and runs the layer eagerly).
    `inputs [B, S, I]`, `lengths [B]` -> outputs `[B, S, D*H]` and the final state(s) `[L*D, B, H]` in the layer's
    order (layer-major, forward before backward)."""
    mask = torch.arange(inputs.shape[1], device=inputs.device) < lengths.to(inputs.device).unsqueeze(1)  # [B, S]
    return masked_layers(rnn, inputs, mask, hidden)


def masked_layers(rnn: nn.RNNBase, inputs: torch.Tensor, mask: torch.Tensor, hidden=None, zero_output: bool = True):
    """Every layer and direction of `rnn` over `inputs [B, S, I]` as `masked_direction` loops under `mask [B, S]` (any
    pattern: packing's, or a Keras mask with pads inside a row) -> outputs `[B, S, D*H]`, final state(s) `[L*D, B, H]`."""
    directions = 2 if rnn.bidirectional else 1
    initial = _initial_states(rnn, inputs, hidden)  # per (layer, direction): (h,) or (h, c), each [B, H]
    x, finals = inputs, []
    for layer in range(rnn.num_layers):
        outputs = []
        for direction in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            weights = [getattr(rnn, f"{kind}{suffix}", None) for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            state = initial[layer * directions + direction]
            output, final = masked_direction(rnn.mode, x, mask, state, weights, direction == 1, zero_output)  # [B, S, H]
            outputs.append(output)
            finals.append(final)
        x = torch.cat(outputs, dim=2)  # [B, S, D*H]
        if rnn.dropout and rnn.training and layer + 1 < rnn.num_layers:
            x = F.dropout(x, rnn.dropout, training=True)
    states = [torch.stack(parts) for parts in zip(*finals, strict=True)]  # each [L*D, B, H]
    return x, (tuple(states) if rnn.mode == "LSTM" else states[0])


def _initial_states(rnn: nn.RNNBase, inputs: torch.Tensor, hidden) -> list[tuple[torch.Tensor, ...]]:
    """The layer's initial state per (layer, direction), zeros where `hidden` is None: (h,), or (h, c) for an LSTM."""
    count = rnn.num_layers * (2 if rnn.bidirectional else 1)
    if hidden is None:
        zeros = inputs.new_zeros(count, inputs.shape[0], rnn.hidden_size)  # [L*D, B, H]
        hidden = (zeros, zeros) if rnn.mode == "LSTM" else zeros
    parts = hidden if rnn.mode == "LSTM" else (hidden,)
    return [tuple(part[i] for part in parts) for i in range(count)]


def masked_direction(mode: str, x, mask, state: tuple, weights: list, reverse: bool = False, zero_output: bool = True):
    """One direction of one recurrent layer (`mode`: torch's GRU, LSTM, RNN_TANH, RNN_RELU) over `x [B, S, I]`, the
    steps in reverse order if `reverse`: the inputs' share of the gates in one product, then a cell per step whose
    new state is kept only where `mask [B, S]` is True; a masked step outputs zeros (`zero_output`) or the previous
    output (Keras's GRU). `state`: (h,) or (h, c), each `[B, H]`; `weights`: W_ih, W_hh, b_ih, b_hh (None: no bias).
    -> outputs `[B, S, H]`, the final state tuple."""
    weight_ih, weight_hh, bias_ih, bias_hh = weights
    input_shares = F.linear(x, weight_ih, bias_ih)  # [B, S, G*H]
    zeros = torch.zeros_like(state[0])  # [B, H]
    outputs, output = [None] * x.shape[1], zeros
    for t in range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1]):
        new = _CELLS[mode](input_shares[:, t], F.linear(state[0], weight_hh, bias_hh), state)  # (h, ...) each [B, H]
        keep = mask[:, t, None]  # [B, 1]
        state = tuple(torch.where(keep, part, old) for part, old in zip(new, state, strict=True))
        output = torch.where(keep, new[0], zeros if zero_output else output)  # [B, H]
        outputs[t] = output
    return torch.stack(outputs, 1), state  # [B, S, H]


def _lstm_cell(input_share, hidden_share, state):
    """torch's LSTM step from its gates' shares `[B, 4H]` (order i, f, g, o) -> (h, c)."""
    i, f, g, o = (input_share + hidden_share).chunk(4, dim=1)  # [B, H] each
    c = torch.sigmoid(f) * state[1] + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


_CELLS = {
    "GRU": lambda input_share, hidden_share, state: (gru_cell(input_share, hidden_share, state[0]),),
    "LSTM": _lstm_cell,
    "RNN_TANH": lambda input_share, hidden_share, state: (torch.tanh(input_share + hidden_share),),
    "RNN_RELU": lambda input_share, hidden_share, state: (torch.relu(input_share + hidden_share),),
}


def _next_input(true_token: torch.Tensor, output: torch.Tensor, forced) -> torch.Tensor:
    """The true token where teacher-forced (`forced` True or None), else the argmax of `output [B, V]`."""
    if forced is None:
        return true_token
    return torch.where(torch.as_tensor(forced), true_token, output.argmax(-1))  # [B]


class Seq2SeqBase(nn.Module):
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

    def __init__(self, encoder: nn.Module, decoder: nn.Module, seed: int = 0):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.schedule_rng = np.random.default_rng(seed)

    def encode(self, src, src_len=None):
        """The memory and the decoder's first state."""
        encoder_outputs, hidden = self.encoder(src, src_len)
        return self.memory(encoder_outputs, src_len), tap(ENCODER_STATE, hidden)

    def memory(self, encoder_outputs, src_len):
        """Encoder outputs `[B, S, *]`, their padding mask `[B, S]` and the attention keys (None as written)."""
        tap(ENCODER_OUTPUTS, encoder_outputs)
        keys = None if self.decodes_as_written() else self.decoder.attention.keys(encoder_outputs)
        return encoder_outputs, source_mask(src_len, encoder_outputs.shape[1]), keys

    def step(self, x, hidden, memory):
        """One decoder step: logits `[B, V]`, the next state, attention `[B, S]`."""
        features, hidden, weights = self.features(x, hidden, memory)
        return self.project(features), hidden, weights

    def decode(self, src, tgt_in, src_len=None, teacher_forcing=None):
        """Logits `[B, T, V]` (step t predicts the token after `tgt_in[:, t]`) and attention `[B, T, S]`.

        Args:
            teacher_forcing: `[T - 1]` booleans from shared.core.teacher_forcing; entry t False feeds step
                t + 1 the argmax of step t instead of `tgt_in[:, t + 1]`. None: always the true token.
        """
        memory, hidden = self.encode(src, src_len)
        if teacher_forcing is None and not self.decodes_as_written():
            return self.decode_teacher_forced(tgt_in, hidden, memory)
        x, logits, attention = tgt_in[:, 0], [], []  # x: [B], <sos> first
        for t in range(tgt_in.shape[1]):
            output, hidden, weights = self.step(x, hidden, memory)  # [B, V], ..., [B, S]
            logits.append(output)
            attention.append(weights)
            if t + 1 < tgt_in.shape[1]:
                x = _next_input(tgt_in[:, t + 1], output, None if teacher_forcing is None else teacher_forcing[t])
        return torch.stack(logits, 1), torch.stack(attention, 1)  # [B, T, V], [B, T, S]

    def decodes_as_written(self) -> bool:
        """Whether every input known still decodes step by step as the listing: as written (Keras's twin also where
        ours has nothing left to hoist on its backend, catalogue `listing_on`)."""
        return self.as_written

    def decode_teacher_forced(self, tgt_in, hidden, memory):
        """Every input known: the loop computes features only; the output layer runs once after it."""
        features, attention = [], []
        for t in range(tgt_in.shape[1]):
            feature, hidden, weights = self.features(tgt_in[:, t], hidden, memory)  # [B, *], ..., [B, S]
            features.append(feature)
            attention.append(weights)
        return self.project(torch.stack(features, 1)), torch.stack(attention, 1)  # [B, T, V], [B, T, S]

    def project_over_time(self, features):
        """The output layer over every step's features `[B, T, H]` -> `[B, T, V]`: one product here (Keras on JAX runs
        one per step for document 003, where one wide product is slower: tf_impl's twin says why)."""
        return self.project(features)  # [B, T, V]

    def translate(self, src, src_len=None, *, max_len: int, sos_id: int, eos_id: int, pad_id: int):
        """Greedy decoding (document 003's `translate`, batched): token ids `[B, L]` and attention `[B, L, S]`.

        Each row stops at its `<eos>` (kept in the output); later positions hold `<pad>` and zero
        attention. L is the longest row, at most `max_len`.
        """
        memory, hidden = self.encode(src, src_len)
        x = torch.full((src.shape[0],), sos_id, dtype=torch.long, device=src.device)  # [B]
        done = torch.zeros_like(x, dtype=torch.bool)
        tokens, attention = [], []
        for _ in range(max_len):
            output, hidden, weights = self.step(x, hidden, memory)
            x = output.argmax(-1)  # [B]
            tokens.append(x.masked_fill(done, pad_id))
            attention.append(weights.masked_fill(done.unsqueeze(1), 0.0))
            done = done | (x == eos_id)
            if bool(done.all()):
                break
        return torch.stack(tokens, 1), torch.stack(attention, 1)  # [B, L], [B, L, S]

    def draw_schedule(self, teacher_force_ratio: float, steps: int):
        """The documents' per-step coin flips, from this model's seeded numpy generator (never `random`)."""
        from shared.core.teacher_forcing import draw

        return draw(teacher_force_ratio, steps, self.schedule_rng)

    def time_major_forward(self, source, target, teacher_force_ratio):
        """The documents' `forward(source [S, B], target [T, B], ratio)` -> outputs `[T, B, V]`.

        Row 0 stays zero as in Ben Trevett's tutorial and document 003 (nothing predicts `<sos>`; the
        loss skips it); row t predicts `target[t]` from `target[t - 1]` (document 002 fed `target[0]`
        twice and predicted nothing for its last step).
        """
        schedule = self.draw_schedule(teacher_force_ratio, target.shape[0] - 2)
        logits, _ = self.decode(source.t(), target[:-1].t(), teacher_forcing=schedule)  # [B, T - 1, V]
        return torch.cat([torch.zeros_like(logits[:, :1]), logits], 1).transpose(0, 1)  # [T, B, V]
