"""Evaluation of a trained model in either stack: the metrics of a split, greedy decoding and beam search (Hugging
Face's rules: the contract's `generate`), the documents' own ways of computing the figures they report
(shared.documents: `Reported`), and translation of a sentence (`rosetta translate`; a file: shared.train.translation).

The stack is passed in as its contract module (`run`, `greedy`, `generate`), so this module imports no framework.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from shared import catalogue, documents, stacks
from shared.core import teacher_forcing as schedules
from shared.data import corpora, parallel, readers
from shared.io.atomic import write_atomic
from shared.specs import RunConfig
from shared.train import metrics, runs

FINAL_BEAMS = 4  # a run's final evaluation: beam search's BLEU (bleu_beam) beside greedy's


def evaluate(stack, model, run: RunConfig, corpus: corpora.Corpus, split: str, limit: int | None = None,
             sampled: bool = False, beams: int | None = None, with_ids: bool = False) -> dict:  # fmt: skip
    """Metrics of one split (its first `limit` batches), in data order and eval mode (dropout off); `sampled`: `limit`
    batches of a seeded shuffle instead (one draw per run: a split in length order, spa-eng's, would otherwise give
    its shortest sentences; Keras's `validation_steps` on a shuffled `val_ds` sees random ones).

    loss, perplexity, token_accuracy: teacher-forced, mean over non-pad targets. sequence_accuracy:
    greedy decoding, every target token right. bleu (real data): greedy translations against the
    untokenized-to-<unk> references. document_loss / document_perplexity: the loss as the model's
    document computed the figure it reports (shared.documents), where it reports one. bleu_beam (`beams` > 1):
    BLEU of beam search over `beams` beams (the contract's `generate`, HF's defaults otherwise) beside greedy's.
    `with_ids`: also `ids`, each sentence's decoded tokens before `<eos>` ("greedy", and "beam" with `beams`).
    """
    order = np.random.default_rng([run.seed, 4]) if sampled and limit is not None else None
    batches = corpus.batches(split, run.batch_size, rng=order)[:limit]
    reported = documents.get(catalogue.get(run.model).document).reported
    protocol = reported.protocol if reported else None
    totals = dict.fromkeys(("nll", "tokens", "correct", "doc_nll", "doc_tokens"), 0.0)
    predictions, rows = [], []
    for index, batch in enumerate(batches):
        _add_loss(totals, stack, model, run, batch, None, "")
        if protocol:
            forcing = _eval_schedule(run, batch, protocol["teacher_force_ratio"], index)
            _add_loss(totals, stack, model, run, batch, forcing, "doc_", protocol["count_first_position"])
        tokens = greedy_tokens(stack, model, run, corpus, batch)
        predictions.append(tokens)
        rows += [metrics.strip_special(row, corpus.eos_id, corpus.pad_id) for row in tokens]
    loss = totals["nll"] / totals["tokens"]
    result = {"split": split, "sentences": sum(len(batch["src"]) for batch in batches), "loss": loss}
    result.update(perplexity=metrics.perplexity(loss), token_accuracy=totals["correct"] / totals["tokens"])
    right = [_rows_right(tokens, batch["tgt_out"], corpus.pad_id) for tokens, batch in zip(predictions, batches, strict=True)]
    result["sequence_accuracy"] = float(np.concatenate(right).mean())
    ids = {"greedy": rows}
    if corpus.references.get(split):
        result["bleu"] = _bleu(corpus, split, rows)
    if beams is not None and beams > 1:
        ids["beam"] = beam_translations(stack, model, run, corpus, split, batches, beams)
        result.update(beams=beams, bleu_beam=_bleu(corpus, split, ids["beam"]))
    if protocol:
        document_loss = totals["doc_nll"] / totals["doc_tokens"]
        result.update(document_loss=document_loss, document_perplexity=metrics.perplexity(document_loss))
    return result | ({"ids": ids} if with_ids else {})


def in_both_stacks(run_dir, trained_in: str, split: str | None = None, limit: int | None = None,
                   beams: int | None = FINAL_BEAMS) -> dict:  # fmt: skip
    """The checkpoint `trained_in` wrote, evaluated in each stack (torch first: import order): each stack's metrics
    (`evaluate`, greedy and beam BLEU), and per decoding the number of sentences whose ids both stacks decoded alike
    (`same_ids`; equal ids give equal BLEU). Written to `<run_dir>/<trained_in>/both_stacks.json`, which the
    reproduction table shows."""
    results, ids = {}, {}
    for stack_name in stacks.STACKS:
        stack, model, run, corpus = runs.load_trained(run_dir, trained_in, into=stack_name)
        split = split or runs.final_split(corpus)
        found = evaluate(stack, model, run, corpus, split, limit=limit, beams=beams, with_ids=True)
        ids[stack_name] = found.pop("ids")
        results[stack_name] = found | {"backend": stacks.import_module(stack_name, "train").backend()}
    first, second = ids.values()
    same = {kind: sum(a == b for a, b in zip(first[kind], second[kind], strict=True)) for kind in first}
    record = {"trained_in": trained_in, "split": split, "sentences": len(first["greedy"]), "beams": beams,
              "same_ids": same, "stacks": results}  # fmt: skip
    write_atomic(Path(run_dir) / trained_in / runs.BOTH_STACKS_FILE, (json.dumps(record, indent=2) + "\n").encode())
    return record


def _bleu(corpus: corpora.Corpus, split: str, rows: list[list[int]]) -> float:
    """sacreBLEU of decoded token rows (before `<eos>`, no pads) against the split's first references."""
    hypotheses = [corpus.tgt_vocab.decode(row) for row in rows]
    return metrics.bleu(hypotheses, corpus.references[split][: len(hypotheses)])


def beam_translations(stack, model, run: RunConfig, corpus: corpora.Corpus, split: str, batches: list[dict],
                      beams: int) -> list[list[int]]:  # fmt: skip
    """`batches`' beam-search translations, each row's tokens before `<eos>`. Sources are padded to one width (the
    lengths mask the pads): one compiled loop for every full batch where the stack compiles (Keras), not one per
    source length."""
    if not catalogue.get(run.model).variable_length:
        raise ValueError(f"--beams: model {run.model!r} has no beam search (it decodes one output token per input token)")
    if not corpus.references.get(split):
        raise ValueError(f"--beams: split {split!r} of corpus {corpus.name!r} has no references to score BLEU against")
    width, rows = max(batch["src"].shape[1] for batch in batches), []
    for batch in batches:
        src = np.pad(batch["src"], ((0, 0), (0, width - batch["src"].shape[1])), constant_values=corpus.pad_id)  # [B, S]
        batch = {"src": src, "src_len": batch["src_len"]}
        tokens = stack.generate(model, run.model, batch, max_len=run.max_len, num_beams=beams)["tokens"]  # [B, L]
        rows += [metrics.strip_special(row, corpus.eos_id, corpus.pad_id) for row in tokens]
    return rows


def final_beams(run: RunConfig, corpus: corpora.Corpus, split: str) -> int | None:
    """The beams of a run's final evaluation: FINAL_BEAMS where the model decodes token by token and the split has
    references (bleu_beam beside bleu in the run's summary), else None."""
    return FINAL_BEAMS if catalogue.get(run.model).variable_length and corpus.references.get(split) else None


def _rows_right(predictions: np.ndarray, targets: np.ndarray, pad_id: int) -> np.ndarray:
    """Per row: is every non-pad target token predicted (metrics.sequence_accuracy's alignment)?"""
    return np.array([metrics.sequence_accuracy(p[None], t[None], pad_id) for p, t in zip(predictions, targets, strict=True)])


def _eval_schedule(run: RunConfig, batch: dict, ratio: float, index: int) -> np.ndarray | None:
    if not catalogue.get(run.model).variable_length:
        return None
    return schedules.draw(ratio, batch["tgt_in"].shape[1] - 1, np.random.default_rng([run.seed, 3, index]))


def _add_loss(totals: dict, stack, model, run: RunConfig, batch: dict, forcing, prefix: str, count_first=False) -> None:
    """Add one batch's summed cross-entropy and its number of non-pad targets to `totals`.

    `count_first`: also count the document's position 0, whose logits are the zero row (log V each).
    """
    spec = catalogue.get(run.model)
    logits = stack.run(model, run.model, batch, teacher_forcing=forcing)["logits"].astype(np.float64)  # [B, T, V]
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))  # [B, T, V]
    targets = batch["tgt_out"]  # [B, T]
    valid = targets != spec.pad_id
    nll = -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]  # [B, T]
    totals[f"{prefix}nll"] += float(nll[valid].sum())
    totals[f"{prefix}tokens"] += int(valid.sum())
    if count_first:
        totals[f"{prefix}nll"] += len(targets) * math.log(logits.shape[-1])
        totals[f"{prefix}tokens"] += len(targets)
    if not prefix:
        totals["correct"] += int((logits.argmax(-1) == targets)[valid].sum())


