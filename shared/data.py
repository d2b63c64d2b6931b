"""The data of the source documents: the synthetic reverse task, Multi30k and Tatoeba spa-eng, and batches.

- "reverse" (document 001): random token ids, the target is the source reversed; no download.
- "multi30k" (documents 002/003): the WMT16 task-1 release, German -> English, tokenized as Ben Trevett's
  tutorials did (spaCy's rule-based tokenizers, lowercased, min_freq 2: 7,853 / 5,893 types).
- "spa_eng" (document 004, the TensorFlow "nmt_with_attention" tutorial of the TF 2.0 era): the first
  30,000 Tatoeba pairs, Spanish -> English, the tutorial's `preprocess_sentence` and Keras word index.

The data sets are read from a folder the user names (`--data-dir` or ROSETTA_DATA_DIR); nothing is ever
downloaded. A `Corpus` holds token ids per split and both vocabularies; `Corpus.save` / `Corpus.load`
keep a prepared corpus (npz + JSON), so a machine without spaCy can train on it. `batches` pads and
buckets: `src [B, S]`, `src_len [B]`, `tgt_in [B, T]`, `tgt_out [B, T]`, int64.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import unicodedata
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shared import catalogue, documents
from shared.atomic import write_atomic
from shared.vocab import TORCHTEXT_SPECIALS, Vocab, build_keras_vocab, build_vocab

ENV_VAR = "ROSETTA_DATA_DIR"
DATASETS = ("reverse", "multi30k", "spa_eng")
# the defaults of `load_corpus`'s options, per dataset; any other option name is an error
OPTIONS = {
    # document 001 gives no data sizes; these are ours
    "reverse": {"train_size": 10_000, "val_size": 1_000, "test_size": 1_000, "seq_len": 10, "vocab_size": 20, "seed": 0},
    "multi30k": {"min_freq": 2},
    # the old tutorial: first 30,000 lines, sklearn train_test_split(test_size=0.2), unseeded
    "spa_eng": {"num_examples": 30_000, "val_fraction": 0.2, "seed": 0},
}
MULTI30K_FILES = {"train": "train", "val": "val", "test": "test2016"}  # split -> WMT16 file stem
MULTI30K_LANGS = ("de", "en")  # source German, target English
SPA_ENG_MEMBER = "spa-eng/spa.txt"

CORPUS_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE = "corpus.npz", "src_vocab.json", "tgt_vocab.json"
CORPUS_FORMAT = "rosetta-corpus/1"


# ---------------------------------------------------------------- where the data is, which model uses what


def resolve_data_dir(cli_value: str | os.PathLike | None) -> Path:
    """The data folder: `cli_value` (--data-dir), else $ROSETTA_DATA_DIR; it must exist."""
    if cli_value:
        path, origin = Path(cli_value), f"--data-dir {cli_value}"
    elif os.environ.get(ENV_VAR):
        path, origin = Path(os.environ[ENV_VAR]), f"{ENV_VAR}={os.environ[ENV_VAR]}"
    else:
        raise ValueError(f"no data folder given: pass --data-dir or set {ENV_VAR} (the folder holding multi30k/ and spa-eng/)")
    if not path.is_dir():
        raise ValueError(f"the data folder {path} (from {origin}) does not exist or is not a folder")
    return path


def dataset_for_model(name: str) -> str | None:
    """The dataset a catalogue model trains on: "reverse", "multi30k", "spa_eng", or None (no seq2seq data)."""
    spec = catalogue.CATALOGUE.get(name)
    if spec is None:
        raise ValueError(f"unknown model {name!r}; the catalogue holds: {', '.join(catalogue.CATALOGUE)}")
    return documents.get(spec.document).dataset


# ---------------------------------------------------------------- document 001: the reverse task


def _check_count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def reverse_task(num_examples: int, seq_len: int = 10, vocab_size: int = 20, seed: int = 0) -> dict[str, np.ndarray]:
    """Document 001's task: reverse a random sequence. Ids in `[3, vocab_size)`; 0 pad, 1 sos, 2 eos unused.

    Returns int64 `src [N, S]`, `tgt_in [N, T]` (`<sos>` + target[:-1]) and `tgt_out [N, T]` (the source
    reversed), S = T = `seq_len`: the document's `(32, 10)` batches. Deterministic from `seed`.
    """
    num_examples, seq_len = _check_count("num_examples", num_examples), _check_count("seq_len", seq_len)
    first = max(catalogue.PAD_ID, catalogue.SOS_ID, catalogue.EOS_ID) + 1
    vocab_size = _check_count("vocab_size", vocab_size, first + 1)
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
    sizes = {split: _check_count(f"{split}_size", size) for split, size in sizes.items()}
    seed = _check_count("seed", seed, 0)
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
        num_examples = _check_count("num_examples", num_examples)
        if num_examples > len(lines):
            raise ValueError(f"num_examples {num_examples} exceeds the {len(lines)} pairs in {origin}")
    pairs = []
    for number, line in enumerate(lines[:num_examples], start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{origin} line {number} has {len(fields)} tab-separated fields; expected English<TAB>Spanish")
        english, spanish = (preprocess_sentence(sentence) for sentence in fields)
        pairs.append((spanish, english))
    return pairs


def read_spa_eng(
    data_dir: str | os.PathLike, num_examples: int | None = 30_000, val_fraction: float = 0.2, seed: int = 0
) -> Corpus:
    """Document 004's data: Spanish -> English, Keras word indices fitted on all kept pairs, split 80/20.

    The old tutorial split with sklearn's unseeded `train_test_split(test_size=0.2)`; we draw the
    same-sized split (val = ceil(0.2 N), train the rest, both in permutation order) from
    `np.random.default_rng(seed).permutation`. The vocabularies are fitted before the split, as in
    the tutorial, so every val word is known (there is no `<unk>`).
    """
    if not isinstance(val_fraction, (int, float)) or isinstance(val_fraction, bool) or not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    pairs = read_spa_eng_text(data_dir, num_examples)
    # Keras's text_to_word_sequence with filters='': split on " ", drop empty strings; [spanish, english]
    token_lists = [[[word for word in sentence.split(" ") if word] for sentence in side] for side in zip(*pairs, strict=True)]
    src_vocab, tgt_vocab = (build_keras_vocab(side) for side in token_lists)
    ids = _encode(src_vocab, token_lists[0]), _encode(tgt_vocab, token_lists[1])  # <start>/<end> are in the text
    seed = _check_count("seed", seed, 0)
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_val = math.ceil(val_fraction * len(pairs))
    parts = {"train": order[n_val:], "val": order[:n_val]}
    splits = {split: ([ids[0][i] for i in index], [ids[1][i] for i in index]) for split, index in parts.items()}
    references = {"val": [token_lists[1][i][1:-1] for i in parts["val"]]}
    special_ids = {"pad_id": 0, "sos_id": tgt_vocab.stoi["<start>"], "eos_id": tgt_vocab.stoi["<end>"], "unk_id": None}
    options = {"num_examples": None if num_examples is None else int(num_examples), "val_fraction": float(val_fraction)}
    options["seed"] = seed
    return Corpus("spa_eng", src_vocab, tgt_vocab, special_ids, splits, references, options=options)


# ---------------------------------------------------------------- batches


def _lengths(sequences: Sequence[np.ndarray]) -> np.ndarray:
    return np.fromiter((len(sequence) for sequence in sequences), dtype=np.int64, count=len(sequences))


def _pad(sequences: list[np.ndarray], lengths: np.ndarray, pad_id: int) -> np.ndarray:
    out = np.full((len(sequences), int(lengths.max())), pad_id, dtype=np.int64)  # [B, L], padded at the end
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = sequence
    return out


def _bucketed_order(
    src_lengths: np.ndarray, tgt_lengths: np.ndarray, batch_size: int, rng, pool_batches: int
) -> list[np.ndarray]:
    """torchtext BucketIterator's `pool`: shuffle, sort pools of `pool_batches` batches by length, shuffle the batches."""
    order = rng.permutation(len(src_lengths))
    chunks = []
    for start in range(0, len(order), batch_size * pool_batches):
        pool = order[start : start + batch_size * pool_batches]
        pool = pool[np.lexsort((tgt_lengths[pool], src_lengths[pool]))]  # by source length, then target length; stable
        pool_chunks = [pool[i : i + batch_size] for i in range(0, len(pool), batch_size)]
        chunks.extend(pool_chunks[i] for i in rng.permutation(len(pool_chunks)))
    # sort_within_batch: longest source first (what pack_padded_sequence with enforce_sorted wants)
    return [chunk[np.argsort(-src_lengths[chunk], kind="stable")] for chunk in chunks]


