"""A corpus in memory and on disk: token ids of each split and both vocabularies (`Corpus`, saved as npz +
JSON so a machine without spaCy can train on it), and `batches`, padded and bucketed: `src [B, S]`,
`src_len [B]`, `tgt_in [B, T]`, `tgt_out [B, T]`, int64.

Sequences are stored flat (`Sequences`: one int32 id array and the offsets), so a corpus of millions of sentence
pairs costs 4 bytes a token and 8 a sentence, not a numpy array (an object's overhead) per sentence; `batches`
builds each padded batch only when it is read (the memory it saves: docs/measurements.md)."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shared import catalogue, documents
from shared.data.vocab import Vocab
from shared.io.atomic import write_with

CORPUS_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE = "corpus.npz", "src_vocab.json", "tgt_vocab.json"
CORPUS_FORMAT = "rosetta-corpus/1"
OWN_CORPUS = "corpus"  # a user's own parallel text (shared.data.parallel, `rosetta train --corpus DIR`)
DATASETS = ("reverse", "multi30k", "spa_eng", "spa_eng_2022", OWN_CORPUS)
REAL_DATA = ("multi30k", "spa_eng", "spa_eng_2022")  # the documents' natural-language data sets


def trains_on_text(model: str) -> bool:
    """Whether catalogue model `model` trains on sentence pairs (a document's real data), so on an own corpus too."""
    spec = catalogue.get(model)
    return spec.interface == "seq2seq" and spec.variable_length and documents.dataset_for_model(model) in REAL_DATA


# ---------------------------------------------------------------- sequences stored flat


class Sequences(Sequence):
    """Token id sequences stored flat: sequence i is `ids[offsets[i]:offsets[i + 1]]` (a view, no copy).

    A list-like container (`len`, indexing, iteration; a slice is a list of views); `lengths` holds every
    sequence's length.

    Args:
        ids: 1-D integer array, every sequence one after another (int32 in a corpus).
        offsets: 1-D int64 array of `len + 1` non-decreasing positions, from 0 to `len(ids)`.
    """

    __slots__ = ("ids", "offsets")

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        ids, offsets = np.asarray(ids), np.asarray(offsets)
        if ids.ndim == 1 and not len(ids):
            ids = ids.astype(np.int32 if ids.dtype.kind not in "iu" else ids.dtype)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"Sequences: ids must be a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
        if offsets.ndim != 1 or not len(offsets) or offsets.dtype.kind not in "iu":
            raise ValueError(f"Sequences: offsets must be a non-empty 1-D integer array, got shape {offsets.shape}")
        if offsets[0] != 0 or offsets[-1] != len(ids) or (np.diff(offsets) < 0).any():
            raise ValueError(f"Sequences: offsets must rise from 0 to len(ids) = {len(ids)}")
        self.ids, self.offsets = ids, offsets.astype(np.int64, copy=False)

    @classmethod
    def from_arrays(cls, arrays, dtype=None) -> Sequences:
        """The sequences of a list of 1-D arrays (or lists), copied into one array (`dtype`: theirs by default)."""
        arrays = [np.asarray(array) for array in arrays]
        lengths = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
        ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype or np.int64)
        return cls(ids if dtype is None else _cast(ids, dtype), np.concatenate([[0], np.cumsum(lengths)]))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):  # a list of views, as a list's slice is a list
            return [self[position] for position in range(*index.indices(len(self)))]
        position = index.__index__()
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"sequence index {index} out of range for {len(self)} sequences")
        return self.ids[self.offsets[position] : self.offsets[position + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        ids, offsets = self.ids, self.offsets.tolist()
        return (ids[start:stop] for start, stop in zip(offsets[:-1], offsets[1:], strict=True))

    def __repr__(self) -> str:
        return f"Sequences({len(self)} sequences, {len(self.ids)} ids, {self.ids.dtype})"

    @property
    def lengths(self) -> np.ndarray:
        """int64 `[N]`: the length of each sequence."""
        return np.diff(self.offsets)

    def pad(self, rows: np.ndarray, lengths: np.ndarray, pad_id: int) -> np.ndarray:
        """int64 `[len(rows), max(lengths)]`: the sequences `rows` (whose `lengths` are given), padded at the end."""
        columns = np.arange(int(lengths.max()))
        inside = columns < lengths[:, None]  # [B, L]
        out = np.full(inside.shape, pad_id, dtype=np.int64)
        out[inside] = self.ids[(self.offsets[rows][:, None] + columns)[inside]]  # row-major: each row's ids in order
        return out


def _cast(ids: np.ndarray, dtype) -> np.ndarray:
    """`ids` as `dtype`; ValueError where a value does not fit."""
    info = np.iinfo(dtype)
    if len(ids) and (ids.min() < info.min or ids.max() > info.max):
        raise ValueError(f"Sequences: ids outside the range of {np.dtype(dtype).name}")
    return ids.astype(dtype, copy=False)


def as_sequences(sequences) -> Sequences:
    """`sequences` itself when it is `Sequences`, else a list of arrays copied into one."""
    return sequences if isinstance(sequences, Sequences) else Sequences.from_arrays(sequences)


# ---------------------------------------------------------------- batches


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


class Batches(Sequence):
    """The padded batches of `batches`, each built when it is read (indexing, iteration; a slice is a list), so an
    epoch of a large corpus is never padded all at once: the batch order, and each batch's bytes, are fixed."""

    def __init__(self, src: Sequences, tgt: Sequences, chunks: list[np.ndarray], pad_id: int, with_src_len: bool):
        self.src, self.tgt, self.chunks, self.pad_id, self.with_src_len = src, tgt, chunks, pad_id, with_src_len
        self.src_lengths, self.tgt_lengths = src.lengths, tgt.lengths

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._batch(chunk) for chunk in self.chunks[index]]
        return self._batch(self.chunks[index])

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return (self._batch(chunk) for chunk in self.chunks)

    def _batch(self, chunk: np.ndarray) -> dict[str, np.ndarray]:
        tgt = self.tgt.pad(chunk, self.tgt_lengths[chunk], self.pad_id)  # [B, T + 1]
        batch = {"src": self.src.pad(chunk, self.src_lengths[chunk], self.pad_id)}  # [B, S]
        if self.with_src_len:
            batch["src_len"] = self.src_lengths[chunk]  # [B]
        batch["tgt_in"], batch["tgt_out"] = tgt[:, :-1], tgt[:, 1:]  # [B, T] each
        return batch


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
) -> Batches:
    """Padded int64 batches: `src [B, S]`, `src_len [B]`, `tgt_in [B, T]`, `tgt_out [B, T]`.

    Each target sequence starts with `<sos>` (so no `sos_id` is needed here). The targets are padded
    with `pad_id` after the end, then `tgt_in` is the padded block without its last column and `tgt_out`
    without its first: `tgt_in[:, t + 1] == tgt_out[:, t]`, as in the fixtures and as torchtext fed
    `trg[:-1]`. A row shorter than the batch keeps its `<eos>` in `tgt_in` where `tgt_out` is already
    pad; the loss ignores that position.
    Without `rng` the batches keep the data's order. With `rng`, torchtext's BucketIterator: shuffle,
    sort pools of `pool_batches` batches by length, shuffle the batches of each pool, and sort each
    batch by descending source length, so padding stays small.
    Returns a list-like `Batches`: the order is drawn here, each batch is padded when it is read.

    Args:
        src_list, tgt_list: `Sequences`, or lists of 1-D id arrays.
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
    batch_size, pool_batches = check_count("batch_size", batch_size), check_count("pool_batches", pool_batches)
    src, tgt = as_sequences(src_list), as_sequences(tgt_list)
    src_lengths, tgt_lengths = src.lengths, tgt.lengths
    if src_lengths.min() < 1 or tgt_lengths.min() < 2:
        raise ValueError("batches: every source needs >= 1 token and every target >= 2 (<sos> and one more)")
    if rng is None:
        chunks = [np.arange(start, min(start + batch_size, len(src))) for start in range(0, len(src), batch_size)]
    else:
        chunks = _bucketed_order(src_lengths, tgt_lengths, batch_size, rng, pool_batches)
    if drop_last:
        chunks = [chunk for chunk in chunks if len(chunk) == batch_size]
    return Batches(src, tgt, chunks, pad_id, with_src_len)


# ---------------------------------------------------------------- the corpus, saved and loaded


@dataclass(eq=False)
class Corpus:
    """Token ids of a dataset's splits and its two vocabularies.

    Args:
        name: "reverse", "multi30k", "spa_eng", "spa_eng_2022", or "corpus" (a user's own, shared.data.parallel).
        special_ids: `pad_id`, `sos_id`, `eos_id` of the target vocabulary (`pad_id` is the source's too),
            and `unk_id` (None where the vocabulary has no `<unk>`).
        splits: split name -> (source sequences, target sequences), each `Sequences` (a list of id arrays is
            stored flat as int32); every target starts with `<sos>`.
        references: split name -> target token lists (before `<unk>` mapping, no `<sos>`/`<eos>`), for BLEU.
        options: what `load_corpus` was asked for (sizes, seed, min_freq, max_vocab_size).
    """

    name: str
    src_vocab: Vocab
    tgt_vocab: Vocab
    special_ids: dict[str, int | None]
    splits: dict[str, tuple[Sequences, Sequences]]
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
        for split, sides in self.splits.items():
            self.splits[split] = src, tgt = tuple(
                _int32_sequences(side, f"corpus {self.name}, split {split!r}") for side in sides
            )
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
        if self.name == OWN_CORPUS:
            if not trains_on_text(model):
                what = documents.dataset_for_model(model) or "nothing"
                raise ValueError(f"model {model!r} trains on {what}, not on sentence pairs: it cannot train on an own corpus")
        elif documents.dataset_for_model(model) != self.name:
            raise ValueError(f"model {model!r} trains on {documents.dataset_for_model(model)}, not on the {self.name} corpus")
        ids = {"pad_id": spec.pad_id, "sos_id": spec.sos_id, "eos_id": spec.eos_id}
        if any(self.special_ids[key] != value for key, value in ids.items()):
            which = "own" if self.name == OWN_CORPUS else self.name
            raise ValueError(f"model {model!r} expects special ids {ids}, the {which} corpus has {self.special_ids}")
        overrides = {spec.vocab_keys[0]: len(self.src_vocab), spec.vocab_keys[1]: len(self.tgt_vocab)}
        if len(set(spec.vocab_keys)) == 1 and len(self.src_vocab) != len(self.tgt_vocab):
            raise ValueError(
                f"model {model!r} has one vocabulary, the corpus has {len(self.src_vocab)} and {len(self.tgt_vocab)}"
            )
        return overrides

    def fingerprint(self) -> str:
        """sha256 hex of what the corpus holds: its name, special ids, every split's token ids and the references (not
        `options`: run.json keeps those), so the same corpus saved and loaded again gives the same fingerprint."""
        described = [self.name, self.special_ids, list(self.splits), self.references]
        digest = hashlib.sha256(json.dumps(described, ensure_ascii=False, sort_keys=True).encode())
        for sides in self.splits.values():
            for sequences in sides:
                digest.update(np.ascontiguousarray(sequences.ids, dtype=np.int32))
                digest.update(np.ascontiguousarray(sequences.offsets, dtype=np.int64))
        return digest.hexdigest()

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
                sequences = _int32_sequences(sequences, f"corpus {self.name}, split {split!r}")  # lists set after init too
                arrays[f"{split}/{side}/ids"], arrays[f"{split}/{side}/offsets"] = sequences.ids, sequences.offsets
        # last: a corpus.npz always has its vocabularies; streamed to its staged file (no copy of a large corpus in memory)
        write_with(lambda temporary: _save_npz(temporary, arrays), folder / CORPUS_FILE)

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


def _save_npz(path: Path, arrays: dict) -> None:
    """np.savez_compressed's npz (one `.npy` member per array, deflated), at zlib's fastest level: chosen because a large
    corpus saves many times faster for a slightly larger file (docs/measurements.md)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for key, array in arrays.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def _json_array(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode(), dtype=np.uint8)


def _from_json_array(array: np.ndarray):
    return json.loads(array.tobytes().decode("utf-8"))


def _int32_sequences(sequences, what: str) -> Sequences:
    """`sequences` (`Sequences` or a list of id arrays) as `Sequences` of int32 ids."""
    try:
        sequences = as_sequences(sequences)
        if sequences.ids.dtype != np.int32:
            sequences = Sequences(_cast(sequences.ids, np.int32), sequences.offsets)
    except ValueError as error:
        raise ValueError(f"{what}: {error}") from None
    return sequences


def _sequences(arrays: dict, key: str, vocab_size: int, path: Path) -> Sequences:
    """The id sequences stored flat under `key`, checked against the vocabulary size."""
    try:
        ids, offsets = arrays[f"{key}/ids"], arrays[f"{key}/offsets"]
    except KeyError:
        raise ValueError(f"saved corpus {path} lacks {key} (truncated or corrupt?)") from None
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or offsets.dtype.kind not in "iu":
        raise ValueError(f"saved corpus {path}: {key} is not integer ids (corrupt?)")
    if offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 or offsets[-1] != len(ids) or (np.diff(offsets) < 0).any():
        raise ValueError(f"saved corpus {path}: the offsets of {key} do not fit its ids (corrupt?)")
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"saved corpus {path}: {key} holds ids outside its vocabulary [0, {vocab_size})")
    return Sequences(ids.astype(np.int32, copy=False), offsets)


def check_count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
