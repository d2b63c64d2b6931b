"""spa_eng_2022: the data recipe of TensorFlow's 2022 "NMT with attention" tutorial, in numpy, against TensorFlow.

`readers.standardize_2022` and `vocab.build_text_vectorization_vocab` are compared with the tutorial's own
`tf_lower_and_split_punct` (tf.strings ops) and `keras.layers.TextVectorization` on every line of spa.txt. The
tutorial's first step, `tf_text.normalize_utf8(text, 'NFKD')`, needs tensorflow-text, which is not installed:
the TF side gets its inputs NFKD-normalized by Python's `unicodedata.normalize('NFKD', ...)` instead, so these
tests check everything after the normalization (ASCII lower-casing, the two regexes, strip, the join, the
whitespace split, the vocabulary's order and cap, the ids), not ICU's NFKD against Python's.

The TF comparisons need tensorflow (and Keras 3 on it) and skip without it, as in the tox `shared` env; run them
in an environment with tensorflow (the repository's venv). The data folder is $ROSETTA_DATA_DIR, else
../shared/data beside the repository; tests that need it skip, naming the path, where it is absent.
"""

from __future__ import annotations

import re
import sys
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import pytest

from shared import data
from shared.data import corpora, readers
from shared.data.vocab import Vocab, build_keras_vocab, build_text_vectorization_vocab
from shared.train import evaluation
from tests.data_files import DATA_DIR, need_data

REPO = Path(__file__).resolve().parents[2]
PAIRS, TRAIN, VAL = 118_964, 95_383, 23_581  # all of spa.txt; the split of np.random.default_rng(0).uniform < 0.8
ID_SENTENCES = 300  # sentences per split and side whose ids are compared with TextVectorization's


@pytest.fixture(scope="module")
def raw() -> dict:
    """The tutorial's `load_data`, verbatim but for numpy: (target = English, context = Spanish), and its split
    `np.random.uniform(size=(N,)) < 0.8`, drawn from `default_rng(0)` as `read_spa_eng_2022` draws it."""
    with zipfile.ZipFile(need_data("spa-eng", "spa-eng.zip")) as archive:
        text = archive.read("spa-eng/spa.txt").decode("utf-8")
    pairs = [line.split("\t") for line in text.splitlines()]
    target, context = [target for target, _ in pairs], [context for _, context in pairs]
    is_train = np.random.default_rng(0).uniform(size=(len(target),)) < 0.8
    return {"target": target, "context": context, "is_train": is_train}


@pytest.fixture(scope="module")
def corpus() -> corpora.Corpus:
    """The corpus through `load_corpus` with its default options, built once for the module (about 2 s)."""
    need_data("spa-eng", "spa-eng.zip")
    return data.load_corpus("spa_eng_2022", DATA_DIR)


# ---------------------------------------------------------------- TensorFlow's side, as the tutorial writes it


