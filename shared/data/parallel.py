"""Your own parallel corpus (`rosetta train MODEL --corpus DIR --langs SRC,TGT`): a folder of sentence-aligned text
files, read once, streaming, into a `Corpus` named "corpus" that any catalogue model of real data trains on.

The folder holds `train.SRC` and `train.TGT`, a validation split `valid.*` (or `val.*`, `dev.*`) and optionally
`test.*` (without one the final evaluation uses the validation split, as `runs.final_split` does), each plain text
or `.gz`, UTF-8, one sentence per line, line i of one side the translation of line i of the other. Lines end as most
of the file's first chunk's do (LF, CRLF, or an old Mac's CR) and are stripped; an empty line is an error naming its file and
line (the two sides would no longer pair up if it were dropped from one), as are unequal line counts, a line longer
than MAX_LINE_BYTES (raised by $ROSETTA_MAX_LINE_BYTES), bytes that are not UTF-8 (a UTF-16 or UTF-32 file named as
such) and a corrupt or truncated `.gz`.

Tokens: spaCy's rule-based tokenizer of each language (`spacy.blank(lang)`, no download; whitespace tokens
dropped) or a split on whitespace; lowercased unless asked not to. Each side's vocabulary is built from the train
split as torchtext's `build_vocab` builds it (shared.data.vocab: specials first, then descending frequency, ties
alphabetical, `min_freq`, and `max_vocab` counting the specials too), with the four special tokens laid out as the
model's catalogue entry expects (`layout`): its pad, sos and eos ids, `<unk>` in the remaining slot of 0..3, named
as its document's data named them (torchtext's `<unk> <pad> <sos> <eos>`, the 2022 TensorFlow tutorial's
`'' [UNK] [START] [END]`, ...). Both sides are wrapped in sos ... eos, as every reader of shared.data.readers does.

Memory: the train split is encoded while it is read, to provisional ids (the order tokens are first seen) in one
int32 array per side; once the vocabulary is known a lookup table turns them into the final ids in place. So a
corpus costs about 4 bytes a token and 8 a sentence, never a Python object per token or sentence.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import itertools
import re
import sys
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from shared import catalogue, documents
from shared.data.corpora import OWN_CORPUS, Corpus, Sequences, check_count, trains_on_text
from shared.data.vocab import Vocab
from shared.failures import limit_from_environment

SPLIT_STEMS = {"train": ("train",), "val": ("valid", "val", "dev"), "test": ("test",)}  # split -> file stems
TOKENIZERS = ("spacy", "whitespace")
# the special tokens of each document's data (shared.data.readers), by role: the layout a model of that data expects
SPECIAL_NAMES = {
    "multi30k": {"unk": "<unk>", "pad": "<pad>", "sos": "<sos>", "eos": "<eos>"},  # torchtext (documents 002/003)
    "spa_eng": {"pad": "<pad>", "sos": "<start>", "eos": "<end>", "unk": "<unk>"},  # Keras Tokenizer (document 004)
    "spa_eng_2022": {"pad": "", "unk": "[UNK]", "sos": "[START]", "eos": "[END]"},  # TextVectorization (2022 tutorial)
}
ROLES = ("pad", "sos", "eos", "unk")
# load_corpus's options for an own corpus and their defaults (path, langs and the layout have none)
OPTIONS = {"path": None, "langs": None, "tokenizer": "spacy", "lowercase": True, "min_freq": 2, "max_vocab": None,
           "specials": None, "special_ids": None}  # fmt: skip
_LANG = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
_INT32, _INT64 = (next(code for code in codes if array(code).itemsize == size) for codes, size in (("il", 4), ("lq", 8)))
_CHUNK = 1 << 20  # bytes read at a time
_CHUNK_IDS = 1 << 22  # ids counted or remapped at a time (bounds numpy's temporaries)
# A line holds one sentence, which a model trains as one sequence: the limit is far above any sentence (some ten
# thousand words), so a longer line is a file that is not one sentence a line (a document a line, a binary file),
# refused before its tokens cost memory; a user who means such lines raises it ($ROSETTA_MAX_LINE_BYTES).
MAX_LINE_BYTES, MAX_LINE_VARIABLE = 1 << 16, "ROSETTA_MAX_LINE_BYTES"
_BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
                     (codecs.BOM_UTF16_BE, "utf-16"))  # fmt: skip
_SAMPLE = 4096  # the first bytes of a file looked at for UTF-16/32 without a byte-order mark


# ---------------------------------------------------------------- what the user asks for


def parse_langs(text) -> list[str]:
    """`"de,en"` -> `["de", "en"]`: two different language codes (file suffixes: letters, digits, `_`, `-`)."""
    langs = text.split(",") if isinstance(text, str) else list(text) if isinstance(text, (list, tuple)) else None
    if langs is None or len(langs) != 2 or not all(isinstance(lang, str) and _LANG.fullmatch(lang.strip()) for lang in langs):
        raise ValueError(
            f"--langs takes two language codes SRC,TGT, the suffixes of the corpus files (e.g. de,en for "
            f"train.de and train.en), got {text!r}"
        )
    langs = [lang.strip() for lang in langs]
    if langs[0] == langs[1]:
        raise ValueError(f"--langs names {langs[0]!r} twice: the source and target files need different suffixes")
    return langs


def layout(model: str) -> dict:
    """The special tokens `model` expects, as load_corpus's options: `specials` (the tokens of ids 0..3) and
    `special_ids` (pad, sos, eos from its catalogue entry, unk in the slot left). Refuses a model that trains on no
    sentence pairs (the reverse task, the attention layer alone)."""
    if not trains_on_text(model):
        what = documents.dataset_for_model(model)
        text_models = ", ".join(name for name in catalogue.CATALOGUE if trains_on_text(name))
        raise ValueError(
            f"model {model!r} trains on {'no data' if what is None else f'the synthetic {what} task'}, not on sentence "
            f"pairs: --corpus trains the models of real data ({text_models})"
        )
    spec = catalogue.get(model)
    ids = {"pad": spec.pad_id, "sos": spec.sos_id, "eos": spec.eos_id}
    free = sorted(set(range(len(ROLES))) - set(ids.values()))
    if len(free) != 1:
        raise ValueError(f"model {model!r}: its pad, sos and eos ids {ids} are not three of 0..3")
    ids["unk"] = free[0]
    names = SPECIAL_NAMES[documents.dataset_for_model(model)]
    specials = [""] * len(ROLES)
    for role, index in ids.items():
        specials[index] = names[role]
    return {"specials": specials, "special_ids": {f"{role}_id": ids[role] for role in ROLES}}


def normalize(options: dict) -> dict:
    """load_corpus's options for an own corpus, checked, in the form run.json keeps (JSON types, absolute path)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"an own corpus takes no option {', '.join(unknown)}; it takes: {', '.join(OPTIONS)}")
    options = {**OPTIONS, **options}
    if options["path"] is None or options["langs"] is None:
        raise ValueError("an own corpus needs its folder and languages: --corpus DIR --langs SRC,TGT")
    path = Path(options["path"]).expanduser()
    if not path.is_dir():
        raise ValueError(f"--corpus {options['path']}: no such folder (it should hold train.SRC, train.TGT, valid.*)")
    if options["tokenizer"] not in TOKENIZERS:
        raise ValueError(f"--tokenizer must be one of {', '.join(TOKENIZERS)}, got {options['tokenizer']!r}")
    if not isinstance(options["lowercase"], bool):
        raise ValueError(f"lowercase must be true or false, got {options['lowercase']!r}")
    min_freq = check_count("--min-freq", options["min_freq"])
    max_vocab = None if options["max_vocab"] is None else check_count("--max-vocab", options["max_vocab"], len(ROLES) + 1)
    specials, special_ids = options["specials"], options["special_ids"]
    if specials is None or special_ids is None:
        raise ValueError("an own corpus needs the model's special tokens: pass **parallel.layout(model)")
    if (
        not isinstance(specials, (list, tuple))
        or len(specials) != len(ROLES)
        or not isinstance(special_ids, dict)
        or sorted(special_ids) != sorted(f"{role}_id" for role in ROLES)
        or sorted(special_ids.values()) != list(range(len(ROLES)))
    ):
        raise ValueError(f"specials {specials!r} / special_ids {special_ids!r} are not a layout of four tokens (parallel.layout)")
    return {"path": str(path.resolve()), "langs": parse_langs(options["langs"]), "tokenizer": options["tokenizer"],
            "lowercase": options["lowercase"], "min_freq": min_freq, "max_vocab": max_vocab, "specials": list(specials),
            "special_ids": dict(special_ids)}  # fmt: skip


