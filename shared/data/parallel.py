"""Your own parallel corpus (`rosetta train MODEL --corpus DIR --langs SRC,TGT`): a folder of sentence-aligned text
files, read once, streaming, into a `Corpus` named "corpus" that any catalogue model of real data trains on. Its
options, the files of its folder and the check of a saved copy: shared.data.parallel_options; a file read as lines:
shared.data.text_files.

Each file is UTF-8, one sentence per line, line i of one side the translation of line i of the other; an empty line
is an error naming its file and line (the two sides would no longer pair up if it were dropped from one), as are
unequal line counts.

Tokens: spaCy's rule-based tokenizer of each language (`spacy.blank(lang)`, no download; whitespace tokens
dropped) or a split on whitespace; lowercased unless asked not to. Each side's vocabulary is built from the train
split as torchtext's `build_vocab` builds it (shared.data.vocab: specials first, then descending frequency, ties
alphabetical, `min_freq`, and `max_vocab` counting the specials too), with the four special tokens laid out as the
model's catalogue entry expects (`parallel_options.layout`). Both sides are wrapped in sos ... eos, as every reader
of shared.data.readers does.

Memory: the train split is encoded while it is read, to provisional ids (the order tokens are first seen) in one
int32 array per side; once the vocabulary is known a lookup table turns them into the final ids in place. So a
corpus costs about 4 bytes a token and 8 a sentence, never a Python object per token or sentence.
"""

from __future__ import annotations

import itertools
import sys
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from shared.core import moved
from shared.data import parallel_options, text_files
from shared.data.corpora import OWN_CORPUS, Corpus, Sequences
from shared.data.vocab import Vocab

_INT32, _INT64 = (next(code for code in codes if array(code).itemsize == size) for codes, size in (("il", 4), ("lq", 8)))
_CHUNK_IDS = 1 << 22  # ids counted or remapped at a time (bounds numpy's temporaries)


# ---------------------------------------------------------------- tokens


def tokenizer(kind: str, lang: str, lowercase: bool) -> Callable[[str], list[str]]:
    """A function from a stripped, non-empty line to its tokens (at least one)."""
    if kind == "whitespace":
        return (lambda line: line.lower().split()) if lowercase else str.split
    try:
        import spacy
    except ImportError:
        raise ValueError(
            "--tokenizer spacy needs spaCy: pip install 'seq2seq-rosetta[data]', or pass --tokenizer whitespace"
        ) from None
    try:
        split = spacy.blank(lang).tokenizer
    except Exception as error:  # spaCy's own errors (E048 unknown language, a language's missing dependency)
        raise ValueError(
            f"spaCy has no tokenizer for language {lang!r} ({str(error).splitlines()[0][:200]}): name languages by "
            "spaCy's codes (de, en, fr, ...) in --langs, or pass --tokenizer whitespace"
        ) from None
    if lowercase:
        return lambda line: [token.text.lower() for token in split(line) if not token.is_space]
    return lambda line: [token.text for token in split(line) if not token.is_space]


def source_tokens(corpus: Corpus, sentence: str) -> list[str]:
    """A sentence to translate, tokenized as the corpus's sources were, wrapped in its sos ... eos tokens."""
    options, vocab = corpus.options, corpus.src_vocab
    tokens = tokenizer(options["tokenizer"], options["langs"][0], options["lowercase"])(sentence.strip())
    return [vocab.itos[corpus.sos_id], *tokens, vocab.itos[corpus.eos_id]]


# ---------------------------------------------------------------- reading


def _provisional(lexicon: dict[str, int]) -> Callable[[list[str]], list[int]]:
    """Tokens -> ids in the order tokens are first seen (a new token gets the next id)."""
    get, add = lexicon.get, lexicon.setdefault

    def encode(tokens: list[str]) -> list[int]:
        ids = [get(token, -1) for token in tokens]
        return [add(token, len(lexicon)) for token in tokens] if -1 in ids else ids

    return encode


def _final(vocab: Vocab) -> Callable[[list[str]], list[int]]:
    get, unk = vocab.stoi.get, vocab.unk_id
    return lambda tokens: [get(token, unk) for token in tokens]


