"""Your own parallel corpus (shared.data.parallel, `rosetta train MODEL --corpus DIR --langs SRC,TGT`): tiny corpora
written to tmp_path, plain and .gz, read into the run's corpus/; the flat `Sequences` every corpus is stored in; and
each bad corpus or request refused with one error naming the file and line.

numpy only (spaCy for its tokenizer's tests, the [data] extra); no torch, no TensorFlow.
"""

from __future__ import annotations

import gzip
import json
import re
import tracemalloc

import numpy as np
import pytest

from shared import catalogue, data
from shared.cli import main as rosetta
from shared.data import corpora, parallel, parallel_options, text_files
from shared.data.vocab import TORCHTEXT_SPECIALS, build_vocab
from shared.train import evaluation, runs

GERMAN = ["ein hund läuft .", "zwei katzen schlafen .", "ein mann isst brot .", "ein hund schläft .", "zwei hunde laufen ."]
ENGLISH = ["a dog runs .", "two cats sleep .", "a man eats bread .", "a dog sleeps .", "two dogs run ."]
TEXT_MODELS = ["bahdanau_bigru", "luong_dot", "luong_general", "luong_concat", "tf_tutorial", "tf_tutorial_mha"]


def write(path, lines_or_bytes, gz: bool | None = None, line_end: str = "\n") -> None:
    """`path` holding the lines (each ended by `line_end`) or the bytes; gzipped when its name ends in .gz."""
    text = None if isinstance(lines_or_bytes, bytes) else "".join(f"{line}{line_end}" for line in lines_or_bytes)
    blob = lines_or_bytes if text is None else text.encode()
    path.write_bytes(gzip.compress(blob) if (path.name.endswith(".gz") if gz is None else gz) else blob)


def make_corpus(folder, end: str = "", test: bool = True, val_stem: str = "valid", line_end: str = "\n", repeat: int = 1):
    """train (5 pairs, `repeat` times over), valid (2) and test (2) of German -> English in `folder`, each file named
    `*.LANG{end}`, its lines ended by `line_end`."""
    folder.mkdir(parents=True, exist_ok=True)
    splits = {
        "train": (GERMAN * repeat, ENGLISH * repeat),
        val_stem: (["ein hund isst .", "zwei männer laufen ."], ["a dog eats .", "two men run ."]),
    }
    if test:
        splits["test"] = (["ein mann läuft .", "zwei katzen essen ."], ["a man runs .", "two cats eat ."])
    for stem, (de, en) in splits.items():
        write(folder / f"{stem}.de{end}", de, line_end=line_end)
        write(folder / f"{stem}.en{end}", en, line_end=line_end)
    return folder


def read(folder, model: str = "luong_general", **options):
    options = {"tokenizer": "whitespace", "min_freq": 1, **options}
    return data.load_corpus("corpus", path=folder, langs="de,en", **options, **parallel_options.layout(model))


# ---------------------------------------------------------------- reading


def test_plain_and_gz_files_read_alike(tmp_path):
    plain, gz = read(make_corpus(tmp_path / "plain")), read(make_corpus(tmp_path / "gz", ".gz"))
    assert plain.name == gz.name == corpora.OWN_CORPUS and plain.with_src_len
    assert plain.src_vocab == gz.src_vocab and plain.tgt_vocab == gz.tgt_vocab
    assert list(plain.splits) == ["train", "val", "test"] and plain.references == gz.references
    for split, sides in plain.splits.items():
        for mine, theirs in zip(sides, gz.splits[split], strict=True):
            assert np.array_equal(mine.ids, theirs.ids) and np.array_equal(mine.offsets, theirs.offsets)
    assert plain.references["test"] == [["a", "man", "runs", "."], ["two", "cats", "eat", "."]]
    files = gz.options["files"]
    assert [record["file"] for record in files["val"]] == ["valid.de.gz", "valid.en.gz"]
    assert files["train"][0]["bytes"] == (tmp_path / "gz" / "train.de.gz").stat().st_size
    assert plain.options["path"] == str((tmp_path / "plain").resolve()) and plain.options["langs"] == ["de", "en"]


