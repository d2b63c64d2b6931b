"""The source documents' corpora read from the data folder: the synthetic reverse task (document 001),
Multi30k (documents 002/003), Tatoeba spa-eng as document 004 (the TF 2.0-era tutorial) read it, and all of
spa-eng as the 2022 rewrite of that tutorial reads it (TextVectorization), each as a `Corpus`."""

from __future__ import annotations

import gzip
import math
import os
import re
import unicodedata
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shared import catalogue
from shared.data.corpora import Corpus, check_count
from shared.data.vocab import TORCHTEXT_SPECIALS, Vocab, build_keras_vocab, build_text_vectorization_vocab, build_vocab

MULTI30K_FILES = {"train": "train", "val": "val", "test": "test2016"}  # split -> WMT16 file stem
MULTI30K_LANGS = ("de", "en")  # source German, target English
SPA_ENG_MEMBER = "spa-eng/spa.txt"


# ---------------------------------------------------------------- document 001: the reverse task


def reverse_task(num_examples: int, seq_len: int = 10, vocab_size: int = 20, seed: int = 0) -> dict[str, np.ndarray]:
    """Document 001's task: reverse a random sequence. Ids in `[3, vocab_size)`; 0 pad, 1 sos, 2 eos unused.

    Returns int64 `src [N, S]`, `tgt_in [N, T]` (`<sos>` + target[:-1]) and `tgt_out [N, T]` (the source
    reversed), S = T = `seq_len`: the document's `(32, 10)` batches. Deterministic from `seed`.
    """
    num_examples, seq_len = check_count("num_examples", num_examples), check_count("seq_len", seq_len)
    first = max(catalogue.PAD_ID, catalogue.SOS_ID, catalogue.EOS_ID) + 1
    vocab_size = check_count("vocab_size", vocab_size, first + 1)
    src = np.random.default_rng(seed).integers(first, vocab_size, (num_examples, seq_len), dtype=np.int64)  # [N, S]
    tgt_out = src[:, ::-1].copy()  # [N, T]
    tgt_in = np.concatenate([np.full((num_examples, 1), catalogue.SOS_ID, dtype=np.int64), tgt_out[:, :-1]], axis=1)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


def reverse_vocab(vocab_size: int = 20) -> Vocab:
    """The reverse task's trivial vocabulary: `<pad> <sos> <eos>`, then the ids themselves as tokens."""
    specials = ("<pad>", "<sos>", "<eos>")  # catalogue.PAD_ID, SOS_ID, EOS_ID
    return Vocab([*specials, *(str(index) for index in range(len(specials), vocab_size))], specials)


def reverse_corpus(train_size=10_000, val_size=1_000, test_size=1_000, seq_len=10, vocab_size=20, seed=0) -> Corpus:
    """The reverse task as a corpus; targets are stored as `<sos>` + reversed source (no `<eos>`)."""
    sizes = dict(train=train_size, val=val_size, test=test_size)
    sizes = {split: check_count(f"{split}_size", size) for split, size in sizes.items()}
    seed = check_count("seed", seed, 0)
    arrays = reverse_task(sum(sizes.values()), seq_len, vocab_size, seed)
    tgt = np.concatenate([arrays["tgt_in"][:, :1], arrays["tgt_out"]], axis=1)  # [N, T + 1]
    splits, start = {}, 0
    for split, size in sizes.items():
        splits[split] = (list(arrays["src"][start : start + size]), list(tgt[start : start + size]))
        start += size
    vocab = reverse_vocab(vocab_size)
    special_ids = {"pad_id": catalogue.PAD_ID, "sos_id": catalogue.SOS_ID, "eos_id": catalogue.EOS_ID, "unk_id": None}
    options = {**{f"{split}_size": size for split, size in sizes.items()}, "seq_len": int(seq_len), "vocab_size": int(vocab_size)}
    options["seed"] = seed
    return Corpus("reverse", vocab, vocab, special_ids, splits, options=options)


