"""shared.data and shared.data.vocab: the reverse task, Multi30k, spa-eng, batches, and the saved corpus.

Needs numpy (and spaCy for Multi30k); no torch, no TensorFlow. The data folder is $ROSETTA_DATA_DIR, else
../shared/data beside the repository; tests that need it skip, naming the path, where it is absent.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from shared import catalogue, data, documents
from shared.data import corpora, readers
from shared.data.vocab import Vocab, build_keras_vocab, build_vocab
from tests.data_files import need_data

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def multi30k() -> corpora.Corpus:
    """Multi30k tokenized once for the module (a few seconds: spaCy's import and 31k sentence pairs)."""
    pytest.importorskip("spacy", reason="Multi30k is tokenized with spaCy (the [data] extra)")
    return readers.read_multi30k(need_data("multi30k", "wmt16"))


@pytest.fixture(scope="module")
def spa_eng() -> corpora.Corpus:
    return readers.read_spa_eng(need_data("spa-eng", "spa-eng.zip").parent)


def write_gz(path: Path, text: str | bytes) -> None:
    path.write_bytes(gzip.compress(text.encode() if isinstance(text, str) else text))


def fake_multi30k(folder: Path, lines: int = 3) -> Path:
    """A tiny WMT16-like folder: every split's .de.gz and .en.gz, `lines` pairs each, an empty last line."""
    folder.mkdir(parents=True, exist_ok=True)
    for stem in readers.MULTI30K_FILES.values():
        write_gz(folder / f"{stem}.de.gz", "".join(f"Ein Hund läuft {i}.\n" for i in range(lines)) + "\n")
        write_gz(folder / f"{stem}.en.gz", "".join(f"A dog runs {i}.\n" for i in range(lines)) + "\n")
    return folder


# ---------------------------------------------------------------- vocabularies


def test_build_vocab_orders_as_torchtext():
    tokens = [["b", "a", "c", "b"], ["a", "d", "c", "<pad>"], ["e", "b"]]
    vocab = build_vocab(tokens, min_freq=2)
    # specials first; then b (3); then a and c (2), alphabetical; d, e (1) and the special <pad> are not counted
    assert vocab.itos == ("<unk>", "<pad>", "<sos>", "<eos>", "b", "a", "c")
    assert vocab.encode(["c", "zzz", "b"]) == [6, 0, 4]
    assert vocab.decode(np.array([4, 5, 0])) == ["b", "a", "<unk>"]
    assert len(build_vocab(tokens, min_freq=1)) == 9


def test_keras_vocab_orders_by_count_then_first_seen():
    vocab = build_keras_vocab([["<start>", "z", "y", "<end>"], ["<start>", "y", "x", "<end>"]])
    assert vocab.itos == ("<pad>", "<start>", "y", "<end>", "z", "x")  # ties in first-seen order, id 0 reserved
    with pytest.raises(ValueError, match="no <unk>.*'w'"):
        vocab.encode(["y", "w"])


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda: Vocab(["a", "b", "a"]), "tokens twice"),
        (lambda: Vocab(["a", ""]), "non-empty strings"),
        (lambda: Vocab(["a"], specials=["<pad>"]), "not in the vocabulary"),
        (lambda: Vocab(["<unk>", "a"], specials=["<unk>"], unk_token="a"), "must be one of the specials"),
        (lambda: Vocab(["a", "b"]).decode([2]), r"token id 2 is outside the vocabulary \[0, 2\)"),
        (lambda: build_vocab([["a"]], min_freq=0), "min_freq must be a positive integer"),
    ],
    ids=["duplicate", "empty-token", "special-missing", "unk-not-special", "decode-out-of-range", "min-freq-zero"],
)
def test_vocab_rejects_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


def test_vocab_save_load_round_trip(tmp_path):
    vocab = build_vocab([["ä", "ß", "ß", " ", " "], ["ä"]], min_freq=2)
    vocab.save(tmp_path / "vocab.json")
    loaded = Vocab.load(tmp_path / "vocab.json")
    assert loaded == vocab and loaded.fingerprint == vocab.fingerprint and len(loaded) == len(vocab) == 7
    assert loaded.stoi["ß"] == vocab.stoi["ß"] and loaded.unk_id == 0
    assert len(vocab.fingerprint) == 64
    reordered = Vocab([*vocab.itos[:4], *reversed(vocab.itos[4:])], vocab.specials, vocab.unk_token)
    assert reordered.fingerprint != vocab.fingerprint  # same tokens, other ids: another vocabulary
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.json"]  # no temporary file left behind


