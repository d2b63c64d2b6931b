"""Greedy and beam search with Hugging Face's rules (transformers 5.23, `GenerationMixin._sample` and `_beam_search`
with its helpers), on static shapes, written once over an array namespace `xp` (see processors.py).

Each search is three functions the stacks' loops call: `start` (the search state for a batch), `advance` (one
step from the model's logits: the new state, and for beam search the rows of the model's state to carry on), and
`unfinished` (HF's loop condition). `length` counts the decoder tokens so far, the start token included.

Ties: every top-k here keeps the lower index first among equal scores (the stacks' `xp.top_k`). HF calls
`torch.topk`, whose order among equal values is unspecified; in HF's beam search such ties arise only between
candidates of equal content (the -1e9 placeholders of the first step and forced tokens) or at -inf, which no kept
hypothesis holds, so the ids agree either way.
"""

from __future__ import annotations

from shared.generation.processors import process

PLACEHOLDER = -1.0e9  # HF's score for beams that must not be chosen


def penalties(plan) -> list[float]:
    """`length ** length_penalty` for every generated length, computed in python floats as torch does before
    rounding to float32 (a traced float32 power could differ in the last bit)."""
    return [float(length) ** plan.length_penalty if length else 1.0 for length in range(plan.max_length + 1)]


# ---- greedy: GenerationMixin._sample without sampling ----


def greedy_start(xp, plan, batch: int) -> dict:
    sequences = xp.full((batch, plan.max_length), plan.fill_token_id, "int")  # [B, L]
    sequences = xp.set_column(sequences, 0, xp.full((batch,), plan.decoder_start_token_id, "int"))
    return {"sequences": sequences, "unfinished": xp.full((batch,), True, "bool")}


def greedy_advance(xp, plan, state: dict, logits, length) -> dict:
    """One token per row: the processed scores' argmax; finished rows take pad (HF's has-eos rule)."""
    scores = process(xp, plan, state["sequences"], length, xp.cast(logits, "float32"))  # [B, V]
    tokens = xp.cast(xp.argmax(scores), "int")  # [B]
    if plan.eos_token_ids:
        tokens = xp.where(state["unfinished"], tokens, plan.pad_token_id)
    sequences = xp.set_column(state["sequences"], length, tokens)  # [B, L]
    done = xp.logical_or(xp.isin(tokens, plan.eos_token_ids), xp.greater_equal(length + 1, plan.max_length))
    return {"sequences": sequences, "unfinished": xp.logical_and(state["unfinished"], xp.logical_not(done))}


def greedy_unfinished(xp, state: dict):
    return xp.any(state["unfinished"])


# ---- beam search: GenerationMixin._beam_search ----


def beams_to_keep(plan) -> int:
    return max(2, 1 + len(plan.eos_token_ids)) * plan.num_beams


def beam_start(xp, plan, batch: int) -> dict:
    """HF's running and finished tensors: the first beam scores 0, the others -1e9, so the first step extends one."""
    beams, length = plan.num_beams, plan.max_length
    running = xp.full((batch, beams, length), plan.fill_token_id, "int")  # [B, K, L]
    running = xp.set_column(running, 0, xp.full((batch, beams), plan.decoder_start_token_id, "int"))
    first = xp.expand_dims(xp.equal(xp.arange(beams), 0), 0)  # [1, K]
    return {
        "running": running,
        "running_scores": xp.where(first, xp.zeros((batch, beams), "float32"), PLACEHOLDER),  # [B, K]
        "sequences": running,  # the finished pool [B, K, L]
        "scores": xp.full((batch, beams), PLACEHOLDER, "float32"),  # [B, K]
        "lengths": xp.zeros((batch, beams), "int"),  # generated tokens of each finished hypothesis
        "finished": xp.full((batch, beams), False, "bool"),  # is_sent_finished
        "improvable": xp.full((batch, 1), True, "bool"),  # is_early_stop_heuristic_unsatisfied
        "hits": xp.full((batch, beams_to_keep(plan)), False, "bool"),  # next_token_hits_stopping_criteria
    }


def _top_continuations(xp, plan, state: dict, log_probs, length):
    """`_get_top_k_continuations`: the best 2K (or more, with several eos) of all beams' next tokens."""
    batch, beams = log_probs.shape[0] // plan.num_beams, plan.num_beams
    vocabulary = log_probs.shape[-1]
    accumulated = xp.reshape(log_probs, (batch, beams, vocabulary)) + xp.expand_dims(state["running_scores"], 2)
    top_scores, top_indices = xp.top_k(xp.reshape(accumulated, (batch, beams * vocabulary)), beams_to_keep(plan))
    source_beams = top_indices // vocabulary  # [B, 2K]
    tokens = top_indices % vocabulary  # [B, 2K]
    sequences = xp.take_along(state["running"], xp.expand_dims(source_beams, 2), 1)  # [B, 2K, L]
    return top_scores, xp.set_column(sequences, length, tokens), source_beams


def _stopping(xp, plan, sequences, length):
    """HF's stopping criteria on the candidates: the new token is an eos, or max_length is reached."""
    last = xp.take_column(sequences, length)  # [B, 2K]
    return xp.logical_or(xp.isin(last, plan.eos_token_ids), xp.greater_equal(length + 1, plan.max_length))