# ---------------------------------------------------------------- documents 002/003: Multi30k


def find_multi30k(data_dir: str | os.PathLike) -> Path:
    """The WMT16 folder: `data_dir` itself, `data_dir/wmt16` or `data_dir/multi30k/wmt16`."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise ValueError(f"the Multi30k folder {data_dir} does not exist (expected a folder holding wmt16/train.de.gz ...)")
    candidates = [data_dir, data_dir / "wmt16", data_dir / "multi30k" / "wmt16"]
    for folder in candidates:
        if (folder / "train.de.gz").is_file():
            return folder
    tried = ", ".join(str(folder) for folder in candidates)
    raise ValueError(f"no Multi30k under {data_dir}: expected the WMT16 task-1 files (train.de.gz, ...) in one of {tried}")


def read_lines_gz(path: Path) -> list[str]:
    """The lines of a gzipped UTF-8 file, without trailing empty lines; bad gzip or UTF-8 raises ValueError."""
    if not path.is_file():
        raise ValueError(f"Multi30k file {path} is missing; {path.parent} should hold train/val/test2016 .de.gz and .en.gz")
    try:
        with gzip.open(path, "rb") as stream:
            text = stream.read().decode("utf-8")
    except (OSError, EOFError, zlib.error) as error:
        raise ValueError(f"{path} is not a readable gzip file (corrupt or truncated): {error}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text: {error}") from None
    lines = text.split("\n")
    while lines and not lines[-1].strip():  # the WMT16 train and val files end with one empty line
        lines.pop()
    return lines


def read_multi30k_text(data_dir: str | os.PathLike) -> dict[str, tuple[list[str], list[str]]]:
    """Sentence pairs per split, `{"train": (german, english), "val": ..., "test": ...}`.

    Lines are stripped and a pair with an empty side is dropped, as torchtext's TranslationDataset did
    (there are none once the trailing empty line is gone). The two files of a split must have equal lines.
    """
    folder = find_multi30k(data_dir)
    splits = {}
    for split, stem in MULTI30K_FILES.items():
        paths = [folder / f"{stem}.{lang}.gz" for lang in MULTI30K_LANGS]
        de, en = (read_lines_gz(path) for path in paths)
        if len(de) != len(en):
            raise ValueError(f"Multi30k {split}: {paths[0]} has {len(de)} lines but {paths[1]} has {len(en)}; they must pair up")
        pairs = [(d.strip(), e.strip()) for d, e in zip(de, en, strict=True) if d.strip() and e.strip()]
        splits[split] = ([d for d, _ in pairs], [e for _, e in pairs])
    return splits


def spacy_tokenizers():
    """spaCy's rule-based German and English tokenizers (`spacy.blank`: no model package, no download)."""
    try:
        import spacy
    except ImportError:
        raise ValueError("reading Multi30k needs spaCy: pip install 'seq2seq-rosetta[data]' (or load a saved corpus)") from None
    return spacy.blank("de").tokenizer, spacy.blank("en").tokenizer


def tokenize(tokenizer, sentences: Sequence[str]) -> list[list[str]]:
    """torchtext Field(tokenize=spacy, lower=True): tokenize, then lowercase each token."""
    return [[token.text.lower() for token in tokenizer(sentence)] for sentence in sentences]  # faster than .pipe here


def _encode(vocab: Vocab, sentences: list[list[str]], sos: str | None = None, eos: str | None = None) -> list[np.ndarray]:
    """int64 id arrays of tokenized sentences, wrapped in `sos` ... `eos` where given."""
    wrap = ([sos] if sos else [], [eos] if eos else [])
    return [np.array(vocab.encode([*wrap[0], *sentence, *wrap[1]]), dtype=np.int64) for sentence in sentences]


