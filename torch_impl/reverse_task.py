"""Document 001 (attention mechanisms on the reverse-sequence task): `ReverseTaskV0`, `ReverseTaskV6`,
the Bahdanau concatenative variant, `ReverseTaskV7`, `ReverseTaskV8` and the Luong concat variant.

Legend: B batch, S source length, T target length, E embedding_dim, H hidden_size, A attention_size,
V vocab_size. Batch-first throughout, as the document. Defaults are the document's module constants
(VOCAB_SIZE 20, EMBEDDING_DIM 64, HIDDEN_SIZE 128, ATTENTION_SIZE 128); attribute names are its own,
so a state_dict of the document's class loads into ours with `strict=True`.
"""

from __future__ import annotations

import torch
from torch import nn


class ReverseTaskBase(nn.Module):
    """What every model of document 001 shares: embeddings and recurrent layers on both sides."""

    rnn_class = nn.GRU

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
        """The document's signature: `(B, S)`, `(B, T)` token ids -> logits `(B, T, V)`."""
        return self.decode(enc_inputs, dec_inputs)[0]

    def decode(self, enc_inputs, dec_inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits `(B, T, V)` and the attention weights of every decoder step `(B, T, S)` (None: no attention)."""
        raise NotImplementedError


class ReverseTaskV0(ReverseTaskBase):
    """Document 001, `ReverseTaskV0`: vanilla RNN encoder-decoder joined by the final encoder state."""

    rnn_class = nn.RNN

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size, decoder_input_size=embedding_dim)
        self.output_layer = nn.Linear(in_features=hidden_size, out_features=vocab_size)

    def decode(self, enc_inputs, dec_inputs):
        enc_emb = self.enc_embeddings(enc_inputs)  # [B, S, E]
        enc_out, enc_hidden = self.encoder(enc_emb)  # [B, S, H], [1, B, H]
        dec_emb = self.dec_embeddings(dec_inputs)  # [B, T, E]
        dec_out, dec_hidden = self.decoder(dec_emb, enc_hidden)  # [B, T, H], [1, B, H]
        return self.output_layer(dec_out), None  # [B, T, V]


class BahdanauReverseTask(ReverseTaskBase):
    """Bahdanau order: score the *previous* decoder state, then feed [embedding; context] to the GRU."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int):
        super().__init__(vocab_size, embedding_dim, hidden_size, decoder_input_size=embedding_dim + hidden_size)

    def decode(self, enc_inputs, dec_inputs):
        enc_out, enc_hidden = self.encoder(self.enc_embeddings(enc_inputs))  # [B, S, H], [1, B, H]
        keys = self.keys(enc_out)  # [B, S, *]
        prev_hidden, outputs, attention = enc_hidden, [], []  # s_{t-1}: [1, B, H]
        for t in range(dec_inputs.shape[1]):
            probs = torch.softmax(self.scores(keys, enc_out, prev_hidden[-1]), dim=-1)  # [B, S]
            context_vector = torch.bmm(probs.unsqueeze(1), enc_out)  # [B, 1, S] @ [B, S, H] -> [B, 1, H]
            emb_vector = self.dec_embeddings(dec_inputs[:, t]).unsqueeze(1)  # [B, 1, E]
            s_t = torch.cat([emb_vector, context_vector], dim=2)  # [B, 1, E + H]
            dec_out_t, prev_hidden = self.decoder(s_t, prev_hidden)  # [B, 1, H], [1, B, H]
            outputs.append(self.output_layer(dec_out_t))  # [B, 1, V]
            attention.append(probs)
        return torch.cat(outputs, dim=1), torch.stack(attention, dim=1)  # [B, T, V], [B, T, S]


class LuongReverseTask(ReverseTaskBase):
    """Luong order: run the GRU on the embedding, score the *current* state, predict from [output; context]."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int):
        super().__init__(vocab_size, embedding_dim, hidden_size, decoder_input_size=embedding_dim)

    def decode(self, enc_inputs, dec_inputs):
        enc_out, enc_hidden = self.encoder(self.enc_embeddings(enc_inputs))  # [B, S, H], [1, B, H]
        keys = self.keys(enc_out)  # [B, S, *]
        prev_hidden, outputs, attention = enc_hidden, [], []
        for t in range(dec_inputs.shape[1]):
            emb_vector = self.dec_embeddings(dec_inputs[:, t]).unsqueeze(1)  # [B, 1, E]
            dec_out, prev_hidden = self.decoder(emb_vector, prev_hidden)  # [B, 1, H], [1, B, H]
            probs = torch.softmax(self.scores(keys, enc_out, prev_hidden[-1]), dim=-1)  # [B, S]
            context_vector = torch.bmm(probs.unsqueeze(1), enc_out)  # [B, 1, H]
            outputs.append(self.output_layer(torch.cat([dec_out, context_vector], dim=2)))  # [B, 1, V]
            attention.append(probs)
        return torch.cat(outputs, dim=1), torch.stack(attention, dim=1)  # [B, T, V], [B, T, S]


def dot_scores(keys: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """`s . k_i` for every source step: `[B, S, H]`, `[B, H]` -> `[B, S]`."""
    return torch.bmm(keys, state.unsqueeze(2)).squeeze(2)  # [B, S, H] @ [B, H, 1] -> [B, S]


def concat_scores(W_a: nn.Linear, v: nn.Linear, enc_out: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """`v . tanh(W_a [s; h_i])` for every source step: `[B, H]`, `[B, S, H]` -> `[B, S]`."""
    states = state.unsqueeze(1).expand(-1, enc_out.shape[1], -1)  # [B, S, H]
    return v(torch.tanh(W_a(torch.cat([states, enc_out], dim=2)))).squeeze(-1)  # [B, S, 2H] -> [B, S]


class ReverseTaskV6(BahdanauReverseTask):
    """Document 001, `ReverseTaskV6`: Bahdanau additive attention, `v . tanh(W_h h_i + W_s s_{t-1})`.

    The listing recomputes `W_h(enc_out)` at every decoder step; it is computed once here (same values).
    """

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W_h = nn.Linear(hidden_size, attention_size)  # encoder projection of h_i
        self.W_s = nn.Linear(hidden_size, attention_size)  # decoder projection of s_{t-1}
        self.v = nn.Linear(attention_size, 1, bias=False)  # attention vector -> score
        self.output_layer = nn.Linear(hidden_size, vocab_size)

    def keys(self, enc_out):
        return self.W_h(enc_out)  # [B, S, A]

    def scores(self, keys, enc_out, state):
        add_projections = torch.tanh(keys + self.W_s(state).unsqueeze(1))  # [B, S, A] + [B, 1, A]
        return self.v(add_projections).squeeze(-1)  # [B, S]


class ReverseTaskBahdanauConcat(BahdanauReverseTask):
    """Document 001, Bahdanau concatenative attention (formula only): `v . tanh(W_a [s_{t-1}; h_i])`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W_a = nn.Linear(2 * hidden_size, attention_size)  # [s; h] -> attention space
        self.v = nn.Linear(attention_size, 1, bias=False)
        self.output_layer = nn.Linear(hidden_size, vocab_size)

    def keys(self, enc_out):
        return enc_out  # [B, S, H]

    def scores(self, keys, enc_out, state):
        return concat_scores(self.W_a, self.v, enc_out, state)  # [B, S]


class ReverseTaskV7(LuongReverseTask):
    """Document 001, `ReverseTaskV7`: Luong general attention, `s_t . W h_i`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W = nn.Linear(hidden_size, hidden_size)  # encoder space -> decoder space
        self.output_layer = nn.Linear(2 * hidden_size, vocab_size)

    def keys(self, enc_out):
        return self.W(enc_out)  # [B, S, H]

    def scores(self, keys, enc_out, state):
        return dot_scores(keys, state)  # [B, S]


class ReverseTaskV8(LuongReverseTask):
    """Document 001, `ReverseTaskV8`: Luong dot attention, `s_t . h_i`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.output_layer = nn.Linear(2 * hidden_size, vocab_size)

    def keys(self, enc_out):
        return enc_out  # [B, S, H]

    def scores(self, keys, enc_out, state):
        return dot_scores(keys, state)  # [B, S]


class ReverseTaskLuongConcat(LuongReverseTask):
    """Document 001, Luong concat attention (formula only): `v . tanh(W_a [s_t; h_i])`."""

    def __init__(self, vocab_size: int = 20, embedding_dim: int = 64, hidden_size: int = 128, attention_size: int = 128):
        super().__init__(vocab_size, embedding_dim, hidden_size)
        self.W_a = nn.Linear(2 * hidden_size, attention_size)
        self.v = nn.Linear(attention_size, 1, bias=False)
        self.output_layer = nn.Linear(2 * hidden_size, vocab_size)

    def keys(self, enc_out):
        return enc_out  # [B, S, H]

    def scores(self, keys, enc_out, state):
        return concat_scores(self.W_a, self.v, enc_out, state)  # [B, S]