def test_vocab_load_rejects_missing_truncated_and_edited_files(tmp_path):
    path = tmp_path / "vocab.json"
    with pytest.raises(ValueError, match=f"{path} does not exist"):
        Vocab.load(path)
    build_vocab([["a", "a", "b", "b"]]).save(path)
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match=f"{path} is not valid JSON"):
        Vocab.load(path)
    record = json.loads(blob)
    record["itos"][-1] = "c"  # hand-edited: the recorded fingerprint no longer fits
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"{path} is corrupt: its tokens hash to"):
        Vocab.load(path)
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="is not a vocabulary"):
        Vocab.load(path)
    with pytest.raises(ValueError, match="folder .* does not exist"):
        build_vocab([["a"]]).save(tmp_path / "nowhere" / "vocab.json")


# ---------------------------------------------------------------- the reverse task (document 001)


def test_reverse_task_is_deterministic_and_reversed():
    arrays = readers.reverse_task(32, seed=5)
    assert all(arrays[key].shape == (32, 10) and arrays[key].dtype == np.int64 for key in ("src", "tgt_in", "tgt_out"))
    assert np.array_equal(arrays["tgt_out"], arrays["src"][:, ::-1])
    assert (arrays["tgt_in"][:, 0] == catalogue.SOS_ID).all() and np.array_equal(
        arrays["tgt_in"][:, 1:], arrays["tgt_out"][:, :-1]
    )
    assert arrays["src"].min() >= 3 and arrays["src"].max() < 20
    again, other = readers.reverse_task(32, seed=5), readers.reverse_task(32, seed=6)
    assert all(np.array_equal(arrays[key], again[key]) for key in arrays)
    assert not np.array_equal(arrays["src"], other["src"])
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 4"):
        readers.reverse_task(4, vocab_size=3)


def test_reverse_corpus_batches_match_reverse_task():
    corpus = data.load_corpus("reverse", train_size=64, val_size=8, test_size=8)
    assert (len(corpus.src_vocab), corpus.with_src_len) == (20, False)
    assert corpus.vocab_overrides("reverse_bahdanau") == {"vocab_size": 20}
    batch = corpus.batches("train", 32)[0]
    assert set(batch) == {"src", "tgt_in", "tgt_out"}  # the reverse-task models take no src_len
    expected = readers.reverse_task(80, seed=0)
    assert all(np.array_equal(batch[key], expected[key][:32]) for key in batch)


# ---------------------------------------------------------------- batches


def _sequences(lengths, start=5):
    return [np.arange(start, start + n, dtype=np.int64) for n in lengths]


def test_batches_pad_and_shift_in_order():
    src, tgt = _sequences([3, 1, 4, 2, 5]), _sequences([4, 2, 3, 5, 2])
    out = corpora.batches(src, tgt, 2, pad_id=1)
    assert [len(batch["src"]) for batch in out] == [2, 2, 1]
    first = out[0]
    assert np.array_equal(first["src"], [[5, 6, 7], [5, 1, 1]]) and np.array_equal(first["src_len"], [3, 1])
    # targets padded first, then shifted: tgt_in[:, t + 1] == tgt_out[:, t] (the short row's last token stays in tgt_in)
    assert np.array_equal(first["tgt_in"], [[5, 6, 7], [5, 6, 1]])
    assert np.array_equal(first["tgt_out"], [[6, 7, 8], [6, 1, 1]])
    assert all(array.dtype == np.int64 for batch in out for array in batch.values())
    assert len(corpora.batches(src, tgt, 2, pad_id=1, drop_last=True)) == 2


