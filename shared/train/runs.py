"""A training run is a folder; this module creates it, reads it back and loads what it trained.

`create_run` writes what both stacks share: `run.json` (model, config, training spec, data, and the fingerprints of
the corpus it was built from, which every later use checks: `check_corpus`), `corpus/` (token ids and both
vocabularies, so a checkpoint can be used later without the data or spaCy) and, once the first stack starts,
`initial.safetensors` (both stacks start from those weights). Each stack then writes its own subfolder
(shared/train/runner.py):

    <stack>/checkpoint.safetensors   canonical weights (metadata: step, vocabulary fingerprints)
    <stack>/checkpoint.pt | checkpoint.weights.h5   the same weights in the stack's own format
    <stack>/loss.jsonl               one JSON line per step: step, epoch, loss, grad_norm, seconds
    <stack>/evals.jsonl              one line per epoch: the validation metrics
    <stack>/eval.json                the final metrics on the test split
    <stack>/both_stacks.json         the checkpoint evaluated in each stack, their ids compared (rosetta evaluate
                                     --both-stacks: shared.train.evaluation.in_both_stacks)
    <stack>/attention.json           the trained weights' attention on a few test sentences, run by this stack
                                     (shared.train.attention_samples: the report's figure when the checkpoint is gone)
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from shared import catalogue, data, documents, stacks
from shared.core import optimizer_state, validation
from shared.data import corpora, parallel_options
from shared.failures import shown
from shared.io import locks, safetensors_io
from shared.io.atomic import write_atomic
from shared.specs import RunConfig

RUN_FILE, INITIAL_FILE, CORPUS_DIR = "run.json", "initial.safetensors", "corpus"
CHECKPOINT, LOSS_LOG, EVAL_LOG, EVAL_FILE = "checkpoint.safetensors", "loss.jsonl", "evals.jsonl", "eval.json"
ATTENTION_FILE, BOTH_STACKS_FILE = "attention.json", "both_stacks.json"
# run.json's fingerprints and the file of the run's corpus/ each one is of (shared.specs.RunConfig.fingerprints)
FINGERPRINT_FILES = {"corpus": corpora.CORPUS_FILE, "src_vocab": corpora.SRC_VOCAB_FILE, "tgt_vocab": corpora.TGT_VOCAB_FILE}


def read_json_lines(path: Path, numbers: tuple[str, ...] = ()) -> list[dict]:
    """The records of a `.jsonl` log (`loss.jsonl`, `evals.jsonl`); none when the file is not there. A torn
    last line (the writer killed mid-line: no newline after it) is dropped; any other bad line, or a record whose
    fields `numbers` are not numbers, is an error naming the file and line."""
    if not path.is_file():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 JSON-lines log") from None
    lines, records = text.splitlines(), []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):
                break  # torn: the next write (a resume cuts the log back to its checkpoint) drops it
            raise ValueError(f"{path}, line {number}: not a JSON record ({error.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: not a JSON object")
        for key in numbers:
            if type(record.get(key)) not in (int, float):
                raise ValueError(f"{path}, line {number}: its field {key!r} must be a number, got {shown(record.get(key))}")
        records.append(record)
    return records


def read_json(path: Path):
    """A JSON file a run wrote (`eval.json`); one ValueError naming it when it is not JSON."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a JSON file ({getattr(error, 'msg', 'not UTF-8')}); delete it to write it again") from None


@contextlib.contextmanager
def run_folder(run_dir) -> Iterator[None]:
    """`run_dir` made if missing and held by this process for the block (shared.io.locks: a second `rosetta
    train` there is refused, naming this one's pid); a folder this made and left empty is removed again."""
    run_dir = Path(run_dir)
    made = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with locks.folder_lock(run_dir, "a training run"):
            yield
    finally:
        if made and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()


class RunError(ValueError):
    """A run that cannot go on: diverged, or a folder that holds something else."""


