"""What the report shows of a trained model's attention, small enough to keep beside its run's summary.

A run's checkpoint (hundreds of MB for documents 002-004) stays out of the repository; its attention
record (a few KB of JSON, `reports/training/attention/<summary name>.json`) holds the fixed sentences below,
their tokens and the attention of the trained weights as every installed stack computes it:

    {"format": "rosetta-attention/1", "run", "model", "document", "trained_in", "steps", "split",
     "stacks": ["torch", "tf"],
     "sentences": [{"index": i, "source": [S tokens], "output": [L tokens],
                    "attention": {"torch": [[S numbers] x L], "tf": [...]}}]}

The sentences: the first SENTENCES of the run's final split (test; spa-eng: val) whose source has at most
MAX_SOURCE_TOKENS tokens. The output: greedy decoding by the stack that trained the weights (up to and
including `<eos>`). Every stack then runs the same weights teacher-forced on that output, so the matrices
of the two stacks have the same rows even where a near-tie would let their greedy decodings part; for a
causal decoder that teacher-forced attention is the greedy attention (tests/cross/test_attention_samples.py).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from shared import catalogue, stacks
from shared.data import corpora
from shared.io.atomic import write_atomic
from shared.train import evaluation, runs

FORMAT = "rosetta-attention/1"
SENTENCES = 2
MAX_SOURCE_TOKENS = 14  # the heatmap stays legible (document 003's plot_attention draws sentences of this size)
RECORDS_DIR = "attention"  # the records' folder inside a summaries folder
FRAMEWORKS = {"torch": "torch", "tf": "keras"}  # the module each stack needs


def has_decoder_attention(model: str) -> bool:
    """Whether the catalogue model decodes tokens with attention (what a record needs)."""
    spec = catalogue.get(model)
    return spec.interface == "seq2seq" and spec.has_attention


def installed_stacks() -> list[str]:
    """The stacks whose framework is importable here, torch first."""
    return [name for name in stacks.STACKS if importlib.util.find_spec(FRAMEWORKS[name]) is not None]


def pick_sentences(corpus, split: str) -> list[int]:
    """Indices of the first SENTENCES sources of `split` with at most MAX_SOURCE_TOKENS tokens."""
    sources = corpus.splits[split][0]
    picked = [index for index, source in enumerate(sources) if len(source) <= MAX_SOURCE_TOKENS][:SENTENCES]
    if not picked:
        raise ValueError(f"split {split!r} of {corpus.name} has no source of at most {MAX_SOURCE_TOKENS} tokens")
    return picked


def forced_attention(stack, model, name: str, src: np.ndarray, tokens: np.ndarray, sos_id: int) -> np.ndarray:
    """The attention `[L, S]` of the catalogue model `name` on one source `[1, S]` while its decoder is fed
    `<sos>` and then `tokens [L]` (teacher forcing on a given output: position t predicts tokens[t])."""
    tgt_in = np.concatenate([[sos_id], tokens[:-1]]).astype(np.int64)[None]  # [1, L]
    batch = {"src": src, "tgt_in": tgt_in}
    if catalogue.get(name).variable_length:
        batch["src_len"] = np.array([src.shape[1]])
    return stack.run(model, name, batch)["attention"][0]  # [L, S]


def record(run_dir, trained_in: str, with_stacks: list[str] | None = None) -> dict:
    """The attention record of the weights `trained_in` trained in `run_dir`, run by `with_stacks` (default:
    every installed stack)."""
    run_dir, with_stacks = Path(run_dir), with_stacks or installed_stacks()
    if trained_in not in with_stacks:
        raise ValueError(
            f"the attention record of {run_dir} decodes with the stack that trained it ({trained_in}): "
            f"install {FRAMEWORKS[trained_in]}"
        )
    stack, model, run, corpus = runs.load_trained(run_dir, trained_in)
    if not has_decoder_attention(run.model):
        raise ValueError(f"model {run.model!r} has no decoder attention to record")
    split = runs.final_split(corpus)
    indices = pick_sentences(corpus, split)
    sources, targets = ([side[index] for index in indices] for side in corpus.splits[split])
    batch = corpora.batches(sources, targets, len(indices), pad_id=corpus.pad_id)[0]  # data order: src [N, S], src_len [N]
    outputs = [ids for ids, _ in evaluation.decode(stack, model, run, corpus, batch["src"], batch["src_len"])]  # [L] each
    sources = [source.astype(np.int64)[None] for source in sources]  # [1, S] each
    models = {  # the trained stack's model, already loaded, serves its own attention too
        name: (stack, model) if name == trained_in else runs.load_trained(run_dir, trained_in, into=name)[:2]
        for name in with_stacks
    }
    attention = {
        name: [
            _shortest(forced_attention(*models[name], run.model, src, ids, corpus.sos_id))
            for src, ids in zip(sources, outputs, strict=True)
        ]
        for name in with_stacks
    }
    sentences = [
        {"index": index, "source": corpus.src_vocab.decode(src[0]), "output": corpus.tgt_vocab.decode(tokens),
         "attention": {name: matrices[number] for name, matrices in attention.items()}}
        for number, (index, src, tokens) in enumerate(zip(indices, sources, outputs, strict=True))
    ]  # fmt: skip
    return {
        "format": FORMAT, "run": run_dir.resolve().name, "model": run.model, "document": catalogue.get(run.model).document,
        "trained_in": trained_in, "steps": _steps(run_dir, trained_in), "split": split, "stacks": list(attention),
        "sentences": sentences,
    }  # fmt: skip


def _steps(run_dir: Path, stack: str) -> int:
    """The number of training steps the stack's loss log holds."""
    log = run_dir / stack / runs.LOSS_LOG
    return sum(1 for _ in log.open()) if log.is_file() else 0


def _shortest(array: np.ndarray) -> list[list[float]]:
    """The float32 values as the shortest decimals that read back to the same float32 (a few KB per record)."""
    return [[float(str(value)) for value in row] for row in np.asarray(array, dtype=np.float32)]


def write_record(run_dir, trained_in: str, path, with_stacks: list[str] | None = None) -> Path:
    """Write the attention record of `run_dir`'s `trained_in` weights to `path` (atomically); its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(record(run_dir, trained_in, with_stacks)) + "\n").encode())
    return path
