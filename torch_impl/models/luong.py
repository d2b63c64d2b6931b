"""Document 003 (NLP from scratch: annotated attention, after Luong et al. 2015): `Attention`,
`Encoder`, `Decoder`, `Model`, and `translate`.

Legend: B batch, S source length, T target length, E embed_dim, H hidden_dim, L n_layers,
V output_dim. Batch-first inside; `Model.forward` keeps the document's time-major signature. Listing
defects fixed where they sit (each marked "fix:").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from shared.core.taps import CONTEXT_VECTORS, SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS, tap
from torch_impl.inductor_ops import energy_tanh
from torch_impl.models.seq2seq import Seq2SeqBase, masked_softmax, run_rnn

SCORE_FNS = ("dot", "general", "concat")


class Attention(nn.Module):
    """Document 003, `Attention(hidden_dim, score_fn)`: global attention with Luong's three scores.

    dot `h_t . h_s`; general `h_t . (W h_s + b)` (the listing's Linear keeps its bias);
    concat `v . tanh(W [h_t; h_s])`.
    """

    def __init__(self, hidden_dim: int, score_fn: str = "general"):
        super().__init__()
        if score_fn not in SCORE_FNS:
            raise ValueError(f"score_fn must be one of {', '.join(SCORE_FNS)}, got {score_fn!r}")
        self.score_fn = score_fn
        if score_fn == "general":
            self.w = nn.Linear(hidden_dim, hidden_dim)
        if score_fn == "concat":
            self.w = nn.Linear(hidden_dim * 2, hidden_dim)
            self.v = nn.Parameter(torch.empty(hidden_dim).uniform_(-0.1, 0.1))  # the listing left it uninitialised

    def score(self, decoder_out: torch.Tensor, encoder_outs: torch.Tensor) -> torch.Tensor:
        """As written: `decoder_out [B, H]`, `encoder_outs [B, S, H]` -> scores `[B, S]`."""
        query = decoder_out.unsqueeze(1)  # [B, 1, H]
        if self.score_fn == "dot":
            return torch.sum(query * encoder_outs, dim=2)
        if self.score_fn == "general":
            return torch.sum(query * self.w(encoder_outs), dim=2)
        decoder_outs = query.expand(-1, encoder_outs.shape[1], -1)  # [B, S, H]
        cat = torch.cat((decoder_outs, encoder_outs), dim=2)  # [B, S, 2H]; fix: feature axis (the listing concatenated on time)
        return torch.sum(self.v * torch.tanh(self.w(cat)), dim=2)  # fix: the paper's tanh, missing in the listing

    def keys(self, encoder_outs: torch.Tensor) -> torch.Tensor:
        """Ours: the encoder's share of every score, once: `h_s`, `W h_s + b`, or `W[:, H:] h_s + b`."""
        if self.score_fn == "dot":
            return encoder_outs  # [B, S, H]
        if self.score_fn == "general":
            return self.w(encoder_outs)  # [B, S, H]
        return F.linear(encoder_outs, self.w.weight[:, encoder_outs.shape[2] :], self.w.bias)  # [B, S, H]

    def scores(self, keys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """Ours: `keys [B, S, H]`, `queries [B, T, H]` -> scores `[B, T, S]`."""
        if self.score_fn != "concat":
            return torch.bmm(queries, keys.transpose(1, 2))  # [B, T, H] @ [B, H, S]
        query_share = F.linear(queries, self.w.weight[:, : queries.shape[2]])  # [B, T, H]
        return energy_tanh(keys.unsqueeze(1) + query_share.unsqueeze(2)) @ self.v  # [B, T, S, H] @ [H] -> [B, T, S]

    def attend(self, queries, encoder_outs, mask, keys):
        """Ours: alignment `[B, T, S]` and context `[B, T, H]` of every query at once."""
        a = masked_softmax(self.scores(keys, queries), None if mask is None else mask.unsqueeze(1))  # [B, T, S]
        return a, tap(CONTEXT_VECTORS, torch.bmm(a, encoder_outs))  # [B, T, S] @ [B, S, H] -> [B, T, H]

    def forward(self, decoder_out, encoder_outs, mask=None, keys=None):
        """-> alignment `a [B, S]` and context `[B, H]` (the listing's `(a, context)` order); keys: ours."""
        if keys is not None:
            a, context = self.attend(decoder_out.unsqueeze(1), encoder_outs, mask, keys)  # [B, 1, S], [B, 1, H]
            return a.squeeze(1), context.squeeze(1)
        a = masked_softmax(self.score(decoder_out, encoder_outs), mask)  # [B, S]
        context = tap(CONTEXT_VECTORS, torch.bmm(a.unsqueeze(1), encoder_outs).squeeze(1))  # [B, 1, S] @ [B, S, H] -> [B, H]
        return a, context


class Encoder(nn.Module):
    """Document 003, `Encoder`: embedding, dropout, stacked LSTM; returns dropout(outputs) and (h, c)."""

    def __init__(self, input_dim: int, embed_dim: int, hidden_dim: int, n_layers: int, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(input_dim, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden_dim, n_layers, dropout=dropout, batch_first=True)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor | None = None):
        """`src [B, S]` -> outputs `[B, S, H]`, (h `[L, B, H]`, c `[L, B, H]`)."""
        embed = tap(SOURCE_EMBEDDINGS, self.dropout(self.embed(src)))  # [B, S, E]
        out, hidden = run_rnn(self.lstm, embed, lengths)
        return self.dropout(out), hidden


class Decoder(nn.Module):
    """Document 003, `Decoder`: LSTM step, attention on its output, `wc` over [h_t; c_t] with tanh, `fc`."""

    def __init__(self, output_dim: int, embed_dim: int, hidden_dim: int, num_layers: int, dropout: float, score_fn="general"):
        super().__init__()
        self.output_dim = output_dim
        self.embed = nn.Embedding(output_dim, embed_dim)
        # fix: the listing passed an undefined `n_layers`; its Attention had no way to choose score_fn
        self.lstm = nn.LSTM(embed_dim, hidden_dim, num_layers, dropout=dropout, batch_first=True)
        self.attention = Attention(hidden_dim, score_fn)
        self.wc = nn.Linear(hidden_dim * 2, hidden_dim)
        self.fc = nn.Linear(hidden_dim, output_dim)  # fix: the name `fc` was lost in extraction
        self.dropout = nn.Dropout(dropout)

    def forward(self, trg: torch.Tensor, hidden, encoder_out: torch.Tensor, mask=None):
        """The document's signature: `trg [B]`, (h, c) `[L, B, H]` -> logits `[B, V]`, (h, c), attention `[B, S]`."""
        atten_hidden, hidden, atten = self.features(trg, hidden, encoder_out, mask)
        return self.fc(atten_hidden), hidden, atten  # softmax is in the loss

    def features(self, trg, hidden, encoder_out, mask=None, keys=None):
        """One step up to `fc`: `tanh(wc [h_t; c_t])` `[B, H]`, (h, c), attention `[B, S]`."""
        embed = tap(TARGET_EMBEDDINGS, self.dropout(self.embed(trg.unsqueeze(1))))  # [B, 1, E]
        decoder_out, hidden = self.lstm(embed, hidden)  # [B, 1, H]
        atten, context = self.attention(decoder_out.squeeze(1), encoder_out, mask, keys)  # [B, S], [B, H]
        atten_hidden = torch.tanh(self.wc(torch.cat((decoder_out.squeeze(1), context), dim=1)))  # [B, H]
        return atten_hidden, hidden, atten

    def features_teacher_forced(self, trg, hidden, encoder_out, mask, keys):
        """Ours, every input known (`trg [B, T]`): no input feeding, so the LSTM runs over the whole target
        and attention, `wc` over all steps at once -> `[B, T, H]`, attention `[B, T, S]`."""
        embed = tap(TARGET_EMBEDDINGS, self.dropout(self.embed(trg)))  # [B, T, E]
        decoder_out, _ = self.lstm(embed, hidden)  # [B, T, H]
        atten, context = self.attention.attend(decoder_out, encoder_out, mask, keys)  # [B, T, S], [B, T, H]
        return torch.tanh(self.wc(torch.cat((decoder_out, context), dim=2))), atten  # [B, T, H]


class Model(Seq2SeqBase):
    """Document 003, `Model(encoder, decoder)` with teacher forcing from a shared schedule."""

    def forward(self, src, trg, teacher_force_ratio: float = 0.5):
        """The document's signature: `src [S, B]`, `trg [T, B]` -> outs `[T, B, V]`, outs[0] zero."""
        return self.time_major_forward(src, trg, teacher_force_ratio)

    def features(self, x, hidden, memory):
        encoder_out, mask, keys = memory
        return self.decoder.features(x, hidden, encoder_out, mask, keys)

    def project(self, features):
        return self.decoder.fc(features)  # [..., V]

    def decode_teacher_forced(self, tgt_in, hidden, memory):
        features, attention = self.decoder.features_teacher_forced(tgt_in, hidden, *memory)  # [B, T, H], [B, T, S]
        return self.project_over_time(features), attention


def build_model(input_dim: int, output_dim: int, embed_dim: int, hidden_dim: int, n_layers: int, dropout: float,
                score_fn: str) -> Model:  # fmt: skip
    """The catalogue's `luong_<score_fn>`: `Model(Encoder(...), Decoder(...))`, uniform init +-0.1 as the document."""
    encoder = Encoder(input_dim, embed_dim, hidden_dim, n_layers, dropout)
    decoder = Decoder(output_dim, embed_dim, hidden_dim, n_layers, dropout, score_fn)
    model = Model(encoder, decoder)
    for param in model.parameters():  # the document's init_weights
        nn.init.uniform_(param.data, -0.1, 0.1)
    return model
