"""Document 001 (attention mechanisms on the reverse-sequence task): `ReverseTaskV0`, `ReverseTaskV6`,
the Bahdanau concatenative variant, `ReverseTaskV7`, `ReverseTaskV8` and the Luong concat variant.

Legend: B batch, S source length, T target length, E embedding_dim, H hidden_size, A attention_size,
V vocab_size. Batch-first throughout, as the document. Defaults are the document's module constants
(VOCAB_SIZE 20, EMBEDDING_DIM 64, HIDDEN_SIZE 128, ATTENTION_SIZE 128); attribute names are its own,
so a state_dict of the document's class loads into ours with `strict=True`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from shared.core.taps import (
    CONTEXT_VECTORS,
    ENCODER_OUTPUTS,
    ENCODER_STATE,
    SOURCE_EMBEDDINGS,
    TARGET_EMBEDDINGS,
    tap,
)
from torch_impl.inductor_ops import StateProducts, energy_tanh, table_rows
from torch_impl.models.seq2seq import gru_cell, gru_cell_row_bias, masked_softmax


class ReverseTaskBase(nn.Module):
    """What every model of document 001 shares: embeddings and recurrent layers on both sides.

    Attributes:
        as_written: decode with the listing's own per-step computation (the speed baseline of
            `rosetta bench`); False (ours): hoist what does not depend on the step out of the loop.
    """

    rnn_class = nn.GRU
    as_written = False

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int, decoder_input_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.decoder_input_size = decoder_input_size
        self.enc_embeddings = nn.Embedding(vocab_size, embedding_dim)
        self.encoder = self.rnn_class(input_size=embedding_dim, hidden_size=hidden_size, batch_first=True)
        self.dec_embeddings = nn.Embedding(vocab_size, embedding_dim)
        self.decoder = self.rnn_class(input_size=decoder_input_size, hidden_size=hidden_size, batch_first=True)

    def forward(self, enc_inputs: torch.Tensor, dec_inputs: torch.Tensor) -> torch.Tensor:
        """The document's signature: `[B, S]`, `[B, T]` token ids -> logits `[B, T, V]`."""
        return self.decode(enc_inputs, dec_inputs)[0]

    def decode(self, enc_inputs, dec_inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits `[B, T, V]` and the attention weights of every decoder step `[B, T, S]` (None: no attention)."""
        enc_emb = tap(SOURCE_EMBEDDINGS, self.enc_embeddings(enc_inputs))  # [B, S, E]
        enc_out, enc_hidden = self.encode(enc_emb)  # [B, S, H], [1, B, H]
        tap(ENCODER_OUTPUTS, enc_out)
        tap(ENCODER_STATE, enc_hidden)
        if self.as_written:
            return self.decode_as_written(enc_out, enc_hidden, dec_inputs)
        return self.decode_hoisted(enc_out, enc_hidden, dec_inputs)

    def encode(self, enc_emb: torch.Tensor):
        """The encoder over the source embeddings `[B, S, E]` -> outputs `[B, S, H]`, final state (torch `[1, B, H]`,
        Keras `[B, H]`). torch's nn.GRU projects every step's inputs in one product: the Keras twin's GRU models do it
        explicitly."""
        return self.encoder(enc_emb)


class ReverseTaskV0(ReverseTaskBase):
    """Document 001, `ReverseTaskV0`: vanilla RNN encoder-decoder joined by the final encoder state.

    The listing runs both recurrent layers over whole sequences: nothing to hoist, as written = ours.
    """

    rnn_class = nn.RNN

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size, decoder_input_size=embedding_dim)
        self.output_layer = nn.Linear(in_features=hidden_size, out_features=vocab_size)

    def decode_hoisted(self, enc_out, enc_hidden, dec_inputs):
        dec_emb = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs))  # [B, T, E]
        dec_out, dec_hidden = self.decoder(dec_emb, enc_hidden)  # [B, T, H], [1, B, H]
        return self.output_layer(dec_out), None  # [B, T, V]

    decode_as_written = decode_hoisted


class BahdanauReverseTask(ReverseTaskBase):
    """Bahdanau order: score the *previous* decoder state, then feed [embedding; context] to the GRU."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int):
        super().__init__(vocab_size, embedding_dim, hidden_size, decoder_input_size=embedding_dim + hidden_size)

    def decode_hoisted(self, enc_out, enc_hidden, dec_inputs):
        """Ours: what does not depend on the step once (the encoder's share of the score; the embeddings' share of
        the GRU's gates, projected on the table's V rows and looked up: linear maps, no dropout between, V < B T), a
        GRU cell per step, the output layer once after the loop. Each mode takes its faster form (docs/measurements.md):
        eagerly torch's own C++ cell (`gru_cell_row_bias`, that share its input bias, a row per example) and the score
        as one product with `v`'s vector; compiled, one product for all that reads s_{t-1} (`StateProducts`) and the
        lookup as a one-hot product (`table_rows`). Per-step pieces come from one `unbind` and one slice outside the
        loop: a slice per step would zero-fill a whole `[B, T, 3H]` gradient in each step's backward."""
        tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs))  # [B, T, E] for the taps; no gradient flows from it
        keys = self.keys(enc_out)  # [B, S, A]
        E, gru = self.embedding_dim, self.decoder
        share_table = F.linear(self.dec_embeddings.weight, gru.weight_ih_l0[:, :E], gru.bias_ih_l0)  # [V, 3H]
        emb_share = table_rows(share_table, dec_inputs)  # [B, T, 3H]
        context_weight, hidden_bias = gru.weight_ih_l0[:, E:], gru.bias_hh_l0  # [3H, H], [3H]
        query_weight, query_bias = self.query_projection()  # [A, H], [A]
        v = self.v.weight[0]  # [A]
        state_products = StateProducts(query_weight, query_bias, gru.weight_hh_l0, hidden_bias)
        state, states, attention = enc_hidden[-1], [], []  # s_{t-1}: [B, H]
        for emb_share_t in emb_share.unbind(1):  # [B, 3H] each
            query, hidden_share = state_products(state)  # [B, A], [B, 3H] (None eagerly: the cell's own)
            probs = masked_softmax(torch.matmul(energy_tanh(keys + query.unsqueeze(1)), v), None)  # [B, S, A] @ [A] -> [B, S]
            context_vector = tap(CONTEXT_VECTORS, attention_context(probs, enc_out))  # [B, H]
            if hidden_share is None:
                state = gru_cell_row_bias(context_vector, state, context_weight, gru.weight_hh_l0, emb_share_t, hidden_bias)
            else:
                state = gru_cell(torch.addmm(emb_share_t, context_vector, context_weight.t()), hidden_share, state)  # [B, H]
            states.append(state)
            attention.append(probs)
        return self.output_layer(torch.stack(states, dim=1)), torch.stack(attention, dim=1)  # [B, T, V], [B, T, S]

    def decode_as_written(self, enc_out, enc_hidden, dec_inputs):
        """The listing's loop: the score from scratch, the embedding and the output layer at every step."""
        prev_hidden, outputs, attention = enc_hidden, [], []
        for t in range(dec_inputs.shape[1]):
            probs = masked_softmax(self.scores_as_written(enc_out, prev_hidden[-1]), None)  # [B, S]
            context_vector = tap(CONTEXT_VECTORS, torch.bmm(probs.unsqueeze(1), enc_out))  # [B, 1, H]
            emb_vector = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs[:, t]).unsqueeze(1))  # [B, 1, E]
            s_t = torch.cat([emb_vector, context_vector], dim=2)  # [B, 1, E + H]
            dec_out_t, prev_hidden = self.decoder(s_t, prev_hidden)  # [B, 1, H], [1, B, H]
            outputs.append(self.output_layer(dec_out_t))  # [B, 1, V]
            attention.append(probs)
        return torch.cat(outputs, dim=1), torch.stack(attention, dim=1)  # [B, T, V], [B, T, S]


