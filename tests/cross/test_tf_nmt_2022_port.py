"""`rosetta port --from/--to tf-nmt-2022`: TensorFlow's NMT tutorial as it is today (the 2022 rewrite), its files
ported as a user ports them, both ways.

The files are written by the tutorial's own classes (tf_impl/tutorials/nmt_2022.py, through
tests/tutorials/tf_nmt_2022.py): `model.save_weights('x.weights.h5')`, and the tutorial's export,
`tf.saved_model.save(Export(model), ...)` with real TextVectorization layers in the model. The ported model (the
`load it:` line run as printed) is compared with the tutorial's on a padded batch (sources and targets padded
with 0 at the end, rows of different lengths), at the real target positions: float64 and float32. Negative
controls: the tutorial built with `merge_mode='concat'` is refused from either file; a swapped key/value
projection, or the model run without its masks, moves the logits by orders more than the bounds.
"""

from __future__ import annotations

import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import torch_impl
import torch_impl.models.tf_tutorial_mha as torch_tutorial_mha
from shared.cli import main as rosetta
from shared.port import porting
from tests.printed import load_as_printed
from tests.tutorials import tf_nmt_2022 as tutorial
from tf_impl import references
from tf_impl.keras_compat.backends import exact_float64, float64_policy

UNITS = 11
SENTENCES = {  # a few sentences each side: the tutorial's TextVectorization layers adapted on them
    "context": ["[START] si quieres sonar como un hablante nativo [END]", "[START] tengo hambre [END]",
                "[START] el gato duerme en la casa [END]", "[START] quieres agua [END]"],
    "target": ["[START] if you want to sound like a native speaker [END]", "[START] i am hungry [END]",
               "[START] the cat sleeps in the house [END]"],
}  # fmt: skip
LENGTHS = {"src": [7, 5, 3], "tgt_in": [5, 2, 4]}  # each row's real tokens; 0 (padding) after


class Export(tf.Module):
    """The tutorial's export (`export = Export(model)`, then `tf.saved_model.save(export, 'translator', ...)`),
    without its `translate` function (the transcription has no `Translator.translate`)."""

    def __init__(self, model):
        self.model = model


def _processors() -> dict:
    """The tutorial's `context_text_processor` and `target_text_processor`, adapted on SENTENCES (its own
    standardisation is tensorflow-text's; the sentences here are standardised already)."""
    processors = {}
    for side, sentences in SENTENCES.items():
        processors[side] = keras.layers.TextVectorization(max_tokens=5000, standardize=None, ragged=True)
        processors[side].adapt(sentences)
    return processors


def _padded(vocab: dict) -> tuple[np.ndarray, np.ndarray]:
    """(context, target_in): token ids >= 1 up to each row's length, 0 after."""
    context, target_in = tutorial.example_batch(3, 7, 5, vocab["context"], vocab["target"], seed=3)
    for ids, key in ((context, "src"), (target_in, "tgt_in")):
        ids[np.arange(ids.shape[1]) >= np.array(LENGTHS[key])[:, None]] = 0
    return context, target_in


def _transcription(vocab: dict, processors: dict | None = None):
    """The tutorial's `Translator(UNITS, context_text_processor, target_text_processor)`, its processors kept on
    the encoder and decoder as the tutorial's are; built by its first call."""
    model = tutorial.translator(vocab["context"], vocab["target"], UNITS)
    if processors is not None:
        model.encoder.text_processor, model.decoder.text_processor = processors["context"], processors["target"]
    tutorial.teacher_forced(model, *_padded(vocab))
    return model


def _tutorial_outputs(model, batch) -> tuple[np.ndarray, np.ndarray]:
    logits = tutorial.teacher_forced(model, *batch).numpy()  # [B, T, V]
    return logits, model.decoder.last_attention_weights.numpy()  # [B, T, S]


def _torch_outputs(model, batch) -> tuple[np.ndarray, np.ndarray]:
    found = torch_impl.run(model, "tf_tutorial_mha", {"src": batch[0], "tgt_in": batch[1]})
    return found["logits"], found["attention"]


def _real(array: np.ndarray) -> np.ndarray:
    """The real target positions of a [B, T, ...] array (padded steps dropped)."""
    return array[np.arange(array.shape[1]) < np.array(LENGTHS["tgt_in"])[:, None]]


def _error(reference: tuple, candidate: tuple) -> tuple[float, float]:
    """Max |diff| of (logits, attention) at the real target positions."""
    return tuple(float(np.abs(_real(a) - _real(b)).max()) for a, b in zip(reference, candidate, strict=True))


def _errors(err: str) -> list[str]:
    """rosetta's error lines (stderr holds Keras's warnings about the tutorial's masks too)."""
    return [line for line in err.splitlines() if line.startswith("rosetta port: ")]


