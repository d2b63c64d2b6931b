"""Evaluation metrics on numpy arrays: perplexity, token and sequence accuracy, special-token stripping, BLEU.

Framework-neutral: inputs are numpy arrays (or what `np.asarray` makes one of); sacrebleu is imported
inside `bleu` only. Every bad input raises one ValueError that names the problem.

Alignment of predictions with targets (both accuracies): greedy decoding stops at <eos>, so predictions
[B, T'] may be shorter or longer than targets [B, T]. Predictions are truncated to T, or padded to T with
`pad_id`; only positions where the target is not `pad_id` are scored, so a missing prediction counts wrong
and whatever the model emits past the target's padding start is ignored. Targets should hold <eos> (as the
decoder's `tgt_out` does): then stopping too early or too late both miss the <eos> position.
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np


def perplexity(loss: float) -> float:
    """exp(mean token cross-entropy); a loss too large for a float gives inf; NaN or negative raises ValueError."""
    value = None if isinstance(loss, bool) else np.asarray(loss)
    if value is None or value.ndim != 0 or value.dtype.kind not in "iuf":
        raise ValueError(f"loss must be a real number, got {loss!r}")
    loss = float(value)
    if math.isnan(loss):
        raise ValueError("loss is NaN: the perplexity is undefined")
    if loss < 0:
        raise ValueError(f"loss must be >= 0 (a cross-entropy), got {loss!r}")
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def token_accuracy(predictions, targets, pad_id: int) -> float:
    """Fraction of non-pad target positions whose prediction is right (alignment: see the module docstring).

    Args:
        predictions: [B, T'] integer ids, T' any length.
        targets: [B, T] integer ids, `pad_id` after each row's end.
    """
    correct, scored = _scored(predictions, targets, pad_id)  # [B, T] each
    if not scored.any():
        raise ValueError("targets hold no non-pad position: the token accuracy is undefined")
    return float(correct.sum() / scored.sum())


def sequence_accuracy(predictions, targets, pad_id: int) -> float:
    """Fraction of rows whose every non-pad target position is predicted right (alignment: module docstring).

    Args:
        predictions: [B, T'] integer ids, T' any length.
        targets: [B, T] integer ids; every row needs at least one non-pad position.
    """
    correct, scored = _scored(predictions, targets, pad_id)  # [B, T] each
    empty = np.flatnonzero(~scored.any(axis=1))
    if empty.size:
        raise ValueError(f"target rows {empty.tolist()} are all padding: their sequence accuracy is undefined")
    return float((correct == scored).all(axis=1).mean())


def _scored(predictions, targets, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(right and scored, scored) masks [B, T]: predictions aligned to the targets' length, pads unscored."""
    pad_id = _token_id(pad_id, "pad_id")
    predictions, targets = _ids(predictions, "predictions", 2), _ids(targets, "targets", 2)
    if predictions.shape[0] != targets.shape[0]:
        raise ValueError(f"predictions hold {predictions.shape[0]} rows, targets {targets.shape[0]}")
    if targets.shape[0] == 0:
        raise ValueError("the batch is empty (0 rows)")
    batch, length = targets.shape
    aligned = np.full((batch, length), pad_id, dtype=np.int64)  # [B, T]; pad_id never matches a scored target
    kept = min(length, predictions.shape[1])
    aligned[:, :kept] = predictions[:, :kept]
    scored = targets != pad_id  # [B, T]
    return (aligned == targets) & scored, scored


def strip_special(ids, eos_id: int, pad_id: int, sos_id: int | None = None) -> list[int]:
    """The tokens before the first <eos> of a 1-D id array, without <pad> (and <sos> when `sos_id` is given)."""
    ids = _ids(ids, "ids", 1)  # [T]
    eos_id, pad_id = _token_id(eos_id, "eos_id"), _token_id(pad_id, "pad_id")
    drop = {pad_id} if sos_id is None else {pad_id, _token_id(sos_id, "sos_id")}
    ends = np.flatnonzero(ids == eos_id)
    head = ids[: ends[0]] if ends.size else ids
    return [int(token) for token in head if int(token) not in drop]


def _ids(array, what: str, ndim: int) -> np.ndarray:
    """`array` as an integer numpy array of `ndim` dimensions, or ValueError."""
    try:
        array = np.asarray(array)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"{what} is not a rectangular array: {error}") from None
    if array.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integer token ids, got dtype {array.dtype}")
    if array.ndim != ndim:
        raise ValueError(f"{what} must be {ndim}-D, got shape {array.shape}")
    return array


def _token_id(value, what: str) -> int:
    """`value` as a Python int, or ValueError (bools are no ids)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, Integral):
        raise ValueError(f"{what} must be an integer token id, got {value!r}")
    return int(value)


def bleu(hypotheses: list[list[str]], references: list[list[str]]) -> float:
    """Corpus BLEU-4 (0..100) of tokenized hypotheses against one tokenized reference each.

    sacrebleu on the tokens joined by spaces, `tokenize="none"` and no smoothing: the same value as
    torchtext's `bleu_score` (Ben Trevett's tutorials) times 100, any n-gram order without a match gives 0.
    Tokens must be non-empty strings without whitespace (sacrebleu splits on whitespace).
    """
    hyps, refs = _corpus(hypotheses, "hypotheses"), _corpus(references, "references")
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("the corpus is empty: BLEU is undefined")
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    return float(metric.corpus_score(hyps, [refs]).score)


def _corpus(sentences, what: str) -> list[str]:
    """Each sentence (a list of tokens) joined by single spaces, or ValueError naming the bad one."""
    if isinstance(sentences, str | bytes) or not hasattr(sentences, "__len__"):
        raise ValueError(f"{what} must be a list of token lists, got {type(sentences).__name__}")
    joined = []
    for index, tokens in enumerate(sentences):
        if isinstance(tokens, str | bytes) or not hasattr(tokens, "__iter__"):
            raise ValueError(f"{what}[{index}] must be a list of tokens, got {tokens!r}")
        tokens = list(tokens)
        bad = [t for t in tokens if not isinstance(t, str) or t.split() != [t]]
        if bad:
            raise ValueError(f"{what}[{index}] holds tokens that are not non-empty strings without whitespace: {bad!r}")
        joined.append(" ".join(tokens))
    return joined
