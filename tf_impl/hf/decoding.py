"""Key/value-cached decoding of our Keras Hugging Face models (BART family: Marian, BART, mBART; T5) for a generation
loop: `decoding(model)` gives an object with `start` and `step` (docs: the decoding contract), whose logits equal the
model's teacher-forced forward at the same position, as transformers' generate with its cache (EncoderDecoderCache).

memory: (encoder mask [B, 1, 1, S] additive, ((keys, values) [B, N, S, D] of each decoder layer's cross-attention)).
state: ((keys, values) [B, N, L, D] of each decoder layer's self-attention), L = max_length, zeros at start.
`step` writes position `index` (a traced int32 scalar inside keras.ops.while_loop, under XLA) with slice_update, so
every shape stays static. Legend: B batch (N rows with beams), S source, L max_length, E d_model, V vocabulary.
"""

from __future__ import annotations

from keras import ops

from tf_impl.hf import marian_layers


class _Decoding:
    """What both families share: the encoder pass and its cross-attention keys and values in `start`, the zero caches."""

    def __init__(self, model):
        self.model, self.backbone = model, model.backbone
        self.dtype = self.backbone.compute_dtype

    def start(self, input_ids, attention_mask, max_length: int):
        """input_ids, attention_mask [B, S] (1 token, 0 padding), max_length (a python int: the caches' length) ->
        (memory, state) as the module docstring says."""
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
            raise ValueError(f"max_length: expected a positive python int (the caches' static length), got {max_length!r}")
        mask = marian_layers.padding_mask(attention_mask, self.dtype)  # [B, 1, 1, S]
        encoder_output = self.backbone.encode(input_ids, mask)  # [B, S, E]
        cross = tuple(attention.project(encoder_output) for attention in self._cross_attentions())  # [B, N, S, D] each
        batch = ops.shape(input_ids)[0]
        state = tuple(
            tuple(ops.zeros((batch, attention.heads, max_length, attention.head_dim), self.dtype) for _ in "kv")
            for attention in self._self_attentions()
        )  # [B, N, L, D] each
        return (mask, cross), state

    def step(self, tokens, index, state, memory):
        """tokens [N] at decoder position `index` (a scalar int; a traced tensor allowed) -> (logits [N, V] for position
        index + 1, the state with position `index` written)."""
        encoder_mask, cross = memory
        length = ops.shape(state[0][0])[2]
        self_mask = marian_layers.cache_mask(index, length, self.dtype)  # [1, 1, 1, L]
        y, state = self._layers(tokens, index, state, self_mask, cross, encoder_mask)  # [N, 1, E]
        return self._logits(y)[:, 0], state  # [N, V]

    def _layers(self, tokens, index, state, self_mask, cross, encoder_mask):
        raise NotImplementedError

    def _logits(self, y):
        raise NotImplementedError

    def _self_attentions(self) -> list:
        raise NotImplementedError

    def _cross_attentions(self) -> list:
        raise NotImplementedError


class BartFamilyDecoding(_Decoding):
    """Marian/Bart/MBartForConditionalGeneration's decoding: the embedding of position `index` (Marian's sinusoid row
    index, BART's learned row index + 2), layernorm_embedding, the decoder layers' steps, mBART's final norm, the lm head
    with final_logits_bias."""

    def _layers(self, tokens, index, state, self_mask, cross, encoder_mask):
        y = self.backbone.embed_step(tokens, index)  # [N, 1, E]
        caches = []
        for layer, cache, memory in zip(self.backbone.decoder_layers, state, cross, strict=True):
            y, cache = layer.step(y, cache, index, self_mask, memory, encoder_mask)  # [N, 1, E]
            caches.append(cache)
        return self.backbone.decoder_output(y), tuple(caches)  # [N, 1, E]

    def _logits(self, y):
        return self.model.final_logits_bias(y)  # [N, 1, V]

    @property
    def vocabulary_size(self) -> int:
        return self.backbone.decoder_embed_tokens.input_dim

    def _self_attentions(self) -> list:
        return [layer.self_attn for layer in self.backbone.decoder_layers]

    def _cross_attentions(self) -> list:
        return [layer.encoder_attn for layer in self.backbone.decoder_layers]


class T5Decoding(_Decoding):
    """T5ForConditionalGeneration's decoding: the shared embedding, the decoder's relative bias of query `index`
    against the cache (causal buckets, block 0's for every block), the blocks' steps, the final norm, the lm head
    (d_model**-0.5 first when scale_decoder_outputs)."""

    def _layers(self, tokens, index, state, self_mask, cross, encoder_mask):
        y = self.backbone.token_embedding(tokens[:, None])  # [N, 1, E]
        position_bias = self.backbone.decoder_relative_bias.at(index, ops.shape(self_mask)[-1])  # [1, N, 1, L]
        caches = []
        for block, cache, memory in zip(self.backbone.decoder_blocks, state, cross, strict=True):
            y, cache = block.step(y, cache, index, self_mask, position_bias, memory, encoder_mask)  # [N, 1, E]
            caches.append(cache)
        return self.backbone.decoder_final_layer_norm(y), tuple(caches)  # [N, 1, E]

    def _logits(self, y):
        return self.model.lm_head(y)  # [N, 1, V]

    @property
    def vocabulary_size(self) -> int:
        return self.backbone.token_embedding.input_dim

    def _self_attentions(self) -> list:
        return [block.self_attention for block in self.backbone.decoder_blocks]

    def _cross_attentions(self) -> list:
        return [block.cross_attention for block in self.backbone.decoder_blocks]


def decoding(model) -> _Decoding:
    """The decoding object (start, step) of a BartFamilySeq2SeqLM (Marian, BART, mBART) or a T5Seq2SeqLM."""
    if callable(getattr(model, "decoding", None)):  # the models name their class (this module imports none of them)
        return model.decoding()
    raise TypeError(f"decoding: {type(model).__module__}.{type(model).__name__} has no cached decoding here; expected a "
                    f"BartFamilySeq2SeqLM (Marian, BART, mBART) or a T5Seq2SeqLM (tf_impl/hf)")  # fmt: skip