def document_defaults(model: str) -> dict:
    """The batch size, epochs, TrainSpec, epoch size, validation batches and patience `model` trains with: its own
    recipe, else its document's (shared.documents.training_for_model)."""
    training = documents.training_for_model(model)
    if training is None:
        document = catalogue.get(model).document
        raise ValueError(f"model {model!r} (document {document}) has no training data: document {document} trains nothing")
    recipe = {"batch_size": training.batch_size, "epochs": training.epochs, "spec": training.spec}
    extras = {"steps_per_epoch": training.steps_per_epoch, "eval_batches": training.eval_batches, "patience": training.patience}
    return {**recipe, **{key: value for key, value in extras.items() if value is not None}}


def create_run(run_dir, model: str, data_dir=None, overrides: dict | None = None, corpus_options: dict | None = None,
               dataset: str | None = None, progress: bool = False, **settings) -> RunConfig:  # fmt: skip
    """Prepare `run_dir` for training `model`: the corpus (read once, saved with the run) and run.json.

    `dataset`: the model's own (None), or `corpora.OWN_CORPUS` with `corpus_options` naming the folder and languages
    (`path`, `langs`; shared.data.parallel), laid out with the model's special tokens. `progress`: an own corpus's
    progress bar. An existing run.json must describe the same run (then this returns it): a folder never holds two runs.
    """
    run_dir, defaults = Path(run_dir), document_defaults(model)
    dataset = dataset or documents.dataset_for_model(model)
    if dataset == corpora.OWN_CORPUS:  # the specials of this model's catalogue entry (a model of no real data: refused)
        corpus_options = {**(corpus_options or {}), **parallel_options.layout(model)}
    cache = run_dir / CORPUS_DIR
    saved = (cache / corpora.CORPUS_FILE).is_file()
    corpus = data.load_corpus(dataset, data_dir, cache_dir=cache if saved else None, progress=progress, **(corpus_options or {}))
    sizes = {**corpus.vocab_overrides(model), **(overrides or {})}
    config = catalogue.resolve_config(catalogue.get(model), settings.get("dtype", "float32"), sizes)
    run = RunConfig(model=model, dataset=dataset, config=config, corpus_options=corpus.options, **{**defaults, **settings},
                    fingerprints=fingerprints(corpus))  # fmt: skip
    existing = run_dir / RUN_FILE
    if existing.is_file():
        before = load_run(run_dir)
        if before != run:
            raise RunError(f"{run_dir} already holds another run ({existing}); choose another --run-dir or delete it")
        check_corpus(run_dir, before, corpus, note=False, now=run.fingerprints)
        return before
    if not saved:  # only now: a request refused above leaves no folder behind
        corpus.save(cache)
    write_atomic(existing, (json.dumps(run.to_json(), indent=2) + "\n").encode())
    return run