class _Reader:
    """One corpus folder read split by split: both sides of a split in lockstep, encoded as they are read."""

    def __init__(self, options: dict, files: dict[str, tuple[Path, Path]], progress: bool):
        self.options, self.files = options, files
        self.tokenize = [tokenizer(options["tokenizer"], lang, options["lowercase"]) for lang in options["langs"]]
        total = sum(path.stat().st_size for paths in files.values() for path in paths)
        self.progress = text_files.ReadProgress(total, progress, f"reading {options['path']}")
        self.fingerprints: dict[str, list[dict]] = {}
        self.sos, self.eos = options["special_ids"]["sos_id"], options["special_ids"]["eos_id"]

    def split(self, split: str, encoders, references: list | None) -> tuple[Sequences, Sequences]:
        """Both sides of `split` as Sequences (sos + ids + eos); the target tokens appended to `references`."""
        paths = self.files[split]
        counted = [text_files.CountedFile(path, self.progress) for path in paths]
        try:
            lines = [text_files.read_lines(path, stream) for path, stream in zip(paths, counted, strict=True)]
            (src_ids, tgt_ids), (src_offsets, tgt_offsets) = ids, offsets = (
                (array(_INT32), array(_INT32)),
                (array(_INT64, [0]), array(_INT64, [0])),
            )
            (tokenize_src, tokenize_tgt), (encode_src, encode_tgt) = self.tokenize, encoders
            keep, sos, eos, number = None if references is None else references.append, self.sos, self.eos, 0
            for number, (src_text, tgt_text) in enumerate(itertools.zip_longest(*lines), start=1):  # the hot loop
                if not (src_text and tgt_text):
                    self._bad_pair(split, lines, number, (src_text, tgt_text))
                src_tokens, tgt_tokens = tokenize_src(src_text), tokenize_tgt(tgt_text)
                src_ids.append(sos)
                src_ids.extend(encode_src(src_tokens))
                src_ids.append(eos)
                src_offsets.append(len(src_ids))
                tgt_ids.append(sos)
                tgt_ids.extend(encode_tgt(tgt_tokens))
                tgt_ids.append(eos)
                tgt_offsets.append(len(tgt_ids))
                if keep is not None:
                    keep(tgt_tokens)
            if not number:
                raise ValueError(f"{paths[0]} and {paths[1]} are empty: the {split} split needs sentence pairs")
        finally:
            for stream in counted:
                stream.close()
        self.fingerprints[split] = [{"file": path.name, "bytes": stream.size, "sha256": stream.digest.hexdigest()}
                                    for path, stream in zip(paths, counted, strict=True)]  # fmt: skip
        return tuple(_as_sequences(side_ids, side_offsets) for side_ids, side_offsets in zip(ids, offsets, strict=True))

    def _bad_pair(self, split: str, lines: list[Iterator[str]], number: int, pair: tuple) -> None:
        """Raise for line `number` of `split`: one side has ended before the other (unequal line counts, the longer
        side counted to its end), or a line is empty."""
        paths = self.files[split]
        if None in pair:
            longer = 0 if pair[0] is not None else 1
            counts = [number - 1, number - 1]
            counts[longer] += 1 + sum(1 for _ in lines[longer])
            raise ValueError(
                f"{paths[0]} has {counts[0]} lines but {paths[1]} has {counts[1]}: the two sides of the {split} split "
                "must pair up line by line"
            )
        side = 0 if not pair[0] else 1
        raise ValueError(
            f"{paths[side]}, line {number}: empty line; every line holds one sentence (delete the pair: line {number} "
            f"of both {paths[0].name} and {paths[1].name})"
        )


def _as_sequences(ids: array, offsets: array) -> Sequences:
    return Sequences(np.frombuffer(ids, dtype=np.int32), np.frombuffer(offsets, dtype=np.int64))