def find_files(folder: str | Path, langs: list[str]) -> dict[str, tuple[Path, Path]]:
    """split -> (source file, target file): `train` and one of `valid`/`val`/`dev` required, `test` optional."""
    folder, found = Path(folder), {}
    for split, stems in SPLIT_STEMS.items():
        names = {lang: [f"{stem}.{lang}{end}" for stem in stems for end in ("", ".gz")] for lang in langs}
        present = {lang: [name for name in candidates if (folder / name).is_file()] for lang, candidates in names.items()}
        for lang, names_there in present.items():
            if len(names_there) > 1:
                raise ValueError(f"{folder} holds {' and '.join(names_there)}: keep one {split} file for {lang}")
        if not any(present.values()):
            if split == "test":
                continue
            tried = ", ".join(name for candidates in names.values() for name in candidates)
            raise ValueError(f"no {split} split in {folder}: looked for {tried}")
        for lang in langs:
            if not present[lang]:
                other = next(names_there[0] for names_there in present.values() if names_there)
                raise ValueError(f"{folder} has {other} but no {split} file for {lang}: looked for {', '.join(names[lang])}")
        found[split] = tuple(folder / present[lang][0] for lang in langs)
    stems = {path.name.split(".")[0] for paths in found.values() for path in paths}
    for split, (src, tgt) in found.items():
        if src.name.split(".")[0] != tgt.name.split(".")[0]:
            raise ValueError(f"the {split} split is {src.name} and {tgt.name}: name both sides alike ({sorted(stems)})")
    return found


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