@pytest.fixture(scope="module")
def tf_side(raw) -> dict:
    """The tutorial's standardization on every sentence (inputs NFKD'd in Python, see the module docstring) and
    its two TextVectorization layers, adapted on the train split's sentences."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")

    def tf_lower_and_split_punct(text):
        # Split accented characters: tf_text.normalize_utf8(text, 'NFKD') is done by unicodedata on the inputs
        text = tf.strings.lower(text)
        # Keep space, a to z, and select punctuation.
        text = tf.strings.regex_replace(text, "[^ a-z.?!,¿]", "")
        # Add spaces around punctuation.
        text = tf.strings.regex_replace(text, "[.?!,¿]", r" \0 ")
        # Strip whitespace.
        text = tf.strings.strip(text)
        text = tf.strings.join(["[START]", text, "[END]"], separator=" ")
        return text

    out = {"standardize": tf_lower_and_split_punct}
    for side in ("context", "target"):
        sentences = np.array([unicodedata.normalize("NFKD", sentence) for sentence in raw[side]], dtype=object)
        out[f"{side}_nfkd"] = sentences
        out[f"{side}_standardized"] = [s.decode("utf-8") for s in tf_lower_and_split_punct(tf.constant(sentences)).numpy()]
        layer = keras.layers.TextVectorization(standardize=tf_lower_and_split_punct, max_tokens=5000, ragged=True)
        # the tutorial adapts on batches of a shuffled tf.data pipeline; the counts, hence the vocabulary, do not
        # depend on order or batching, and adapting on one array is 10x faster (0.3 s for the 95,383 sentences)
        layer.adapt(sentences[raw["is_train"]])
        out[f"{side}_layer"] = layer
    return out


def first_difference(ours: list, theirs: list) -> str | None:
    """None where the lists are equal, else where they first differ (for assertion messages)."""
    if list(ours) == list(theirs):
        return None
    index = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    pick = lambda items: items[index] if index < len(items) else "<end>"  # noqa: E731
    return f"lengths {len(ours)} / {len(theirs)}; first difference at {index}: {pick(ours)!r} vs {pick(theirs)!r}"


def differences(ours: list, theirs: list) -> list[int]:
    return [index for index, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]


# ---------------------------------------------------------------- the standardization


HAND_CASES = {
    "¿Todavía está en casa?": "[START] ¿ todavia esta en casa ? [END]",
    "ÉL ESTÁ AQUÍ. ¡Ñandú!": "[START] el esta aqui .  nandu ! [END]",  # capitals decomposed; '¡' is not kept
    "Tengo 3 gatos, 2 perros.": "[START] tengo  gatos ,   perros . [END]",  # digits dropped, spaces kept until split
    "Hola\tmundo\u00a0a\u200bb": "[START] holamundo ab [END]",  # a tab is not a kept space; NFKD makes NBSP a space
    "ﬁn Ⅻ Straße": "[START] fin xii strae [END]",  # compatibility forms decomposed (K of NFKD); ß has no decomposition
    "": "[START]  [END]",
}


@pytest.mark.parametrize("sentence", HAND_CASES)
def test_standardize_2022_hand_cases(sentence):
    assert readers.standardize_2022(sentence) == HAND_CASES[sentence]


def test_standardize_2022_hand_cases_as_tf(tf_side):
    sentences = [unicodedata.normalize("NFKD", sentence) for sentence in HAND_CASES]
    theirs = [s.decode("utf-8") for s in tf_side["standardize"](np.array(sentences, dtype=object)).numpy()]
    assert theirs == list(HAND_CASES.values())


def test_standardize_2022_equals_the_tutorials_on_every_line(raw, tf_side):
    for side in ("context", "target"):
        ours = [readers.standardize_2022(sentence) for sentence in raw[side]]
        assert len(ours) == PAIRS
        assert first_difference(ours, tf_side[f"{side}_standardized"]) is None, side


def test_standardize_2022_negative_controls(raw, tf_side):
    """Variants that must fail the comparison above do: no normalization (73,362 Spanish lines lose their accented
    letters) and NFD in place of NFKD (7 Spanish lines: 'º' is 'o' and '¨' a space only under NFKD).

    Python's Unicode `str.lower()` in place of tf.strings.lower's ASCII-only one cannot be caught by any input:
    the only characters it lower-cases into a kept one are U+0130 (İ -> i + dot) and U+212A (KELVIN SIGN -> k),
    and NFKD, which runs first, decomposes both into ASCII capitals. That is asserted here over all of Unicode.
    """
    kept = re.compile("[^ a-z.?!,¿]")

    def variant(normalize=None):
        def standardize(text):
            text = unicodedata.normalize(normalize, text) if normalize else text
            text = re.sub("[.?!,¿]", r" \g<0> ", kept.sub("", text.encode().lower().decode()))
            return f"[START] {text.strip()} [END]"

        return standardize

    # lines of spa.txt (Spanish side) where a variant is wrong; with NFKD the same harness is right everywhere
    for form, expected in (("NFKD", 0), ("NFD", 7), (None, 73_362)):
        ours = [variant(form)(sentence) for sentence in raw["context"]]
        assert len(differences(ours, tf_side["context_standardized"])) == expected, form
    cased_into_kept = [
        chr(point)
        for point in range(0x80, sys.maxunicode + 1)
        if not 0xD800 <= point < 0xE000 and kept.sub("", chr(point).lower()) not in ("", chr(point))
    ]
    assert cased_into_kept == ["\u0130", "\u212a"]
    assert [unicodedata.normalize("NFKD", char)[0] for char in cased_into_kept] == ["I", "K"]


# ---------------------------------------------------------------- the vocabulary and the ids


def test_build_text_vectorization_vocab_orders_as_keras():
    tokens = [["b", "a", "c", "b"], ["a", "d", "[UNK]", ""], ["é", "z"]]
    vocab = build_text_vectorization_vocab(tokens)
    # '' and [UNK] first and not counted; b, a (2) then the ones (1) in descending UTF-8 byte order
    assert vocab.itos == ("", "[UNK]", "b", "a", "é", "z", "d", "c")
    assert build_text_vectorization_vocab(tokens, max_tokens=4).itos == ("", "[UNK]", "b", "a")
    assert (vocab.stoi[""], vocab.unk_id) == (0, 1)
    assert vocab.encode(["z", "unseen", ""]) == [5, 1, 0]
    with pytest.raises(ValueError, match="max_tokens must be None or an integer > 1"):
        build_text_vectorization_vocab(tokens, max_tokens=1)


def test_vocab_allows_the_empty_string_only_as_a_special(tmp_path):
    vocab = Vocab(["", "[UNK]", "a"], ["", "[UNK]"], "[UNK]")
    vocab.save(tmp_path / "vocab.json")
    assert Vocab.load(tmp_path / "vocab.json") == vocab
    assert Vocab.load(tmp_path / "vocab.json").itos[0] == ""
    with pytest.raises(ValueError, match="non-empty strings .*only a special"):
        Vocab(["", "[UNK]", "a"], ["[UNK]"], "[UNK]")
    with pytest.raises(ValueError, match="non-empty strings"):
        Vocab(["[UNK]", None], ["[UNK]"])  # the other checks stand
    with pytest.raises(ValueError, match="twice"):
        Vocab(["", "", "a"], [""])


def test_vocabulary_equals_text_vectorization(raw, corpus, tf_side):
    """All 95,383 train sentences adapted; `get_vocabulary()` list for list, on both sides."""
    for side, vocab in (("context", corpus.src_vocab), ("target", corpus.tgt_vocab)):
        theirs = [str(token) for token in tf_side[f"{side}_layer"].get_vocabulary()]
        assert first_difference(list(vocab.itos), theirs) is None, side
        assert len(theirs) == 5000


def test_vocabulary_negative_control_tie_rules(raw, corpus, tf_side):
    """Ties broken in first-seen order (Keras's old Tokenizer) or alphabetically fail the same comparison."""
    theirs = [str(token) for token in tf_side["target_layer"].get_vocabulary()]
    tokens = [readers.standardize_2022(raw["target"][i]).split() for i in np.flatnonzero(raw["is_train"])]
    first_seen = ["", "[UNK]", *build_keras_vocab(tokens).itos[1:]][:5000]
    assert first_difference(first_seen, theirs) is not None
    counts: dict[str, int] = {}
    for sentence in tokens:
        for token in sentence:
            counts[token] = counts.get(token, 0) + 1
    alphabetical = ["", "[UNK]", *sorted(counts, key=lambda token: (-counts[token], token))][:5000]
    assert first_difference(alphabetical, theirs) is not None
    assert first_difference(list(corpus.tgt_vocab.itos), theirs) is None  # the same comparison passes ours


def test_ids_equal_text_vectorization(raw, corpus, tf_side):
    """The ids of the first ID_SENTENCES train and val pairs, both sides ([UNK] included), and the tutorial's
    `process_text` batch: `context.to_tensor()`, `target[:, 1:].to_tensor()`; `target[:, :-1]` where it matters."""
    val = np.flatnonzero(~raw["is_train"])
    for split, index in (("train", np.flatnonzero(raw["is_train"])), ("val", val)):
        for position, side in enumerate(("context", "target")):
            theirs = tf_side[f"{side}_layer"](tf_side[f"{side}_nfkd"][index[:ID_SENTENCES]]).to_list()
            ours = [ids.tolist() for ids in corpus.splits[split][position][:ID_SENTENCES]]
            assert first_difference(ours, theirs) is None, (split, side)
            assert split == "train" or any(1 in ids for ids in ours)  # [UNK]: the vocabularies know the train split only
    batch = corpus.batches("val", 64)[0]
    context = tf_side["context_layer"](tf_side["context_nfkd"][val[:64]]).to_tensor().numpy()
    target = tf_side["target_layer"](tf_side["target_nfkd"][val[:64]])
    targ_in, targ_out = target[:, :-1].to_tensor().numpy(), target[:, 1:].to_tensor().numpy()
    np.testing.assert_array_equal(batch["src"], context)
    np.testing.assert_array_equal(batch["tgt_out"], targ_out)
    # ours pads the whole target, then drops its last column: a short row keeps its [END] in tgt_in, under a pad target
    np.testing.assert_array_equal(np.where(targ_out != 0, batch["tgt_in"], 0), np.where(targ_out != 0, targ_in, 0))


# ---------------------------------------------------------------- the corpus


def test_corpus_sizes_and_special_ids(raw, corpus):
    assert {split: len(src) for split, (src, _) in corpus.splits.items()} == {"train": TRAIN, "val": VAL}
    assert TRAIN + VAL == PAIRS == len(raw["target"]) and int(raw["is_train"].sum()) == TRAIN
    assert (len(corpus.src_vocab), len(corpus.tgt_vocab)) == (5000, 5000)
    assert corpus.special_ids == {"pad_id": 0, "sos_id": 2, "eos_id": 3, "unk_id": 1}
    for vocab in (corpus.src_vocab, corpus.tgt_vocab):
        assert vocab.itos[:5] == ("", "[UNK]", "[START]", "[END]", ".")  # '.' (82,990 train targets) < [START] (95,383)
        assert vocab.specials == ("", "[UNK]") and vocab.unk_id == 1
    assert corpus.options == {"max_vocab_size": 5000, "val_fraction": 0.2, "seed": 0}
    for sides in corpus.splits.values():
        for sequences in sides:
            assert all(ids[0] == 2 and ids[-1] == 3 for ids in sequences)
    # the references: val targets' tokens before [UNK] mapping, without [START] / [END]
    first_val = int(np.flatnonzero(~raw["is_train"])[0])
    assert corpus.references["val"][0] == readers.standardize_2022(raw["target"][first_val]).split()[1:-1]
    assert list(corpus.references) == ["val"] and len(corpus.references["val"]) == VAL
    assert "test" not in corpus.splits  # runs.final_split evaluates on val


def test_corpus_save_load_round_trip(corpus, tmp_path):
    corpus.save(tmp_path)
    loaded = corpora.Corpus.load(tmp_path)
    assert (loaded.name, loaded.special_ids, loaded.options) == (corpus.name, corpus.special_ids, corpus.options)
    assert (loaded.src_vocab, loaded.tgt_vocab) == (corpus.src_vocab, corpus.tgt_vocab)
    assert loaded.tgt_vocab.itos[0] == "" and loaded.references == corpus.references
    for split, sides in corpus.splits.items():
        for ours, theirs in zip(sides, loaded.splits[split], strict=True):
            assert len(ours) == len(theirs) and all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert data.load_corpus("spa_eng_2022", cache_dir=tmp_path).tgt_vocab == corpus.tgt_vocab  # no data folder needed
    with pytest.raises(ValueError, match="is spa_eng_2022 with .* not spa_eng_2022 with"):
        data.load_corpus("spa_eng_2022", cache_dir=tmp_path, seed=1)


def test_encode_sentence(corpus):
    ids, tokens = evaluation.encode_sentence(corpus, "¿Todavía está en casa, Zyxwvut?")
    assert tokens == ["[START]", "¿", "todavia", "esta", "en", "casa", ",", "zyxwvut", "?", "[END]"]
    assert ids[0, 0] == 2 and ids[0, -1] == 3 and ids[0, -3] == 1 and (ids[0, :-3] > 1).all()


def test_load_corpus_options():
    assert data.OPTIONS["spa_eng_2022"] == {"max_vocab_size": 5000, "val_fraction": 0.2, "seed": 0}
    with pytest.raises(ValueError, match="takes no option num_examples"):
        data.load_corpus("spa_eng_2022", DATA_DIR, num_examples=10)


# ---------------------------------------------------------------- bad inputs


def write_spa(folder: Path, text: str) -> Path:
    (folder / "spa.txt").write_text(text, encoding="utf-8")
    return folder


def test_rejects_a_line_without_one_tab(tmp_path):
    lines = "Go.\tVe.\nHi.\tHola.\n"
    with pytest.raises(ValueError, match=r"spa\.txt line 3 has 1 tab-separated fields; expected English<TAB>Spanish"):
        readers.read_spa_eng_2022(write_spa(tmp_path, lines + "Run! Corre.\nStop!\tPara.\n"))
    with pytest.raises(ValueError, match=r"spa\.txt line 2 has 3 tab-separated fields"):
        readers.read_spa_eng_2022(write_spa(tmp_path, "Go.\tVe.\nHi.\tHola.\textra\n"))
    with pytest.raises(ValueError, match=r"spa\.txt line 3 has 1 tab-separated fields"):  # the tutorial's splitlines
        readers.read_spa_eng_2022(write_spa(tmp_path, lines + "\n"))
    with pytest.raises(ValueError, match="holds no sentence pairs"):
        readers.read_spa_eng_2022(write_spa(tmp_path, ""))
    with pytest.raises(ValueError, match="left val empty"):
        readers.read_spa_eng_2022(write_spa(tmp_path, lines), val_fraction=0.01)
    with pytest.raises(ValueError, match="max_vocab_size must be an integer >= 4"):
        readers.read_spa_eng_2022(write_spa(tmp_path, lines), max_vocab_size=3)
    with pytest.raises(ValueError, match="val_fraction must be in"):
        readers.read_spa_eng_2022(write_spa(tmp_path, lines), val_fraction=1.0)


def test_tiny_file(tmp_path):
    lines = "".join(f"Go {i}.\tVe {i}.\n" for i in range(20))
    corpus = readers.read_spa_eng_2022(write_spa(tmp_path, lines + "Why?\t¿Por qué?\r\n"), seed=3)
    assert sum(len(src) for src, _ in corpus.splits.values()) == 21
    assert corpus.src_vocab.itos[:4] == ("", "[UNK]", "[START]", "[END]")
