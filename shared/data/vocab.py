"""Vocabularies: token <-> id tables, built as the source documents' tutorials built them.

`build_vocab` orders tokens as torchtext's legacy `Field.build_vocab` (documents 002/003, Multi30k):
specials first, then descending frequency, ties alphabetical. `build_keras_vocab` orders them as
Keras's `Tokenizer(filters='')` (document 004's TensorFlow NMT tutorial, spa-eng): descending
frequency, ties in first-seen order, index 0 reserved for padding, no `<unk>`.
`build_text_vectorization_vocab` orders them as Keras's `TextVectorization.adapt` (the 2022 rewrite of
that tutorial): `''` (pad) and `[UNK]` first, then descending frequency, ties in descending token order.

A `Vocab` is saved as JSON with the sha256 `fingerprint` of its token list, so a checkpoint or a saved
corpus can verify it was made with this very vocabulary.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from shared.io.atomic import write_atomic

FORMAT = "rosetta-vocab/1"
TORCHTEXT_SPECIALS = ("<unk>", "<pad>", "<sos>", "<eos>")  # ids 0..3, catalogue.MULTI30K_SPECIALS


def fingerprint(itos: Sequence[str]) -> str:
    """sha256 hex of the token list (JSON-encoded, so no token can be confused with a separator)."""
    return hashlib.sha256(json.dumps(list(itos), ensure_ascii=False).encode()).hexdigest()


class Vocab:
    """A token table: `itos` (id -> token), `stoi` (token -> id) and the special tokens.

    Args:
        itos: the tokens in id order; no duplicates; non-empty strings, except that a special token may be
            the empty string (TextVectorization's pad/mask token `''`).
        specials: the special tokens (each in `itos`), e.g. `<unk> <pad> <sos> <eos>`, or `'' [UNK]`.
        unk_token: the token unknown words encode to (one of `specials`); None for a vocabulary without
            one (the TF tutorial's), where encoding an unknown word raises ValueError.
    """

    def __init__(self, itos: Iterable[str], specials: Iterable[str] = (), unk_token: str | None = None):
        self.itos = tuple(itos)
        self.specials = tuple(specials)
        self.unk_token = unk_token
        bad = [token for token in self.itos if not isinstance(token, str) or not (token or token in self.specials)]
        if bad:
            raise ValueError(f"vocabulary tokens must be non-empty strings (only a special may be ''), got {bad[:5]!r}")
        self.stoi = {token: index for index, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            repeated = sorted(token for token, count in Counter(self.itos).items() if count > 1)
            raise ValueError(f"vocabulary lists tokens twice: {repeated[:10]!r}")
        missing = [token for token in self.specials if token not in self.stoi]
        if missing:
            raise ValueError(f"special tokens {missing!r} are not in the vocabulary")
        if unk_token is not None and unk_token not in self.specials:
            raise ValueError(f"unk_token {unk_token!r} must be one of the specials {self.specials!r}")
        self._fingerprint = fingerprint(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return (self.itos, self.specials, self.unk_token) == (other.itos, other.specials, other.unk_token)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens, specials={self.specials!r}, fingerprint={self.fingerprint[:12]})"

    @property
    def fingerprint(self) -> str:
        """sha256 hex of the token list: equal fingerprints, equal ids for every token."""
        return self._fingerprint

    @property
    def unk_id(self) -> int | None:
        return None if self.unk_token is None else self.stoi[self.unk_token]

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Token ids; an unknown token becomes `<unk>`, or raises ValueError where there is no `<unk>`."""
        tokens = list(tokens)
        unk = self.unk_id
        if unk is not None:
            return [self.stoi.get(token, unk) for token in tokens]
        unknown = [token for token in tokens if token not in self.stoi]
        if unknown:
            raise ValueError(f"tokens not in the vocabulary (it has no <unk>): {unknown[:10]!r}")
        return [self.stoi[token] for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of `ids` (ints or a 1-D integer array); an id outside `[0, len)` raises ValueError."""
        out = []
        for index in ids:
            if isinstance(index, bool) or not hasattr(index, "__index__") or not 0 <= int(index) < len(self.itos):
                raise ValueError(f"token id {index!r} is outside the vocabulary [0, {len(self.itos)})")
            out.append(self.itos[int(index)])
        return out

    def to_json(self) -> dict:
        record = {"format": FORMAT, "fingerprint": self.fingerprint, "specials": list(self.specials)}
        return {**record, "unk_token": self.unk_token, "itos": list(self.itos)}

    def save(self, path: str | Path) -> None:
        """Write the vocabulary as JSON, atomically; the folder must exist."""
        path = Path(path)
        if not path.parent.is_dir():
            raise ValueError(f"cannot save the vocabulary to {path}: the folder {path.parent} does not exist")
        write_atomic(path, json.dumps(self.to_json(), ensure_ascii=False, indent=0).encode())

    @classmethod
    def from_json(cls, record, source: str = "the vocabulary") -> Vocab:
        """The vocabulary of a `to_json` record; a malformed one raises ValueError naming `source`."""
        keys = ("format", "fingerprint", "specials", "unk_token", "itos")
        if not isinstance(record, dict) or any(key not in record for key in keys):
            raise ValueError(f"{source} is not a vocabulary: expected a JSON object with keys {', '.join(keys)}")
        if record["format"] != FORMAT:
            raise ValueError(f"{source} has format {record['format']!r}; this version reads {FORMAT!r}")
        if not isinstance(record["itos"], list) or not isinstance(record["specials"], list):
            raise ValueError(f"{source} is corrupt: 'itos' and 'specials' must be lists")
        try:
            vocab = cls(record["itos"], record["specials"], record["unk_token"])
        except (ValueError, TypeError) as error:
            raise ValueError(f"{source} is corrupt: {error}") from None
        if vocab.fingerprint != record["fingerprint"]:
            recorded = str(record["fingerprint"])[:12]
            raise ValueError(f"{source} is corrupt: its tokens hash to {vocab.fingerprint[:12]}, the file records {recorded}")
        return vocab

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        """Read a vocabulary written by `save`; a missing, truncated or edited file raises ValueError."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"vocabulary file {path} does not exist (expected the JSON written by Vocab.save)")
        try:
            record = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"vocabulary file {path} is not valid JSON (truncated or corrupt?): {error}") from None
        return cls.from_json(record, source=f"vocabulary file {path}")


def _check_min_freq(min_freq) -> int:
    if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
        raise ValueError(f"min_freq must be a positive integer, got {min_freq!r}")
    return min_freq


def build_vocab(
    token_lists: Iterable[Sequence[str]],
    min_freq: int = 2,
    specials: Sequence[str] = TORCHTEXT_SPECIALS,
    unk_token: str | None = "<unk>",
    max_size: int | None = None,
) -> Vocab:
    """torchtext legacy `Field.build_vocab`: specials, then tokens seen >= `min_freq` times.

    Order: specials first, then by descending frequency, ties alphabetical; specials are not counted
    as words. `max_size` caps the non-special tokens (document 002 passes 10,000, above Multi30k's sizes).
    """
    min_freq = _check_min_freq(min_freq)
    counts = Counter(token for tokens in token_lists for token in tokens)
    for token in specials:
        counts.pop(token, None)
    ranked = sorted(sorted(counts.items()), key=lambda item: item[1], reverse=True)  # stable: ties stay alphabetical
    words = [token for token, count in ranked if count >= min_freq][:max_size]
    return Vocab([*specials, *words], specials, unk_token)


def build_keras_vocab(token_lists: Iterable[Sequence[str]], pad_token: str = "<pad>") -> Vocab:
    """Keras `Tokenizer(filters='').fit_on_texts` word index, with `pad_token` naming the reserved id 0.

    Keras counts words in an OrderedDict and sorts by count (a stable sort): descending frequency,
    ties in first-seen order. Ids start at 1; `len(vocab)` is `len(word_index) + 1`. No `<unk>`.
    """
    counts: dict[str, int] = {}
    for tokens in token_lists:
        for token in tokens:
            counts[token] = counts.get(token, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
    return Vocab([pad_token, *(token for token, _ in ranked)], (pad_token,), None)


def build_text_vectorization_vocab(
    token_lists: Iterable[Sequence[str]], max_tokens: int | None = None, mask_token: str = "", oov_token: str = "[UNK]"
) -> Vocab:
    """Keras `TextVectorization(max_tokens=...).adapt(...).get_vocabulary()`: `['', '[UNK]', ...]`.

    Keras's IndexLookup counts every token except the mask and OOV tokens, then sorts with
    `np.lexsort((tokens, counts))[::-1]` (keras/src/layers/preprocessing/index_lookup.py, `finalize_state`):
    descending count, ties in descending order of the tokens' UTF-8 bytes (so `[START]` before `[END]`, `z`
    before `a`). `max_tokens` counts the mask and OOV tokens too (None: no cap). Unknown words encode to
    `oov_token`; the mask token `''` is id 0, the padding id.
    """
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 1):
        raise ValueError(f"max_tokens must be None or an integer > 1 (as TextVectorization's), got {max_tokens!r}")
    counts = Counter(token for tokens in token_lists for token in tokens)
    for token in (mask_token, oov_token):
        counts.pop(token, None)
    ranked = sorted(counts.items(), key=lambda item: (item[1], item[0].encode("utf-8")), reverse=True)
    learned = [token for token, _ in ranked][: None if max_tokens is None else max_tokens - 2]
    return Vocab([mask_token, oov_token, *learned], (mask_token, oov_token), oov_token)