def test_batches_bucket_with_rng():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, 1000)
    src, tgt = _sequences(lengths), _sequences(lengths + 1)
    for index, sequence in enumerate(src):
        sequence[0] = 1000 + index  # a unique first token names the example
    out = corpora.batches(src, tgt, 16, pad_id=0, rng=np.random.default_rng(1))
    seen = np.concatenate([batch["src"][:, 0] for batch in out]) - 1000
    assert sorted(seen.tolist()) == list(range(1000))  # every example exactly once
    assert all(np.array_equal(batch["src_len"], lengths[batch["src"][:, 0] - 1000]) for batch in out)
    padding = sum((batch["src"] == 0).sum() for batch in out) / sum(batch["src"].size for batch in out)
    in_order = corpora.batches(src, tgt, 16, pad_id=0)
    padding_in_order = sum((batch["src"] == 0).sum() for batch in in_order) / sum(batch["src"].size for batch in in_order)
    assert padding < 0.05 < padding_in_order
    assert all((np.diff(batch["src_len"]) <= 0).all() for batch in out)  # longest source first in each batch
    again = corpora.batches(src, tgt, 16, pad_id=0, rng=np.random.default_rng(1))
    assert all(np.array_equal(a["src"], b["src"]) for a, b in zip(out, again, strict=True))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tgt": _sequences([3])}, "2 source sequences but 1 target"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"rng": 3}, "rng must be a numpy Generator"),
        ({"tgt": _sequences([1, 3])}, "every target >= 2"),
    ],
    ids=["count-mismatch", "batch-size-zero", "rng-int", "target-too-short"],
)
def test_batches_reject_bad_input(kwargs, message):
    args = {"src": _sequences([2, 3]), "tgt": _sequences([3, 3]), "batch_size": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        corpora.batches(args.pop("src"), args.pop("tgt"), args.pop("batch_size"), pad_id=0, **args)


# ---------------------------------------------------------------- the saved corpus


def test_corpus_save_load_round_trip(tmp_path):
    corpus = data.load_corpus("reverse", train_size=50, val_size=5, test_size=5, seed=3)
    corpus.save(tmp_path)
    loaded = corpora.Corpus.load(tmp_path)
    assert (loaded.name, loaded.special_ids, loaded.options) == (corpus.name, corpus.special_ids, corpus.options)
    assert loaded.src_vocab == corpus.src_vocab and loaded.tgt_vocab == corpus.tgt_vocab
    for split, sides in corpus.splits.items():
        for mine, theirs in zip(sides, loaded.splits[split], strict=True):
            assert len(mine) == len(theirs) and all(np.array_equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.npz", "src_vocab.json", "tgt_vocab.json"]


def test_corpus_load_rejects_another_vocab_and_corrupt_files(tmp_path):
    with pytest.raises(ValueError, match=f"no saved corpus at {tmp_path}"):
        corpora.Corpus.load(tmp_path)
    data.load_corpus("reverse", train_size=10, val_size=2, test_size=2).save(tmp_path)
    good_vocab = (tmp_path / corpora.TGT_VOCAB_FILE).read_bytes()
    readers.reverse_vocab(21).save(tmp_path / corpora.TGT_VOCAB_FILE)  # a corpus saved with another vocab
    with pytest.raises(ValueError, match="made with another tgt vocabulary"):
        corpora.Corpus.load(tmp_path)
    (tmp_path / corpora.TGT_VOCAB_FILE).write_bytes(good_vocab)
    blob = (tmp_path / corpora.CORPUS_FILE).read_bytes()
    (tmp_path / corpora.CORPUS_FILE).write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match="corpus.npz is unreadable"):
        corpora.Corpus.load(tmp_path)


def test_load_corpus_cache_and_options(tmp_path):
    first = data.load_corpus("reverse", cache_dir=tmp_path, train_size=20, val_size=2, test_size=2)
    again = data.load_corpus("reverse", cache_dir=tmp_path, train_size=20, val_size=2, test_size=2)
    assert np.array_equal(np.stack(first.splits["train"][0]), np.stack(again.splits["train"][0]))
    with pytest.raises(ValueError, match="the corpus saved in .* is reverse with"):
        data.load_corpus("reverse", cache_dir=tmp_path, train_size=21, val_size=2, test_size=2)
    with pytest.raises(ValueError, match="takes no option min_freq"):
        data.load_corpus("reverse", min_freq=2)
    with pytest.raises(ValueError, match="unknown dataset 'wmt14'"):
        data.load_corpus("wmt14")


# ---------------------------------------------------------------- where the data is, which model uses what


def test_resolve_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    with pytest.raises(ValueError, match=f"pass --data-dir or set {data.ENV_VAR}"):
        data.resolve_data_dir(None)
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    assert data.resolve_data_dir(None) == tmp_path
    assert data.resolve_data_dir(tmp_path / "..") == tmp_path / ".."  # the command line wins
    with pytest.raises(ValueError, match=f"{tmp_path / 'missing'} \\(from --data-dir"):
        data.resolve_data_dir(tmp_path / "missing")
    with pytest.raises(ValueError, match="does not exist"):
        data.load_corpus("multi30k", data_dir=tmp_path / "missing")


def test_dataset_for_model():
    expected = {"additive_attention": None, "bahdanau_bigru": "multi30k", "tf_tutorial": "spa_eng"}
    expected["tf_tutorial_mha"] = "spa_eng_2022"
    expected.update({name: "reverse" for name in catalogue.CATALOGUE if name.startswith("reverse_")})
    expected.update({name: "multi30k" for name in catalogue.CATALOGUE if name.startswith("luong_")})
    assert {name: documents.dataset_for_model(name) for name in catalogue.CATALOGUE} == expected
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        documents.dataset_for_model("gpt")


def test_importing_shared_data_imports_numpy_only():
    code = "import sys, shared.data; bad = {'spacy', 'torch', 'tensorflow', 'sacrebleu'} & set(sys.modules); print(sorted(bad))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# ---------------------------------------------------------------- Multi30k (documents 002/003)


def test_multi30k_vocab_sizes_and_specials(multi30k):
    assert (len(multi30k.src_vocab), len(multi30k.tgt_vocab)) == (7853, 5893)  # the tutorials' published sizes
    assert multi30k.src_vocab.itos[:4] == multi30k.tgt_vocab.itos[:4] == ("<unk>", "<pad>", "<sos>", "<eos>")
    assert multi30k.special_ids == {"unk_id": 0, **catalogue.MULTI30K_SPECIALS}
    assert {split: len(src) for split, (src, _) in multi30k.splits.items()} == {"train": 29000, "val": 1014, "test": 1000}
    for name in ("bahdanau_bigru", "luong_dot"):
        spec = catalogue.get(name)
        assert multi30k.vocab_overrides(name) == {key: spec.config[key] for key in spec.vocab_keys}


def test_multi30k_sentences_are_wrapped(multi30k):
    src, tgt = multi30k.splits["train"]
    assert all(s[0] == 2 and s[-1] == 3 for s in src[:500] + tgt[:500])
    words = "<sos> two young , white males are outside near many bushes . <eos>".split()
    assert multi30k.tgt_vocab.decode(tgt[0]) == words
    assert multi30k.src_vocab.decode(src[0])[:4] == ["<sos>", "zwei", "junge", "weiße"]
    assert len(multi30k.references["test"]) == 1000 and multi30k.references["test"][0][:2] == ["a", "man"]


def test_multi30k_saved_corpus_round_trip(multi30k, tmp_path):
    multi30k.save(tmp_path)
    loaded = corpora.Corpus.load(tmp_path)
    assert loaded.src_vocab.fingerprint == multi30k.src_vocab.fingerprint
    assert all(np.array_equal(a, b) for a, b in zip(loaded.splits["val"][1], multi30k.splits["val"][1], strict=True))
    assert loaded.references == multi30k.references
    batch = loaded.batches("train", 128, rng=np.random.default_rng(0))[0]
    assert batch["src"].shape[0] == 128 and batch["src_len"].max() == batch["src"].shape[1]
    assert batch["tgt_in"].shape == batch["tgt_out"].shape and (batch["tgt_in"][:, 0] == 2).all()


def test_multi30k_data_dir_forms(tmp_path):
    pytest.importorskip("spacy", reason="Multi30k is tokenized with spaCy (the [data] extra)")
    fake_multi30k(tmp_path / "multi30k" / "wmt16")
    for folder in (tmp_path, tmp_path / "multi30k", tmp_path / "multi30k" / "wmt16"):
        corpus = readers.read_multi30k(folder, min_freq=1)
        assert len(corpus.splits["train"][0]) == 3  # the empty last line is dropped
    assert corpus.tgt_vocab.itos[4:7] == (".", "a", "dog")


def test_multi30k_rejects_missing_folder_and_file(tmp_path):
    with pytest.raises(ValueError, match=f"no Multi30k under {tmp_path}: expected the WMT16 task-1 files"):
        readers.read_multi30k_text(tmp_path)
    with pytest.raises(ValueError, match=f"the Multi30k folder {tmp_path / 'nope'} does not exist"):
        readers.read_multi30k_text(tmp_path / "nope")
    fake_multi30k(tmp_path)
    (tmp_path / "test2016.en.gz").unlink()
    with pytest.raises(ValueError, match=f"Multi30k file {tmp_path / 'test2016.en.gz'} is missing"):
        readers.read_multi30k_text(tmp_path)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda path: path.write_bytes(b"not a gzip file"), "is not a readable gzip file"),
        (lambda path: path.write_bytes(path.read_bytes()[:-12]), "is not a readable gzip file"),  # truncated
        (lambda path: write_gz(path, b"Ein \xff Hund\n"), "is not UTF-8 text"),
        (lambda path: write_gz(path, "eins\nzwei\n"), r"val.de.gz has 2 lines but .*val.en.gz has 3"),
    ],
    ids=["not-gzip", "truncated-gzip", "bad-utf8", "line-count-mismatch"],
)
def test_multi30k_rejects_bad_files(tmp_path, damage, message):
    fake_multi30k(tmp_path)
    damage(tmp_path / "val.de.gz")
    with pytest.raises(ValueError, match=message) as error:
        readers.read_multi30k_text(tmp_path)
    assert str(tmp_path / "val.de.gz") in str(error.value)


