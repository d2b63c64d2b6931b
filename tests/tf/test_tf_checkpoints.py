"""tf_impl.checkpoints: the TensorFlow NMT tutorial's checkpoints (document 004) read into `tf_tutorial`, and written back.

The tutorial's own classes (tests/tutorials/tf_nmt_2020.py and tf_nmt_2021.py, transcribed from the notebook)
are trained three steps and saved as the tutorial saves them by tests/tutorials/tf_nmt_writer.py: in this
process (Keras 3), and once per module in a subprocess with TF_USE_LEGACY_KERAS=1 (Keras 2, from tf_keras;
those tests skip only where tf_keras cannot be imported: tox's tf and cross envs install it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import STACKS

if "tf" not in STACKS:
    pytest.skip("the tf stack is not under test (ROSETTA_STACKS)", allow_module_level=True)

import tensorflow as tf  # noqa: E402

import tf_impl  # noqa: E402
from tests.tutorials import tf_nmt_writer as writer  # noqa: E402
from tf_impl import checkpoints, object_graph  # noqa: E402
from tf_impl.weights import get_grads  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAME = "tf_tutorial"
PAIRS = {"encoder": "enc", "decoder": "dec"}  # the Keras 2 part files' names (TF format)
H5_PARTS = {"encoder": "encoder.weights.h5", "decoder": "decoder.weights.h5"}


def _model(**overrides):
    return tf_impl.build(NAME, **writer.SIZES, **overrides)


def _expected(job: Path) -> dict:
    with np.load(job / "expected.npz") as stored:
        return dict(stored)


def _assert_holds(model, expected: dict) -> None:
    """The model's variables equal the writer's (exact), and its logits the tutorial's on the writer's batch."""
    variables = checkpoints.variable_paths(model)
    assert sorted(variables) == sorted(key[len("var/") :] for key in expected if key.startswith("var/"))
    for path, variable in variables.items():
        np.testing.assert_array_equal(variable.numpy(), expected[f"var/{path}"], err_msg=path)
    outputs = _run(model, expected)
    np.testing.assert_allclose(outputs["logits"], expected["logits"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(outputs["attention"], expected["attention"], rtol=0, atol=1e-6)


def _run(model, expected: dict) -> dict:
    """Our model through the contract on the writer's batch: `logits (B, T, V)`, `attention (B, T, S)`."""
    return tf_impl.run(model, NAME, {"src": expected["src"], "tgt_in": expected["tgt_in"]})


def _canonical_moments(model, expected: dict) -> dict:
    """The writer's Adam moments in canonical layout, through the weights' leaf rules."""
    paths = {id(variable): path for path, variable in checkpoints.variable_paths(model).items()}
    return {
        name: get_grads(model, lambda v, k=k: expected[f"{k}/{paths[id(v)]}"])
        for name, k in (("exp_avg", "m"), ("exp_avg_sq", "v"))
    }


def _assert_state(state: dict, model, expected: dict) -> None:
    assert state["step"] == int(expected["step"]) == writer.STEPS
    for name, moments in _canonical_moments(model, expected).items():
        assert sorted(state[name]) == sorted(moments)
        for key, value in moments.items():
            np.testing.assert_array_equal(state[name][key], value, err_msg=f"{name} {key}")


# ---- whole checkpoints, Keras 3 and Keras 2 ----


@pytest.mark.parametrize("form", ["folder", "prefix", "index"])
def test_keras3_checkpoint_loads_exactly_and_computes_the_tutorials_logits(keras3, form):
    folder = keras3 / "2020-adam" / "training_checkpoints"
    source = {"folder": folder, "prefix": folder / "ckpt-1", "index": folder / "ckpt-1.index"}[form]
    model = _model()
    assert checkpoints.read(source, model) is None
    _assert_holds(model, _expected(keras3 / "2020-adam"))


@pytest.mark.parametrize("optimizer", ["legacy_adam", "adam"])
def test_keras2_checkpoint_loads_exactly_and_computes_the_tutorials_logits(keras2, optimizer):
    model = _model()
    checkpoints.read(keras2 / f"2020-{optimizer}" / "training_checkpoints", model)
    _assert_holds(model, _expected(keras2 / f"2020-{optimizer}"))


