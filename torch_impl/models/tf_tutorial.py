"""Document 004 (attention survey quoting TensorFlow's NMT-with-attention tutorial): `BahdanauAttention`,
`Encoder`, `Decoder` — the Keras listing's classes in PyTorch — and `Seq2Seq`, the tutorial's
train/translate loop as a module.

Legend: B batch, S source length, E embedding_dim, H units (enc_units = dec_units), V vocabulary.
Batch-first, as the tutorial. Keras infers input sizes; torch needs them, so `BahdanauAttention` takes
`query_dim` and `values_dim` (default: `units`, as the tutorial's equal sizes give).

The tutorial's score changed between revisions: January 2020 `V(tanh(W1(values) + W2(query)))` (the
default), 2021 `V(tanh(W1(query) + W2(values)))` (`w1_on_query=True`). Same function, but a checkpoint
of one revision holds W1 and W2 swapped for the other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from shared.core.taps import CONTEXT_VECTORS, ENCODER_STATE, SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS, tap
from torch_impl.inductor_ops import energy_tanh
from torch_impl.models.seq2seq import Seq2SeqBase, gru_cell, masked_softmax, run_rnn


class BahdanauAttention(nn.Module):
    """Document 004, `BahdanauAttention(units)`: `score = V(tanh(W1(values) + W2(query)))`, softmax on axis 1.

    `w1_on_query=True`: the 2021 revision's `V(tanh(W1(query) + W2(values)))`; W1 then takes `query_dim`
    inputs and W2 `values_dim`.
    """

    def __init__(self, units: int, query_dim: int | None = None, values_dim: int | None = None, w1_on_query: bool = False):
        super().__init__()
        query_dim, values_dim = query_dim or units, values_dim or units
        self.w1_on_query = w1_on_query
        self.W1 = nn.Linear(query_dim if w1_on_query else values_dim, units)
        self.W2 = nn.Linear(values_dim if w1_on_query else query_dim, units)
        self.V = nn.Linear(units, 1)

    @property
    def query_layer(self) -> nn.Linear:
        """The layer applied to the query: W2 (January 2020), W1 (2021, `w1_on_query`)."""
        return self.W1 if self.w1_on_query else self.W2

    @property
    def values_layer(self) -> nn.Linear:
        """The layer applied to the values: W1 (January 2020), W2 (2021, `w1_on_query`)."""
        return self.W2 if self.w1_on_query else self.W1

    def keys(self, values: torch.Tensor) -> torch.Tensor:
        """Ours: the values' share (`W1(values)`, `W2(values)` with w1_on_query) once per sequence instead of
        once per step: `[B, S, H]`."""
        return self.values_layer(values)

    def forward(self, query: torch.Tensor, values: torch.Tensor, mask=None, keys=None):
        """`query [B, H]`, `values [B, S, H]` -> context `[B, H]`, attention_weights `[B, S, 1]`."""
        hidden_with_time_axis = query.unsqueeze(1)  # [B, 1, H]
        values_share = self.values_layer(values) if keys is None else keys  # [B, S, H]; the listing: at every step
        tanh = torch.tanh if keys is None else energy_tanh  # ours: keys computed once
        score = self.V(tanh(values_share + self.query_layer(hidden_with_time_axis)))  # [B, S, 1]
        attention_weights = masked_softmax(score.squeeze(2), mask).unsqueeze(2)  # [B, S, 1]
        context_vector = tap(CONTEXT_VECTORS, torch.sum(attention_weights * values, dim=1))  # [B, H]
        return context_vector, attention_weights


class Encoder(nn.Module):
    """Document 004, `Encoder(vocab_size, embedding_dim, enc_units, batch_sz)`: embedding and GRU."""

    def __init__(self, vocab_size: int, embedding_dim: int, enc_units: int, batch_sz: int):
        super().__init__()
        self.batch_sz = batch_sz
        self.enc_units = enc_units
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.gru = nn.GRU(embedding_dim, enc_units, batch_first=True)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor, lengths: torch.Tensor | None = None):
        """`x [B, S]`, `hidden [B, H]` -> output `[B, S, H]`, state `[B, H]`."""
        x = tap(SOURCE_EMBEDDINGS, self.embedding(x))  # [B, S, E]
        output, state = run_rnn(self.gru, x, lengths, hidden.unsqueeze(0))  # [B, S, H], [1, B, H]
        return output, state.squeeze(0)

    def initialize_hidden_state(self, batch_size: int | None = None) -> torch.Tensor:
        """Zeros `[batch_sz, enc_units]` (or `[batch_size, ...]` for a batch of another size)."""
        weight = self.gru.weight_hh_l0
        return torch.zeros(batch_size or self.batch_sz, self.enc_units, dtype=weight.dtype, device=weight.device)


class Decoder(nn.Module):
    """Document 004, `Decoder(vocab_size, embedding_dim, dec_units, batch_sz)`: attention, embedding, GRU, fc.

    The listing calls `self.gru(x)` without `initial_state`: the GRU restarts from zeros at every step
    and the previous state reaches it only as the attention query. That is kept as the default;
    `feed_state=True` passes the previous state as the paper intends. `w1_on_query` picks the
    attention's revision (`BahdanauAttention`).
    """

    def __init__(self, vocab_size: int, embedding_dim: int, dec_units: int, batch_sz: int, feed_state: bool = False,
                 w1_on_query: bool = False):  # fmt: skip
        super().__init__()
        self.batch_sz = batch_sz
        self.dec_units = dec_units
        self.feed_state = feed_state
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.gru = nn.GRU(embedding_dim + dec_units, dec_units, batch_first=True)  # input: [context; embedding]
        self.fc = nn.Linear(dec_units, vocab_size)
        self.attention = BahdanauAttention(self.dec_units, w1_on_query=w1_on_query)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor, enc_output: torch.Tensor, mask=None):
        """`x [B, 1]`, `hidden [B, H]`, `enc_output [B, S, H]` -> logits `[B, V]`, state `[B, H]`, weights `[B, S, 1]`."""
        output, state, attention_weights = self.features(x, hidden, enc_output, mask)
        return self.fc(output), state, attention_weights

    def features(self, x, hidden, enc_output, mask=None, keys=None):
        """One step up to `fc`: the GRU output `[B, H]`, state `[B, H]`, attention_weights `[B, S, 1]`."""
        context_vector, attention_weights = self.attention(hidden, enc_output, mask, keys)  # [B, H], [B, S, 1]
        x = tap(TARGET_EMBEDDINGS, self.embedding(x))  # [B, 1, E]
        x = torch.cat([context_vector.unsqueeze(1), x], dim=-1)  # [B, 1, H + E]
        output, state = self.gru(x, hidden.unsqueeze(0) if self.feed_state else None)  # [B, 1, H], [1, B, H]
        return output.reshape(-1, output.shape[2]), state.squeeze(0), attention_weights  # [B, H], [B, H], [B, S, 1]

    def features_teacher_forced(self, tgt_in, hidden, enc_output, mask, keys):
        """Ours, every input known (`tgt_in [B, T]`): the embeddings' share of the GRU's gates for all steps in one
        product; per step only the context's share and, with `feed_state`, the state's. Without it the listing's
        GRU starts each step from zeros, so its recurrent product is `0 W_hh^T`: ours skips it (the bias remains).
        -> GRU outputs `[B, T, H]`, attention `[B, T, S]`."""
        x = tap(TARGET_EMBEDDINGS, self.embedding(tgt_in))  # [B, T, E]
        H, gru = self.dec_units, self.gru
        emb_share = F.linear(x, gru.weight_ih_l0[:, H:], gru.bias_ih_l0)  # [B, T, 3H]; the GRU's input is [context; x]
        context_weight = gru.weight_ih_l0[:, :H].t()  # [H, 3H], sliced once
        zero_state, bias_share = torch.zeros_like(hidden), gru.bias_hh_l0.expand_as(emb_share[:, 0])  # [B, H], [B, 3H]
        outputs, attention = [], []
        for emb_share_t in emb_share.unbind(1):  # [B, 3H] each
            context_vector, attention_weights = self.attention(hidden, enc_output, mask, keys)  # [B, H], [B, S, 1]
            input_share = torch.addmm(emb_share_t, context_vector, context_weight)  # [B, 3H]
            if self.feed_state:
                hidden = gru_cell(input_share, F.linear(hidden, gru.weight_hh_l0, gru.bias_hh_l0), hidden)  # [B, H]
            else:
                hidden = gru_cell(input_share, bias_share, zero_state)  # the listing's GRU restarts from zeros
            outputs.append(hidden)
            attention.append(attention_weights.squeeze(2))
        return torch.stack(outputs, 1), torch.stack(attention, 1)  # [B, T, H], [B, T, S]


class Seq2Seq(Seq2SeqBase):
    """The tutorial's loop around `Encoder` and `Decoder` (its `train_step` and `evaluate`), as a module."""

    def forward(self, inp: torch.Tensor, targ: torch.Tensor) -> torch.Tensor:
        """The tutorial's `train_step` forward: `inp [B, S]`, `targ [B, T]` -> logits `[B, T - 1, V]`."""
        return self.decode(inp, targ[:, :-1])[0]

    def encode(self, src, src_len=None):
        enc_hidden = self.encoder.initialize_hidden_state(src.shape[0])  # [B, H]
        enc_output, enc_hidden = self.encoder(src, enc_hidden, src_len)  # [B, S, H], [B, H]
        return self.memory(enc_output, src_len), tap(ENCODER_STATE, enc_hidden)

    def features(self, x, hidden, memory):
        enc_output, mask, keys = memory
        output, state, attention_weights = self.decoder.features(x.unsqueeze(1), hidden, enc_output, mask, keys)
        return output, state, attention_weights.squeeze(2)  # [B, H], [B, H], [B, S]

    def project(self, features):
        return self.decoder.fc(features)  # [..., V]

    def decode_teacher_forced(self, tgt_in, hidden, memory):
        features, attention = self.decoder.features_teacher_forced(tgt_in, hidden, *memory)  # [B, T, H], [B, T, S]
        return self.project(features), attention


def keras_initializers(model: nn.Module) -> nn.Module:
    """Keras's defaults, so a torch model starts from the tutorial's distributions: glorot-uniform kernels
    (the tutorial's `recurrent_initializer='glorot_uniform'` too), zero biases, U(-0.05, 0.05) embeddings."""
    for name, param in model.named_parameters():
        if "embedding" in name:
            nn.init.uniform_(param, -0.05, 0.05)
        elif "bias" in name:
            nn.init.zeros_(param)
        else:
            nn.init.xavier_uniform_(param)
    return model


def build_model(vocab_inp_size: int, vocab_tar_size: int, embedding_dim: int, units: int, batch_sz: int,
                feed_state: bool, w1_on_query: bool = False) -> Seq2Seq:  # fmt: skip
    """The catalogue's `tf_tutorial`: the tutorial's `Encoder` and `Decoder` joined by `Seq2Seq`."""
    encoder = Encoder(vocab_inp_size, embedding_dim, units, batch_sz)
    decoder = Decoder(vocab_tar_size, embedding_dim, units, batch_sz, feed_state, w1_on_query)
    return keras_initializers(Seq2Seq(encoder, decoder))
