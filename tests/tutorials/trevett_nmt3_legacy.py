"""Ben Trevett's pytorch-seq2seq, notebook 3 in its torchtext-era listing, transcribed as a user has it.

Source: github.com/bentrevett/pytorch-seq2seq, "legacy/3 - Neural Machine Translation by Jointly Learning to
Align and Translate.ipynb" (the notebook before the 2024 rewrite, kept under legacy/ at commit 4574589): the
classes `Encoder`, `Attention` (`attn`, `v`), `Decoder` (returns prediction and hidden only), `Seq2Seq` and
`init_weights` as the notebook writes them. The training step and the helpers are the 2024 module's (the
notebook's `train` is the same loop).
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.tutorials.trevett_nmt3_2024 import SIZES, init_weights, logits, train_steps

__all__ = ["Attention", "Decoder", "Encoder", "Seq2Seq", "build", "logits", "reference", "train_steps"]


class Encoder(nn.Module):
    def __init__(self, input_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout):
        super().__init__()
        self.embedding = nn.Embedding(input_dim, emb_dim)
        self.rnn = nn.GRU(emb_dim, enc_hid_dim, bidirectional=True)
        self.fc = nn.Linear(enc_hid_dim * 2, dec_hid_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src):
        embedded = self.dropout(self.embedding(src))
        outputs, hidden = self.rnn(embedded)
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)))
        return outputs, hidden


class Attention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim):
        super().__init__()
        self.attn = nn.Linear((enc_hid_dim * 2) + dec_hid_dim, dec_hid_dim)
        self.v = nn.Linear(dec_hid_dim, 1, bias=False)

    def forward(self, hidden, encoder_outputs):
        batch_size = encoder_outputs.shape[1]  # noqa: F841 (the notebook computes it)
        src_len = encoder_outputs.shape[0]
        hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)
        encoder_outputs = encoder_outputs.permute(1, 0, 2)
        energy = torch.tanh(self.attn(torch.cat((hidden, encoder_outputs), dim=2)))
        attention = self.v(energy).squeeze(2)
        return F.softmax(attention, dim=1)


class Decoder(nn.Module):
    def __init__(self, output_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout, attention):
        super().__init__()
        self.output_dim = output_dim
        self.attention = attention
        self.embedding = nn.Embedding(output_dim, emb_dim)
        self.rnn = nn.GRU((enc_hid_dim * 2) + emb_dim, dec_hid_dim)
        self.fc_out = nn.Linear((enc_hid_dim * 2) + dec_hid_dim + emb_dim, output_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input, hidden, encoder_outputs):
        input = input.unsqueeze(0)
        embedded = self.dropout(self.embedding(input))
        a = self.attention(hidden, encoder_outputs)
        a = a.unsqueeze(1)
        encoder_outputs = encoder_outputs.permute(1, 0, 2)
        weighted = torch.bmm(a, encoder_outputs)
        weighted = weighted.permute(1, 0, 2)
        rnn_input = torch.cat((embedded, weighted), dim=2)
        output, hidden = self.rnn(rnn_input, hidden.unsqueeze(0))
        assert (output == hidden).all()
        embedded = embedded.squeeze(0)
        output = output.squeeze(0)
        weighted = weighted.squeeze(0)
        prediction = self.fc_out(torch.cat((output, weighted, embedded), dim=1))
        return prediction, hidden.squeeze(0)


class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder, device):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.device = device

    def forward(self, src, trg, teacher_forcing_ratio=0.5):
        batch_size = src.shape[1]
        trg_len = trg.shape[0]
        trg_vocab_size = self.decoder.output_dim
        outputs = torch.zeros(trg_len, batch_size, trg_vocab_size).to(self.device)
        encoder_outputs, hidden = self.encoder(src)
        input = trg[0, :]
        for t in range(1, trg_len):
            output, hidden = self.decoder(input, hidden, encoder_outputs)
            outputs[t] = output
            teacher_force = random.random() < teacher_forcing_ratio
            top1 = output.argmax(1)
            input = trg[t] if teacher_force else top1
        return outputs


def build(input_dim, output_dim, encoder_embedding_dim, decoder_embedding_dim, encoder_hidden_dim, decoder_hidden_dim):
    """The notebook's model cell (ENC_DROPOUT = DEC_DROPOUT = 0.5) and `model.apply(init_weights)`."""
    attn = Attention(encoder_hidden_dim, decoder_hidden_dim)
    enc = Encoder(input_dim, encoder_embedding_dim, encoder_hidden_dim, decoder_hidden_dim, 0.5)
    dec = Decoder(output_dim, decoder_embedding_dim, encoder_hidden_dim, decoder_hidden_dim, 0.5, attn)
    model = Seq2Seq(enc, dec, torch.device("cpu"))
    model.apply(init_weights)
    return model


def reference(path):
    """`--reference` for this notebook: `model.load_state_dict(torch.load('tut3-model.pt'))` as it does."""
    model = build(**SIZES)
    model.load_state_dict(torch.load(path))
    return model