def test_keras3_adam_state_is_read_exactly(keras3):
    model = _model()
    state = checkpoints.read(keras3 / "2020-adam" / "training_checkpoints", model, with_optimizer=True)
    _assert_state(state, model, _expected(keras3 / "2020-adam"))
    assert (state["lr"], state["betas"], state["eps"]) == (0.001, None, None)  # Keras 3 saves no betas


def test_keras2_slot_variables_are_read_exactly(keras2):
    model = _model()
    state = checkpoints.read(keras2 / "2020-legacy_adam" / "training_checkpoints", model, with_optimizer=True)
    _assert_state(state, model, _expected(keras2 / "2020-legacy_adam"))
    assert (state["lr"], state["betas"], state["eps"]) == (0.001, (0.9, 0.999), None)


def test_keras2_optimizer_of_tf_2_11_to_2_15_cannot_be_paired(keras2):
    model = _model()
    before = {path: v.numpy() for path, v in checkpoints.variable_paths(model).items()}
    with pytest.raises(ValueError, match=r"TF 2\.11-2\.15 .* cannot be paired reliably; read without with_optimizer"):
        checkpoints.read(keras2 / "2020-adam" / "training_checkpoints", model, with_optimizer=True)
    for path, variable in checkpoints.variable_paths(model).items():  # refused before anything was loaded
        np.testing.assert_array_equal(variable.numpy(), before[path])


def test_the_2021_revision_loads_into_w1_on_query_and_not_into_the_2020_model(keras3):
    source, expected = keras3 / "2021-adam" / "training_checkpoints", _expected(keras3 / "2021-adam")
    model = _model(w1_on_query=True)
    checkpoints.read(source, model)
    _assert_holds(model, expected)
    model_2020 = _model()  # same names and shapes: it loads, and computes another function
    checkpoints.read(source, model_2020)
    outputs = _run(model_2020, expected)  # W1 on the values: attention off by ~6e-3 (equal to 1e-6 above)
    assert np.abs(outputs["attention"] - expected["attention"]).max() > 1e-4


def test_a_model_saved_under_one_name_loads(tmp_path):
    source = _model()
    tf.train.Checkpoint(model=source).write(str(tmp_path / "model"))
    model = _model()
    checkpoints.read(tmp_path / "model", model)
    for path, variable in checkpoints.variable_paths(model).items():
        np.testing.assert_array_equal(variable.numpy(), checkpoints.variable_paths(source)[path].numpy())


# ---- the tutorial's separate part files ----


def test_keras2_part_files_load_as_parts(keras2):
    parts = keras2 / "2020-legacy_adam" / "parts"
    model = _model()
    checkpoints.read({part: parts / name for part, name in PAIRS.items()}, model)
    _assert_holds(model, _expected(keras2 / "2020-legacy_adam"))


def test_keras3_weights_h5_part_files_load_as_parts(keras3):
    parts = keras3 / "2020-adam" / "parts"
    model = _model()
    checkpoints.read({part: parts / name for part, name in H5_PARTS.items()}, model)
    _assert_holds(model, _expected(keras3 / "2020-adam"))


def test_keras_alone_cannot_load_a_part_file_into_the_whole_model(keras3):
    with pytest.raises(ValueError, match="A total of 8 objects could not be loaded"):
        _model().load_weights(str(keras3 / "2020-adam" / "parts" / "encoder.weights.h5"))


@pytest.mark.parametrize("kind", ["keras2", "keras3"])
def test_a_single_part_file_says_which_part_it_holds(request, kind):
    folder = request.getfixturevalue(kind) / ("2020-legacy_adam" if kind == "keras2" else "2020-adam") / "parts"
    names = PAIRS if kind == "keras2" else H5_PARTS
    encoder, decoder = folder / names["encoder"], folder / names["decoder"]
    with pytest.raises(ValueError) as refused:
        checkpoints.read(encoder, _model())
    message = f"{encoder}: holds the encoder of tf_tutorial (embedding, gru); the decoder is missing: "
    message += f"pass encoder={encoder},decoder=PATH"
    assert str(refused.value) == message
    with pytest.raises(
        ValueError, match=r"holds the decoder of tf_tutorial \(.*\); the encoder is missing: pass encoder=PATH,decoder="
    ):
        checkpoints.read(decoder, _model())


