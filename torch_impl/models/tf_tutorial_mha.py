"""Document 004 as TensorFlow's NMT-with-attention tutorial is today (the 2022 rewrite in tensorflow/text,
docs/tutorials/nmt_with_attention.ipynb, model code of commit c1ddc39b): `Encoder`, `CrossAttention`, `Decoder`
and `Translator`, in PyTorch, computing what the Keras classes compute *with their masks*.

Legend: B batch, S source length, T target length, H units, V target vocabulary. Batch-first, as the tutorial.

The tutorial pads with id 0 and lets Keras mask (`Embedding(mask_zero=True)`). What torch needs for the same
numbers, everywhere a Keras mask acts:
- the encoder's `Bidirectional(GRU, merge_mode='sum')`: each direction skips pad steps (its state kept) and
  outputs zeros there (Keras forces `zero_output_for_mask` under `Bidirectional`): packed sequences, or a masked
  loop where a pad sits inside a row;
- the decoder's GRU (`zero_output_for_mask=False`): a pad step keeps the state and repeats the previous output
  (zeros before the first step of a call);
- `MultiHeadAttention` with query and key masks: a pad key gets weight 0 (the score set to -1e9, as Keras's
  `Softmax`); a pad query row's weights are all zeros (Keras zeroes a fully masked row after its softmax), so its
  attention output is the output projection's bias.
torch's `nn.MultiheadAttention` has no query mask, so `CrossAttention` computes the attention from the layer's
own parameters (`mha.in_proj_weight`, `mha.out_proj`: the canonical layout is nn.MultiheadAttention's).
"""

from __future__ import annotations

import torch
from torch import nn

from shared.core.taps import (
    ATTENTION_SCORES,
    CONTEXT_VECTORS,
    ENCODER_OUTPUTS,
    SOURCE_EMBEDDINGS,
    TARGET_EMBEDDINGS,
    tap,
)
from torch_impl.keras_layers import keras_attention, masked_gru
from torch_impl.models.seq2seq import Seq2SeqBase, source_mask

KERAS_LAYER_NORM_EPS = 1e-3  # keras.layers.LayerNormalization's default epsilon (torch's is 1e-5)
PAD_ID = 0  # mask_zero=True: id 0 is padding


class Encoder(nn.Module):
    """The tutorial's `Encoder(text_processor, units)` (here `vocab_size, units`): `embedding`, and `rnn`, a
    bidirectional GRU whose directions are summed (`Bidirectional(merge_mode='sum')`)."""

    def __init__(self, vocab_size: int, units: int):
        super().__init__()
        self.vocab_size, self.units = vocab_size, units
        self.embedding = nn.Embedding(vocab_size, units)
        self.rnn = nn.GRU(units, units, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None):
        """`x [B, S]` (and its rows' `lengths [B]`, where known) -> the context `[B, S, H]` (zeros at pad steps) and
        its mask `[B, S]`: the pad ids' (mask_zero), and the steps past each row's length."""
        mask = x != PAD_ID  # [B, S]
        if lengths is not None:
            mask = mask & source_mask(lengths, x.shape[1])
        embedded = tap(SOURCE_EMBEDDINGS, self.embedding(x))  # [B, S, H]
        outputs, _ = masked_gru(self.rnn, embedded, mask)  # [B, S, 2H]
        forward, backward = outputs.chunk(2, dim=-1)  # [B, S, H] each
        return forward + backward, mask


class CrossAttention(nn.Module):
    """The tutorial's `CrossAttention(units)`: `mha` (one head as wide as the model: Keras's
    `MultiHeadAttention(key_dim=units, num_heads=1)`), `add` (the residual, no weights), `layernorm`."""

    def __init__(self, units: int, num_heads: int = 1):
        super().__init__()
        self.mha = nn.MultiheadAttention(units, num_heads, batch_first=True)
        self.layernorm = nn.LayerNorm(units, eps=KERAS_LAYER_NORM_EPS)
        self.add = torch.add

    def forward(self, x, context, query_mask, context_mask):
        """`x [B, T, H]`, `context [B, S, H]` -> `[B, T, H]`, and the attention averaged over the heads `[B, T, S]`
        (the tutorial's `last_attention_weights`)."""
        attn_output, attn_scores = keras_attention(self.mha, x, context, query_mask, context_mask)
        attn_scores = tap(ATTENTION_SCORES, attn_scores.mean(dim=1))  # [B, T, S]
        x = self.add(x, tap(CONTEXT_VECTORS, attn_output))  # [B, T, H]
        return self.layernorm(x), attn_scores


