"""A PyTorch twin of TensorFlow's 2022 "Neural machine translation with attention" tutorial's model, as a PyTorch
user writes it.

The Keras classes it mirrors are transcribed in tests/tutorials/tf_nmt_2022.py (tensorflow/text,
docs/tutorials/nmt_with_attention.ipynb, commit 978fd9f2; model code of the 2022 rewrite, c1ddc39b). Class for
class and attribute for attribute, so the two pair by attribute path in a converter:
- `Encoder`: `embedding` (`nn.Embedding(vocab, units, padding_idx=0)`), `rnn` (a bidirectional `nn.GRU`
  whose two directions' outputs are summed: Keras's `Bidirectional(merge_mode='sum')`);
- `CrossAttention`: `mha` (`nn.MultiheadAttention(units, num_heads=1, batch_first=True)`: one head as wide as the
  model, Keras's `MultiHeadAttention(key_dim=units, num_heads=1)`), `add` (the residual sum, no weights),
  `layernorm` (`nn.LayerNorm(units, eps=1e-3)`: Keras's `LayerNormalization` default epsilon, not torch's 1e-5);
  it keeps the attention weights averaged over the heads as `last_attention_weights` [batch, t, s];
- `Decoder`: `embedding`, `rnn` (`nn.GRU`, its sequence and final state: Keras's `return_sequences=True,
  return_state=True`), `attention` (a `CrossAttention`), `output_layer` (`nn.Linear(units, vocab)`); the
  teacher-forced `forward(context, x, state=None, return_state=False)` as the tutorial's `call`;
- `Translator`: `encoder`, `decoder`; `forward(context, target_in)` returns logits [batch, t, target_vocab].

Not mirrored: Keras's masking (`mask_zero=True`: the GRUs skip pad steps, the attention ignores pad keys and
queries). This twin runs every step and attends to every position, so it computes the tutorial's function on
batches without padding (every token id >= 1); `padding_idx=0` only keeps the pad embedding at zero.
"""

from __future__ import annotations

import torch
from torch import nn

KERAS_LAYER_NORM_EPS = 1e-3  # keras.layers.LayerNormalization's default epsilon


class Encoder(nn.Module):
    """The tutorial's `Encoder`: embeddings, a bidirectional GRU with its directions summed."""

    def __init__(self, vocab_size, units):
        super().__init__()
        self.vocab_size = vocab_size
        self.units = units
        self.embedding = nn.Embedding(vocab_size, units, padding_idx=0)
        self.rnn = nn.GRU(units, units, batch_first=True, bidirectional=True)

    def forward(self, x):
        x = self.embedding(x)  # [batch, s, units]
        x, _ = self.rnn(x)  # [batch, s, 2 * units]: forward and backward directions side by side
        forward, backward = x.chunk(2, dim=-1)
        return forward + backward  # merge_mode='sum': [batch, s, units]


class CrossAttention(nn.Module):
    """The tutorial's `CrossAttention`: one-head attention over the context, the residual, a LayerNorm."""

    def __init__(self, units):
        super().__init__()
        self.mha = nn.MultiheadAttention(units, num_heads=1, batch_first=True)
        self.layernorm = nn.LayerNorm(units, eps=KERAS_LAYER_NORM_EPS)
        self.add = torch.add  # the tutorial's Add layer: no weights

    def forward(self, x, context):
        attn_output, attn_scores = self.mha(query=x, key=context, value=context, average_attn_weights=False)
        # Cache the attention scores (averaged over the heads, [batch, t, s]) for plotting later.
        self.last_attention_weights = attn_scores.mean(dim=1)
        x = self.add(x, attn_output)
        return self.layernorm(x)


class Decoder(nn.Module):
    """The tutorial's `Decoder`, teacher-forced: embeddings, a GRU, cross-attention, the logits."""

    def __init__(self, vocab_size, units):
        super().__init__()
        self.vocab_size = vocab_size
        self.units = units
        self.embedding = nn.Embedding(vocab_size, units, padding_idx=0)
        self.rnn = nn.GRU(units, units, batch_first=True)
        self.attention = CrossAttention(units)
        self.output_layer = nn.Linear(units, vocab_size)

    def forward(self, context, x, state=None, return_state=False):
        x = self.embedding(x)  # [batch, t, units]
        x, state = self.rnn(x, state)  # [batch, t, units], [1, batch, units]
        x = self.attention(x, context)
        self.last_attention_weights = self.attention.last_attention_weights  # [batch, t, s]
        logits = self.output_layer(x)  # [batch, t, vocab]
        if return_state:
            return logits, state
        return logits


class Translator(nn.Module):
    """The tutorial's `Translator`: the encoder over the context, the decoder over `target_in`."""

    def __init__(self, units, context_vocab_size, target_vocab_size):
        super().__init__()
        self.encoder = Encoder(context_vocab_size, units)
        self.decoder = Decoder(target_vocab_size, units)

    def forward(self, context, target_in):
        context = self.encoder(context)
        return self.decoder(context, target_in)


def translator(input_vocab=23, target_vocab=19, units=16) -> nn.Module:
    """The twin of tests/tutorials/tf_nmt_2022.py's `translator`: `Translator(units, input_vocab, target_vocab)`."""
    return Translator(units, input_vocab, target_vocab)