@pytest.fixture(scope="module")
def tutorial_files(tmp_path_factory):
    """The tutorial's files, each written as the tutorial writes it: `tut.weights.h5` and the SavedModel `translator`
    (its text processors in it), the float32 model that wrote them, the vocabulary sizes, the padded batch."""
    folder = tmp_path_factory.mktemp("tf_nmt_2022")
    keras.utils.set_random_seed(0)  # the tutorial's initializers: the same weights every run
    processors = _processors()
    vocab = {side: processor.vocabulary_size() for side, processor in processors.items()}
    model = _transcription(vocab, processors)
    model.save_weights(folder / "tut.weights.h5")
    tf.saved_model.save(Export(model), str(folder / "translator"))
    return {"folder": folder, "model": model, "vocab": vocab, "batch": _padded(vocab)}


def test_the_tutorials_weights_port_to_torch_and_back_and_compute_the_tutorials_function(tutorial_files, tmp_path):
    folder, model, vocab, batch = (tutorial_files[key] for key in ("folder", "model", "vocab", "batch"))
    assert (batch[0] == 0).any() and (batch[1] == 0).any()  # padded: the masks act
    report = porting.port(folder / "tut.weights.h5", tmp_path / "tut.pt", source_format="tf-nmt-2022")
    printed = porting.render(report)
    assert report.ok and printed.splitlines()[-2] == "ported.", printed
    assert report.inferred == {"units": UNITS, "context_vocab_size": vocab["context"], "target_vocab_size": vocab["target"]}
    own = report.checks[-1]  # the tutorial's own classes holding the file, run in float64
    assert own.dtype == "float64" and "tf-nmt-2022's own model" in own.title and max(c.max_abs for c in own.components) < 1e-12

    ported = load_as_printed(printed)  # float32, as the line builds it
    expected32 = _tutorial_outputs(model, batch)
    logits32, attention32 = _error(expected32, _torch_outputs(ported, batch))
    assert logits32 < 1e-5 and attention32 < 1e-5
    with float64_policy():
        model64 = _transcription(vocab)
    exact_float64(model64)  # Keras rounds MultiHeadAttention's 1/sqrt(units) to float32 on TensorFlow: 1e-10 else
    model64.load_weights(folder / "tut.weights.h5")  # the same float32 values, widened exactly
    expected64 = _tutorial_outputs(model64, batch)
    logits64, attention64 = _error(expected64, _torch_outputs(ported.double(), batch))
    assert logits64 < 1e-12 and attention64 < 1e-12
    print(f"\nweights.h5 -> .pt, real target positions: float64 logits {logits64:.1e}, attention {attention64:.1e}; "
          f"float32 logits {logits32:.1e}, attention {attention32:.1e}")  # fmt: skip

    # negative controls: what a wrong port computes, against the same float64 numbers
    swapped = torch_impl.build("tf_tutorial_mha", "float64", **report.config)
    state = {key: value.double() for key, value in torch.load(tmp_path / "tut.pt").items()}
    for key in ("decoder.attention.mha.in_proj_weight", "decoder.attention.mha.in_proj_bias"):
        q, k, v = state[key].chunk(3)
        state[key] = torch.cat([q, v, k])
    swapped.load_state_dict(state)
    swapped_error = _error(expected64, _torch_outputs(swapped, batch))  # key and value projections swapped
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch_tutorial_mha, "PAD_ID", -1)  # the model without its masks: pads read as tokens
        unmasked = _error(expected64, _torch_outputs(ported, batch))
    print(
        f"negative controls (logits, attention): k/v swapped {swapped_error[0]:.1e}, {swapped_error[1]:.1e}; "
        f"no masks {unmasked[0]:.1e}, {unmasked[1]:.1e}"
    )
    assert swapped_error[0] > 1e-2 and unmasked[0] > 1e-2 and unmasked[1] > 1e-2  # 1e7 times the float32 bound

    back = porting.port(tmp_path / "tut.pt", tmp_path / "back.weights.h5", to="tf-nmt-2022")  # and back
    assert back.ok and "tf-nmt-2022's own model" in back.checks[-1].title, porting.render(back)
    reloaded = tutorial.translator(vocab["context"], vocab["target"], UNITS)
    tutorial.teacher_forced(reloaded, *batch)
    reloaded.load_weights(tmp_path / "back.weights.h5")  # the tutorial's own load
    assert max(_error(expected32, _tutorial_outputs(reloaded, batch))) == 0.0  # the same float32 values