class Decoder(nn.Module):
    """The tutorial's `Decoder(text_processor, units)` (here `vocab_size, units`): `embedding`, `rnn` (a GRU
    returning its sequence and state), `attention` (a `CrossAttention`), `output_layer`."""

    def __init__(self, vocab_size: int, units: int):
        super().__init__()
        self.vocab_size, self.units = vocab_size, units
        self.embedding = nn.Embedding(vocab_size, units)
        self.rnn = nn.GRU(units, units, batch_first=True)
        self.attention = CrossAttention(units)
        self.output_layer = nn.Linear(units, vocab_size)

    def forward(self, context, context_mask, x, state=None):
        """The tutorial's `call(context, x, state, return_state=True)` up to the output layer: `x [B, T]`, `state
        [B, H]` or None (zeros) -> features `[B, T, H]`, state `[B, H]`, attention `[B, T, S]`."""
        mask = x != PAD_ID  # [B, T]
        embedded = tap(TARGET_EMBEDDINGS, self.embedding(x))  # [B, T, H]
        x, state = masked_gru(self.rnn, embedded, mask, None if state is None else state.unsqueeze(0), zero_output=False)
        x, attention = self.attention(x, context, mask, context_mask)  # [B, T, H], [B, T, S]
        return x, state.squeeze(0), attention


class Translator(Seq2SeqBase):
    """The tutorial's `Translator(units, context_text_processor, target_text_processor)` (here the vocabulary
    sizes): `encoder`, `decoder`; teacher-forced on `(context, target_in)` as its `call`, and greedy decoding as
    its `translate` (one token at a time, the GRU's state carried)."""

    def __init__(self, units: int, context_vocab_size: int, target_vocab_size: int):
        super().__init__(Encoder(context_vocab_size, units), Decoder(target_vocab_size, units))

    def forward(self, context, target_in):
        """The tutorial's `call((context, x))`: logits `[B, T, V]`."""
        return self.decode(context, target_in)[0]

    def encode(self, src, src_len=None):
        """The context, its mask, and the decoder's first state: zeros (the tutorial's `get_initial_state`).
        The mask comes from the pad ids (mask_zero), as Keras's, and from `src_len` where given."""
        context, mask = self.encoder(src, src_len)  # [B, S, H], [B, S]
        tap(ENCODER_OUTPUTS, context)
        return (context, mask), context.new_zeros(src.shape[0], self.decoder.units)

    def decode(self, src, tgt_in, src_len=None, teacher_forcing=None):
        """Teacher-forced, every target at once as the tutorial's `call` (as written too); with a schedule, step
        by step (Seq2SeqBase)."""
        if teacher_forcing is not None:
            return super().decode(src, tgt_in, src_len, teacher_forcing)
        memory, state = self.encode(src, src_len)
        return self.decode_teacher_forced(tgt_in, state, memory)

    def decode_teacher_forced(self, tgt_in, hidden, memory):
        features, _, attention = self.decoder(*memory, tgt_in)  # [B, T, H], _, [B, T, S]
        return self.project(features), attention

    def features(self, x, hidden, memory):
        """One token `x [B]` from state `hidden [B, H]` (the tutorial's `get_next_token`): features `[B, H]`,
        state, attention `[B, S]`."""
        features, state, attention = self.decoder(*memory, x.unsqueeze(1), hidden)  # [B, 1, H], [B, H], [B, 1, S]
        return features.squeeze(1), state, attention.squeeze(1)

    def project(self, features):
        return self.decoder.output_layer(features)  # [..., V]


def keras_initializers(model: nn.Module) -> nn.Module:
    """Keras's defaults, so a torch model starts from the tutorial's distributions: glorot-uniform kernels (the
    tutorial's `recurrent_initializer='glorot_uniform'` too; each of q, k, v, out as Keras builds them), zero
    biases, U(-0.05, 0.05) embeddings, LayerNorm's ones and zeros."""
    for name, param in model.named_parameters():
        if "embedding" in name:
            nn.init.uniform_(param, -0.05, 0.05)
        elif "layernorm" in name:
            nn.init.ones_(param) if name.endswith("weight") else nn.init.zeros_(param)
        elif "bias" in name:
            nn.init.zeros_(param)
        elif name.endswith("in_proj_weight"):
            for block in param.data.chunk(3):
                nn.init.xavier_uniform_(block)
        else:
            nn.init.xavier_uniform_(param)
    return model


def build_model(units: int, context_vocab_size: int, target_vocab_size: int) -> Translator:
    """The catalogue's `tf_tutorial_mha`: the tutorial's `Translator(units, ...)`."""
    return keras_initializers(Translator(units, context_vocab_size, target_vocab_size))
