"""shared.train.metrics and shared.train.plots: known values, the BLEU cross-check, bad inputs, deterministic atomic PNGs.

Needs numpy, sacrebleu (BLEU tests) and matplotlib (heatmap tests) only; no framework.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from shared.train import metrics

PAD, SOS, EOS = 0, 1, 2


# perplexity


def test_perplexity_known_values():
    assert metrics.perplexity(0.0) == 1.0
    assert metrics.perplexity(math.log(7.5)) == pytest.approx(7.5, rel=1e-15)
    assert metrics.perplexity(np.float32(1.0)) == pytest.approx(math.e, rel=1e-7)
    assert metrics.perplexity(np.array(2.0)) == pytest.approx(math.e**2)


def test_perplexity_overflows_to_inf():
    assert metrics.perplexity(1000.0) == math.inf
    assert metrics.perplexity(math.inf) == math.inf


@pytest.mark.parametrize("loss, message", [(math.nan, "NaN"), (-0.5, ">= 0"), ("1.0", "real number"), (True, "real number")])
def test_perplexity_bad_loss_raises(loss, message):
    with pytest.raises(ValueError, match=message):
        metrics.perplexity(loss)


# token and sequence accuracy

TARGETS = np.array([[5, 6, 7, EOS], [5, 6, EOS, PAD], [8, EOS, PAD, PAD]])  # 9 scored positions


def test_accuracies_of_perfect_predictions():
    assert metrics.token_accuracy(TARGETS, TARGETS, PAD) == 1.0
    assert metrics.sequence_accuracy(TARGETS, TARGETS, PAD) == 1.0


def test_accuracies_known_values():
    predictions = np.array([[5, 6, 7, EOS], [5, 9, EOS, 4], [8, EOS, 3, 3]])  # row 1 misses one; pads not scored
    assert metrics.token_accuracy(predictions, TARGETS, PAD) == pytest.approx(8 / 9)
    assert metrics.sequence_accuracy(predictions, TARGETS, PAD) == pytest.approx(2 / 3)


def test_shorter_predictions_count_missing_positions_wrong():
    predictions = np.array([[5, 6], [5, 6], [8, EOS]])  # greedy stopped early: rows 0, 1 miss 7/EOS and EOS
    assert metrics.token_accuracy(predictions, TARGETS, PAD) == pytest.approx(6 / 9)
    assert metrics.sequence_accuracy(predictions, TARGETS, PAD) == pytest.approx(1 / 3)


def test_longer_predictions_are_truncated_to_the_targets():
    predictions = np.concatenate([TARGETS, np.full((3, 3), 9)], axis=1)  # [3, 7]: emits past the end
    assert metrics.token_accuracy(predictions, TARGETS, PAD) == 1.0
    assert metrics.sequence_accuracy(predictions, TARGETS, PAD) == 1.0


def test_missing_eos_is_wrong_when_targets_hold_eos():
    predictions = np.array([[5, 6, 7, 7], [5, 6, EOS, PAD], [8, EOS, PAD, PAD]])  # row 0 runs past its <eos>
    assert metrics.sequence_accuracy(predictions, TARGETS, PAD) == pytest.approx(2 / 3)


def test_accuracies_accept_lists_and_numpy_ids():
    assert metrics.token_accuracy(TARGETS.tolist(), TARGETS.astype(np.int32), np.int64(PAD)) == 1.0


@pytest.mark.parametrize("function", [metrics.token_accuracy, metrics.sequence_accuracy])
@pytest.mark.parametrize(
    "predictions, targets, pad_id, message",
    [
        (TARGETS.astype(float), TARGETS, PAD, "integer token ids"),
        (TARGETS, TARGETS.astype(float), PAD, "integer token ids"),
        (TARGETS[0], TARGETS, PAD, "2-D"),
        (TARGETS[:2], TARGETS, PAD, "2 rows, targets 3"),
        ([[1, 2], [3]], TARGETS, PAD, "rectangular"),
        (TARGETS, TARGETS, 0.0, "pad_id"),
        (TARGETS, TARGETS, True, "pad_id"),
        (np.zeros((0, 4), int), np.zeros((0, 4), int), PAD, "empty"),
    ],
)
def test_accuracies_bad_inputs_raise(function, predictions, targets, pad_id, message):
    with pytest.raises(ValueError, match=message):
        function(predictions, targets, pad_id)


def test_accuracies_of_all_padding_targets_raise():
    with pytest.raises(ValueError, match="no non-pad position"):
        metrics.token_accuracy(np.zeros((2, 3), int), np.zeros((2, 3), int), PAD)
    with pytest.raises(ValueError, match=r"rows \[1\] are all padding"):
        metrics.sequence_accuracy(TARGETS[:2], np.array([[5, EOS, PAD], [PAD, PAD, PAD]]), PAD)


# strip_special


def test_strip_special_keeps_the_tokens_before_the_first_eos():
    ids = np.array([SOS, 5, 6, PAD, 7, EOS, 8, EOS, PAD])
    assert metrics.strip_special(ids, EOS, PAD, SOS) == [5, 6, 7]
    assert metrics.strip_special(ids, EOS, PAD) == [SOS, 5, 6, 7]
    assert metrics.strip_special(np.array([5, 6]), EOS, PAD) == [5, 6]  # no <eos>: all of it
    assert metrics.strip_special(np.array([EOS, 5]), EOS, PAD) == []
    assert all(type(token) is int for token in metrics.strip_special(np.array([5, 6], np.int32), EOS, PAD))


@pytest.mark.parametrize(
    "ids, special, message",
    [
        (np.array([[5, EOS]]), (EOS, PAD), "1-D"),
        (np.array([5.0, 2.0]), (EOS, PAD), "integer token ids"),
        (np.array([5, EOS]), (2.0, PAD), "eos_id"),
        (np.array([5, EOS]), (EOS, PAD, "1"), "sos_id"),
    ],
)
def test_strip_special_bad_inputs_raise(ids, special, message):
    with pytest.raises(ValueError, match=message):
        metrics.strip_special(ids, *special)


# BLEU


def reference_bleu(hypotheses: list[list[str]], references: list[list[str]], max_n: int = 4) -> float:
    """torchtext's bleu_score with one reference each, times 100: brevity penalty x geometric mean of the
    clipped n-gram precisions, uniform weights; 0 when any order has no clipped match."""
    clipped, totals = [0] * max_n, [0] * max_n
    for hyp, ref in zip(hypotheses, references, strict=True):
        for n in range(1, max_n + 1):
            hyp_grams = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            ref_grams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            clipped[n - 1] += sum((hyp_grams & ref_grams).values())
            totals[n - 1] += sum(hyp_grams.values())
    if min(clipped) == 0:
        return 0.0
    hyp_len, ref_len = sum(map(len, hypotheses)), sum(map(len, references))
    penalty = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * penalty * math.exp(sum(math.log(c / t) for c, t in zip(clipped, totals, strict=True)) / max_n)


def _split(*sentences: str) -> list[list[str]]:
    return [sentence.split() for sentence in sentences]


CORPORA = {
    "short hypotheses (brevity penalty)": (
        _split("a dog runs on the grass .", "two men are playing soccer in a park"),
        _split("a brown dog runs on the green grass .", "two young men are playing soccer in the park ."),
    ),
    "long hypotheses, repeated n-grams (clipping)": (
        _split("the the the cat sat on the mat on the mat", "a man in a blue shirt is is standing"),
        _split("the cat sat on the mat", "a man in a blue shirt is standing on a ladder"),
    ),
    "German, punctuation and <unk> tokens": (
        _split("ein hund läuft durch das <unk> gras .", "eine frau , die ein buch liest .", "kinder spielen im park"),
        _split("ein brauner hund läuft durch das hohe gras .", "eine frau liest ein buch .", "kinder spielen im park ."),
    ),
}


@pytest.mark.parametrize("corpus", CORPORA, ids=list(CORPORA))
def test_bleu_equals_a_torchtext_style_reference(corpus):
    pytest.importorskip("sacrebleu")
    hypotheses, references = CORPORA[corpus]
    expected = reference_bleu(hypotheses, references)
    assert 0 < expected < 100  # non-degenerate: every order matches, not all perfect
    assert metrics.bleu(hypotheses, references) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_bleu_known_values():
    pytest.importorskip("sacrebleu")
    sentences = _split("a man is riding a horse on the beach", "two dogs play")
    assert metrics.bleu(sentences, sentences) == pytest.approx(100.0, rel=1e-12)
    # a sentence without 4-grams ("two dogs play") is fine while the corpus has some; no 4-gram match at all
    # scores 0, as torchtext does (sacrebleu's default "exp" smoothing would give 59.46 here)
    assert metrics.bleu(_split("a b c d"), _split("a b c e")) == 0.0
    assert metrics.bleu([[]], _split("a b c d")) == 0.0  # an empty hypothesis is allowed


@pytest.mark.parametrize(
    "hypotheses, references, message",
    [
        ([], [], "empty"),
        (_split("a b", "c d"), _split("a b"), "2 hypotheses but 1 references"),
        (["a b c"], _split("a b c"), r"hypotheses\[0\] must be a list of tokens"),
        ("a b c", _split("a b c"), "hypotheses must be a list of token lists"),
        ([["a", "b c"]], _split("a b c"), "without whitespace"),
        (_split("a b"), [["a", ""]], r"references\[0\].*without whitespace"),
        ([["a", 3]], _split("a b"), "non-empty strings"),
    ],
)
def test_bleu_bad_inputs_raise(hypotheses, references, message):
    pytest.importorskip("sacrebleu")
    with pytest.raises(ValueError, match=message):
        metrics.bleu(hypotheses, references)


# attention heatmaps

SOURCE = ["<sos>", "ein", "hund", "läuft", "$5$", "<eos>"]
OUTPUT = ["a", "dog", "runs", "<eos>"]


def _attention(rows: int = len(OUTPUT), columns: int = len(SOURCE)) -> np.ndarray:
    return np.random.default_rng(0).dirichlet(np.ones(columns), size=rows)  # [L, S], rows sum to 1


def _png_size(blob: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which must come first after the signature."""
    assert blob[:8] == b"\x89PNG\r\n\x1a\n" and blob[12:16] == b"IHDR"
    return struct.unpack(">II", blob[16:24])