def batches(
    src_list: Sequence[np.ndarray],
    tgt_list: Sequence[np.ndarray],
    batch_size: int,
    *,
    pad_id: int,
    rng: np.random.Generator | None = None,
    with_src_len: bool = True,
    pool_batches: int = 100,
    drop_last: bool = False,
) -> list[dict[str, np.ndarray]]:
    """Padded int64 batches: `src [B, S]`, `src_len [B]`, `tgt_in [B, T]`, `tgt_out [B, T]`.

    Each target sequence starts with `<sos>` (so no `sos_id` is needed here). The targets are padded
    with `pad_id` after the end, then `tgt_in` is the padded block without its last column and `tgt_out`
    without its first: `tgt_in[:, t + 1] == tgt_out[:, t]`, as in the fixtures and as torchtext fed
    `trg[:-1]`. A row shorter than the batch keeps its `<eos>` in `tgt_in` where `tgt_out` is already
    pad; the loss ignores that position.
    Without `rng` the batches keep the data's order. With `rng`, torchtext's BucketIterator: shuffle,
    sort pools of `pool_batches` batches by length, shuffle the batches of each pool, and sort each
    batch by descending source length, so padding stays small.

    Args:
        with_src_len: include `src_len`; False for the reverse-task models, which take none.
        drop_last: drop a batch smaller than `batch_size`.
    """
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"batches: rng must be a numpy Generator (np.random.default_rng(seed)) or None, got {type(rng).__name__}"
        )
    if len(src_list) != len(tgt_list):
        raise ValueError(f"batches: {len(src_list)} source sequences but {len(tgt_list)} target sequences")
    if not len(src_list):
        raise ValueError("batches: no sequences to batch")
    batch_size, pool_batches = _check_count("batch_size", batch_size), _check_count("pool_batches", pool_batches)
    src_lengths, tgt_lengths = _lengths(src_list), _lengths(tgt_list)
    if src_lengths.min() < 1 or tgt_lengths.min() < 2:
        raise ValueError("batches: every source needs >= 1 token and every target >= 2 (<sos> and one more)")
    if rng is None:
        chunks = [np.arange(start, min(start + batch_size, len(src_list))) for start in range(0, len(src_list), batch_size)]
    else:
        chunks = _bucketed_order(src_lengths, tgt_lengths, batch_size, rng, pool_batches)
    out = []
    for chunk in chunks:
        if drop_last and len(chunk) < batch_size:
            continue
        tgt = _pad([tgt_list[i] for i in chunk], tgt_lengths[chunk], pad_id)  # [B, T + 1]
        batch = {"src": _pad([src_list[i] for i in chunk], src_lengths[chunk], pad_id)}  # [B, S]
        if with_src_len:
            batch["src_len"] = src_lengths[chunk]  # [B]
        batch["tgt_in"], batch["tgt_out"] = tgt[:, :-1], tgt[:, 1:]  # [B, T] each
        out.append(batch)
    return out