def greedy_tokens(stack, model, run: RunConfig, corpus: corpora.Corpus, batch: dict) -> np.ndarray:
    """Greedy decoding `[B, L]`: the stack's `greedy` (documents 002-004), or for document 001's models,
    whose decoders take the whole target at once, one `run` per step on the tokens decoded so far."""
    if catalogue.get(run.model).variable_length:
        return stack.greedy(model, run.model, {"src": batch["src"], "src_len": batch["src_len"]}, max_len=run.max_len)["tokens"]
    return rerun_greedy(stack, model, run.model, batch["src"], batch["tgt_out"].shape[1], corpus.sos_id)[0]


def rerun_greedy(stack, model, name: str, src: np.ndarray, steps: int, sos_id: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Greedy decoding by re-running the teacher-forced decoder on its own outputs: tokens `[B, steps]` and
    the attention of the last run `[B, steps, S]` (None without attention). Exact for causal decoders: output t
    reads inputs 0..t alone. The input grows a token a run; where `run` compiles a program per shape
    (`stack.compiles_per_shape()`: Keras on JAX), every run takes all `steps` inputs, those not decoded yet `<sos>`:
    one program, not one per length: chosen because it is far faster on JAX (docs/measurements.md)."""
    tokens = np.full((len(src), steps + 1), sos_id, dtype=np.int64)  # [B, steps + 1]: <sos>, then the decoded ids
    fixed = stack.compiles_per_shape()
    for t in range(steps):
        outputs = stack.run(model, name, {"src": src, "tgt_in": tokens[:, : steps if fixed else t + 1]})
        tokens[:, t + 1] = outputs["logits"][:, t].argmax(-1)  # [B]
    return tokens[:, 1:], outputs.get("attention")


def encode_sentence(corpus: corpora.Corpus, sentence: str) -> tuple[np.ndarray, list[str]]:
    """Source ids `[1, S]` and their tokens, tokenized as the corpus was: spaCy (Multi30k, with `<sos>`
    and `<eos>`), the tutorial's preprocessing (spa-eng), the 2022 tutorial's `tf_lower_and_split_punct` and
    whitespace split (spa-eng 2022: unknown words become `[UNK]`), an own corpus's tokenizer (shared.data.parallel),
    or space-separated tokens (the reverse task)."""
    if not sentence.strip():
        raise ValueError("the sentence to translate is empty")
    if corpus.name == "multi30k":
        tokens = ["<sos>", *readers.tokenize(readers.spacy_tokenizers()[0], [sentence])[0], "<eos>"]
    elif corpus.name == "spa_eng":
        tokens = readers.preprocess_sentence(sentence).split()
    elif corpus.name == "spa_eng_2022":
        tokens = readers.standardize_2022(sentence).split()
    elif corpus.name == corpora.OWN_CORPUS:
        tokens = parallel.source_tokens(corpus, sentence)
    else:
        tokens = sentence.split()
    try:
        ids = corpus.src_vocab.encode(tokens)
    except ValueError as error:
        raise ValueError(f"cannot translate {sentence!r}: {error}") from None
    return np.array([ids], dtype=np.int64), tokens


def decode(stack, model, run: RunConfig, corpus: corpora.Corpus, src: np.ndarray, src_len=None, **options) -> list[tuple]:
    """Decoding of a batch of sources `[N, S]` (`src_len [N]` where padded), one `(ids [L], attention [L, S] or None)`
    per row: documents 002-004 up to and including `<eos>`, the reverse task one output token per source token (its
    sources have one length). `options`: Hugging Face's generation fields (num_beams, max_new_tokens...); greedy
    decoding (the contract's `greedy`, with its attention) unless one asks for more (the contract's `generate`)."""
    spec, searched = catalogue.get(run.model), {key: value for key, value in options.items() if value is not None}
    max_len = searched.pop("max_new_tokens", run.max_len)
    searched = {key: value for key, value in searched.items() if (key, value) != ("num_beams", 1)}
    if not spec.variable_length and (searched or max_len != run.max_len):
        given = ", ".join(sorted(key for key, value in options.items() if value is not None))
        raise ValueError(f"model {run.model!r} decodes one output token per input token: no beam search nor {given}")
    lengths = np.full(len(src), src.shape[1]) if src_len is None else src_len
    if searched:
        tokens, attention = (
            stack.generate(model, run.model, {"src": src, "src_len": lengths}, max_len, **searched)["tokens"],
            None,
        )
    elif spec.variable_length:
        decoded = stack.greedy(model, run.model, {"src": src, "src_len": lengths}, max_len=max_len)
        tokens, attention = decoded["tokens"], decoded["attention"]  # [N, L], [N, L, S]
    else:
        tokens, attention = rerun_greedy(stack, model, run.model, src, src.shape[1], corpus.sos_id)
    rows = []
    for row, ids in enumerate(tokens):
        length = list(ids).index(corpus.eos_id) + 1 if spec.variable_length and corpus.eos_id in ids else len(ids)
        rows.append((ids[:length], None if attention is None else attention[row, :length]))
    return rows


def check_length(run: RunConfig, source_tokens: list[str]) -> None:
    if not catalogue.get(run.model).variable_length and len(source_tokens) > run.max_len:
        raise ValueError(
            f"{len(source_tokens)} tokens: {run.model} decodes one output token per input token by re-running its "
            f"decoder (quadratic in the length), so at most {run.max_len} (the run's max_len)"
        )


def translate(run_dir, stack_name: str, sentence: str, heatmap=None, **options) -> dict:
    """Translation of one sentence with a run's checkpoint, greedy unless `options` (HF's generation fields, as
    `decode`) ask for beam search; with `heatmap`, its attention as a PNG (greedy decoding's).

    Returns the source and output tokens (up to and including `<eos>`) and the attention `[L, S]` (None: beam search).
    """
    if heatmap is not None and not Path(heatmap).parent.is_dir():
        raise ValueError(f"{heatmap}: its folder {Path(heatmap).parent} does not exist: create it first")
    stack, model, run, corpus = runs.load_trained(run_dir, stack_name)
    src, source_tokens = encode_sentence(corpus, sentence)
    check_length(run, source_tokens)
    [(tokens, attention)] = decode(stack, model, run, corpus, src, **options)
    output_tokens = corpus.tgt_vocab.decode(tokens)
    result = {"source": source_tokens, "output": output_tokens, "attention": attention}
    if heatmap is not None:
        if attention is None:
            raise ValueError(f"model {run.model!r} has no attention to draw here: greedy decoding's is drawn (--beams 1)")
        from shared.train.plots import attention_heatmap

        attention_heatmap(result["attention"], source_tokens, output_tokens, heatmap, title=f"{run.model} [{stack_name}]")
    return result