# ---------------------------------------------------------------- spa-eng (document 004)


def test_spa_eng_preprocessing_is_the_tutorials():
    assert readers.preprocess_sentence("¿Todavía está en casa?") == "<start> ¿ todavia esta en casa ? <end>"
    assert readers.preprocess_sentence("May I borrow this book?") == "<start> may i borrow this book ? <end>"
    assert readers.preprocess_sentence('  Tom\'s 3 cats, "hi"!') == "<start> tom s cats , hi ! <end>"


def test_spa_eng_vocab_sizes_and_specials(spa_eng):
    # the tutorial's vocab_inp_size and vocab_tar_size: len(word_index) + 1
    assert (len(spa_eng.src_vocab), len(spa_eng.tgt_vocab)) == (9414, 4935)
    spec = catalogue.get("tf_tutorial")
    assert spa_eng.vocab_overrides("tf_tutorial") == {key: spec.config[key] for key in spec.vocab_keys}
    assert spa_eng.special_ids == {"pad_id": 0, "sos_id": 1, "eos_id": 2, "unk_id": None}
    assert spa_eng.src_vocab.itos[:3] == ("<pad>", "<start>", "<end>")
    assert {split: len(src) for split, (src, _) in spa_eng.splits.items()} == {"train": 24000, "val": 6000}
    lengths = [max(len(s) for split in spa_eng.splits.values() for s in split[side]) for side in (0, 1)]
    assert lengths == [16, 11]  # the tutorial's max_length_inp, max_length_targ


