"""`rosetta port` on TensorFlow NMT tutorial checkpoints (document 004's source): the tf-nmt presets, Keras 3
and Keras 2 (pre-Keras-3) files, separate part files, Adam's slots, and the revision read with the wrong
preset refused against the user's own model.

The checkpoints are written by the tutorial's own classes (tests/tutorials/tf_nmt_2020.py, tf_nmt_2021.py,
transcribed from the notebook) through tests/tutorials/tf_nmt_writer.py: Keras 3 in this process, Keras 2
(tf_keras, TF_USE_LEGACY_KERAS=1) in one subprocess per module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import torch

import torch_impl
from shared.cli import main as rosetta
from shared.port import porting
from tests.printed import load_as_printed
from tests.tutorials import tf_nmt_writer as writer

ROOT = Path(__file__).resolve().parents[2]


def reference_2021(path):
    """`--reference` as a tutorial user writes it: the 2021 notebook's models, `checkpoint.restore(...)`."""
    encoder, decoder = writer.build(writer.load_tutorial("2021"))
    tf.train.Checkpoint(encoder=encoder, decoder=decoder).restore(tf.train.latest_checkpoint(path)).expect_partial()
    return encoder, decoder


def _expected(job: Path) -> dict:
    with np.load(job / "expected.npz") as stored:
        return dict(stored)


def _torch_logits(path: Path, config: dict, expected: dict) -> np.ndarray:
    model = torch_impl.build("tf_tutorial", "float32", **config)
    torch_impl.set_weights(model, {key: value.numpy() for key, value in torch.load(path).items()})
    return torch_impl.run(model, "tf_tutorial", {"src": expected["src"], "tgt_in": expected["tgt_in"]})["logits"]


@pytest.mark.parametrize(("keras", "job"), [("keras3", "2020-adam"), ("keras3", "2021-adam"), ("keras2", "2021-legacy_adam")])
def test_a_tutorial_checkpoint_ports_each_way_and_matches_the_tutorials_model(request, tmp_path, keras, job):
    folder = request.getfixturevalue(keras) / job
    revision = job.split("-")[0]
    preset = f"tf-nmt-{revision}"
    report = porting.port(folder / "training_checkpoints", tmp_path / "nmt.pt", source_format=preset)
    assert report.ok, porting.render(report)
    # both revisions port into the catalogue's default model: 2021's W1 and W2 trade places on the way
    assert report.config["w1_on_query"] is False and report.inferred["units"] == writer.SIZES["units"]
    own = report.checks[-1]
    assert own.dtype == "float64" and preset in own.title and max(c.max_abs for c in own.components) < 1e-12
    expected = _expected(folder)
    as_printed = load_as_printed(porting.render(report))  # the line the port prints, run as a user pastes it
    ported = torch_impl.run(as_printed, "tf_tutorial", {"src": expected["src"], "tgt_in": expected["tgt_in"]})["logits"]
    error = np.abs(ported - expected["logits"]).max()
    assert error < 1e-7  # the tutorial's own forward pass, float32 (logits of magnitude 1e-2 here)
    other = _torch_logits(tmp_path / "nmt.pt", {**report.config, "w1_on_query": True}, expected)
    assert np.abs(other - expected["logits"]).max() > 100 * max(error, 1e-8)  # negative control: a model the line does not name

    back = porting.port(tmp_path / "nmt.pt", tmp_path / "training_checkpoints", to=preset)  # and back
    assert back.ok and preset in back.checks[-1].title, porting.render(back)
    encoder, decoder = writer.build(writer.load_tutorial(revision))
    status = tf.train.Checkpoint(encoder=encoder, decoder=decoder).restore(
        tf.train.latest_checkpoint(tmp_path / "training_checkpoints")
    )
    status.assert_existing_objects_matched()  # the tutorial's own restore (Keras 3)
    logits, _ = writer.logits(encoder, decoder, expected["src"], expected["tgt_in"])
    assert np.abs(logits - expected["logits"]).max() < 1e-5


def test_the_2021_tutorial_read_with_the_2020_preset_is_refused_against_the_users_model(keras3, tmp_path, capsys):
    source = keras3 / "2021-adam" / "training_checkpoints"
    argv = ["port", str(source), str(tmp_path / "nmt.pt"), "--from", "tf-nmt-2020"]
    assert rosetta([*argv, "--reference", "tests.cross.test_port_tf_layouts:reference_2021"]) == 1
    out = capsys.readouterr().out
    assert "against tests.cross.test_port_tf_layouts:reference_2021" in out and "(float64)" in out
    assert "not ported: attention weights, decoder step 0 differs (nothing written)" in out
    assert not (tmp_path / "nmt.pt").exists()
    assert rosetta([*argv[:-1], "tf-nmt-2021", "--reference", "tests.cross.test_port_tf_layouts:reference_2021"]) == 0
    capsys.readouterr()


