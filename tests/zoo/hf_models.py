"""Tiny random Hugging Face seq2seq models, one factory per family, as a user's folder is made: a config built by hand
(nothing is downloaded), `AutoModelForSeq2SeqLM.from_config`, then `save_pretrained`. transformers is imported here
only. Sizes are small and distinct from each other, so a transposed or swapped matrix is a shape error."""

from __future__ import annotations

import functools

import torch
import transformers

VOCAB = 48  # shared (source) vocabulary
DECODER_VOCAB = 40  # Marian's separate target vocabulary (share_encoder_decoder_embeddings=False)
MODEL_DIM = 16
FFN = 24
HEADS = 2
LAYERS = 2
POSITIONS = 32

_SIZES = {"d_model": MODEL_DIM, "encoder_layers": LAYERS, "decoder_layers": LAYERS, "encoder_attention_heads": HEADS,
          "decoder_attention_heads": HEADS, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN,
          "max_position_embeddings": POSITIONS, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
          "decoder_start_token_id": 2}  # fmt: skip
_T5_SIZES = {"d_model": MODEL_DIM, "d_kv": 8, "d_ff": FFN, "num_layers": LAYERS, "num_heads": HEADS,
             "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16, "decoder_start_token_id": 0}  # fmt: skip

FAMILIES = ("marian", "marian_separate", "bart", "mbart", "t5", "t5_v1_1")


def config(family: str, **overrides) -> transformers.PretrainedConfig:
    """The config of a tiny `family` model: Marian shared or with a separate decoder vocabulary, BART, mBART, T5 v1.0
    (relu, tied) or v1.1 (gated-gelu, tie_word_embeddings=False)."""
    marian = _SIZES | {"pad_token_id": VOCAB - 1, "decoder_start_token_id": VOCAB - 1, "eos_token_id": 0}
    if family == "marian":
        return transformers.MarianConfig(vocab_size=VOCAB, scale_embedding=True, **marian, **overrides)
    if family == "marian_separate":
        separate = marian | {"pad_token_id": DECODER_VOCAB - 1, "decoder_start_token_id": DECODER_VOCAB - 1}
        return transformers.MarianConfig(vocab_size=VOCAB, decoder_vocab_size=DECODER_VOCAB, scale_embedding=True,
                                         share_encoder_decoder_embeddings=False, **separate, **overrides)  # fmt: skip
    if family == "bart":
        return transformers.BartConfig(vocab_size=VOCAB, **_SIZES, **overrides)
    if family == "mbart":
        return transformers.MBartConfig(vocab_size=VOCAB, scale_embedding=True, **_SIZES, **overrides)
    if family == "t5":
        return transformers.T5Config(vocab_size=VOCAB, feed_forward_proj="relu", **_T5_SIZES, **overrides)
    if family == "t5_v1_1":
        return transformers.T5Config(vocab_size=VOCAB, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                     **_T5_SIZES, **overrides)  # fmt: skip
    raise ValueError(f"unknown family {family!r}: one of {', '.join(FAMILIES)}")


def model(family: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny random `family` model in eval mode, eager attention; BART-like models get a nonzero final_logits_bias, as
    Marian's checkpoints have (zeros would hide a bias read wrongly)."""
    torch.manual_seed(seed)
    built = transformers.AutoModelForSeq2SeqLM.from_config(config(family, **overrides), attn_implementation="eager")
    if hasattr(built, "final_logits_bias"):
        with torch.no_grad():
            built.final_logits_bias.normal_()
    return built.eval()


def batch(family: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Ids for a forward pass: input_ids [B, S], attention_mask [B, S] (one padded row), decoder_input_ids [B, T]."""
    generator = torch.Generator().manual_seed(seed)
    target = DECODER_VOCAB if family == "marian_separate" else VOCAB
    input_ids = torch.randint(3, VOCAB - 2, (2, 7), generator=generator)  # [B, S]
    mask = torch.ones_like(input_ids)  # [B, S]
    mask[1, 5:] = 0
    decoder_input_ids = torch.randint(3, target - 2, (2, 5), generator=generator)  # [B, T]
    return {"input_ids": input_ids, "attention_mask": mask, "decoder_input_ids": decoder_input_ids}


def logits(built: torch.nn.Module, family: str) -> torch.Tensor:
    """The model's logits [B, T, V] on `batch(family)`."""
    with torch.no_grad():
        return built(**batch(family)).logits  # [B, T, V]


@functools.lru_cache(maxsize=2)
def trained(family: str, steps: int = 150, seed: int = 0) -> torch.nn.Module:
    """A tiny `family` model trained `steps` Adam steps to reverse its source: its distributions depend on the source
    and the history, and its hypotheses end at different lengths, as a real translation model's do (a random one
    repeats one token). Sources: ids 3..VOCAB-3, lengths 2..9, then eos. Built once per process: a caller that
    changes it copies it first."""
    import numpy as np

    built = model(family, seed=seed).train()
    target = DECODER_VOCAB if family == "marian_separate" else VOCAB
    pad, eos = built.config.pad_token_id, built.config.eos_token_id
    rng, optimizer = np.random.default_rng(seed), torch.optim.Adam(built.parameters(), 3e-3)
    for _ in range(steps):
        lengths = rng.integers(2, 10, 32)  # [32]
        width = int(lengths.max()) + 1
        source = rng.integers(3, min(target, VOCAB) - 2, (32, width))  # [32, S]
        kept = np.arange(width)[None] < lengths[:, None]  # [32, S]
        ids = np.where(kept, source, pad)
        ids[np.arange(32), lengths] = eos
        labels = np.full((32, width), -100)
        for row, length in enumerate(lengths):
            labels[row, :length] = source[row, :length][::-1]
            labels[row, length] = eos
        mask = (np.arange(width)[None] <= lengths[:, None]).astype(np.int64)
        loss = built(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask), labels=torch.as_tensor(labels)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return built.eval()