def read_multi30k(data_dir: str | os.PathLike, min_freq: int = 2) -> Corpus:
    """Multi30k as documents 002/003 had it: German -> English, `<sos>` + ids + `<eos>` on both sides.

    Vocabularies from the train split, min_freq 2, specials `<unk> <pad> <sos> <eos>` (ids 0..3).
    """
    text = read_multi30k_text(data_dir)
    tokenizers = spacy_tokenizers()
    tokens = {split: [tokenize(tok, side) for tok, side in zip(tokenizers, pair, strict=True)] for split, pair in text.items()}
    src_vocab, tgt_vocab = (build_vocab(tokens["train"][side], min_freq=min_freq) for side in (0, 1))
    sos, eos = TORCHTEXT_SPECIALS[2:]
    splits = {split: (_encode(src_vocab, de, sos, eos), _encode(tgt_vocab, en, sos, eos)) for split, (de, en) in tokens.items()}
    references = {split: pair[1] for split, pair in tokens.items() if split != "train"}
    special_ids = {"unk_id": 0, **catalogue.MULTI30K_SPECIALS}
    return Corpus("multi30k", src_vocab, tgt_vocab, special_ids, splits, references, options={"min_freq": min_freq})


# ---------------------------------------------------------------- document 004: Tatoeba spa-eng


def unicode_to_ascii(text: str) -> str:
    """The tutorial's `unicode_to_ascii`: NFD, then drop combining marks (category Mn)."""
    return "".join(char for char in unicodedata.normalize("NFD", text) if unicodedata.category(char) != "Mn")


def preprocess_sentence(sentence: str) -> str:
    """The tutorial's `preprocess_sentence`: ascii, lowercase, spaced punctuation, `<start> ... <end>`."""
    sentence = unicode_to_ascii(sentence.lower().strip())
    sentence = re.sub(r"([?.!,¿])", r" \1 ", sentence)  # a space between a word and the punctuation after it
    sentence = re.sub(r'[" "]+', " ", sentence)
    sentence = re.sub(r"[^a-zA-Z?.!,¿]+", " ", sentence)  # everything else becomes a space
    return "<start> " + sentence.strip() + " <end>"


def _read_spa_eng_file(data_dir: Path) -> tuple[str, str]:
    """(text of spa.txt, where it came from): `spa-eng.zip` or an extracted `spa-eng/spa.txt`.

    `data_dir` may also be the data root holding `spa-eng/spa-eng.zip` (as ../shared/data does).
    """
    if not data_dir.is_dir():
        raise ValueError(f"the spa-eng folder {data_dir} does not exist (expected a folder holding spa-eng.zip)")
    candidates = [
        data_dir / "spa-eng.zip",
        data_dir / "spa-eng" / "spa.txt",
        data_dir / "spa-eng" / "spa-eng.zip",
        data_dir / "spa.txt",
    ]
    path = next((candidate for candidate in candidates if candidate.is_file()), None)
    if path is None:
        tried = ", ".join(str(candidate) for candidate in candidates)
        raise ValueError(
            f"no spa-eng data under {data_dir}: expected the tutorial's spa-eng.zip or spa-eng/spa.txt; tried {tried}"
        )
    try:
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as archive:
                if SPA_ENG_MEMBER not in archive.namelist():
                    raise ValueError(f"{path} holds no {SPA_ENG_MEMBER} (it holds: {', '.join(archive.namelist()[:5])})")
                blob, origin = archive.read(SPA_ENG_MEMBER), f"{path}:{SPA_ENG_MEMBER}"
        else:
            blob, origin = path.read_bytes(), str(path)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as error:
        raise ValueError(f"{path} is not a readable zip archive (corrupt or truncated): {error}") from None
    try:
        return blob.decode("utf-8"), origin
    except UnicodeDecodeError as error:
        raise ValueError(f"{origin} is not UTF-8 text: {error}") from None