class _Progress:
    """Bytes read of every file: tqdm when installed (the `train` extra), else a line every 10%; nothing when off."""

    def __init__(self, total: int, enabled: bool, label: str):
        self.total, self.enabled, self.label, self.done, self.shown, self.bar = max(total, 1), enabled, label, 0, 0, None
        if enabled:
            try:
                from tqdm import tqdm

                interval = 0.1 if sys.stderr.isatty() else 30
                self.bar = tqdm(total=total, desc=label, unit="B", unit_scale=True, dynamic_ncols=True, mininterval=interval)
            except ImportError:
                pass

    def add(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        elif self.enabled and self.done * 10 // self.total > self.shown:
            self.shown = self.done * 10 // self.total
            print(f"{self.label}: {10 * self.shown}% of {self.total / 1e6:.1f} MB", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Counted(io.RawIOBase):
    """A file's raw bytes as they are read: hashed (sha256) and counted into the progress."""

    def __init__(self, path: Path, progress: _Progress | None):
        self.file, self.progress, self.digest, self.size = open(path, "rb", buffering=0), progress, hashlib.sha256(), 0  # noqa: SIM115

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.file.readinto(buffer)
        if count:
            self.digest.update(memoryview(buffer)[:count])
            self.size += count
            if self.progress is not None:
                self.progress.add(count)
        return count

    def drain(self) -> None:
        """Read to the end (bytes after a gzip stream's end count in the fingerprint too)."""
        buffer = bytearray(_CHUNK)
        while self.readinto(buffer):
            pass

    def close(self) -> None:
        self.file.close()
        super().close()


def max_line_bytes() -> int:
    """The longest line a corpus file may hold, in bytes: MAX_LINE_BYTES, or $ROSETTA_MAX_LINE_BYTES where set."""
    rule = "the longest line of a corpus file is a number of bytes, e.g. 1000000"
    return limit_from_environment(MAX_LINE_VARIABLE, MAX_LINE_BYTES, rule)


def _lines(path: Path, counted: _Counted) -> Iterator[str]:
    """The stripped lines of `path` (`.gz`: decompressed), decoded as UTF-8, split at the file's own line ends (LF,
    CRLF or an old Mac's CR: `_separator`); reading holds one chunk and one line at most. A line longer than
    `max_line_bytes()`, a UTF-16/32 or compressed file, a byte that is not UTF-8, a NUL byte or a corrupt gzip stream
    raises ValueError naming the file (and the line)."""
    gz, limit, number = path.name.endswith(".gz"), max_line_bytes(), 0
    try:
        stream = io.BufferedReader(counted, _CHUNK)
        if gz:
            stream = gzip.GzipFile(fileobj=stream, mode="rb")
        chunks = iter(lambda: stream.read(_CHUNK), b"")
        separator, head = _separator(chunks, limit)
        if head:
            _check_head(path, head[0], gz)
        for number, raw in enumerate(_split(itertools.chain(head, chunks), separator, limit, path), start=1):  # noqa: B007
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(_not_utf8(path, number, raw, error)) from None
            if "\x00" in text:
                raise ValueError(
                    f"{path}, line {number}: a NUL byte (0x00) at byte {raw.index(0) + 1} of the line: not text; a corpus "
                    "file is UTF-8 text, one sentence a line"
                )
            yield (text[1:] if number == 1 and text.startswith("\ufeff") else text).strip()  # a byte-order mark
        counted.drain()
    except (OSError, EOFError, zlib.error) as error:
        if not gz:
            raise ValueError(f"{path}, line {number + 1}: cannot be read: {error}") from None
        raise ValueError(f"{path}, line {number + 1}: not a readable gzip file (corrupt or truncated): {error}") from None
    finally:
        counted.close()


def _separator(chunks: Iterator[bytes], limit: int) -> tuple[bytes, list[bytes]]:
    """The line end of a file, the one most line ends of its first chunk are: LF (LF and CRLF files: a CR left at a
    line's end goes with the spaces) or a lone CR (an old Mac's file), so a stray CR inside a line of an LF file stays
    there (as `wc -l` counts), and a stray LF in a CR file; and the chunks read to decide (those of its first `limit`
    bytes at most), to be split first."""
    seen, size = [], 0
    for chunk in chunks:
        seen.append(chunk)
        lf, lone_cr = chunk.count(b"\n"), chunk.count(b"\r") - chunk.count(b"\r\n")
        if lf or lone_cr:
            return (b"\r" if lone_cr > lf else b"\n"), seen
        size += len(chunk)
        if size > limit:  # no line end yet: the first line is too long (`_split` says so)
            break
    return b"\n", seen


def _split(chunks: Iterator[bytes], separator: bytes, limit: int, path: Path) -> Iterator[bytes]:
    """The lines of a stream of chunks, without their `separator`; a line longer than `limit` bytes raises ValueError
    naming `path` and the line as soon as it is seen, so reading holds no more than a chunk and `limit` bytes."""
    pending, size, number = [], 0, 0
    for chunk in chunks:
        pieces = chunk.split(separator)
        for piece in pieces[:-1]:
            number += 1
            if size + len(piece) > limit:
                raise ValueError(_too_long(path, number, limit))
            yield b"".join((*pending, piece)) if pending else piece
            pending, size = [], 0
        pending.append(pieces[-1])
        size += len(pieces[-1])
        if size > limit:
            raise ValueError(_too_long(path, number + 1, limit))
    if size:
        yield b"".join(pending)


def _too_long(path: Path, number: int, limit: int) -> str:
    return (
        f"{path}, line {number}: longer than {limit:,} bytes, the longest line a corpus file may hold (a line holds "
        "one sentence: is this file one sentence a line?); where such lines are meant, raise the limit with "
        f"{MAX_LINE_VARIABLE}=BYTES"
    )


def _check_head(path: Path, head: bytes, gz: bool) -> None:
    """Refuse a file whose first bytes are no UTF-8 text: gzip data under a plain name, UTF-16 or UTF-32."""
    if not gz and head.startswith(b"\x1f\x8b"):
        raise ValueError(f"{path}, line 1: not UTF-8 text (the file looks gzip-compressed: name it .gz)")
    wide = _wide_encoding(head)
    if wide is not None:
        encoding, why = wide
        raise ValueError(
            f"{path}: {encoding.upper()} text ({why}), not UTF-8; convert the file to UTF-8, e.g. iconv -f {encoding} -t utf-8"
        )


def _wide_encoding(head: bytes) -> tuple[str, str] | None:
    """(iconv's name, why) of the UTF-16 or UTF-32 encoding a file's first bytes `head` are in: by its byte-order mark,
    else by its NUL bytes, the high bytes of ASCII characters (all on one side of each character, and at least one
    for each LF); None for anything else."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if head.startswith(mark):
            return encoding, "it starts with a byte-order mark"
    sample = head[: _SAMPLE - _SAMPLE % 4]
    if len(sample) < 4 or b"\x00" not in sample:
        return None
    zeros = [sample[offset::4].count(0) for offset in range(4)]  # NUL bytes at each position mod 4
    quarter = len(sample) // 4
    for encoding, wide in (("utf-32le", (2, 3)), ("utf-32be", (0, 1))):
        if all(zeros[offset] == quarter for offset in wide):
            return encoding, "NUL bytes in two of every four"
    odd, even = zeros[1] + zeros[3], zeros[0] + zeros[2]
    for encoding, ones, others in (("utf-16le", odd, even), ("utf-16be", even, odd)):
        if not others and ones >= max(1, sample.count(b"\n")):
            return encoding, "NUL bytes in one of every two"
    return None


def _not_utf8(path: Path, number: int, raw: bytes, error: UnicodeDecodeError) -> str:
    return (
        f"{path}, line {number}: not UTF-8 text (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line); "
        "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
    )


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
        self.progress = _Progress(total, progress, f"reading {options['path']}")
        self.fingerprints: dict[str, list[dict]] = {}
        self.sos, self.eos = options["special_ids"]["sos_id"], options["special_ids"]["eos_id"]

    def split(self, split: str, encoders, references: list | None) -> tuple[Sequences, Sequences]:
        """Both sides of `split` as Sequences (sos + ids + eos); the target tokens appended to `references`."""
        paths = self.files[split]
        counted = [_Counted(path, self.progress) for path in paths]
        try:
            lines = [_lines(path, stream) for path, stream in zip(paths, counted, strict=True)]
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
    """The own corpus of `options` (load_corpus's, see OPTIONS; `normalize` checks them), read once.

    `progress`: a progress bar (tqdm, else a line every 10%) over the bytes of the files, and a summary line,
    on stderr. `options["files"]` of the result records each file's name, size and sha256.
    """
    options = normalize(options)
    files = find_files(options["path"], options["langs"])
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


# ---------------------------------------------------------------- a corpus saved with a run


def file_fingerprint(path: Path) -> dict:
    """What `read_corpus` records of a file: its name, size and sha256."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"file": path.name, "bytes": size, "sha256": digest.hexdigest()}


def check_options(saved: dict, options: dict, folder) -> None:
    """Refuse a corpus read with other options (the folder, languages, tokenizer, case, sizes, specials) than
    `options` (normalized), or from files that have changed since (`saved["files"]`: their names, sizes and sha256):
    one ValueError naming each difference of options, or the first file that differs. `folder`: the run that read it."""
    differences = [f"{key} {saved.get(key)!r} (saved) vs {options.get(key)!r} (asked)"
                   for key in sorted((set(saved) | set(options)) - {"files"}) if saved.get(key) != options.get(key)]  # fmt: skip
    if differences:
        raise ValueError(
            f"the corpus saved in {folder} was read with other options: {'; '.join(differences)}; use another "
            "--run-dir, or delete it"
        )
    if "files" in saved:
        _check_files(saved["files"], options, folder)


def _check_files(recorded: dict, options: dict, folder) -> None:
    """Refuse corpus files that are not those `recorded` (split -> each side's name, size and sha256) when read."""
    files = find_files(options["path"], options["langs"])
    now_names = {split: [path.name for path in paths] for split, paths in files.items()}
    then_names = {split: [record["file"] for record in records] for split, records in recorded.items()}
    if now_names != then_names:
        raise ValueError(
            f"{options['path']} now holds the files {now_names}, the corpus saved in {folder} was read from {then_names}; "
            "use another --run-dir, or delete it"
        )
    for split, paths in files.items():
        for path, record in zip(paths, recorded[split], strict=True):
            now = file_fingerprint(path)
            if now != record:
                what = "size" if now["bytes"] != record["bytes"] else "content (sha256)"
                raise ValueError(
                    f"{path} has changed since the run read it into {folder} (its {what} differs): the run trains on the "
                    "copy it read; put the file back as it was, or train the changed corpus in another --run-dir"
                )


def check_saved(corpus: Corpus, options: dict, folder) -> None:
    """Refuse a saved corpus (a run's `corpus/`) that was read with other options than `options` (normalized), or
    from files that have changed since: one ValueError saying what differs."""
    if corpus.name != OWN_CORPUS:
        raise ValueError(f"the corpus saved in {folder} is {corpus.name}, not an own corpus; use another --run-dir")
    check_options(corpus.options, options, folder)