def _next_running(xp, plan, top_scores, top_sequences, hits, source_beams):
    """`_get_running_beams_for_next_iteration`: the best K candidates that did not stop."""
    scores = top_scores + xp.cast(hits, "float32") * PLACEHOLDER  # [B, 2K]
    _, chosen = xp.top_k(scores, plan.num_beams)  # [B, K]
    running = xp.take_along(top_sequences, xp.expand_dims(chosen, 2), 1)  # [B, K, L]
    sources = xp.take_along(source_beams, chosen, 1)  # [B, K]
    return running, xp.take_along(scores, chosen, 1), sources


def _update_finished(xp, plan, state: dict, top_scores, top_sequences, hits, length, length_penalty):
    """`_update_finished_beams`: candidates among the top K that stopped join the pool, scored with the length
    penalty, and the pool keeps its best K."""
    candidates = hits.shape[1]
    in_top = xp.expand_dims(xp.less(xp.arange(candidates), plan.num_beams), 0)  # [1, 2K]
    just_finished = xp.logical_and(hits, in_top)  # [B, 2K]
    scores = top_scores / length_penalty
    full = xp.all(state["finished"], axis=-1, keepdims=True)  # [B, 1]
    if plan.early_stopping is True:
        scores = scores + xp.cast(full, "float32") * PLACEHOLDER
    scores = scores + xp.cast(xp.logical_not(state["improvable"]), "float32") * PLACEHOLDER
    scores = scores + xp.cast(xp.logical_not(just_finished), "float32") * PLACEHOLDER
    generated = xp.zeros_like(top_sequences[:, :, 0]) + (length + 1 - plan.prompt_length)  # [B, 2K]
    merged_scores = xp.concat([state["scores"], scores], 1)  # [B, 3K]
    _, kept = xp.top_k(merged_scores, plan.num_beams)  # [B, K]
    return {
        "sequences": xp.take_along(xp.concat([state["sequences"], top_sequences], 1), xp.expand_dims(kept, 2), 1),
        "scores": xp.take_along(merged_scores, kept, 1),
        "lengths": xp.take_along(xp.concat([state["lengths"], generated], 1), kept, 1),
        "finished": xp.take_along(xp.concat([state["finished"], just_finished], 1), kept, 1),
    }


def _improvable(xp, plan, state: dict, length, best_penalty):
    """`_check_early_stop_heuristic`: can the best running beam still beat the worst finished one?"""
    best_running = state["running_scores"][:, :1] / best_penalty  # [B, 1]
    worst = xp.where(state["finished"], xp.min(state["scores"], axis=1, keepdims=True), PLACEHOLDER)  # [B, K]
    return xp.logical_and(state["improvable"], xp.any(xp.greater(best_running, worst), axis=-1, keepdims=True))


def beam_advance(xp, plan, state: dict, logits, length, penalty_table):
    """One beam-search step from the model's logits `[B * K, V]` at decoder length `length`: the new state, and the
    flat rows `[B * K]` of the model's state each new running beam continues."""
    log_probs = xp.log_softmax(xp.cast(logits, "float32"))  # [B*K, V]
    flat_running = xp.reshape(state["running"], (-1, plan.max_length))  # [B*K, L]
    log_probs = process(xp, plan, flat_running, length, log_probs)
    top_scores, top_sequences, source_beams = _top_continuations(xp, plan, state, log_probs, length)
    hits = _stopping(xp, plan, top_sequences, length)  # [B, 2K]
    running, running_scores, sources = _next_running(xp, plan, top_scores, top_sequences, hits, source_beams)
    new = dict(state, running=running, running_scores=running_scores, hits=hits)
    new.update(
        _update_finished(
            xp,
            plan,
            state,
            top_scores,
            top_sequences,
            hits,
            length,
            xp.gather_constant(penalty_table, length + 1 - plan.prompt_length),
        )
    )
    hypothetical = length + 1 - plan.prompt_length
    if plan.early_stopping == "never" and plan.length_penalty > 0.0:
        hypothetical = plan.max_length - plan.prompt_length
    new["improvable"] = _improvable(xp, plan, new, length + 1, xp.gather_constant(penalty_table, hypothetical))
    batch = sources.shape[0]
    rows = sources + xp.expand_dims(xp.arange(batch) * plan.num_beams, 1)  # [B, K]
    return new, xp.reshape(rows, (-1,))


def beam_unfinished(xp, plan, state: dict):
    """`_beam_search_has_unfinished_sequences`."""
    going = xp.logical_and(xp.any(state["improvable"]), xp.logical_not(xp.all(state["hits"])))
    if plan.early_stopping is True:
        going = xp.logical_and(going, xp.logical_not(xp.all(state["finished"])))
    return going


def beam_result(xp, plan, state: dict):
    """The best `num_return_sequences` hypotheses per source, flat: ids `[B * R, L]`, scores `[B * R]` and the
    length HF crops every row to (its prompt plus the longest returned hypothesis)."""
    returned = plan.num_return_sequences
    sequences = xp.reshape(state["sequences"][:, :returned], (-1, plan.max_length))
    scores = xp.reshape(state["scores"][:, :returned], (-1,))
    return sequences, scores, plan.prompt_length + xp.max(state["lengths"][:, :returned])
