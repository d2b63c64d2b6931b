"""Hugging Face's logits processors (transformers 5.23, generation/logits_process.py) on static shapes, in the order
`GenerationMixin._get_logits_processor` applies them, written once over an array namespace `xp` that each stack
provides (tf_impl/generation.py, torch_impl/generation.py): the same code runs eagerly in torch and traced in Keras.

`sequences [N, L]` is the static buffer of decoder tokens (HF's growing `input_ids`), `length` how many of its
positions are filled (HF's `input_ids.shape[-1]`): a python int in torch, a traced scalar in Keras.
"""

from __future__ import annotations

import math

NEG_INF = -math.inf


def process(xp, plan, sequences, length, scores):
    """The plan's processors over `scores [N, V]` (float32), in HF's order."""
    if plan.repetition_penalty != 1.0:
        scores = repetition_penalty(xp, sequences, length, scores, plan.repetition_penalty)
    if plan.no_repeat_ngram_size > 0:
        scores = no_repeat_ngram(xp, sequences, length, scores, plan.no_repeat_ngram_size)
    bad_words = [word for word in plan.bad_words_ids if word not in [(eos,) for eos in plan.eos_token_ids]]
    if bad_words:
        scores = no_bad_words(xp, sequences, length, scores, bad_words)
    if plan.min_length > 0 and plan.eos_token_ids:
        scores = xp.where(xp.less(length, plan.min_length), _masked(xp, scores, plan.eos_token_ids), scores)
    if plan.min_new_tokens > 0 and plan.eos_token_ids:
        new_tokens = length - plan.prompt_length
        scores = xp.where(xp.less(new_tokens, plan.min_new_tokens), _masked(xp, scores, plan.eos_token_ids), scores)
    if plan.forced_bos_token_id is not None:
        scores = xp.where(xp.equal(length, 1), _forced(xp, scores, (plan.forced_bos_token_id,)), scores)
    if plan.forced_eos_token_ids:
        at_last = xp.equal(length, plan.max_length - 1)
        scores = xp.where(at_last, _forced(xp, scores, plan.forced_eos_token_ids), scores)
    if plan.renormalize_logits:
        scores = xp.log_softmax(scores)  # HF's LogitNormalization, always last
    return scores


def _vocabulary_mask(xp, scores, ids):
    """[1, V] booleans: True at `ids`."""
    vocabulary = xp.arange(scores.shape[-1])  # [V]
    return xp.expand_dims(xp.isin(vocabulary, ids), 0)  # [1, V]


def _masked(xp, scores, ids):
    """`ids` set to -inf (MinLength, MinNewTokensLength)."""
    return xp.where(_vocabulary_mask(xp, scores, ids), NEG_INF, scores)  # [N, V]


def _forced(xp, scores, ids):
    """Every token -inf but `ids`, which score 0 (ForcedBOSToken, ForcedEOSToken)."""
    return xp.where(_vocabulary_mask(xp, scores, ids), xp.zeros_like(scores), NEG_INF)  # [N, V]


def _filled(xp, sequences, length):
    """[1, L] booleans: the positions filled so far."""
    return xp.expand_dims(xp.less(xp.arange(sequences.shape[1]), length), 0)


def repetition_penalty(xp, sequences, length, scores, penalty: float):
    """RepetitionPenaltyLogitsProcessor: every token seen so far, negative scores times `penalty`, others divided."""
    seen = xp.mark(sequences, xp.broadcast_to(_filled(xp, sequences, length), sequences.shape), scores.shape[-1])
    penalised = xp.where(xp.less(scores, 0.0), scores * penalty, scores / penalty)
    return xp.where(seen, penalised, scores)


def _column(xp, sequences, index):
    """`sequences[:, index]` for a possibly traced index (clamped into range; callers mask what it stands for)."""
    index = xp.clip(index, 0, sequences.shape[1] - 1)
    return xp.take_column(sequences, index)  # [N]


def no_repeat_ngram(xp, sequences, length, scores, size: int):
    """NoRepeatNGramLogitsProcessor: a token that would complete an n-gram already in the sequence is banned.

    HF matches the last n - 1 tokens against every window of n tokens that fits in the filled positions; each match
    bans its window's last token.
    """
    windows = sequences.shape[1] - size + 1
    matches = xp.broadcast_to(xp.less(xp.arange(windows) + size, length + 1), (sequences.shape[0], windows))
    for k in range(size - 1):
        prefix_token = xp.expand_dims(_column(xp, sequences, length - size + 1 + k), 1)  # [N, 1]
        matches = xp.logical_and(matches, xp.equal(sequences[:, k : k + windows], prefix_token))  # [N, W]
    banned = xp.mark(sequences[:, size - 1 : size - 1 + windows], matches, scores.shape[-1])  # [N, V]
    banned = xp.logical_and(banned, xp.greater_equal(length, size))  # nothing before a whole n-gram exists
    return xp.where(banned, NEG_INF, scores)


def no_bad_words(xp, sequences, length, scores, words):
    """NoBadWordsLogitsProcessor: single-token words always banned, longer ones when the sequence ends with the
    word's prefix (a prefix longer than the filled positions never matches)."""
    single = tuple(word[0] for word in words if len(word) == 1)
    banned = xp.broadcast_to(_vocabulary_mask(xp, scores, single), scores.shape) if single else None
    for word in (word for word in words if len(word) > 1):
        prefix = len(word) - 1
        matching = xp.broadcast_to(xp.greater_equal(length, prefix), (sequences.shape[0],))  # [N]
        for k, token in enumerate(word[:-1]):
            matching = xp.logical_and(matching, xp.equal(_column(xp, sequences, length - prefix + k), token))
        hit = xp.logical_and(xp.expand_dims(matching, 1), _vocabulary_mask(xp, scores, (word[-1],)))  # [N, V]
        banned = hit if banned is None else xp.logical_or(banned, hit)
    return xp.where(banned, NEG_INF, scores)