def test_parts_hold_no_optimizer_state_and_must_be_the_models_parts(keras3):
    parts = {part: keras3 / "2020-adam" / "parts" / name for part, name in H5_PARTS.items()}
    with pytest.raises(ValueError, match="hold no optimizer state"):
        checkpoints.read(parts, _model(), with_optimizer=True)
    with pytest.raises(ValueError, match="tf_tutorial has the parts encoder, decoder"):
        checkpoints.read({"encoder": parts["encoder"]}, _model())


# ---- writing ----


def test_written_checkpoint_restores_with_the_tutorials_own_code(keras3, tmp_path):
    model = _model()
    state = checkpoints.read(keras3 / "2020-adam" / "training_checkpoints", model, with_optimizer=True)
    assert checkpoints.write(model, tmp_path / "training_checkpoints", state) == str(tmp_path / "training_checkpoints" / "ckpt-1")
    assert sorted(os.listdir(tmp_path)) == ["training_checkpoints"]
    assert sorted(os.listdir(tmp_path / "training_checkpoints")) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    root = object_graph.Stored(tmp_path / "training_checkpoints").graph.nodes[0]
    assert sorted(child.local_name for child in root.children) == ["decoder", "encoder", "optimizer", "save_counter"]

    tutorial = writer.load_tutorial("2020")
    encoder, decoder = writer.build(tutorial)  # other weights until restored
    optimizer = tf.keras.optimizers.Adam()
    optimizer.build(encoder.trainable_variables + decoder.trainable_variables)  # as its first apply_gradients does
    checkpoint = tf.train.Checkpoint(optimizer=optimizer, encoder=encoder, decoder=decoder)  # the notebook's lines
    status = checkpoint.restore(tf.train.latest_checkpoint(str(tmp_path / "training_checkpoints")))
    status.assert_existing_objects_matched()

    expected = _expected(keras3 / "2020-adam")
    logits, attention = writer.logits(encoder, decoder, expected["src"], expected["tgt_in"])
    np.testing.assert_array_equal(logits, expected["logits"])
    np.testing.assert_array_equal(attention, expected["attention"])
    assert int(optimizer.iterations.numpy()) == writer.STEPS
    for path, variable in writer.named_variables(encoder, decoder).items():
        m, v = writer.moments(optimizer, variable)
        np.testing.assert_array_equal(m, expected[f"m/{path}"], err_msg=path)
        np.testing.assert_array_equal(v, expected[f"v/{path}"], err_msg=path)


