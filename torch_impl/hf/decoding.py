"""A transformers encoder-decoder (MarianMT, BART, mBART, T5) as a decoding object of torch_impl/generation.py, through
its own forward and cache (EncoderDecoderCache): our loop on HF's model, which proves the loop against HF's `generate`
without Keras (tests/hf/test_generation_rules.py)."""

from __future__ import annotations


class HfDecoding:
    """HF's model stepped one token at a time with its cache; `reorder` is the cache's own."""

    def __init__(self, model):
        self.model = model

    def start(self, input_ids, attention_mask, max_length: int):
        encoder = self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        return (encoder.last_hidden_state, attention_mask), None

    def step(self, tokens, index, state, memory):
        from transformers.modeling_outputs import BaseModelOutput

        hidden, mask = memory
        outputs = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=hidden),
            attention_mask=mask,
            decoder_input_ids=tokens[:, None],
            past_key_values=state,
            use_cache=True,
        )
        return outputs.logits[:, -1], outputs.past_key_values

    def reorder(self, state, rows):
        state.reorder_cache(rows)
        return state
