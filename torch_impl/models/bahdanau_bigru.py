"""Document 002 (seq2seq with attention on Multi30k, after Ben Trevett's tutorial): `Encoder`,
`Attention`, `Decoder`, `Seq2Seq`.

Legend: B batch, S source length, T target length, Ee encoder_embed_dim, Ed decoder_embed_dim (the
document has one embed_dim; Trevett's notebook two), He encoder_hidden_size, Hd decoder_hidden_size,
V vocabulary. Batch-first inside; `Seq2Seq.forward` keeps the document's time-major signature. Listing
defects fixed where they sit (each marked "fix:").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from shared.core.taps import CONTEXT_VECTORS, SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS, tap
from torch_impl.inductor_ops import energy_tanh
from torch_impl.models.seq2seq import Seq2SeqBase, masked_softmax, run_rnn


class Encoder(nn.Module):
    """Document 002, `Encoder`: embedding, dropout, bidirectional GRU, `fc` from both final states to Hd, tanh.

    `embed_dim` is the encoder's embedding size, Ee (the catalogue's `encoder_embed_dim`).
    """

    def __init__(self, vocab_size: int, embed_dim: int, encoder_hidden_size: int, decoder_hidden_size: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.gru = nn.GRU(embed_dim, encoder_hidden_size, bidirectional=True, batch_first=True)
        self.fc = nn.Linear(encoder_hidden_size * 2, decoder_hidden_size)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None):
        """`x [B, S]` -> outputs `[B, S, 2He]` (zero at pads), hidden `[B, Hd]`."""
        embedding = tap(SOURCE_EMBEDDINGS, self.dropout(self.embed(x)))  # [B, S, Ee]
        outputs, hidden = run_rnn(self.gru, embedding, lengths)  # [B, S, 2He], [2, B, He]
        # hidden[-1] is the backward pass's final state, i.e. at time 0, not at the end (outputs[:, -1])
        concat_hidden = torch.cat(
            (hidden[-1], hidden[-2]), dim=1
        )  # [B, 2He]; fix: the listing's torch.cat lost its first argument
        return outputs, torch.tanh(self.fc(concat_hidden))  # [B, S, 2He], [B, Hd]


class Attention(nn.Module):
    """Document 002, `Attention`: `fc2(tanh(fc1([s; h_i])))`, softmax over the source.

    `fc1 [s; h_i]` = `fc1[:, :Hd] s + (fc1[:, Hd:] h_i + b)`: ours computes the encoder's share once
    (`keys`); given no keys, `forward` repeats and concatenates at every step as the listing.
    `bias=False` builds `fc2` without its bias, as Trevett's `v = nn.Linear(dec_hid_dim, 1, bias=False)`
    (the bias adds the same to every score: the softmax cancels it).
    """

    def __init__(self, encoder_hidden_size: int, decoder_hidden_size: int, bias: bool = True):
        super().__init__()
        self.decoder_hidden_size = decoder_hidden_size
        self.fc1 = nn.Linear(encoder_hidden_size * 2 + decoder_hidden_size, decoder_hidden_size)
        self.fc2 = nn.Linear(decoder_hidden_size, 1, bias=bias)

    def keys(self, encoder_outputs: torch.Tensor) -> torch.Tensor:
        """`fc1[:, Hd:] h_i + b` for every source step: `[B, S, 2He]` -> `[B, S, Hd]`."""
        return F.linear(encoder_outputs, self.fc1.weight[:, self.decoder_hidden_size :], self.fc1.bias)

    def forward(self, hidden: torch.Tensor, encoder_outputs: torch.Tensor, mask: torch.Tensor | None = None, keys=None):
        """`hidden [B, Hd]`, `encoder_outputs [B, S, 2He]` -> weighted `[B, 2He]`, attention `[B, S]`."""
        if keys is None:
            energy = self.energy_as_written(hidden, encoder_outputs)  # [B, S, Hd]
        else:
            energy = energy_tanh(keys + F.linear(hidden, self.fc1.weight[:, : self.decoder_hidden_size]).unsqueeze(1))
        attention = masked_softmax(self.fc2(energy).squeeze(2), mask)  # [B, S]
        weighted = tap(CONTEXT_VECTORS, torch.bmm(attention.unsqueeze(1), encoder_outputs).squeeze(1))  # [B, 2He]
        return weighted, attention  # fix: the listing's weighted.permute(1, 0, 2) result was never assigned

    def energy_as_written(self, hidden, encoder_outputs):
        seq_len = encoder_outputs.shape[1]
        hidden = hidden.unsqueeze(1).repeat(1, seq_len, 1)  # [B, S, Hd]
        concat = torch.cat((hidden, encoder_outputs), dim=2)  # [B, S, Hd + 2He]; fix: first argument restored
        return torch.tanh(self.fc1(concat))  # [B, S, Hd]


class Decoder(nn.Module):
    """Document 002, `Decoder`: GRU over [embedding; weighted], `fc` over [output; weighted; embedding].

    `embed_dim` is the decoder's embedding size, Ed (the catalogue's `decoder_embed_dim`);
    `attention_bias` is the bias of the attention's `fc2`.
    """

    def __init__(self, vocab_size: int, embed_dim: int, encoder_hidden_size: int, decoder_hidden_size: int, dropout: float,
                 attention_bias: bool = True):  # fmt: skip
        super().__init__()
        self.vocab_size = vocab_size
        self.dropout = nn.Dropout(dropout)  # fix: the listing's `droppout`
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.gru = nn.GRU(encoder_hidden_size * 2 + embed_dim, decoder_hidden_size, batch_first=True)
        self.attention = Attention(encoder_hidden_size, decoder_hidden_size, attention_bias)
        self.fc = nn.Linear(encoder_hidden_size * 2 + decoder_hidden_size + embed_dim, vocab_size)

    def forward(self, x, hidden, encoder_outputs, mask=None):
        """The document's signature: -> prediction `[B, V]`, hidden `[B, Hd]`."""
        fc_in, hidden, _ = self.features(x, hidden, encoder_outputs, mask)
        return self.fc(fc_in), hidden

    def features(self, x: torch.Tensor, hidden: torch.Tensor, encoder_outputs: torch.Tensor, mask=None, keys=None):
        """`x [B]`, `hidden [B, Hd]` -> the input of `fc` `[B, Hd + 2He + Ed]`, hidden `[B, Hd]`, attention `[B, S]`."""
        embedding = tap(TARGET_EMBEDDINGS, self.dropout(self.embedding(x)))  # [B, Ed]
        weighted, attention = self.attention(hidden, encoder_outputs, mask, keys)  # [B, 2He], [B, S]
        weighted_concat = torch.cat((embedding, weighted), dim=1).unsqueeze(1)  # [B, 1, Ed + 2He]; fix: first argument restored
        output, hidden = self.gru(weighted_concat, hidden.unsqueeze(0))  # [B, 1, Hd], [1, B, Hd]
        output, hidden = output.squeeze(1), hidden.squeeze(0)  # [B, Hd], [B, Hd]
        # [B, Hd + 2He + Ed]; fix: first argument restored
        return torch.cat((output, weighted, embedding), dim=1), hidden, attention