def test_spa_eng_split_is_seeded():
    first, again, other = (readers.read_spa_eng(need_data("spa-eng"), num_examples=1000, seed=seed) for seed in (0, 0, 1))
    assert {split: len(src) for split, (src, _) in first.splits.items()} == {"train": 800, "val": 200}
    assert all(np.array_equal(a, b) for a, b in zip(first.splits["val"][0], again.splits["val"][0], strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first.splits["val"][0], other.splits["val"][0], strict=True))


def _zip(path: Path, member: str, text: str) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, text)


def test_spa_eng_rejects_bad_files(tmp_path):
    with pytest.raises(ValueError, match=f"no spa-eng data under {tmp_path}: expected the tutorial's spa-eng.zip"):
        readers.read_spa_eng(tmp_path)
    (tmp_path / "spa-eng.zip").write_bytes(b"PK not really a zip")
    with pytest.raises(ValueError, match="spa-eng.zip is not a readable zip archive"):
        readers.read_spa_eng(tmp_path)
    _zip(tmp_path / "spa-eng.zip", "spa.txt", "Go.\tVe.\n")
    with pytest.raises(ValueError, match="holds no spa-eng/spa.txt"):
        readers.read_spa_eng(tmp_path)
    _zip(tmp_path / "spa-eng.zip", readers.SPA_ENG_MEMBER, "Go.\tVe.\nRun!\tCorre!\tCC-BY\n")
    with pytest.raises(ValueError, match="line 2 has 3 tab-separated fields"):
        readers.read_spa_eng(tmp_path, num_examples=2)
    with pytest.raises(ValueError, match="num_examples 5 exceeds the 2 pairs"):
        readers.read_spa_eng(tmp_path, num_examples=5)
    corpus = readers.read_spa_eng(tmp_path, num_examples=1, val_fraction=0.5)
    assert corpus.tgt_vocab.decode(corpus.splits["val"][1][0]) == ["<start>", "go", ".", "<end>"]