def test_the_vocabulary_and_ids_are_build_vocabs_over_the_train_split(tmp_path):
    """Read streaming to provisional ids and remapped in place, the corpus equals the Multi30k reader's way: token
    lists, torchtext's build_vocab (min_freq, max size), `<sos>` + encode + `<eos>` on both sides."""
    rng = np.random.default_rng(0)
    words = [f"w{index}" for index in range(40)]
    sides = [[" ".join(rng.choice(words, rng.integers(1, 9))) for _ in range(300)] for _ in range(2)]
    folder = tmp_path / "c"
    folder.mkdir()
    for lang, lines in zip(("de", "en"), sides, strict=True):
        write(folder / f"train.{lang}.gz", lines)
        write(folder / f"dev.{lang}", lines[:7] + ["w0 unseen"])
    corpus = read(folder, min_freq=3, max_vocab=30)
    vocabs = (corpus.src_vocab, corpus.tgt_vocab)
    for side, lines, vocab, sequences in zip((0, 1), sides, vocabs, corpus.splits["train"], strict=True):
        tokens = [line.split() for line in lines]
        expected = build_vocab(tokens, min_freq=3, specials=TORCHTEXT_SPECIALS, unk_token="<unk>", max_size=30 - 4)
        assert vocab == expected and len(vocab) == 30, side
        assert [ids.tolist() for ids in sequences] == [[2, *expected.encode(sentence), 3] for sentence in tokens]
    assert corpus.splits["val"][1][-1].tolist() == [2, corpus.tgt_vocab.stoi["w0"], 0, 3]  # unseen -> <unk>
    assert corpus.splits["train"][0].ids.dtype == np.int32


def test_each_model_gets_the_specials_its_catalogue_entry_expects(tmp_path):
    folder = make_corpus(tmp_path / "c")
    names = {"luong_general": ["<unk>", "<pad>", "<sos>", "<eos>"], "tf_tutorial": ["<pad>", "<start>", "<end>", "<unk>"]}
    names["tf_tutorial_mha"] = ["", "[UNK]", "[START]", "[END]"]  # the 2022 tutorial's TextVectorization
    for model in TEXT_MODELS:
        spec, corpus = catalogue.get(model), read(folder, model)
        ids = {"pad_id": spec.pad_id, "sos_id": spec.sos_id, "eos_id": spec.eos_id}
        assert {key: corpus.special_ids[key] for key in ids} == ids
        assert corpus.vocab_overrides(model) == dict.fromkeys(spec.vocab_keys, 17)  # 13 words a side
        assert list(corpus.tgt_vocab.itos[:4]) == names.get(model, names["luong_general"])
        assert corpus.tgt_vocab.unk_id == corpus.special_ids["unk_id"]
        first = corpus.splits["train"][1][0]
        assert (first[0], first[-1]) == (spec.sos_id, spec.eos_id)


def test_negative_control_another_layout_or_a_model_of_no_text_is_refused(tmp_path):
    torchtext = read(make_corpus(tmp_path / "c"), "luong_general")
    with pytest.raises(ValueError, match=r"'tf_tutorial_mha' expects special ids \{'pad_id': 0, 'sos_id': 2, 'eos_id': 3\}"):
        torchtext.vocab_overrides("tf_tutorial_mha")
    with pytest.raises(ValueError, match="'reverse_bahdanau' trains on reverse, not on sentence pairs"):
        torchtext.vocab_overrides("reverse_bahdanau")
    with pytest.raises(ValueError, match="'reverse_bahdanau' trains on the synthetic reverse task.*--corpus trains .*luong_dot"):
        parallel_options.layout("reverse_bahdanau")
    with pytest.raises(ValueError, match="'additive_attention' trains on no data"):
        parallel_options.layout("additive_attention")
    multi30k_like = corpora.Corpus("multi30k", torchtext.src_vocab, torchtext.tgt_vocab, torchtext.special_ids, torchtext.splits)
    assert multi30k_like.vocab_overrides("luong_general")  # the control: the same ids under the document's name