def read_spa_eng_text(data_dir: str | os.PathLike, num_examples: int | None = 30_000) -> list[tuple[str, str]]:
    """The tutorial's `create_dataset`: the first `num_examples` lines, preprocessed, as (spanish, english)."""
    text, origin = _read_spa_eng_file(Path(data_dir))
    lines = text.strip().split("\n")
    if num_examples is not None:
        num_examples = check_count("num_examples", num_examples)
        if num_examples > len(lines):
            raise ValueError(f"num_examples {num_examples} exceeds the {len(lines)} pairs in {origin}")
    pairs = _split_pairs(lines[:num_examples], origin)
    return [(preprocess_sentence(spanish), preprocess_sentence(english)) for english, spanish in pairs]


def _split_pairs(lines: Sequence[str], origin: str) -> list[tuple[str, str]]:
    """(english, spanish) of each `English<TAB>Spanish` line; any other line raises ValueError naming `origin` and it."""
    pairs = []
    for number, line in enumerate(lines, start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{origin} line {number} has {len(fields)} tab-separated fields; expected English<TAB>Spanish")
        pairs.append((fields[0], fields[1]))
    return pairs


def _check_fraction(val_fraction) -> float:
    if not isinstance(val_fraction, (int, float)) or isinstance(val_fraction, bool) or not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    return float(val_fraction)


def read_spa_eng(
    data_dir: str | os.PathLike, num_examples: int | None = 30_000, val_fraction: float = 0.2, seed: int = 0
) -> Corpus:
    """Document 004's data: Spanish -> English, Keras word indices fitted on all kept pairs, split 80/20.

    The old tutorial split with sklearn's unseeded `train_test_split(test_size=0.2)`; we draw the
    same-sized split (val = ceil(0.2 N), train the rest, both in permutation order) from
    `np.random.default_rng(seed).permutation`. The vocabularies are fitted before the split, as in
    the tutorial, so every val word is known (there is no `<unk>`).
    """
    val_fraction = _check_fraction(val_fraction)
    pairs = read_spa_eng_text(data_dir, num_examples)
    # Keras's text_to_word_sequence with filters='': split on " ", drop empty strings; [spanish, english]
    token_lists = [[[word for word in sentence.split(" ") if word] for sentence in side] for side in zip(*pairs, strict=True)]
    src_vocab, tgt_vocab = (build_keras_vocab(side) for side in token_lists)
    ids = _encode(src_vocab, token_lists[0]), _encode(tgt_vocab, token_lists[1])  # <start>/<end> are in the text
    seed = check_count("seed", seed, 0)
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_val = math.ceil(val_fraction * len(pairs))
    parts = {"train": order[n_val:], "val": order[:n_val]}
    splits = {split: ([ids[0][i] for i in index], [ids[1][i] for i in index]) for split, index in parts.items()}
    references = {"val": [token_lists[1][i][1:-1] for i in parts["val"]]}
    special_ids = {"pad_id": 0, "sos_id": tgt_vocab.stoi["<start>"], "eos_id": tgt_vocab.stoi["<end>"], "unk_id": None}
    options = {"num_examples": None if num_examples is None else int(num_examples), "val_fraction": float(val_fraction)}
    options["seed"] = seed
    return Corpus("spa_eng", src_vocab, tgt_vocab, special_ids, splits, references, options=options)


# ---------------------------------------------------------------- the 2022 rewrite of the TF tutorial: all of spa-eng

_NOT_KEPT_2022 = re.compile("[^ a-z.?!,¿]")
PUNCTUATION_2022 = ".?!,¿"  # regex_replace(text, '[.?!,¿]', r' \0 '): one-character matches, so str.replace does it
START_2022, END_2022 = "[START]", "[END]"


def standardize_2022(text: str) -> str:
    """The 2022 tutorial's `tf_lower_and_split_punct`, in Python.

    NFKD (tf_text.normalize_utf8), ASCII-only lower-casing (tf.strings.lower's default leaves every other
    letter alone), drop everything but space, a-z and `.?!,¿`, put spaces around that punctuation, strip,
    and wrap in `[START] ... [END]`: `'¿Todavía está en casa?'` -> `'[START] ¿ todavia esta en casa ? [END]'`.
    Split on whitespace (`.split()`) for TextVectorization's tokens.
    """
    text = unicodedata.normalize("NFKD", text).encode("utf-8").lower().decode("utf-8")  # bytes.lower: A-Z only
    text = _NOT_KEPT_2022.sub("", text)
    for char in PUNCTUATION_2022:  # the spaces put in are not punctuation: no match is spaced twice
        text = text.replace(char, f" {char} ")
    return f"{START_2022} {text.strip()} {END_2022}"  # only spaces are left to strip


def read_spa_eng_2022(
    data_dir: str | os.PathLike, max_vocab_size: int | None = 5000, val_fraction: float = 0.2, seed: int = 0
) -> Corpus:
    """All of spa-eng as the 2022 "NMT with attention" tutorial reads it: Spanish (context) -> English (target).

    Every line of spa.txt (`splitlines`, `English<TAB>Spanish`), standardized by `standardize_2022`. The
    tutorial splits with an unseeded `np.random.uniform(size=N) < 0.8`; we draw the same test from
    `np.random.default_rng(seed).uniform`, train where `< 1 - val_fraction`, val the rest, each in file order.
    There is no test split (`runs.final_split` evaluates on val). Each side's vocabulary is TextVectorization's,
    adapted on the train split only with `max_tokens=max_vocab_size` (which counts `''` and `[UNK]`), so val
    has `[UNK]` (id 1); `''` is id 0, the pad. Sources and targets both hold `[START] ... [END]`; the
    references for BLEU are the val targets' tokens without them.
    """
    if max_vocab_size is not None:
        max_vocab_size = check_count("max_vocab_size", max_vocab_size, 4)  # '', [UNK], [START], [END]
    val_fraction, seed = _check_fraction(val_fraction), check_count("seed", seed, 0)
    text, origin = _read_spa_eng_file(Path(data_dir))
    pairs = _split_pairs(text.splitlines(), origin)
    if not pairs:
        raise ValueError(f"{origin} holds no sentence pairs")
    english, spanish = zip(*pairs, strict=True)
    token_lists = [[standardize_2022(sentence).split() for sentence in side] for side in (spanish, english)]  # [source, target]
    is_train = np.random.default_rng(seed).uniform(size=(len(pairs),)) < 1 - val_fraction
    parts = {"train": np.flatnonzero(is_train), "val": np.flatnonzero(~is_train)}
    empty = [split for split, index in parts.items() if not len(index)]
    if empty:
        raise ValueError(
            f"the random split of the {len(pairs)} pairs in {origin} (val_fraction {val_fraction}, seed {seed}) "
            f"left {' and '.join(empty)} empty; use more pairs or another seed"
        )
    train = parts["train"]
    src_vocab, tgt_vocab = (build_text_vectorization_vocab([side[i] for i in train], max_vocab_size) for side in token_lists)
    missing = [token for token in (START_2022, END_2022) if token not in tgt_vocab.stoi]
    if missing:
        raise ValueError(f"max_vocab_size {max_vocab_size} leaves {', '.join(missing)} out of the target vocabulary")
    vocabs = (src_vocab, tgt_vocab)
    splits = {}
    for split, index in parts.items():
        splits[split] = tuple(_encode(vocab, [side[i] for i in index]) for vocab, side in zip(vocabs, token_lists, strict=True))
    references = {"val": [token_lists[1][i][1:-1] for i in parts["val"]]}
    special_ids = {"pad_id": 0, "sos_id": tgt_vocab.stoi[START_2022], "eos_id": tgt_vocab.stoi[END_2022]}
    special_ids["unk_id"] = tgt_vocab.unk_id  # 1, as the source's
    options = {"max_vocab_size": max_vocab_size, "val_fraction": val_fraction, "seed": seed}
    return Corpus("spa_eng_2022", src_vocab, tgt_vocab, special_ids, splits, references, options=options)