@pytest.fixture
def plots():
    pytest.importorskip("matplotlib")
    from shared.train import plots

    return plots


def test_heatmap_writes_a_png_byte_identical_on_a_second_render(plots, tmp_path):
    first, second = tmp_path / "first.png", tmp_path / "second.png"
    assert plots.attention_heatmap(_attention(), SOURCE, OUTPUT, first, title="luong_dot") == first
    plots.attention_heatmap(_attention(), SOURCE, OUTPUT, str(second), title="luong_dot")
    width, height = _png_size(first.read_bytes())
    assert width > 0 and height > 0
    assert first.read_bytes() == second.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.png", "second.png"]  # no temporary left


def test_side_by_side_heatmaps_write_a_wider_png(plots, tmp_path):
    torch_attention = _attention()
    keras_attention = torch_attention + 1e-7
    panels = [("torch", torch_attention), ("Keras", keras_attention), ("|diff|", np.abs(keras_attention - torch_attention))]
    plots.side_by_side_heatmaps(panels, SOURCE, OUTPUT, tmp_path / "three.png", title="greedy attention")
    plots.attention_heatmap(torch_attention, SOURCE, OUTPUT, tmp_path / "one.png")
    assert _png_size((tmp_path / "three.png").read_bytes())[0] > _png_size((tmp_path / "one.png").read_bytes())[0]