def test_options_case_tokens_and_text_conventions(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    write(folder / "train.de", b"\xef\xbb\xbfEin  Hund\r\nZwei Katzen\n")  # a byte-order mark, CRLF, two spaces
    write(folder / "train.en", ["A dog", "Two cats"])
    write(folder / "val.de", ["Ein Hund"])
    write(folder / "val.en", ["A dog"])
    kept = read(folder, lowercase=False)
    assert kept.src_vocab.itos[4:] == ("Ein", "Hund", "Katzen", "Zwei")
    assert kept.src_vocab.decode(kept.splits["train"][0][0]) == ["<sos>", "Ein", "Hund", "<eos>"]
    assert read(folder).src_vocab.itos[4:] == ("ein", "hund", "katzen", "zwei")
    assert runs.final_split(kept) == "val"  # no test split: the final evaluation uses val
    assert parallel.source_tokens(kept, "  Zwei Hunde ") == ["<sos>", "Zwei", "Hunde", "<eos>"]
    assert evaluation.encode_sentence(kept, "Zwei Hunde")[0].tolist() == [[2, 7, 0, 3]]  # Hunde is unknown


def test_spacy_tokenizes_each_language():
    pytest.importorskip("spacy", reason="the spacy tokenizer needs the [data] extra")
    german = parallel.tokenizer("spacy", "de", lowercase=True)
    assert german("Ein Hund läuft,  schnell.") == ["ein", "hund", "läuft", ",", "schnell", "."]  # no whitespace token
    assert parallel.tokenizer("spacy", "en", lowercase=False)("Don't stop.") == ["Do", "n't", "stop", "."]
    with pytest.raises(ValueError, match="spaCy has no tokenizer for language 'zz'.*--tokenizer whitespace"):
        parallel.tokenizer("spacy", "zz", lowercase=True)


def test_spacy_corpus_and_translation_tokens(tmp_path):
    pytest.importorskip("spacy", reason="the spacy tokenizer needs the [data] extra")
    corpus = read(make_corpus(tmp_path / "c"), tokenizer="spacy")
    assert corpus.src_vocab.decode(corpus.splits["train"][0][0]) == ["<sos>", "ein", "hund", "läuft", ".", "<eos>"]
    assert parallel.source_tokens(corpus, "Ein Hund.") == ["<sos>", "ein", "hund", ".", "<eos>"]


def test_progress_without_tqdm_prints_every_ten_percent_and_a_summary(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)  # `from tqdm import tqdm` raises ImportError
    data.load_corpus("corpus", path=make_corpus(tmp_path / "c"), langs="de,en", tokenizer="whitespace", min_freq=1,
                     progress=True, **parallel_options.layout("luong_general"))  # fmt: skip
    err = capsys.readouterr().err
    assert "reading " in err and ": 100% of" in err
    assert "pairs train 5, val 2, test 2; vocabularies 17 / 17 tokens; unknown in val: src 12.5%, tgt 12.5%" in err


# ---------------------------------------------------------------- saved with a run


def test_a_saved_own_corpus_loads_back_and_batches_alike(tmp_path):
    corpus = read(make_corpus(tmp_path / "c", ".gz"))
    corpus.save(tmp_path / "saved")
    loaded = corpora.Corpus.load(tmp_path / "saved")
    assert (loaded.name, loaded.options, loaded.special_ids, loaded.references) == (
        corpus.name, corpus.options, corpus.special_ids, corpus.references
    )  # fmt: skip
    for split in corpus.splits:
        ours, theirs = (each.batches(split, 2, rng=np.random.default_rng(1)) for each in (corpus, loaded))
        assert len(ours) == len(theirs) == len(corpus.splits[split][0]) // 2 + len(corpus.splits[split][0]) % 2
        for mine, other in zip(ours, theirs, strict=True):
            assert all(mine[key].tobytes() == other[key].tobytes() for key in mine)


def test_the_runs_corpus_is_reused_for_the_same_request_and_refused_for_another(tmp_path, monkeypatch):
    folder = make_corpus(tmp_path / "c")
    options = {"path": str(folder), "langs": "de,en", "tokenizer": "whitespace", "min_freq": 1}
    run = runs.create_run(tmp_path / "run", "luong_general", corpus_options=options, dataset="corpus", max_steps=1)
    assert run.dataset == "corpus" and run.config["input_dim"] == run.config["output_dim"] == 17
    record = json.loads((tmp_path / "run" / runs.RUN_FILE).read_text())
    assert record["corpus_options"]["files"]["train"][1]["file"] == "train.en" and record["corpus_options"]["min_freq"] == 1
    monkeypatch.setattr(parallel, "read_corpus", lambda **_: pytest.fail("the saved corpus was read again"))
    assert runs.create_run(tmp_path / "run", "luong_general", corpus_options=options, dataset="corpus", max_steps=1) == run
    with pytest.raises(ValueError, match=r"read with other options: min_freq 1 \(saved\) vs 2 \(asked\)"):
        runs.create_run(tmp_path / "run", "luong_general", corpus_options={**options, "min_freq": 2}, dataset="corpus")
    with pytest.raises(ValueError, match=r"tokenizer 'whitespace' \(saved\) vs 'spacy' \(asked\)"):
        runs.create_run(tmp_path / "run", "luong_general", corpus_options={**options, "tokenizer": "spacy"}, dataset="corpus")
    with pytest.raises(ValueError, match=r"special_ids .* \(saved\) vs .* \(asked\)"):  # another model's layout
        runs.create_run(tmp_path / "run", "tf_tutorial_mha", corpus_options=options, dataset="corpus")
    write(folder / "train.en", [*ENGLISH[:-1], "two dogs ran ."])  # same size, other words
    with pytest.raises(ValueError, match=rf"{folder / 'train.en'} has changed since the run read it .*content \(sha256\)"):
        runs.create_run(tmp_path / "run", "luong_general", corpus_options=options, dataset="corpus", max_steps=1)
    write(folder / "train.en", ENGLISH)  # as it was: reused again
    assert runs.create_run(tmp_path / "run", "luong_general", corpus_options=options, dataset="corpus", max_steps=1) == run
    write(folder / "test.de", ["x"] * 3)
    with pytest.raises(ValueError, match=f"{folder / 'test.de'} has changed since the run read it .*its size"):
        runs.create_run(tmp_path / "run", "luong_general", corpus_options=options, dataset="corpus", max_steps=1)


def test_the_command_line_prepares_a_run_and_refuses_bad_requests(tmp_path, capsys):
    folder = make_corpus(tmp_path / "c", ".gz")
    base = ["train", "luong_general", "--corpus", str(folder), "--run-dir", str(tmp_path / "run"), "--quiet", "--prepare"]
    assert rosetta([*base, "--langs", "de,en", "--tokenizer", "whitespace", "--min-freq", "1", "--keep-case"]) == 0
    run = runs.load_run(tmp_path / "run")
    assert (run.dataset, run.corpus_options["lowercase"], run.corpus_options["tokenizer"]) == ("corpus", False, "whitespace")
    assert rosetta([*base, "--langs", "de,en", "--tokenizer", "whitespace", "--min-freq", "1", "--keep-case"]) == 0  # reused
    capsys.readouterr()
    refused = {
        "--max-vocab 10": "max_vocab None (saved) vs 10 (asked)",
        "--langs de": "--langs takes two language codes SRC,TGT",
        "--data-dir x": "--data-dir and --data-option are for the documents' data sets, --corpus names your own",
    }
    for flags, message in refused.items():
        argv = [*base, "--tokenizer", "whitespace", "--min-freq", "1", "--keep-case", *flags.split()]
        argv += [] if "--langs" in flags else ["--langs", "de,en"]
        assert rosetta(argv) == 2, flags
        assert message in capsys.readouterr().err, flags
    resumed = ["train", "luong_general", "--run-dir", str(tmp_path / "run"), "--resume", "--prepare", "--corpus", str(folder)]
    assert rosetta([*resumed, "--langs", "de,en", "--tokenizer", "whitespace", "--min-freq", "1", "--keep-case"]) == 0
    assert rosetta([*resumed, "--langs", "de,en", "--tokenizer", "whitespace", "--min-freq", "1"]) == 2  # lowercase now
    assert "lowercase False (saved) vs True (asked)" in capsys.readouterr().err
    assert rosetta(["train", "luong_general", "--langs", "de,en", "--run-dir", str(tmp_path / "x"), "--prepare"]) == 2
    assert "--langs describe an own corpus: pass --corpus DIR too" in capsys.readouterr().err
    assert rosetta(["train", "luong_general", "--corpus", str(folder), "--run-dir", str(tmp_path / "x"), "--prepare"]) == 2
    assert "--corpus needs --langs SRC,TGT" in capsys.readouterr().err
    assert (
        rosetta(["train", "reverse_bahdanau", "--corpus", str(folder), "--langs", "de,en", "--run-dir", str(tmp_path / "x")]) == 2
    )
    assert "'reverse_bahdanau' trains on the synthetic reverse task, not on sentence pairs" in capsys.readouterr().err
    assert not (tmp_path / "x").exists(), "a refused request left a run folder behind"


# ---------------------------------------------------------------- bad corpora: one error naming the file and line


def _bad(tmp_path, end: str, change) -> tuple:
    folder = make_corpus(tmp_path / "c", end)
    change(folder)
    return folder


@pytest.mark.parametrize("end", ["", ".gz"], ids=["plain", "gz"])
def test_unequal_line_counts_name_both_files_and_counts(tmp_path, end):
    folder = _bad(tmp_path, end, lambda f: write(f / f"test.en{end}", ["a man runs ."]))
    message = f"{folder / f'test.de{end}'} has 2 lines but {folder / f'test.en{end}'} has 1: the two sides of the test split"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        read(folder)
    write(folder / f"test.en{end}", ["a", "b", "c", "d"])
    with pytest.raises(ValueError, match="test.de.* has 2 lines but .*test.en.* has 4"):
        read(folder)


@pytest.mark.parametrize("end", ["", ".gz"], ids=["plain", "gz"])
def test_an_empty_line_names_its_file_and_line(tmp_path, end):
    folder = _bad(tmp_path, end, lambda f: write(f / f"train.en{end}", [*ENGLISH[:3], "   ", ENGLISH[4]]))
    message = f"{folder / f'train.en{end}'}, line 4: empty line; every line holds one sentence"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        read(folder)
    write(folder / f"train.en{end}", ENGLISH)
    write(folder / f"train.de{end}", [*GERMAN, ""])  # a blank last line is a line too: its pair is missing
    with pytest.raises(ValueError, match="train.de.* has 6 lines but .*train.en.* has 5"):
        read(folder)


@pytest.mark.parametrize("end", ["", ".gz"], ids=["plain", "gz"])
def test_a_byte_that_is_not_utf8_names_its_file_and_line(tmp_path, end):
    folder = _bad(tmp_path, end, lambda f: write(f / f"valid.de{end}", "ein hund isst .\nzwei m\xe4nner .\n".encode("latin-1")))
    message = f"{folder / f'valid.de{end}'}, line 2: not UTF-8 text (byte 0xe4 at byte 7 of the line)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        read(folder)


def test_a_gzip_file_without_its_suffix_gets_a_hint(tmp_path):
    folder = _bad(tmp_path, "", lambda f: write(f / "train.de", GERMAN, gz=True))
    with pytest.raises(ValueError, match=r"train.de, line 1: not UTF-8 .*\(the file looks gzip-compressed: name it .gz\)"):
        read(folder)


def test_a_truncated_or_corrupt_gz_names_the_file_and_line(tmp_path):
    lines = [f"satz nummer {index} ." for index in range(2000)]
    folder = make_corpus(tmp_path / "c", ".gz")
    write(folder / "train.de.gz", lines)
    write(folder / "train.en.gz", lines)
    blob = (folder / "train.de.gz").read_bytes()
    (folder / "train.de.gz").write_bytes(blob[: len(blob) - 40])  # the end of the stream cut off
    with pytest.raises(ValueError, match=r"train.de.gz, line (\d+): not a readable gzip file \(corrupt or truncated\)"):
        read(folder)
    write(folder / "train.de.gz", GERMAN, gz=False)  # plain text under a .gz name
    with pytest.raises(ValueError, match=r"^.*train.de.gz, line 1: not a readable gzip file \(corrupt or truncated\)"):
        read(folder)


@pytest.mark.parametrize("end", ["", ".gz"], ids=["plain", "gz"])
def test_lf_crlf_and_an_old_macs_cr_line_ends_read_alike(tmp_path, end, monkeypatch):
    """40 sentences a file ended by LF, CRLF or a lone CR: 40 pairs each time, the same corpus. Negative control: the
    reader that splits at LF alone reads the CR corpus as one pair a split, without a word."""
    corpora_read = {name: read(make_corpus(tmp_path / name, end, line_end=line_end, repeat=8))
                    for name, line_end in (("lf", "\n"), ("crlf", "\r\n"), ("cr", "\r"))}  # fmt: skip
    lf = corpora_read["lf"]
    assert len(lf.splits["train"][0]) == 40 and lf.references["test"][0] == ["a", "man", "runs", "."]
    for name, corpus in corpora_read.items():
        assert corpus.src_vocab == lf.src_vocab and corpus.references == lf.references, name
        for split, sides in corpus.splits.items():
            assert all(np.array_equal(mine.ids, theirs.ids) for mine, theirs in zip(sides, lf.splits[split], strict=True))
    monkeypatch.setattr(text_files, "_separator", lambda chunks, limit: (b"\n", []))  # the naive reader: LF only
    assert len(read(make_corpus(tmp_path / "naive", end, line_end="\r", repeat=8)).splits["train"][0]) == 1


def test_a_cr_inside_a_line_of_an_lf_file_stays_in_it(tmp_path):
    """A lone CR inside a line of an LF (or CRLF) file, its first line's too, is no line end (as `wc -l` and `paste`
    count): the sides still pair up. The line end is the one most of the first chunk's are: LF, else a lone CR."""
    folder = make_corpus(tmp_path / "c")
    write(folder / "train.de", [GERMAN[0].replace(" ", "\r", 1), *GERMAN[1:]], line_end="\r\n")
    corpus = read(folder)
    assert len(corpus.splits["train"][0]) == 5
    assert corpus.src_vocab.decode(corpus.splits["train"][0][0]) == ["<sos>", "ein", "hund", "läuft", ".", "<eos>"]
    cases = {(b"a\rb\nc",): b"\n", (b"a\rb\r",): b"\r", (b"a\r\nb\r\n",): b"\n", (b"a\rb\rc\nd\r",): b"\r", (b"ab",): b"\n",
             (b"ab", b"c\r"): b"\r", (b"ab", b"c\n"): b"\n"}  # fmt: skip
    for chunks, separator in cases.items():
        assert text_files._separator(iter(chunks), 100) == (separator, list(chunks)), chunks


def test_a_line_past_the_limit_names_its_file_and_line_and_the_variable_raises_it(tmp_path, monkeypatch):
    folder = make_corpus(tmp_path / "c")
    monkeypatch.delenv(text_files.MAX_LINE_VARIABLE, raising=False)
    long_line = "wort " * 20_000  # 100,000 bytes
    write(folder / "train.de", [*GERMAN[:3], long_line, GERMAN[4]])
    message = f"{folder / 'train.de'}, line 4: longer than 65,536 bytes, the longest line a corpus file may hold"
    with pytest.raises(ValueError, match=f"^{re.escape(message)} .* raise the limit with ROSETTA_MAX_LINE_BYTES=BYTES$"):
        read(folder)
    monkeypatch.setenv(text_files.MAX_LINE_VARIABLE, "100000")  # raised knowingly: the line is read (negative control)
    assert read(folder).splits["train"][0].lengths.tolist() == [6, 6, 7, 20_002, 6]
    monkeypatch.setenv(text_files.MAX_LINE_VARIABLE, "99999")  # one byte short
    with pytest.raises(ValueError, match="train.de, line 4: longer than 99,999 bytes"):
        read(folder)
    for bad in ("lots", "0", "-5"):
        monkeypatch.setenv(text_files.MAX_LINE_VARIABLE, bad)
        with pytest.raises(ValueError, match=f"^ROSETTA_MAX_LINE_BYTES='{bad}': the longest line of a corpus file is a number"):
            read(folder)


@pytest.mark.parametrize("end", ["", ".gz"], ids=["plain", "gz"])
def test_a_file_without_line_ends_is_refused_holding_no_more_than_a_chunk(tmp_path, monkeypatch, end):
    """Memory, not time: a line of 12 MiB is refused having held a few chunks of it (the reader's, gzip's); the negative
    control reads it with the limit raised and holds the line (more than its size) at once."""
    folder = make_corpus(tmp_path / "c", end)
    size = 12 << 20
    write(folder / f"train.de{end}", b"x" * size)
    write(folder / f"train.en{end}", ["y"])

    def peak() -> tuple[int, Exception | None]:
        tracemalloc.start()
        try:
            read(folder)
            error = None
        except ValueError as refused:
            error = refused
        finally:
            peak_bytes = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        return peak_bytes, error

    monkeypatch.delenv(text_files.MAX_LINE_VARIABLE, raising=False)
    guarded, error = peak()
    assert str(error).startswith(f"{folder / f'train.de{end}'}, line 1: longer than 65,536 bytes")
    assert guarded < size / 2, f"{guarded:,} bytes held to refuse a {size:,}-byte line"
    monkeypatch.setenv(text_files.MAX_LINE_VARIABLE, str(2 * size))
    naive, error = peak()
    assert error is None and naive > size, f"{naive:,} bytes held to read a {size:,}-byte line"


@pytest.mark.parametrize(
    "encoding, named, why",
    [
        ("utf-16", "utf-16", "it starts with a byte-order mark"),
        ("utf-16-be", "utf-16be", "NUL bytes in one of every two"),
        ("utf-16-le", "utf-16le", "NUL bytes in one of every two"),
        ("utf-32", "utf-32", "it starts with a byte-order mark"),
        ("utf-32-be", "utf-32be", "NUL bytes in two of every four"),
    ],
)
@pytest.mark.parametrize("end", ["", ".gz"], ids=["plain", "gz"])
def test_a_utf16_or_utf32_file_is_named_with_the_iconv_that_converts_it(tmp_path, monkeypatch, encoding, named, why, end):
    """Negative control: without the detection the same file gets the latin1 hint (which would corrupt it) or, with no
    byte-order mark, is not even refused as UTF-16."""
    folder = _bad(tmp_path, end, lambda f: write(f / f"train.de{end}", "".join(f"{line}\n" for line in GERMAN).encode(encoding)))
    message = f"{folder / f'train.de{end}'}: {named.upper()} text ({why}), not UTF-8; convert the file to UTF-8, e.g. "
    message += f"iconv -f {named} -t utf-8"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        read(folder)
    monkeypatch.setattr(text_files, "_wide_encoding", lambda head: None)
    with pytest.raises(ValueError) as naive:
        read(folder)
    assert f"iconv -f {named} " not in str(naive.value)


def test_a_nul_byte_in_utf8_text_is_no_utf16_and_named_where_it_is(tmp_path):
    folder = _bad(tmp_path, "", lambda f: write(f / "train.en", [*ENGLISH[:2], "a man\x00eats bread .", *ENGLISH[3:]]))
    message = f"{folder / 'train.en'}, line 3: a NUL byte (0x00) at byte 6 of the line: not text"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        read(folder)


def test_a_resume_naming_the_corpus_refuses_a_file_changed_since_the_run_read_it(tmp_path, capsys, monkeypatch):
    """`rosetta train --resume --corpus DIR` after train.en was edited: one line naming the file. Negative control:
    without the file check the resume carries on, saying nothing."""
    folder, run_dir = make_corpus(tmp_path / "c"), tmp_path / "run"
    argv = ["train", "luong_general", "--corpus", str(folder), "--langs", "de,en", "--tokenizer", "whitespace", "--min-freq",
            "1", "--run-dir", str(run_dir), "--quiet", "--prepare"]  # fmt: skip
    assert rosetta(argv) == 0 and rosetta([*argv, "--resume"]) == 0
    write(folder / "train.en", [*ENGLISH[:-1], "two dogs ran ."])  # same size, another word
    capsys.readouterr()
    assert rosetta([*argv, "--resume"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"rosetta train: {folder / 'train.en'} has changed since the run read it into {run_dir} (its content (sha256) "
        "differs): the run trains on the copy it read; put the file back as it was, or train the changed corpus in "
        "another --run-dir"
    )
    monkeypatch.setattr(parallel_options, "_check_files", lambda *args: None)
    assert rosetta([*argv, "--resume"]) == 0


def test_missing_or_ambiguous_files_say_what_was_looked_for(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=f"^no train split in {empty}: looked for train.de, train.de.gz, train.en, train.en.gz$"):
        read(empty)
    folder = make_corpus(tmp_path / "c")
    (folder / "train.en").unlink()
    with pytest.raises(ValueError, match=f"{folder} has train.de but no train file for en: looked for train.en, train.en.gz"):
        read(folder)
    folder = make_corpus(tmp_path / "d", val_stem="dev")
    write(folder / "dev.de.gz", ["x"])
    with pytest.raises(ValueError, match=f"{folder} holds dev.de and dev.de.gz: keep one val file for de"):
        read(folder)
    folder = make_corpus(tmp_path / "e")
    for lang in ("de", "en"):
        (folder / f"valid.{lang}").unlink()
    with pytest.raises(ValueError, match="no val split in .*: looked for valid.de, valid.de.gz, val.de, val.de.gz, dev.de"):
        read(folder)
    write(folder / "val.de", ["x"])
    write(folder / "dev.en", ["x"])
    with pytest.raises(ValueError, match="the val split is val.de and dev.en: name both sides alike"):
        read(folder)
    with pytest.raises(ValueError, match=f"--corpus {tmp_path / 'nope'}: no such folder"):
        read(tmp_path / "nope")
    write(folder / "val.en", [])
    (folder / "dev.en").unlink()
    write(folder / "val.de", [])
    with pytest.raises(ValueError, match="val.de and .*val.en are empty: the val split needs sentence pairs"):
        read(folder)


@pytest.mark.parametrize(
    "langs, message",
    [
        ("de", "--langs takes two language codes SRC,TGT"),
        ("de,en,fr", "--langs takes two language codes SRC,TGT"),
        ("de,", "--langs takes two language codes SRC,TGT"),
        ("de,e n", "--langs takes two language codes SRC,TGT"),
        ("../x,en", "--langs takes two language codes SRC,TGT"),
        ("de,de", "--langs names 'de' twice"),
    ],
)
def test_malformed_langs_are_refused(langs, message):
    with pytest.raises(ValueError, match=message):
        parallel_options.parse_langs(langs)


def test_bad_options_are_refused(tmp_path):
    folder = make_corpus(tmp_path / "c")
    with pytest.raises(ValueError, match="--tokenizer must be one of spacy, whitespace, got 'moses'"):
        read(folder, tokenizer="moses")
    with pytest.raises(ValueError, match="--max-vocab must be an integer >= 5, got 4"):
        read(folder, max_vocab=4)
    with pytest.raises(ValueError, match="--min-freq 9 leaves no word in the de vocabulary: .* seen 5 times"):
        read(folder, min_freq=9)
    with pytest.raises(ValueError, match="an own corpus takes no option seed"):
        parallel.read_corpus(path=folder, langs="de,en", seed=1, **parallel_options.layout("luong_general"))
    with pytest.raises(ValueError, match="needs the model's special tokens"):
        data.load_corpus("corpus", path=folder, langs="de,en")
    with pytest.raises(ValueError, match="needs its folder and languages: --corpus DIR --langs SRC,TGT"):
        data.load_corpus("corpus", langs="de,en", **parallel_options.layout("luong_general"))


def test_a_refused_corpus_leaves_no_run_folder(tmp_path):
    folder = _bad(tmp_path, "", lambda f: write(f / "train.en", ENGLISH[:4]))
    options = {"path": str(folder), "langs": "de,en", "tokenizer": "whitespace"}
    with pytest.raises(ValueError, match="has 5 lines but"):
        runs.create_run(tmp_path / "run", "luong_general", corpus_options=options, dataset="corpus")
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- Sequences: every corpus stored flat


def test_sequences_are_a_flat_list_of_views():
    arrays = [np.array([5, 6, 7]), np.array([8]), np.array([], dtype=np.int64), np.array([9, 10])]
    sequences = corpora.Sequences.from_arrays(arrays, np.int32)
    assert len(sequences) == 4 and sequences.ids.dtype == np.int32 and sequences.lengths.tolist() == [3, 1, 0, 2]
    assert [s.tolist() for s in sequences] == [a.tolist() for a in arrays] and sequences[-1].tolist() == [9, 10]
    assert np.shares_memory(sequences[0], sequences.ids)  # a view, no copy
    assert [s.tolist() for s in sequences[1:3]] == [[8], []] and isinstance(sequences[::2], list)
    assert sequences.pad(np.array([3, 1]), np.array([2, 1]), 0).tolist() == [[9, 10], [8, 0]]
    with pytest.raises(IndexError, match="sequence index 4 out of range for 4 sequences"):
        sequences[4]
    with pytest.raises(ValueError, match="offsets must rise from 0 to len"):
        corpora.Sequences(np.arange(3), np.array([0, 2, 1, 3]))
    with pytest.raises(ValueError, match="ids outside the range of int32"):
        corpora.Sequences.from_arrays([np.array([2**40])], np.int32)
    empty = corpora.Sequences.from_arrays([])
    assert len(empty) == 0 and list(empty) == []


def test_a_corpus_stores_lists_flat_and_batches_lazily():
    corpus = data.load_corpus("reverse", train_size=40, val_size=4, test_size=4)
    src, tgt = corpus.splits["train"]
    assert isinstance(src, corpora.Sequences) and src.ids.dtype == np.int32 and len(tgt) == 40
    batches = corpus.batches("train", 16, rng=np.random.default_rng(0))
    assert len(batches) == 3 and isinstance(batches[:2], list)
    again = list(batches)  # built again when read again: the same bytes
    assert all(a[key].tobytes() == b[key].tobytes() for a, b in zip(again, batches, strict=True) for key in a)
    assert len(corpus.batches("train", 16, drop_last=True)) == 2