class LuongReverseTask(ReverseTaskBase):
    """Luong order: run the GRU on the embedding, score the *current* state, predict from [output; context]."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int):
        super().__init__(vocab_size, embedding_dim, hidden_size, decoder_input_size=embedding_dim)

    def decode_hoisted(self, enc_out, enc_hidden, dec_inputs):
        """Ours: the decoder's input never depends on attention, so the GRU runs over the whole target
        at once and attention scores every step in one product."""
        dec_emb = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs))  # [B, T, E]
        dec_out, _ = self.decoder(dec_emb, enc_hidden)  # [B, T, H]
        probs = masked_softmax(self.scores(self.keys(enc_out), dec_out), None)  # [B, T, S]
        context_vector = tap(CONTEXT_VECTORS, torch.bmm(probs, enc_out))  # [B, T, S] @ [B, S, H] -> [B, T, H]
        return self.output_layer(torch.cat([dec_out, context_vector], dim=2)), probs  # [B, T, V], [B, T, S]

    def decode_as_written(self, enc_out, enc_hidden, dec_inputs):
        """The listing's loop: one GRU step, one score, one output layer per target position."""
        keys = self.keys_as_written(enc_out)  # [B, S, *]
        prev_hidden, outputs, attention = enc_hidden, [], []
        for t in range(dec_inputs.shape[1]):
            emb_vector = tap(TARGET_EMBEDDINGS, self.dec_embeddings(dec_inputs[:, t]).unsqueeze(1))  # [B, 1, E]
            dec_out, prev_hidden = self.decoder(emb_vector, prev_hidden)  # [B, 1, H], [1, B, H]
            probs = masked_softmax(self.scores_as_written(keys, prev_hidden[-1]), None)  # [B, S]
            context_vector = tap(CONTEXT_VECTORS, torch.bmm(probs.unsqueeze(1), enc_out))  # [B, 1, H]
            outputs.append(self.output_layer(torch.cat([dec_out, context_vector], dim=2)))  # [B, 1, V]
            attention.append(probs)
        return torch.cat(outputs, dim=1), torch.stack(attention, dim=1)  # [B, T, V], [B, T, S]

    def keys_as_written(self, enc_out):
        return enc_out  # [B, S, H]