def load_run(run_dir) -> RunConfig:
    """The RunConfig saved in `run_dir`; a missing or corrupt run.json raises ValueError."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        raise ValueError(f"{run_dir} is not a training run: it has no {RUN_FILE} (start one with `rosetta train`)")
    try:
        return RunConfig.from_json(json.loads(path.read_text()), str(path))
    except (json.JSONDecodeError, TypeError, KeyError) as error:
        raise ValueError(f"{path} is corrupt: {error}") from None


def final_split(corpus: corpora.Corpus) -> str:
    """The split of the final evaluation: "test", or "val" where the data has no test split (spa-eng)."""
    return "test" if "test" in corpus.splits else "val"


def load_corpus(run_dir: Path) -> corpora.Corpus:
    return corpora.Corpus.load(run_dir / CORPUS_DIR)


def fingerprints(corpus: corpora.Corpus) -> dict[str, str]:
    """What run.json records of the corpus a run is built from (FINGERPRINT_FILES: the key of each)."""
    return {"corpus": corpus.fingerprint(), "src_vocab": corpus.src_vocab.fingerprint, "tgt_vocab": corpus.tgt_vocab.fingerprint}


def check_corpus(run_dir, run: RunConfig, corpus: corpora.Corpus, note: bool = True, now: dict | None = None) -> None:
    """Refuse a run folder whose `corpus/` is not the one its run.json was built from (another run's copied in, a file
    edited): one RunError naming each file that differs, before anything is trained or written. A run.json of an older
    version records none: with `note`, a line on stderr says the corpus goes unchecked (a checkpoint's vocabularies
    are still checked: check_checkpoint). `now`: the corpus's fingerprints where the caller has them (each hashes
    every token id)."""
    run_dir = Path(run_dir)
    if not run.fingerprints:
        if note:
            print(f"note: {run_dir / RUN_FILE} records no fingerprints of its corpus (an older version wrote it): "
                  f"{run_dir / CORPUS_DIR} is checked against the checkpoints' vocabularies only", file=sys.stderr)  # fmt: skip
        return
    now = now or fingerprints(corpus)
    recorded = {key: str(run.fingerprints.get(key)) for key in now}
    changed = [f"{FINGERPRINT_FILES[key]} has fingerprint {now[key][:12]} where run.json has {recorded[key][:12]}"
               for key in now if recorded[key] != now[key]]  # fmt: skip
    if changed:
        raise RunError(
            f"{run_dir / CORPUS_DIR} is not the corpus {run_dir / RUN_FILE} was built from: {'; '.join(changed)}; it was "
            "replaced or edited: put the run's own corpus back, or start a new run in another --run-dir"
        )


_WHAT = {"count": "a whole number", "json": "JSON"}  # what a checkpoint's metadata field of each kind must be


def checkpoint_field(path, metadata: dict, key: str, kind: str):
    """A checkpoint's metadata field `key` (text), parsed as `kind` ("count": a whole number, or "json"); a missing or
    malformed one raises one ValueError naming the file and the field (a hand-edited `"step": "two"`)."""
    if key not in metadata:
        raise ValueError(f'{path}: metadata "{key}" is missing (not a checkpoint `rosetta train` wrote?)')
    text = metadata[key]
    if isinstance(text, str) and (kind == "json" or (text.isascii() and text.isdigit())):
        try:
            return int(text) if kind == "count" else json.loads(text)
        except json.JSONDecodeError:
            pass
    raise ValueError(f'{path}: metadata "{key}" must be {_WHAT[kind]}, got {shown(text)}')


def check_checkpoint(path, metadata: dict, run: RunConfig, corpus: corpora.Corpus, run_dir) -> None:
    """Refuse a canonical checkpoint of another vocabulary, model or config than the run's (ValueError)."""
    for side, vocab in (("src", corpus.src_vocab), ("tgt", corpus.tgt_vocab)):
        if metadata.get(f"{side}_vocab") != vocab.fingerprint:
            raise ValueError(
                f"{path} was trained with another {side} vocabulary than {Path(run_dir) / CORPUS_DIR} "
                f"(fingerprint {str(metadata.get(f'{side}_vocab'))[:12]} vs {vocab.fingerprint[:12]})"
            )
    if metadata.get("model") != run.model or checkpoint_field(path, metadata, "config", "json") != run.config:
        raise ValueError(f"{path} holds model {metadata.get('model')!r} with another config than {Path(run_dir) / RUN_FILE}")


def load_trained(run_dir, stack_name: str, into: str | None = None):
    """(stack, model, run, corpus) from the canonical checkpoint `stack_name` trained, built in the stack `into`
    (default: the same), after checking it fits the run's vocabularies and config (a checkpoint of another run
    or vocabulary raises ValueError)."""
    run_dir, run = Path(run_dir), load_run(run_dir)
    corpus = load_corpus(run_dir)
    check_corpus(run_dir, run, corpus, note=False)
    path = run_dir / stack_name / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"{run_dir} has no {stack_name} checkpoint ({path}): train it first")
    weights, metadata = safetensors_io.load(path)
    check_checkpoint(path, metadata, run, corpus, run_dir)
    shapes = {key: array.shape for key, array in weights.items()}  # a hand-edited run.json's sizes: never built
    validation.check_config_fits(catalogue.get(run.model), run.config, shapes, f'{run_dir / RUN_FILE}: its "config"')
    stack = stacks.import_stack(into or stack_name)
    model = stack.build(run.model, run.dtype, **run.config)
    stack.set_weights(model, optimizer_state.weights_without_optimizer(weights))
    return stack, model, run, corpus
