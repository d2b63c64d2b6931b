"""Models as PyTorch users write them (the PyTorch tutorials' habits: `batch_first`, `h_n[-1]`, a step loop
over a cell). The factories at the bottom are what `rosetta port --torch-model` names."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, EMBED, HIDDEN, TAGS = 30, 8, 6, 5
MODEL_DIM, HEADS = 15, 3  # head size 5: 1/sqrt(5) is no float32 number (Keras's float64 scale trap shows)


class BiLSTMTagger(nn.Module):
    """A part-of-speech tagger: a two-layer bidirectional LSTM over embeddings, a tag score per token."""

    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, num_layers=2, bidirectional=True, batch_first=True)
        self.hidden2tag = nn.Linear(2 * HIDDEN, TAGS)

    def forward(self, sentence):
        lstm_out, _ = self.lstm(self.word_embeddings(sentence))
        return self.hidden2tag(lstm_out)


class RNNModel(nn.Module):
    """The word-language-model example's shape: encoder (Embedding), a two-layer GRU, decoder (Linear)."""

    def __init__(self, dropout: float = 0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.GRU(EMBED, HIDDEN, num_layers=2, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(HIDDEN, VOCAB)

    def forward(self, input):
        output, hidden = self.rnn(self.drop(self.encoder(input)))
        return self.decoder(self.drop(output)), hidden


class LuongDecoder(nn.Module):
    """A step decoder with Luong's general attention: a cell fed one token at a time in a Python loop."""

    def __init__(self, cell: str = "gru"):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED)
        self.cell = nn.GRUCell(EMBED, HIDDEN) if cell == "gru" else nn.LSTMCell(EMBED, HIDDEN)
        self.attn = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.concat = nn.Linear(2 * HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, encoder_outputs, tokens):
        batch = tokens.size(0)
        hidden = encoder_outputs.new_zeros(batch, HIDDEN)
        state = hidden if isinstance(self.cell, nn.GRUCell) else (hidden, hidden.clone())
        logits = []
        for t in range(tokens.size(1)):
            state = self.cell(self.embedding(tokens[:, t]), state)
            hidden = state if isinstance(self.cell, nn.GRUCell) else state[0]
            scores = torch.bmm(encoder_outputs, self.attn(hidden).unsqueeze(2)).squeeze(2)
            context = torch.bmm(F.softmax(scores, dim=1).unsqueeze(1), encoder_outputs).squeeze(1)
            attended = torch.tanh(self.concat(torch.cat((hidden, context), dim=1)))
            logits.append(self.out(attended))
        return torch.stack(logits, dim=1)


class SentimentLSTM(nn.Module):
    """The PyTorch counterpart of a Keras functional classifier: bi-LSTM's final states, two Linear."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, bidirectional=True, batch_first=True)
        self.fc1 = nn.Linear(2 * HIDDEN, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, 2)

    def forward(self, text):
        _, (hidden, _) = self.lstm(self.embedding(text))
        hidden = torch.cat((hidden[-2], hidden[-1]), dim=1)
        return self.fc2(F.relu(self.fc1(hidden)))


class ConvGRUClassifier(nn.Module):
    """Conv1d over embeddings (channels first), LayerNorm, a GRU's last state, a Linear."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED)
        self.conv = nn.Conv1d(EMBED, HIDDEN, kernel_size=3, padding=1)
        self.norm = nn.LayerNorm(HIDDEN)
        self.gru = nn.GRU(HIDDEN, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, 3)

    def forward(self, x):
        features = F.relu(self.conv(self.embedding(x).transpose(1, 2))).transpose(1, 2)
        _, h_n = self.gru(self.norm(features))
        return self.fc(h_n[-1])


class SelfAttentionClassifier(nn.Module):
    """A self-attention classifier as the PyTorch docs' MultiheadAttention users write it: embeddings,
    `nn.MultiheadAttention(batch_first=True)`, a residual LayerNorm, mean over tokens, a Linear."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, MODEL_DIM)
        self.attention = nn.MultiheadAttention(MODEL_DIM, HEADS, batch_first=True)
        self.norm = nn.LayerNorm(MODEL_DIM)
        self.classifier = nn.Linear(MODEL_DIM, 2)

    def forward(self, tokens):
        x = self.embedding(tokens)  # [B, S, E]
        attended, _ = self.attention(x, x, x, need_weights=False)  # [B, S, E]
        return self.classifier(self.norm(x + attended).mean(dim=1))  # [B, 2]


class CrossAttentionDecoder(nn.Module):
    """A decoder attending over encoder states of another width (kdim, vdim: separate q/k/v weights); returns
    logits and torch's attention weights, averaged over the heads (`average_attn_weights=True`)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, MODEL_DIM)
        self.cross = nn.MultiheadAttention(MODEL_DIM, HEADS, kdim=HIDDEN, vdim=HIDDEN, batch_first=True)
        self.out = nn.Linear(MODEL_DIM, VOCAB)

    def forward(self, encoder_outputs, tokens):
        attended, weights = self.cross(self.embedding(tokens), encoder_outputs, encoder_outputs)  # [B, T, E], [B, T, S]
        return self.out(attended), weights


class QueryValueScorer(nn.Module):
    """The Keras docs' CNN + attention example (query and value token sequences, a shared embedding and Conv1D,
    attention, average pooling, a classifier), written in PyTorch with torch_impl.keras_layers' twin of the
    Keras attention layer it uses."""

    def __init__(self, attention: nn.Module):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB, EMBED)
        self.cnn_layer = nn.Conv1d(EMBED, HIDDEN, kernel_size=3, padding="same")
        self.attention = attention
        self.dense = nn.Linear(2 * HIDDEN, 2)

    def forward(self, query_tokens, value_tokens):
        query = self.cnn_layer(self.token_embedding(query_tokens).transpose(1, 2)).transpose(1, 2)  # [B, Tq, H]
        value = self.cnn_layer(self.token_embedding(value_tokens).transpose(1, 2)).transpose(1, 2)  # [B, Tv, H]
        attended = self.attention([query, value])  # [B, Tq, H]
        return self.dense(torch.cat([query.mean(1), attended.mean(1)], dim=-1))


def concat_attention_scorer() -> nn.Module:
    from torch_impl.keras_layers import Attention

    return QueryValueScorer(Attention(use_scale=True, score_mode="concat"))


def additive_attention_scorer() -> nn.Module:
    from torch_impl.keras_layers import AdditiveAttention

    return QueryValueScorer(AdditiveAttention(HIDDEN))


def self_attention_classifier() -> nn.Module:
    return SelfAttentionClassifier()


def cross_attention_decoder() -> nn.Module:
    return CrossAttentionDecoder()


def bilstm_tagger() -> nn.Module:
    return BiLSTMTagger()


def gru_language_model() -> nn.Module:
    return RNNModel()


def luong_gru_decoder() -> nn.Module:
    return LuongDecoder("gru")


def luong_lstm_decoder() -> nn.Module:
    return LuongDecoder("lstm")


def sentiment_lstm() -> nn.Module:
    return SentimentLSTM()


def conv_gru_classifier() -> nn.Module:
    return ConvGRUClassifier()
