"""The documents' own torch classes, kept as the listings write them: the oracle our torch_impl is
checked against (state_dict loads strictly, same outputs). Not part of the product.

Document 000 (`AdditiveAttention`) and document 001 (`ReverseTaskV0`, `V6`, `V7`, `V8`), with their
module constants. Comments are trimmed; the code is the listings'.
"""

import torch
import torch.nn as nn

VOCAB_SIZE = 20
EMBEDDING_DIM = 64
HIDDEN_SIZE = 128
ATTENTION_SIZE = 128


class AdditiveAttention(torch.nn.Module):
    def __init__(self, encoder_dim=100, decoder_dim=50):
        super().__init__()
        self.encoder_dim = encoder_dim
        self.decoder_dim = decoder_dim
        self.v = torch.nn.Parameter(torch.rand(self.decoder_dim))
        self.W_1 = torch.nn.Linear(self.decoder_dim, self.decoder_dim)
        self.W_2 = torch.nn.Linear(self.encoder_dim, self.decoder_dim)

    def forward(self, query, values):
        weights = self._get_weights(query, values)
        weights = torch.nn.functional.softmax(weights, dim=0)
        return weights @ values

    def _get_weights(self, query, values):
        query = query.repeat(values.size(0), 1)
        weights = self.W_1(query) + self.W_2(values)
        return torch.tanh(weights) @ self.v


class ReverseTaskV0(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.encoder = nn.RNN(input_size=EMBEDDING_DIM, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.dec_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.decoder = nn.RNN(input_size=EMBEDDING_DIM, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.output_layer = nn.Linear(in_features=HIDDEN_SIZE, out_features=VOCAB_SIZE)

    def forward(self, enc_inputs, dec_inputs):
        enc_emb = self.enc_embeddings(enc_inputs)
        enc_out, enc_hidden = self.encoder(enc_emb)
        dec_emb = self.dec_embeddings(dec_inputs)
        dec_out, dec_hidden = self.decoder(dec_emb, enc_hidden)
        logits = self.output_layer(dec_out)
        return logits


class ReverseTaskV6(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.encoder = nn.GRU(input_size=EMBEDDING_DIM, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.dec_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.decoder = nn.GRU(input_size=EMBEDDING_DIM + HIDDEN_SIZE, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.W_h = nn.Linear(HIDDEN_SIZE, ATTENTION_SIZE)
        self.W_s = nn.Linear(HIDDEN_SIZE, ATTENTION_SIZE)
        self.v = nn.Linear(ATTENTION_SIZE, 1, bias=False)
        self.output_layer = nn.Linear(HIDDEN_SIZE, VOCAB_SIZE)

    def forward(self, enc_inputs, dec_inputs):
        enc_emb = self.enc_embeddings(enc_inputs)
        enc_out, enc_hidden = self.encoder(enc_emb)
        dec_timesteps = dec_inputs.shape[1]
        prev_hidden = enc_hidden
        outputs = []
        for t in range(dec_timesteps):
            enc_proj = self.W_h(enc_out)
            dec_proj = self.W_s(prev_hidden)
            dec_proj = dec_proj.squeeze(dim=0).unsqueeze(dim=1)
            add_projections = torch.tanh(enc_proj + dec_proj)
            scores = self.v(add_projections).squeeze(dim=-1)
            probs = torch.softmax(scores, dim=1)
            context_vector = torch.bmm(probs.unsqueeze(dim=1), enc_out)
            emb_vector = self.dec_embeddings(dec_inputs[:, t]).unsqueeze(dim=1)
            s_t = torch.cat([emb_vector, context_vector], dim=2)
            dec_out_t, dec_hidden = self.decoder(s_t, prev_hidden)
            logits = self.output_layer(dec_out_t)
            outputs.append(logits)
            prev_hidden = dec_hidden
        return torch.cat(outputs, dim=1)


class ReverseTaskV8(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.encoder = nn.GRU(input_size=EMBEDDING_DIM, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.dec_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.decoder = nn.GRU(input_size=EMBEDDING_DIM, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.output_layer = nn.Linear(2 * HIDDEN_SIZE, VOCAB_SIZE)

    def forward(self, enc_inputs, dec_inputs):
        enc_emb = self.enc_embeddings(enc_inputs)
        enc_out, enc_hidden = self.encoder(enc_emb)
        dec_timesteps = dec_inputs.shape[1]
        prev_hidden = enc_hidden
        outputs = []
        for t in range(dec_timesteps):
            emb_vector = self.dec_embeddings(dec_inputs[:, t]).unsqueeze(dim=1)
            dec_out, dec_hidden = self.decoder(emb_vector, prev_hidden)
            s_t = dec_hidden[-1]
            scores = torch.bmm(enc_out, s_t.unsqueeze(dim=2))
            probs = torch.softmax(scores, dim=1)
            context_vector = torch.bmm(probs.transpose(1, 2), enc_out)
            logits = self.output_layer(torch.cat([dec_out, context_vector], dim=2))
            outputs.append(logits)
            prev_hidden = dec_hidden
        return torch.cat(outputs, dim=1)


class ReverseTaskV7(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.encoder = nn.GRU(input_size=EMBEDDING_DIM, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.dec_embeddings = nn.Embedding(VOCAB_SIZE, EMBEDDING_DIM)
        self.decoder = nn.GRU(input_size=EMBEDDING_DIM, hidden_size=HIDDEN_SIZE, batch_first=True)
        self.W = nn.Linear(HIDDEN_SIZE, HIDDEN_SIZE)
        self.output_layer = nn.Linear(2 * HIDDEN_SIZE, VOCAB_SIZE)

    def forward(self, enc_inputs, dec_inputs):
        enc_emb = self.enc_embeddings(enc_inputs)
        enc_out, enc_hidden = self.encoder(enc_emb)
        dec_timesteps = dec_inputs.shape[1]
        prev_hidden = enc_hidden
        enc_proj = self.W(enc_out)
        outputs = []
        for t in range(dec_timesteps):
            emb_vector = self.dec_embeddings(dec_inputs[:, t]).unsqueeze(dim=1)
            dec_out, dec_hidden = self.decoder(emb_vector, prev_hidden)
            s_t = dec_hidden[-1]
            scores = torch.bmm(enc_proj, s_t.unsqueeze(dim=2))
            probs = torch.softmax(scores, dim=1)
            context_vector = torch.bmm(probs.transpose(1, 2), enc_out)
            logits = self.output_layer(torch.cat([dec_out, context_vector], dim=2))
            outputs.append(logits)
            prev_hidden = dec_hidden
        return torch.cat(outputs, dim=1)