def _vocab(lexicon: dict[str, int], train: Sequences, options: dict, side: str) -> tuple[Vocab, np.ndarray]:
    """The vocabulary of one side (torchtext's build_vocab order over the train split's counts) and the table from
    the provisional ids of `lexicon` to its ids."""
    specials, unk = options["specials"], options["special_ids"]["unk_id"]
    counts = np.zeros(len(lexicon), dtype=np.int64)
    for start in range(0, len(train.ids), _CHUNK_IDS):  # in chunks: bincount copies its input to int64
        counts += np.bincount(train.ids[start : start + _CHUNK_IDS], minlength=len(lexicon))
    tokens = list(lexicon)  # in provisional-id order; the specials are ids 0..3 in both
    kept = np.flatnonzero(counts >= options["min_freq"])
    kept = kept[kept >= len(specials)].tolist()  # a special's count (sos, eos, the literal token) is no word's
    count_of = counts.tolist()
    ranked = sorted(kept, key=lambda index: (-count_of[index], tokens[index]))  # descending count, ties alphabetical
    if options["max_vocab"] is not None:
        ranked = ranked[: options["max_vocab"] - len(specials)]
    if not ranked:
        most = max(count_of[len(specials) :], default=0)
        raise ValueError(
            f"--min-freq {options['min_freq']} leaves no word in the {side} vocabulary: the most frequent token of the "
            f"train split is seen {most} times"
        )
    remap = np.full(len(lexicon), unk, dtype=np.int32)
    remap[: len(specials)] = np.arange(len(specials))
    remap[ranked] = np.arange(len(specials), len(specials) + len(ranked))
    vocab = Vocab([*specials, *(tokens[index] for index in ranked)], specials, specials[unk])
    return vocab, remap


def _remap_in_place(ids: np.ndarray, table: np.ndarray) -> None:
    for start in range(0, len(ids), _CHUNK_IDS):
        part = ids[start : start + _CHUNK_IDS]
        part[...] = table[part]


def read_corpus(progress: bool = False, **options) -> Corpus:
    """The own corpus of `options` (load_corpus's, see parallel_options.OPTIONS; `normalize` checks them), read once.

    `progress`: a progress bar (tqdm, else a line every 10%) over the bytes of the files, and a summary line,
    on stderr. `options["files"]` of the result records each file's name, size and sha256.
    """
    options = parallel_options.normalize(options)
    files = parallel_options.find_files(options["path"], options["langs"])
    reader = _Reader(options, files, progress)
    try:
        lexicons = [{token: index for index, token in enumerate(options["specials"])} for _ in range(2)]
        train = reader.split("train", [_provisional(lexicon) for lexicon in lexicons], None)
        vocabs = []
        for side, (lexicon, sequences) in enumerate(zip(lexicons, train, strict=True)):
            vocab, table = _vocab(lexicon, sequences, options, options["langs"][side])
            _remap_in_place(sequences.ids, table)
            vocabs.append(vocab)
        del lexicons
        splits, references = {"train": train}, {}
        for split in files:
            if split != "train":
                references[split] = []
                splits[split] = reader.split(split, [_final(vocab) for vocab in vocabs], references[split])
    finally:
        reader.progress.close()
    corpus = Corpus(OWN_CORPUS, vocabs[0], vocabs[1], dict(options["special_ids"]), splits, references,
                    options={**options, "files": reader.fingerprints})  # fmt: skip
    if progress:
        print(summary(corpus), file=sys.stderr, flush=True)
    return corpus


def summary(corpus: Corpus) -> str:
    """One line: the pairs of each split, the vocabulary sizes, and how many validation tokens are unknown."""
    pairs = ", ".join(f"{split} {len(src):,}" for split, (src, _) in corpus.splits.items())
    unknown = []
    for side, sequences in zip(("src", "tgt"), corpus.splits["val"], strict=True):
        inner = sequences.ids.size - 2 * len(sequences)  # without sos and eos
        unknown.append(f"{side} {100 * np.count_nonzero(sequences.ids == corpus.special_ids['unk_id']) / max(inner, 1):.1f}%")
    sizes = f"{len(corpus.src_vocab):,} / {len(corpus.tgt_vocab):,}"
    return f"corpus {corpus.options['path']}: pairs {pairs}; vocabularies {sizes} tokens; unknown in val: {', '.join(unknown)}"


__getattr__ = moved.getattr_for(__name__)  # the names moved to parallel_options.py and text_files.py warn
