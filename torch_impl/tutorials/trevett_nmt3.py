"""Ben Trevett's pytorch-seq2seq notebook 3 ("Neural Machine Translation by Jointly Learning to Align and
Translate"), transcribed in its own layout (time-major, `rnn`, `attn`/`attn_fc`, `v`/`v_fc` without bias, `fc_out`,
the encoder's final states forward first): the torchtext-era listing (legacy/) and the 2024 rewrite differ only in
the attention's attribute names (ATTENTION_NAMES). torch_impl/references.py loads a `tut3-model.pt` into them.

Legend: S source length, B batch, T target length, E embedding, He/Hd encoder/decoder hidden, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TrevettEncoder(nn.Module):
    """Notebook 3's `Encoder`: embedding, bidirectional GRU, `fc` over [forward final; backward final], tanh."""

    def __init__(self, input_dim: int, emb_dim: int, enc_hid_dim: int, dec_hid_dim: int, dropout: float):
        super().__init__()
        self.embedding = nn.Embedding(input_dim, emb_dim)
        self.rnn = nn.GRU(emb_dim, enc_hid_dim, bidirectional=True)
        self.fc = nn.Linear(enc_hid_dim * 2, dec_hid_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src):
        embedded = self.dropout(self.embedding(src))  # [S, B, E]
        outputs, hidden = self.rnn(embedded)  # [S, B, 2He], [2, B, He]
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2], hidden[-1]), dim=1)))  # forward first; [B, Hd]
        return outputs, hidden


class TrevettAttention(nn.Module):
    """Notebook 3's `Attention`: `v(tanh(attn([s; h_i])))`, `v` without bias; `names` are the revision's."""

    def __init__(self, enc_hid_dim: int, dec_hid_dim: int, names: tuple[str, str]):
        super().__init__()
        self.names = names
        setattr(self, names[0], nn.Linear(enc_hid_dim * 2 + dec_hid_dim, dec_hid_dim))
        setattr(self, names[1], nn.Linear(dec_hid_dim, 1, bias=False))

    def forward(self, hidden, encoder_outputs):
        attn, v = (getattr(self, name) for name in self.names)
        hidden = hidden.unsqueeze(1).repeat(1, encoder_outputs.shape[0], 1)  # [B, S, Hd]
        encoder_outputs = encoder_outputs.permute(1, 0, 2)  # [B, S, 2He]
        energy = torch.tanh(attn(torch.cat((hidden, encoder_outputs), dim=2)))  # [B, S, Hd]
        return F.softmax(v(energy).squeeze(2), dim=1)  # [B, S]


class TrevettDecoder(nn.Module):
    """Notebook 3's `Decoder`: GRU over [embedding; weighted], `fc_out` over [output; weighted; embedding]."""

    def __init__(self, output_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout, attention):
        super().__init__()
        self.output_dim = output_dim
        self.attention = attention
        self.embedding = nn.Embedding(output_dim, emb_dim)
        self.rnn = nn.GRU(enc_hid_dim * 2 + emb_dim, dec_hid_dim)
        self.fc_out = nn.Linear(enc_hid_dim * 2 + dec_hid_dim + emb_dim, output_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input.unsqueeze(0)))  # [1, B, E]
        a = self.attention(hidden, encoder_outputs).unsqueeze(1)  # [B, 1, S]
        weighted = torch.bmm(a, encoder_outputs.permute(1, 0, 2)).permute(1, 0, 2)  # [1, B, 2He]
        output, hidden = self.rnn(torch.cat((embedded, weighted), dim=2), hidden.unsqueeze(0))  # [1, B, Hd] x 2
        prediction = self.fc_out(torch.cat((output.squeeze(0), weighted.squeeze(0), embedded.squeeze(0)), dim=1))  # [B, V]
        return prediction, hidden.squeeze(0), a.squeeze(1)


class TrevettSeq2Seq(nn.Module):
    """Notebook 3's `Seq2Seq(encoder, decoder, device)`; the runner below drives its parts step by step."""

    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder


ATTENTION_NAMES = {"2024": ("attn_fc", "v_fc"), "legacy": ("attn", "v")}