def test_a_checkpoint_that_fits_both_revisions_is_named_as_such_and_never_ported_bare(keras3, tmp_path, capsys):
    """The 2020 and 2021 tutorials' checkpoints hold the same names and shapes: unnamed, the port is refused
    naming both; named, it is accepted with a line saying what else the file fits; only the user's own model
    (--reference) earns a bare `ported.`."""
    source, reference = keras3 / "2021-adam" / "training_checkpoints", "tests.cross.test_port_tf_layouts:reference_2021"
    argv = ["port", str(source), str(tmp_path / "nmt.pt")]
    assert rosetta([*argv, "--model", "tf_tutorial"]) == 2
    err = capsys.readouterr().err
    assert "the file fits 2 layouts whose models compute different functions" in err
    assert "the catalogue's own layout and tf-nmt-2020" not in err  # the layout read is the catalogue's own ...
    assert "tf-nmt-2021 (other arrays in decoder.attention.W1, decoder.attention.W2)" in err  # ... the other one
    assert "--from tf_checkpoint for the catalogue's own layout, --from tf-nmt-2021" in err and "--reference" in err
    assert not (tmp_path / "nmt.pt").exists()
    assert rosetta([*argv, "--from", "tf-nmt-2020"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("layout tf-nmt-2020:") for line in out)  # the catalogue's own mapping: nothing to say
    assert "the file also fits tf-nmt-2021 (other arrays in decoder.attention.W1, decoder.attention.W2)" in out[2]
    assert "ported." not in out and out[-2].startswith("ported as tf-nmt-2020, the layout you named (the file fits tf-nmt-2021")
    assert rosetta([*argv, "--from", "tf-nmt-2021", "--reference", reference, "--force"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == ("layout tf-nmt-2021: decoder.attention.W1 and decoder.attention.W2 trade places (so the catalogue's "
                      "model computes this layout's function)")  # fmt: skip
    assert "the file also fits the catalogue's own layout and tf-nmt-2020" in out[3] and "decides" in out[3]
    assert out[-2] == "ported."  # the user's own model was compared (float64, the 2021 tutorial's classes)


def test_a_swap_key_map_reads_the_2021_tutorial_into_the_2020_model(keras3, tmp_path):
    """W1 and W2 trade places: the 2021 function in document 004's own config (w1_on_query=False)."""
    swap = {"swap": ["decoder.attention.W1", "decoder.attention.W2"]}
    key_map = {"model": "tf_tutorial", "format": "tf_checkpoint", "transforms": [swap], "runner": "tf_impl.references:run_tf_nmt"}
    (tmp_path / "swap.json").write_text(json.dumps(key_map))
    report = porting.port(keras3 / "2021-adam" / "training_checkpoints", tmp_path / "doc.pt", key_map=str(tmp_path / "swap.json"),
                          reference="tests.cross.test_port_tf_layouts:reference_2021")  # fmt: skip
    assert report.ok and report.config["w1_on_query"] is False, porting.render(report)
    expected = _expected(keras3 / "2021-adam")
    assert np.abs(_torch_logits(tmp_path / "doc.pt", report.config, expected) - expected["logits"]).max() < 1e-5


def test_part_files_port_and_a_single_part_says_what_is_missing(keras2, keras3, tmp_path, capsys):
    parts = keras2 / "2021-legacy_adam" / "parts"
    source = f"encoder={parts / 'enc'},decoder={parts / 'dec'}"
    assert rosetta(["port", source, str(tmp_path / "a.pt"), "--from", "tf-nmt-2021"]) == 0
    assert "ported as tf-nmt-2021, the layout you named" in capsys.readouterr().out
    h5 = keras3 / "2020-adam" / "parts"
    source = f"encoder={h5 / 'encoder.weights.h5'},decoder={h5 / 'decoder.weights.h5'}"
    sets = [f"--set={key}={value}" for key, value in writer.SIZES.items()]  # .weights.h5 names no sizes
    assert rosetta(["port", source, str(tmp_path / "b.pt"), "--from", "tf-nmt-2020", *sets]) == 0
    capsys.readouterr()
    assert rosetta(["port", str(parts / "enc"), str(tmp_path / "c.pt"), "--from", "tf-nmt-2021"]) == 2
    err = capsys.readouterr().err
    assert "holds the encoder of tf_tutorial" in err and "the decoder is missing: pass encoder=" in err
    assert rosetta(["port", str(h5 / "encoder.weights.h5"), str(tmp_path / "d.pt"), "--from", "tf-nmt-2020", *sets]) == 2
    err = capsys.readouterr().err  # Keras alone: "A total of 8 objects could not be loaded"
    assert "holds the encoder of tf_tutorial" in err and "pass encoder=" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt"]


def test_adam_slots_of_a_keras2_checkpoint_port_exactly(keras2, tmp_path):
    source = keras2 / "2021-legacy_adam" / "training_checkpoints"
    report = porting.port(source, tmp_path / "nmt.pt", source_format="tf-nmt-2021", with_optimizer=True)
    assert report.ok, porting.render(report)
    state = torch.load(tmp_path / "nmt.pt")["optimizer"]["state"]
    expected = _expected(keras2 / "2021-legacy_adam")
    assert all(int(entry["step"]) == int(expected["step"]) for entry in state.values())
    embedding = torch.load(tmp_path / "nmt.pt")["model"]
    index = list(embedding).index("encoder.embedding.weight")
    assert np.array_equal(state[index]["exp_avg"].numpy(), expected["m/encoder/embedding/embeddings"])