def attention_context(probs: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """One decoder step's context: the weights `probs [B, S]` over `values [B, S, D]` -> `[B, D]`, as a broadcast
    product and a sum (the Keras twin's form outside XLA, where TensorFlow's batched product of one row per example
    costs more; here as fast eagerly as `bmm`, and under torch.compile one fused kernel: docs/measurements.md)."""
    return (probs.unsqueeze(2) * values).sum(1)  # [B, S, 1] * [B, S, D] -> [B, D]


def dot_scores(keys: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """`s_t . k_i` for every decoder and source step: `[B, S, K]`, `[B, T, K]` -> `[B, T, S]`."""
    return torch.bmm(states, keys.transpose(1, 2))  # [B, T, K] @ [B, K, S]


def additive_scores(v: nn.Linear, keys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """`v . tanh(k_i + q_t)`: `[B, S, A]`, `[B, T, A]` -> `[B, T, S]`."""
    return v(energy_tanh(keys.unsqueeze(1) + queries.unsqueeze(2))).squeeze(-1)  # [B, T, S, A] -> [B, T, S]


def concat_scores(W_a: nn.Linear, v: nn.Linear, enc_out: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """As written: `v . tanh(W_a [s; h_i])` for every source step: `[B, H]`, `[B, S, H]` -> `[B, S]`."""
    states = state.unsqueeze(1).expand(-1, enc_out.shape[1], -1)  # [B, S, H]
    return v(torch.tanh(W_a(torch.cat([states, enc_out], dim=2)))).squeeze(-1)  # [B, S, 2H] -> [B, S]


class DotScore:
    """`s_t . k_i` with keys `k_i` = `h_i` (dot) or `W h_i` (general)."""

    def scores(self, keys, states):
        return dot_scores(keys, states)  # [B, T, S]

    def scores_as_written(self, keys, state):
        return torch.bmm(keys, state.unsqueeze(2)).squeeze(2)  # [B, S, H] @ [B, H, 1] -> [B, S]


class ConcatScore:
    """`v . tanh(W_a [s; h_i])` split as `W_a[:, :H] s + (W_a[:, H:] h_i + b)`: the encoder's share once."""

    def keys(self, enc_out):
        return F.linear(enc_out, self.W_a.weight[:, self.hidden_size :], self.W_a.bias)  # [B, S, A]

    def scores(self, keys, states):
        return additive_scores(self.v, keys, F.linear(states, self.W_a.weight[:, : self.hidden_size]))  # [B, T, S]

    def query_projection(self):
        """The decoder state's share of the score: `W_a[:, :H]`, no bias (the bias went to the keys)."""
        weight = self.W_a.weight[:, : self.hidden_size]  # [A, H]
        return weight, weight.new_zeros(weight.shape[0])

    def scores_as_written(self, enc_out, state):
        return concat_scores(self.W_a, self.v, enc_out, state)  # [B, S]


class ReverseTaskV6(BahdanauReverseTask):
    """Document 001, `ReverseTaskV6`: Bahdanau additive attention, `v . tanh(W_h h_i + W_s s_{t-1})`.

    The listing recomputes `W_h(enc_out)` at every decoder step (`decode_as_written`); ours once.
    """

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W_h = nn.Linear(hidden_size, attention_size)  # encoder projection of h_i
        self.W_s = nn.Linear(hidden_size, attention_size)  # decoder projection of s_{t-1}
        self.v = nn.Linear(attention_size, 1, bias=False)  # attention vector -> score
        self.output_layer = nn.Linear(hidden_size, vocab_size)

    def keys(self, enc_out):
        return self.W_h(enc_out)  # [B, S, A]

    def scores(self, keys, states):
        return additive_scores(self.v, keys, self.W_s(states))  # [B, T, S]

    def query_projection(self):
        """The decoder state's share of the score: `W_s`."""
        return self.W_s.weight, self.W_s.bias  # [A, H], [A]

    def scores_as_written(self, enc_out, state):
        enc_proj = self.W_h(enc_out)  # [B, S, A], at every step as the listing
        return self.v(torch.tanh(enc_proj + self.W_s(state).unsqueeze(1))).squeeze(-1)  # [B, S]


class ReverseTaskBahdanauConcat(ConcatScore, BahdanauReverseTask):
    """Document 001, Bahdanau concatenative attention (formula only): `v . tanh(W_a [s_{t-1}; h_i])`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W_a = nn.Linear(2 * hidden_size, attention_size)  # [s; h] -> attention space
        self.v = nn.Linear(attention_size, 1, bias=False)
        self.output_layer = nn.Linear(hidden_size, vocab_size)


class ReverseTaskV7(DotScore, LuongReverseTask):
    """Document 001, `ReverseTaskV7`: Luong general attention, `s_t . W h_i` (the listing projects once)."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W = nn.Linear(hidden_size, hidden_size)  # encoder space -> decoder space
        self.output_layer = nn.Linear(2 * hidden_size, vocab_size)

    def keys(self, enc_out):
        return self.W(enc_out)  # [B, S, H]

    keys_as_written = keys


class ReverseTaskV8(DotScore, LuongReverseTask):
    """Document 001, `ReverseTaskV8`: Luong dot attention, `s_t . h_i`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.output_layer = nn.Linear(2 * hidden_size, vocab_size)

    def keys(self, enc_out):
        return enc_out  # [B, S, H]


class ReverseTaskLuongConcat(ConcatScore, LuongReverseTask):
    """Document 001, Luong concat attention (formula only): `v . tanh(W_a [s_t; h_i])`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W_a = nn.Linear(2 * hidden_size, attention_size)
        self.v = nn.Linear(attention_size, 1, bias=False)
        self.output_layer = nn.Linear(2 * hidden_size, vocab_size)