def test_the_tutorials_savedmodel_export_ports_its_text_processors_left_out_with_a_note(tutorial_files, tmp_path, capsys):
    folder, model, batch = (tutorial_files[key] for key in ("folder", "model", "batch"))
    source = folder / "translator"
    assert rosetta(["port", str(source), str(tmp_path / "tut.pt"), "--from", "tf-nmt-2022"]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].startswith(f"{source} (TensorFlow SavedModel, layout tf-nmt-2022) -> ")
    note = next(line for line in lines if line.startswith("left out, no weights of the model: "))
    assert "model/encoder/text_processor/" in note and "model/decoder/text_processor/" in note, note
    assert f"(tf_impl.references:tf_nmt_2022) holding {source} (float64)" in printed and lines[-2] == "ported."
    logits, attention = _error(_tutorial_outputs(model, batch), _torch_outputs(load_as_printed(printed), batch))
    assert logits < 1e-5 and attention < 1e-5


def test_a_savedmodel_of_the_model_itself_reads_and_writing_one_is_refused(tutorial_files, tmp_path, capsys):
    """`tf.saved_model.save(translator, ...)`: the model at the root, read by the tutorial's reference (TensorFlow's
    own restore); a SavedModel is never written: one error says what to write instead."""
    model, batch = tutorial_files["model"], tutorial_files["batch"]
    tf.saved_model.save(model, str(tmp_path / "root"))
    restored = references.tf_nmt_2022(tmp_path / "root")
    assert max(_error(_tutorial_outputs(model, batch), _tutorial_outputs(restored, batch))) == 0.0
    source = str(tutorial_files["folder"] / "tut.weights.h5")
    for destination, flags in (("out", ["--to", "saved_model"]), ("root", ["--to", "tf-nmt-2022", "--force"])):
        assert rosetta(["port", source, str(tmp_path / destination), "--model", "tf_tutorial_mha", *flags]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / destination}: rosetta port reads a TensorFlow SavedModel but does not write one" in err
        assert ".weights.h5" in err and len(_errors(err)) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["root"]


def test_the_tutorial_with_concatenated_directions_is_refused_from_either_file(tutorial_files, tmp_path, capsys):
    """Negative control: `Bidirectional(merge_mode='concat')` makes the context twice as wide; the attention's key
    and value projections do not fit, and each file is refused by name, nothing written."""
    vocab = tutorial_files["vocab"]
    model = tutorial.translator(vocab["context"], vocab["target"], UNITS)
    model.encoder.rnn = tf.keras.layers.Bidirectional(
        merge_mode="concat", layer=tf.keras.layers.GRU(UNITS, return_sequences=True, recurrent_initializer="glorot_uniform")
    )
    tutorial.teacher_forced(model, *tutorial_files["batch"])
    model.save_weights(tmp_path / "concat.weights.h5")
    tf.saved_model.save(Export(model), str(tmp_path / "concat"))
    for source, path in (("concat.weights.h5", "decoder/attention/mha/value_dense/vars/0"),
                         ("concat", "decoder/attention/mha/_value_dense/kernel")):  # fmt: skip
        assert rosetta(["port", str(tmp_path / source), str(tmp_path / "out.pt"), "--from", "tf-nmt-2022"]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / source} does not fit tf_tutorial_mha: mis-shaped " in err, err
        assert f"{path} (model ({UNITS}, 1, {UNITS}), file ({2 * UNITS}, 1, {UNITS}))" in err
        assert len(_errors(err)) == 1
    assert not (tmp_path / "out.pt").exists()


def test_a_bad_savedmodel_is_refused_by_name_and_nothing_is_written(tutorial_files, tmp_path, capsys):
    """A truncated variables file, a SavedModel without its variables' index, a variable beside the model (not
    a table: refused, never dropped), `--with-optimizer` on an export without one: one error each, naming the folder."""
    saved = tutorial_files["folder"] / "translator"
    cases = {"truncated": "variables/variables: cannot read its object graph", "no_index": "a SavedModel without variables/"}
    for case in cases:
        shutil.copytree(saved, tmp_path / case)
    data = tmp_path / "truncated" / "variables" / "variables.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:100])
    (tmp_path / "no_index" / "variables" / "variables.index").unlink()
    export = Export(tutorial_files["model"])
    export.temperature = tf.Variable(1.0)  # beside the model: no weight of it, but a variable
    tf.saved_model.save(export, str(tmp_path / "extra"))
    cases["extra"] = "does not fit tf_tutorial_mha: missing paths: "
    for case, message in [*cases.items(), ("extra", "temperature")]:
        assert rosetta(["port", str(tmp_path / case), str(tmp_path / "out.pt"), "--from", "tf-nmt-2022"]) == 2
        errors = _errors(capsys.readouterr().err)
        assert len(errors) == 1 and errors[0].startswith(f"rosetta port: {tmp_path / case}") and message in errors[0], errors
    assert rosetta(["port", str(saved), str(tmp_path / "out.pt"), "--from", "tf-nmt-2022", "--with-optimizer"]) == 2
    assert f"{saved}: holds no optimizer state" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["extra", "no_index", "truncated"]
