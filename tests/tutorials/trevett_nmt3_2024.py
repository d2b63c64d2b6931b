"""Ben Trevett's pytorch-seq2seq, notebook 3 as rewritten in 2024, transcribed as a user has it.

Source: github.com/bentrevett/pytorch-seq2seq, "3 - Neural Machine Translation by Jointly Learning to Align
and Translate.ipynb" (main branch after the 2024 rewrite, commit 7faa64a8): the classes `Encoder`,
`Attention`, `Decoder`, `Seq2Seq`, `init_weights` and the training step of `train_fn`, as the notebook writes
them (time-major, `teacher_forcing_ratio` drawn with `random.random()`). Its comments are shortened.
"""

import random

import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, input_dim, embedding_dim, encoder_hidden_dim, decoder_hidden_dim, dropout):
        super().__init__()
        self.embedding = nn.Embedding(input_dim, embedding_dim)
        self.rnn = nn.GRU(embedding_dim, encoder_hidden_dim, bidirectional=True)
        self.fc = nn.Linear(encoder_hidden_dim * 2, decoder_hidden_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src):
        # src = [src length, batch size]
        embedded = self.dropout(self.embedding(src))
        outputs, hidden = self.rnn(embedded)
        # hidden [-2, :, : ] is the last of the forwards RNN
        # hidden [-1, :, : ] is the last of the backwards RNN
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)))
        return outputs, hidden


class Attention(nn.Module):
    def __init__(self, encoder_hidden_dim, decoder_hidden_dim):
        super().__init__()
        self.attn_fc = nn.Linear((encoder_hidden_dim * 2) + decoder_hidden_dim, decoder_hidden_dim)
        self.v_fc = nn.Linear(decoder_hidden_dim, 1, bias=False)

    def forward(self, hidden, encoder_outputs):
        src_length = encoder_outputs.shape[0]
        hidden = hidden.unsqueeze(1).repeat(1, src_length, 1)
        encoder_outputs = encoder_outputs.permute(1, 0, 2)
        energy = torch.tanh(self.attn_fc(torch.cat((hidden, encoder_outputs), dim=2)))
        attention = self.v_fc(energy).squeeze(2)
        return torch.softmax(attention, dim=1)


class Decoder(nn.Module):
    def __init__(self, output_dim, embedding_dim, encoder_hidden_dim, decoder_hidden_dim, dropout, attention):
        super().__init__()
        self.output_dim = output_dim
        self.attention = attention
        self.embedding = nn.Embedding(output_dim, embedding_dim)
        self.rnn = nn.GRU((encoder_hidden_dim * 2) + embedding_dim, decoder_hidden_dim)
        self.fc_out = nn.Linear((encoder_hidden_dim * 2) + decoder_hidden_dim + embedding_dim, output_dim)
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
        return prediction, hidden.squeeze(0), a.squeeze(1)


class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder, device):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.device = device

    def forward(self, src, trg, teacher_forcing_ratio):
        batch_size = src.shape[1]
        trg_length = trg.shape[0]
        trg_vocab_size = self.decoder.output_dim
        outputs = torch.zeros(trg_length, batch_size, trg_vocab_size).to(self.device)
        encoder_outputs, hidden = self.encoder(src)
        input = trg[0, :]
        for t in range(1, trg_length):
            output, hidden, _ = self.decoder(input, hidden, encoder_outputs)
            outputs[t] = output
            teacher_force = random.random() < teacher_forcing_ratio
            top1 = output.argmax(1)
            input = trg[t] if teacher_force else top1
        return outputs


def init_weights(m):
    for name, param in m.named_parameters():
        if "weight" in name:
            nn.init.normal_(param.data, mean=0, std=0.01)
        else:
            nn.init.constant_(param.data, 0)


def build(input_dim, output_dim, encoder_embedding_dim, decoder_embedding_dim, encoder_hidden_dim, decoder_hidden_dim):
    """The notebook's model cell (dropout 0.5 both sides) and `model.apply(init_weights)`."""
    attention = Attention(encoder_hidden_dim, decoder_hidden_dim)
    encoder = Encoder(input_dim, encoder_embedding_dim, encoder_hidden_dim, decoder_hidden_dim, 0.5)
    decoder = Decoder(output_dim, decoder_embedding_dim, encoder_hidden_dim, decoder_hidden_dim, 0.5, attention)
    model = Seq2Seq(encoder, decoder, torch.device("cpu"))
    model.apply(init_weights)
    return model


def train_steps(model, batches, pad_index=1, clip=1.0, teacher_forcing_ratio=0.5):
    """`train_fn`'s body over `batches` of (src [src length, batch], trg [trg length, batch]): Adam, clip 1.0."""
    optimizer = torch.optim.Adam(model.parameters())
    criterion = nn.CrossEntropyLoss(ignore_index=pad_index)
    model.train()
    for src, trg in batches:
        optimizer.zero_grad()
        output = model(src, trg, teacher_forcing_ratio)
        output_dim = output.shape[-1]
        output = output[1:].view(-1, output_dim)
        trg = trg[1:].view(-1)
        loss = criterion(output, trg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
    return optimizer


def logits(model, src, trg):
    """The notebook's forward with teacher forcing always on: logits [batch, trg length - 1, vocab] (batch-first)."""
    model.eval()
    with torch.no_grad():
        return model(src, trg, 1.0)[1:].permute(1, 0, 2)


SIZES = {"input_dim": 23, "output_dim": 19, "encoder_embedding_dim": 7, "decoder_embedding_dim": 9,
         "encoder_hidden_dim": 5, "decoder_hidden_dim": 11}  # fmt: skip


def reference(path):
    """`--reference` for this notebook: its model, `load_state_dict(torch.load(path))` as the notebook does."""
    model = build(**SIZES)
    model.load_state_dict(torch.load(path))
    return model


def reference_logits(path):
    """`--reference` as a function: batch -> logits, the notebook's forward with teacher forcing."""
    model = reference(path)

    def run(batch):
        src = torch.as_tensor(batch["src"]).T  # [src length, batch]
        trg = torch.cat([torch.as_tensor(batch["tgt_in"]), torch.zeros(len(batch["src"]), 1, dtype=torch.long)], 1).T
        return logits(model, src, trg).numpy()

    return run