def test_written_checkpoint_reads_back_exactly(keras3, tmp_path):
    model = _model()
    state = checkpoints.read(keras3 / "2020-adam" / "training_checkpoints", model, with_optimizer=True)
    checkpoints.write(model, tmp_path / "out", state)
    again = _model()
    state_again = checkpoints.read(tmp_path / "out", again, with_optimizer=True)
    _assert_holds(again, _expected(keras3 / "2020-adam"))
    _assert_state(state_again, again, _expected(keras3 / "2020-adam"))
    assert state_again["lr"] == state["lr"]

    checkpoints.write(model, tmp_path / "weights_only")
    with pytest.raises(ValueError, match="holds no optimizer state"):
        checkpoints.read(tmp_path / "weights_only", _model(), with_optimizer=True)


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    model = _model()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep").write_text("mine")
    with pytest.raises(ValueError, match="exists and is not an empty folder"):
        checkpoints.write(model, tmp_path / "taken")
    assert (tmp_path / "taken" / "keep").read_text() == "mine"

    bad_state = {"step": 3, "exp_avg": {"encoder.embedding.weight": np.zeros((2, 2))}, "exp_avg_sq": {}}
    with pytest.raises(ValueError, match="missing keys"):
        checkpoints.write(model, tmp_path / "out", bad_state)

    def save_half(self, file_prefix, **kwargs):
        Path(f"{file_prefix}-1.index").write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(tf.train.Checkpoint, "save", save_half)
    with pytest.raises(OSError, match="disk full"):
        checkpoints.write(model, tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == ["taken"]


# ---- strictness ----


def _nested_checkpoint(arrays: dict, prefix: Path) -> None:
    """A checkpoint whose object graph holds `arrays` (path -> array) as variables, by tf.Module attributes."""
    root = tf.Module()
    for path, array in arrays.items():
        *owners, name = path.split("/")
        node = root
        for owner in owners:
            if not hasattr(node, owner):
                setattr(node, owner, tf.Module())
            node = getattr(node, owner)
        setattr(node, name, tf.Variable(array))
    tf.train.Checkpoint(**{name: value for name, value in vars(root).items() if not name.startswith("_")}).write(str(prefix))


def test_missing_unexpected_and_misshaped_paths_are_listed_at_once(tmp_path):
    arrays = {path: variable.numpy() for path, variable in checkpoints.variable_paths(_model()).items()}
    del arrays["decoder/fc/bias"]
    arrays["decoder/fc/extra"] = np.zeros(3, np.float32)
    arrays["encoder/embedding/embeddings"] = np.zeros((22, 7), np.float32)
    _nested_checkpoint(arrays, tmp_path / "bad")
    model = _model()
    before = {path: v.numpy() for path, v in checkpoints.variable_paths(model).items()}
    with pytest.raises(ValueError) as refused:
        checkpoints.read(tmp_path / "bad", model)
    assert str(refused.value) == (
        f"{tmp_path / 'bad'} does not fit tf_tutorial: missing paths: decoder/fc/bias | unexpected paths: decoder/fc/extra"
        " | mis-shaped paths: encoder/embedding/embeddings (model (23, 7), file (22, 7))"
    )
    for path, variable in checkpoints.variable_paths(model).items():  # nothing was loaded
        np.testing.assert_array_equal(variable.numpy(), before[path])


def test_a_checkpoint_of_nested_modules_with_the_models_paths_loads(tmp_path):
    arrays = {path: variable.numpy() + 1 for path, variable in checkpoints.variable_paths(_model()).items()}
    _nested_checkpoint(arrays, tmp_path / "good")
    model = _model()
    checkpoints.read(tmp_path / "good", model)
    for path, variable in checkpoints.variable_paths(model).items():
        np.testing.assert_array_equal(variable.numpy(), arrays[path])


def test_bad_sources_are_refused_by_name(keras3, tmp_path):
    with pytest.raises(ValueError, match=r"nowhere/ckpt-1: nothing there"):
        checkpoints.read(tmp_path / "nowhere" / "ckpt-1", _model())
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty: a folder without a `checkpoint` file"):
        checkpoints.read(tmp_path / "empty", _model())
    shutil.copytree(keras3 / "2020-adam" / "training_checkpoints", tmp_path / "index")
    with open(tmp_path / "index" / "ckpt-1.index", "r+b") as index:
        index.truncate(100)
    with pytest.raises(ValueError, match=r"ckpt-1: not a readable TensorFlow checkpoint"):
        checkpoints.read(tmp_path / "index", _model())
    shutil.copytree(keras3 / "2020-adam" / "training_checkpoints", tmp_path / "data")
    with open(tmp_path / "data" / "ckpt-1.data-00000-of-00001", "r+b") as data:
        data.truncate(100)
    with pytest.raises(ValueError, match=r"ckpt-1: cannot read its object graph"):
        checkpoints.read(tmp_path / "data", _model())


def test_a_corrupt_variable_is_refused_and_nothing_is_loaded(tmp_path):
    source = _model()
    checkpoints.write(source, tmp_path / "corrupt")
    data = tmp_path / "corrupt" / "ckpt-1.data-00000-of-00001"
    blob = bytearray(data.read_bytes())
    at = blob.find(source.encoder.gru.cell.recurrent_kernel.numpy().tobytes())
    assert at >= 0
    blob[at + 5] ^= 0xFF  # one corrupt byte: the variable's checksum no longer matches
    data.write_bytes(bytes(blob))
    model = _model()
    before = {path: v.numpy() for path, v in checkpoints.variable_paths(model).items()}
    with pytest.raises(ValueError, match=r"ckpt-1: cannot read encoder/gru/cell/recurrent_kernel/.ATTRIBUTES/VARIABLE_VALUE"):
        checkpoints.read(tmp_path / "corrupt", model)
    for path, variable in checkpoints.variable_paths(model).items():  # nothing was loaded
        np.testing.assert_array_equal(variable.numpy(), before[path])
