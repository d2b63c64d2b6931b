"""`rosetta translate`'s flags and its file mode: a file of sentences translated in batches, greedy or with beam
search (Hugging Face's generation fields: shared.train.evaluation.decode), a progress bar on stderr, the output written
whole or not at all. shared/cli.py parses the flags; the rules are here."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from shared import catalogue
from shared.io.atomic import write_atomic
from shared.train import evaluation, runs

WIDTH_STEP = 8  # padded sources' widths, rounded up to a multiple: the lengths mask the pads
BATCH_SIZE = 32  # --input: sentences a batch
EARLY_STOPPING = {"true": True, "false": False, "never": "never"}  # HF's early_stopping values


def add_arguments(translate, number) -> None:
    """The file mode's and Hugging Face's generation flags of `rosetta translate`; `number(kind, low, above=False)`
    is the command line's checked number type (shared.cli)."""
    translate.add_argument("--input", metavar="FILE", help="translate this file instead of a sentence: UTF-8, one "
                           "sentence a line (an empty line is an error); needs --output")  # fmt: skip
    translate.add_argument("--output", metavar="FILE", help="one translation a line, the input's order, each as "
                           "`rosetta translate RUN SENTENCE` prints it; written whole or not at all")  # fmt: skip
    translate.add_argument("--batch-size", type=number(int, 1), default=BATCH_SIZE, help="--input: sentences a batch")
    translate.add_argument("--beams", type=number(int, 1), default=1, help="beam search over N beams, Hugging Face's "
                           "rules (default 1: greedy, the only one drawing a --heatmap)")  # fmt: skip
    translate.add_argument("--max-new-tokens", type=number(int, 1), help="at most N output tokens (default: the run's max_len)")
    translate.add_argument("--length-penalty", type=float, help="beam search: a hypothesis scores its log-probability "
                           "/ length**P (HF's default 1.0; above 1 favours longer outputs)")  # fmt: skip
    translate.add_argument("--no-repeat-ngram-size", type=number(int, 0), help="no n-gram of this size twice (0: off)")
    translate.add_argument("--early-stopping", choices=list(EARLY_STOPPING), help="beam search: stop once num_beams "
                           "hypotheses finished (true), when no better one can come (false, HF's default) or never")  # fmt: skip
    translate.add_argument("--repetition-penalty", type=number(float, 0.0, above=True), help="divide the logits of "
                           "tokens already generated (CTRL's penalty, HF's; 1.0: off)")  # fmt: skip


def options(args) -> dict:
    """The generation fields of `rosetta translate`'s flags, in Hugging Face's names (None: not given)."""
    early = None if args.early_stopping is None else EARLY_STOPPING[args.early_stopping]
    return {"num_beams": args.beams, "max_new_tokens": args.max_new_tokens, "length_penalty": args.length_penalty,
            "no_repeat_ngram_size": args.no_repeat_ngram_size, "early_stopping": early,
            "repetition_penalty": args.repetition_penalty}  # fmt: skip


def command(args) -> int:
    """`rosetta translate` with its parsed flags: a sentence printed, or --input translated into --output."""
    if args.input is None and args.output is None:
        if args.sentence is None:
            raise ValueError("rosetta translate takes a sentence, or --input FILE --output FILE")
        result = evaluation.translate(args.run_dir, args.stack, args.sentence, heatmap=args.heatmap, **options(args))
        print(" ".join(result["output"]))
        if args.heatmap:
            print(f"attention heatmap: {args.heatmap}", file=sys.stderr)
        return 0
    if args.input is None or args.output is None or args.sentence is not None or args.heatmap:
        raise ValueError("--input and --output go together, without a sentence or --heatmap")
    count = translate_file(args.run_dir, args.stack, args.input, args.output, args.batch_size, **options(args))
    print(f"rosetta translate: {count} sentences of {args.input} translated into {args.output}", file=sys.stderr)
    return 0


def read_sentences(path) -> list[str]:
    """The sentences of a UTF-8 file, one a line; a missing file, a bad byte or an empty line is one error naming
    the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (one sentence a line, UTF-8)")
    blob = path.read_bytes()
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as error:
        line = blob[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 ({error.reason})") from None
    lines = read_sentences_of_text(text)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise ValueError(f"{path}, line {number}: empty line (one sentence a line; remove it, or the output's lines "
                             "would not pair with the input's)")  # fmt: skip
    if not lines:
        raise ValueError(f"{path}: no sentence to translate")
    return lines


def read_sentences_of_text(text: str) -> list[str]:
    """A file's lines: split at newlines alone (a sentence may hold U+2028 or a form feed), a CR before one dropped."""
    return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []


def translate_file(run_dir, stack_name: str, source, output, batch_size: int = BATCH_SIZE, progress: bool = True,
                   **options) -> int:  # fmt: skip
    """Translate `source` (one sentence a line) into `output`, one translation a line in the same order (each line as
    `rosetta translate` prints that sentence's), `batch_size` sentences a batch; `output` is written whole or not at
    all. A progress bar on stderr: tqdm where installed, else a counter. Returns the number of sentences."""
    if not Path(output).parent.is_dir():
        raise ValueError(f"{output}: its folder {Path(output).parent} does not exist: create it first")
    sentences = read_sentences(source)
    stack, model, run, corpus = runs.load_trained(run_dir, stack_name)
    encoded = []
    for number, sentence in enumerate(sentences, 1):
        try:
            encoded.append(evaluation.encode_sentence(corpus, sentence)[0][0])
            evaluation.check_length(run, encoded[-1])
        except ValueError as error:
            raise ValueError(f"{source}, line {number}: {error}") from None
    translations, bar = [""] * len(sentences), _Progress(len(sentences), progress)
    padded = catalogue.get(run.model).variable_length
    for rows in _batches(encoded, batch_size, padded):
        lengths = np.array([len(encoded[row]) for row in rows])
        width = -(-lengths.max() // WIDTH_STEP) * WIDTH_STEP if padded else lengths.max()  # Keras: a compile a width
        src = np.full((len(rows), width), corpus.pad_id, dtype=np.int64)  # [N, S]
        for i, row in enumerate(rows):
            src[i, : lengths[i]] = encoded[row]
        for row, (tokens, _) in zip(rows, evaluation.decode(stack, model, run, corpus, src, lengths, **options), strict=True):
            translations[row] = " ".join(corpus.tgt_vocab.decode(tokens))
        bar.update(len(rows))
    bar.close()
    write_atomic(output, "".join(f"{line}\n" for line in translations).encode())
    return len(sentences)


def _batches(encoded: list, batch_size: int, padded: bool) -> list[list[int]]:
    """Row indices a batch, by source length (less padding); sources of one length a batch where the model takes no
    padding (the reverse task)."""
    order, batches = sorted(range(len(encoded)), key=lambda row: len(encoded[row])), []
    for row in order:
        if batches and len(batches[-1]) < batch_size and (padded or len(encoded[batches[-1][0]]) == len(encoded[row])):
            batches[-1].append(row)
        else:
            batches.append([row])
    return batches


class _Progress:
    """Sentences translated, on stderr: tqdm where installed, else a line a batch."""

    def __init__(self, total: int, enabled: bool):
        self.bar, self.total, self.done, self.enabled = None, total, 0, enabled
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="sentence", desc="translate", file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        elif self.enabled:
            print(f"translate: {self.done}/{self.total} sentences", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
