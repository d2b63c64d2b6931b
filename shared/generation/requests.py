"""What a stack's contract `generate` (torch_impl/contract.py, tf_impl/contract.py) asks of the generation loop for a
catalogue model, and how it returns the ids: the same in both stacks, so written once here."""

from __future__ import annotations

import numpy as np

from shared.generation.settings import GenerationSettings


def catalogue_request(spec, arrays: dict, max_len: int) -> tuple[np.ndarray, GenerationSettings]:
    """The source padding mask `[B, S]` (from `src_len`, else every position) and the settings of a catalogue model:
    its `<sos>` starts the decoder, `<eos>` and `<pad>` as its spec names them, at most `max_len` new tokens."""
    source = arrays["src"]  # [B, S]
    lengths = np.asarray(arrays.get("src_len", np.full(len(source), source.shape[1])))  # [B]
    mask = (np.arange(source.shape[1])[None] < lengths[:, None]).astype(np.int64)  # [B, S]
    settings = GenerationSettings(decoder_start_token_id=spec.sos_id, eos_token_id=spec.eos_id,
                                  pad_token_id=spec.pad_id, max_length=max_len + 1)  # fmt: skip
    return mask, settings


def greedy_shaped(ids: np.ndarray, spec) -> dict[str, np.ndarray]:
    """The generated ids `[N, 1 + L]` as `greedy` gives tokens: the start column dropped, `<pad>` after each row's
    first `<eos>` (HF fills a finished beam with `pad or eos`)."""
    tokens = ids[:, 1:]  # [N, L]
    after = np.cumsum(tokens == spec.eos_id, axis=1) - (tokens == spec.eos_id) > 0  # [N, L]: past the first <eos>
    return {"tokens": np.where(after, spec.pad_id, tokens)}