# ---------------------------------------------------------------- the corpus, saved and loaded


@dataclass(eq=False)
class Corpus:
    """Token ids of a dataset's splits and its two vocabularies.

    Args:
        name: "reverse", "multi30k" or "spa_eng".
        special_ids: `pad_id`, `sos_id`, `eos_id` of the target vocabulary (`pad_id` is the source's too),
            and `unk_id` (None where the vocabulary has no `<unk>`).
        splits: split name -> (source id arrays, target id arrays); every target starts with `<sos>`.
        references: split name -> target token lists (before `<unk>` mapping, no `<sos>`/`<eos>`), for BLEU.
        options: what `load_corpus` was asked for (sizes, seed, min_freq).
    """

    name: str
    src_vocab: Vocab
    tgt_vocab: Vocab
    special_ids: dict[str, int | None]
    splits: dict[str, tuple[list[np.ndarray], list[np.ndarray]]]
    references: dict[str, list[list[str]]] = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.name not in DATASETS:
            raise ValueError(f"unknown dataset {self.name!r}; known: {', '.join(DATASETS)}")
        missing = {"pad_id", "sos_id", "eos_id"} - set(self.special_ids)
        if missing:
            raise ValueError(f"corpus {self.name}: special_ids lacks {', '.join(sorted(missing))}")
        pad = self.pad_id
        if not (0 <= pad < min(len(self.src_vocab), len(self.tgt_vocab))) or self.src_vocab.itos[pad] != self.tgt_vocab.itos[pad]:
            raise ValueError(f"corpus {self.name}: pad id {pad} must name the same token in both vocabularies")
        for split, (src, tgt) in self.splits.items():
            if len(src) != len(tgt):
                raise ValueError(f"corpus {self.name}: split {split!r} has {len(src)} sources but {len(tgt)} targets")

    @property
    def pad_id(self) -> int:
        return self.special_ids["pad_id"]

    @property
    def sos_id(self) -> int:
        return self.special_ids["sos_id"]

    @property
    def eos_id(self) -> int:
        return self.special_ids["eos_id"]

    @property
    def with_src_len(self) -> bool:
        """The reverse-task models take no `src_len`; the real-data models do."""
        return self.name != "reverse"

    def batches(self, split: str, batch_size: int, rng: np.random.Generator | None = None, **options) -> list[dict]:
        """`batches` of one split with this corpus's pad id and `src_len` rule."""
        if split not in self.splits:
            raise ValueError(f"corpus {self.name} has no split {split!r}; it has: {', '.join(self.splits)}")
        src, tgt = self.splits[split]
        return batches(src, tgt, batch_size, pad_id=self.pad_id, rng=rng, with_src_len=self.with_src_len, **options)

    def vocab_overrides(self, model: str) -> dict[str, int]:
        """The config overrides that size `model`'s embeddings and output layer to this corpus.

        Raises ValueError if the model trains on another dataset or expects other special ids.
        """
        spec = catalogue.get(model)
        if dataset_for_model(model) != self.name:
            raise ValueError(f"model {model!r} trains on {dataset_for_model(model)}, not on the {self.name} corpus")
        ids = {"pad_id": spec.pad_id, "sos_id": spec.sos_id, "eos_id": spec.eos_id}
        if any(self.special_ids[key] != value for key, value in ids.items()):
            raise ValueError(f"model {model!r} expects special ids {ids}, the {self.name} corpus has {self.special_ids}")
        overrides = {spec.vocab_keys[0]: len(self.src_vocab), spec.vocab_keys[1]: len(self.tgt_vocab)}
        if len(set(spec.vocab_keys)) == 1 and len(self.src_vocab) != len(self.tgt_vocab):
            raise ValueError(
                f"model {model!r} has one vocabulary, the corpus has {len(self.src_vocab)} and {len(self.tgt_vocab)}"
            )
        return overrides

    def save(self, folder: str | os.PathLike) -> None:
        """Write `src_vocab.json`, `tgt_vocab.json` and then `corpus.npz` (ids + vocabulary fingerprints), each atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.src_vocab.save(folder / SRC_VOCAB_FILE)
        self.tgt_vocab.save(folder / TGT_VOCAB_FILE)
        meta = {"format": CORPUS_FORMAT, "name": self.name, "special_ids": self.special_ids, "options": self.options}
        meta.update(
            src_fingerprint=self.src_vocab.fingerprint, tgt_fingerprint=self.tgt_vocab.fingerprint, splits=list(self.splits)
        )
        arrays = {"meta": _json_array(meta), "references": _json_array(self.references)}
        for split, sides in self.splits.items():
            for side, sequences in zip(("src", "tgt"), sides, strict=True):
                lengths = _lengths(sequences)
                arrays[f"{split}/{side}/ids"] = np.concatenate([*sequences, np.zeros(0, np.int64)]).astype(np.int32)
                arrays[f"{split}/{side}/offsets"] = np.concatenate([[0], np.cumsum(lengths)])
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        write_atomic(folder / CORPUS_FILE, buffer.getvalue())  # last: a corpus.npz always has its vocabularies

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Corpus:
        """Read a corpus written by `save`; needs numpy only. Any inconsistency raises ValueError."""
        folder = Path(folder)
        path = folder / CORPUS_FILE
        if not path.is_file():
            raise ValueError(
                f"no saved corpus at {folder}: expected {CORPUS_FILE}, {SRC_VOCAB_FILE} and {TGT_VOCAB_FILE} (Corpus.save)"
            )
        src_vocab, tgt_vocab = Vocab.load(folder / SRC_VOCAB_FILE), Vocab.load(folder / TGT_VOCAB_FILE)
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {key: npz[key] for key in npz.files}
            meta, references = _from_json_array(arrays.pop("meta")), _from_json_array(arrays.pop("references"))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error, UnicodeDecodeError) as error:
            raise ValueError(f"saved corpus {path} is unreadable (truncated or corrupt?): {error}") from None
        keys = ("name", "special_ids", "options", "src_fingerprint", "tgt_fingerprint", "splits")
        if not isinstance(meta, dict) or meta.get("format") != CORPUS_FORMAT or any(key not in meta for key in keys):
            raise ValueError(f"saved corpus {path} is not a {CORPUS_FORMAT} file (its metadata lacks {', '.join(keys)})")
        for side, vocab, vocab_file in (("src", src_vocab, SRC_VOCAB_FILE), ("tgt", tgt_vocab, TGT_VOCAB_FILE)):
            if meta[f"{side}_fingerprint"] != vocab.fingerprint:
                raise ValueError(
                    f"saved corpus {path} was made with another {side} vocabulary than {folder / vocab_file} "
                    f"(fingerprint {meta[f'{side}_fingerprint'][:12]} vs {vocab.fingerprint[:12]}); save the corpus again"
                )
        sides = (("src", src_vocab), ("tgt", tgt_vocab))
        splits = {}
        for split in meta["splits"]:
            splits[split] = tuple(_sequences(arrays, f"{split}/{side}", len(vocab), path) for side, vocab in sides)
        return cls(meta["name"], src_vocab, tgt_vocab, meta["special_ids"], splits, references, meta["options"])


def _json_array(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode(), dtype=np.uint8)


def _from_json_array(array: np.ndarray):
    return json.loads(array.tobytes().decode("utf-8"))


def _sequences(arrays: dict, key: str, vocab_size: int, path: Path) -> list[np.ndarray]:
    """The id arrays stored flat under `key`, checked against the vocabulary size."""
    try:
        ids, offsets = arrays[f"{key}/ids"].astype(np.int64), arrays[f"{key}/offsets"]
    except KeyError:
        raise ValueError(f"saved corpus {path} lacks {key} (truncated or corrupt?)") from None
    if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != len(ids) or (np.diff(offsets) < 0).any():
        raise ValueError(f"saved corpus {path}: the offsets of {key} do not fit its ids (corrupt?)")
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"saved corpus {path}: {key} holds ids outside its vocabulary [0, {vocab_size})")
    return np.split(ids, offsets[1:-1]) if len(offsets) > 1 else []


# ---------------------------------------------------------------- one entry point


def load_corpus(
    dataset: str, data_dir: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None, **options
) -> Corpus:
    """The corpus of `dataset` ("reverse", "multi30k", "spa_eng") with `options` (see OPTIONS for names and defaults).

    `data_dir` goes through `resolve_data_dir` (--data-dir, else $ROSETTA_DATA_DIR); the reverse task
    needs none. With `cache_dir`, a corpus saved there is loaded (its dataset and options must match) or
    the new one is saved there, so a later run needs neither the data files nor spaCy.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    unknown = sorted(set(options) - set(OPTIONS[dataset]))
    if unknown:
        raise ValueError(f"dataset {dataset!r} takes no option {', '.join(unknown)}; it takes: {', '.join(OPTIONS[dataset])}")
    options = {**OPTIONS[dataset], **options}
    if cache_dir is not None and (Path(cache_dir) / CORPUS_FILE).is_file():
        corpus = Corpus.load(cache_dir)
        if (corpus.name, corpus.options) != (dataset, options):
            raise ValueError(
                f"the corpus saved in {cache_dir} is {corpus.name} with {corpus.options}, not {dataset} with {options}; "
                "use another cache folder or delete it"
            )
        return corpus
    if dataset == "reverse":
        corpus = reverse_corpus(**options)
    elif dataset == "multi30k":
        corpus = read_multi30k(resolve_data_dir(data_dir), **options)
    else:
        corpus = read_spa_eng(resolve_data_dir(data_dir), **options)
    if cache_dir is not None:
        corpus.save(cache_dir)
    return corpus