def test_heatmap_leaves_pyplot_unimported(tmp_path):
    pytest.importorskip("matplotlib")
    code = (
        "import sys, numpy as np; from shared.train import plots; "
        f"plots.attention_heatmap(np.eye(2), ['a', 'b'], ['c', 'd'], {str(tmp_path / 'eye.png')!r}); "
        "sys.exit('pyplot imported' if 'matplotlib.pyplot' in sys.modules else 0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
    assert (tmp_path / "eye.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "attention, source, output, message",
    [
        (_attention(3, 6), SOURCE, OUTPUT, r"shape \(3, 6\).*4 output tokens \(rows\) and 6 source tokens"),
        (_attention().T, SOURCE, OUTPUT, r"shape \(6, 4\)"),
        (_attention()[0], SOURCE, OUTPUT, r"shape \(6,\)"),
        (np.zeros((0, 0)), [], [], "neither may be 0"),
        (np.where(np.eye(4, 6) > 0, np.nan, _attention()), SOURCE, OUTPUT, "NaN or inf"),
        (_attention().astype(complex), SOURCE, OUTPUT, "real numbers"),
        (_attention(), "abcdef", OUTPUT, "source_tokens must be a list of strings"),
        (_attention(), SOURCE, [1, 2, 3, 4], "output_tokens must be a list of strings"),
    ],
)
def test_heatmap_bad_inputs_raise_and_write_nothing(plots, tmp_path, attention, source, output, message):
    with pytest.raises(ValueError, match=message):
        plots.attention_heatmap(attention, source, output, tmp_path / "bad.png")
    assert not any(tmp_path.iterdir())


def test_heatmap_bad_paths_raise_and_write_nothing(plots, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plots.attention_heatmap(_attention(), SOURCE, OUTPUT, tmp_path / "missing" / "attention.png")
    with pytest.raises(ValueError, match=r"end in \.png"):
        plots.attention_heatmap(_attention(), SOURCE, OUTPUT, tmp_path / "attention.pdf")
    assert not any(tmp_path.iterdir())


def test_failed_render_or_write_leaves_no_file(plots, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    target = tmp_path / "attention.png"

    def broken(*args, **kwargs):
        raise RuntimeError("render failed")

    with monkeypatch.context() as patch:
        patch.setattr(Figure, "savefig", broken)
        with pytest.raises(RuntimeError, match="render failed"):
            plots.attention_heatmap(_attention(), SOURCE, OUTPUT, target)
    with monkeypatch.context() as patch:
        patch.setattr("shared.io.atomic.os.replace", broken)
        with pytest.raises(RuntimeError, match="render failed"):
            plots.attention_heatmap(_attention(), SOURCE, OUTPUT, target)
    assert not any(tmp_path.iterdir())