class Seq2Seq(Seq2SeqBase):
    """Document 002, `Seq2Seq(encoder, decoder, device)` with teacher forcing from a shared schedule."""

    def __init__(self, encoder: Encoder, decoder: Decoder, device=None, seed: int = 0):
        super().__init__(encoder, decoder, seed)
        self.device = device  # the document's argument; placement follows the weights

    def forward(self, source, target, teacher_force_ratio: float = 0.5):
        """The document's signature: `source [S, B]`, `target [T, B]` -> outputs `[T, B, V]` (row 0 zero)."""
        return self.time_major_forward(source, target, teacher_force_ratio)

    def features(self, x, hidden, memory):
        encoder_outputs, mask, keys = memory
        return self.decoder.features(x, hidden, encoder_outputs, mask, keys)

    def project(self, features):
        return self.decoder.fc(features)  # [..., V]; fix: the listing returned an undefined `predictions`


def build_model(src_vocab_size: int, tgt_vocab_size: int, encoder_embed_dim: int, decoder_embed_dim: int,
                encoder_hidden_size: int, decoder_hidden_size: int, dropout: float,
                attention_bias: bool = True) -> Seq2Seq:  # fmt: skip
    """The catalogue's `bahdanau_bigru`: `Seq2Seq(Encoder(...), Decoder(...))` as the document wires it."""
    encoder = Encoder(src_vocab_size, encoder_embed_dim, encoder_hidden_size, decoder_hidden_size, dropout)
    decoder = Decoder(tgt_vocab_size, decoder_embed_dim, encoder_hidden_size, decoder_hidden_size, dropout, attention_bias)
    return Seq2Seq(encoder, decoder)
