"""A Hugging Face folder's generation_config.json travels with its Keras model, and the model serves without our code.

A tiny trained Marian saved by `save_pretrained` with opus-mt's generation fields (num_beams 4, bad_words_ids [[pad]],
forced eos) is ported to `.keras` by the port's API and reloaded with keras.saving.load_model: `model.generate` with
no override gives HF's `generate` ids with no override, and with num_beams=1 HF's with num_beams=1; ported back to a
folder, the model's generation_config.json comes out. `tf_impl.generation.export` writes a SavedModel whose
`translate` signature, loaded in a subprocess that imports tensorflow alone, gives the same ids on 16 sources of
mixed lengths in chunks of 6 (the last padded).

Negative controls: the exported ids differ from HF's greedy ones (the comparison sees the plan), the chunks end at
different lengths (the crop across chunks is exercised), and the model without its generation config gives other ids.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from shared.generation.settings import GenerationSettings
from shared.port import porting
from shared.port.pretrained_formats import PRETRAINED
from tests.hf.test_generation_rules import hf_generate, sources
from tests.zoo import hf_models
from tf_impl import generation
from tf_impl.hf import generating
from tf_impl.keras_compat import backends

CHUNK = 6  # the exported loop's batch: 16 sources run as 3 chunks, the last holding 2 copies of source 0

# run with `python -I` in an empty folder: tensorflow and numpy only, neither this repository nor its packages
SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
translate = tf.saved_model.load(sys.argv[1]).signatures["translate"]
ids, mask = (np.asarray(json.loads(sys.argv[i]), np.int32) for i in (2, 3))
sequences = translate(input_ids=tf.constant(ids), attention_mask=tf.constant(mask))["sequences"]
ours = sorted(name for name in sys.modules if name.split(".")[0] in ("tf_impl", "torch_impl", "shared", "tests", "torch"))
print(json.dumps({"sequences": sequences.numpy().tolist(), "dtype": sequences.dtype.name, "ours": ours}))
"""


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    """(HF's model, its folder, the `.keras` file reloaded, sources, HF's ids with no override and with num_beams=1):
    the folder holds opus-mt's generation fields."""
    folder = tmp_path_factory.mktemp("serving") / "opus"
    model = copy.deepcopy(hf_models.trained("marian"))  # its generation config changes here
    pad = model.config.pad_token_id
    model.generation_config.update(num_beams=4, bad_words_ids=[[pad]], forced_eos_token_id=model.config.eos_token_id)
    model.save_pretrained(folder)
    report = porting.port(folder, folder.parent / "opus.keras")
    assert report.ok, porting.render(report)
    keras_model = keras.saving.load_model(folder.parent / "opus.keras")
    ids, mask = sources(hf_models.VOCAB, pad, model.config.eos_token_id)
    expected = {"default": hf_generate(model, ids, mask), "greedy": hf_generate(model, ids, mask, num_beams=1)}
    return model, folder, keras_model, (ids, mask), expected


def test_the_ported_model_generates_with_its_folders_config(ported):
    _, folder, keras_model, (ids, mask), expected = ported
    assert keras_model.generation_config == json.loads((folder / "generation_config.json").read_text())
    settings, config = keras_model.generation_defaults()
    assert expected["default"].shape[1] < settings.resolved(config).max_length  # HF crops to the used length
    assert np.array_equal(keras_model.generate(ids, mask), expected["default"])
    keras_hubs = {"encoder_token_ids": ids, "encoder_padding_mask": mask}
    assert np.array_equal(keras_model.generate(keras_hubs), expected["default"])
    assert np.array_equal(keras_model.generate(ids, mask, num_beams=1), expected["greedy"])


def test_negative_control_without_its_generation_config_the_ids_differ(ported):
    """config.json's token fields alone: HF's greedy default, no bad words, no forced eos."""
    _, _, keras_model, (ids, mask), expected = ported
    kept = keras_model.generation_config
    try:
        keras_model.generation_config = None
        bare = keras_model.generate(ids, mask)
    finally:
        keras_model.generation_config = kept
    assert bare.shape != expected["default"].shape or (bare != expected["default"]).any()


def test_the_keras_file_writes_its_generation_config_into_a_folder(ported, tmp_path):
    """The port's reading of the `.keras` file and writing of a folder (its checks are test_port_hf's)."""
    _, folder, _, _, _ = ported
    found = PRETRAINED["keras"].read(folder.parent / "opus.keras", None)
    PRETRAINED["hf"].write(tmp_path / "back", found, "float32", None)
    written = json.loads((tmp_path / "back" / "generation_config.json").read_text())
    assert written == json.loads((folder / "generation_config.json").read_text()) and written["num_beams"] == 4


def test_the_saved_model_serves_hfs_ids_without_our_code(ported, tmp_path):
    model, _, keras_model, (ids, mask), expected = ported
    plan = generation.export(keras_model, tmp_path / "served", batch_size=CHUNK)
    assert plan.num_beams == 4 and b"_XlaMustCompile" in (tmp_path / "served" / "saved_model.pb").read_bytes()
    served = _serve(tmp_path / "served", ids, mask, cwd=tmp_path)
    assert served.shape == expected["default"].shape and (served == expected["default"]).all()
    assert np.array_equal(served, keras_model.generate(ids, mask))
    greedy = expected["greedy"]
    assert greedy.shape != served.shape or (greedy != served).any()  # negative control: the comparison sees the plan
    chunk_lengths = {hf_generate(model, ids[i : i + CHUNK], mask[i : i + CHUNK]).shape[1] for i in range(0, 16, CHUNK)}
    assert len(chunk_lengths) > 1 and max(chunk_lengths) == served.shape[1]  # negative control: the chunks' crops differ


def _serve(path, ids, mask, cwd) -> np.ndarray:
    """The signature's ids, run by a python that imports tensorflow alone (isolated: no repository on its path)."""
    argv = [sys.executable, "-I", "-c", SERVE, str(path), json.dumps(ids.tolist()), json.dumps(mask.tolist())]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ours"] == [] and result["dtype"] == "int32"
    return np.asarray(result["sequences"], np.int64)


def test_export_needs_tensorflow(ported, monkeypatch, tmp_path):
    monkeypatch.setattr(backends, "name", lambda: "jax")
    with pytest.raises(ValueError, match=r"export writes a TensorFlow SavedModel: run Keras on TensorFlow .*not jax"):
        generation.export(ported[2], tmp_path / "served")


@pytest.mark.parametrize(
    "inputs, mask, message",
    [
        ({"input_ids": [[3, 4]], "encoder_token_ids": [[3, 4]]}, None, "one of them"),
        ({"input_ids": [[3, 4]], "labels": [[1]]}, None, r"unexpected input \['labels'\]"),
        ({"input_ids": [[3, 4]], "attention_mask": [[1, 1]]}, [[1, 1]], "two masks given"),
        ([3, 4], None, r"input_ids must be integers of shape \[batch, length\]"),
        ([[3, 4]], [[1, 2]], "attention_mask must be 0s and 1s"),
    ],
)
def test_bad_inputs_are_named(inputs, mask, message):
    with pytest.raises(ValueError, match=message):
        generating.source_inputs(inputs, mask)


def test_a_generation_config_is_a_json_dict():
    with pytest.raises(TypeError, match="generation_config: expected a dict"):
        generating.checked_generation_config([("num_beams", 4)])
    with pytest.raises(ValueError, match="not storable as JSON"):
        generating.checked_generation_config({"num_beams": object()})


class Countdown:
    """A decoding object (start, step) whose every source ends after its own length: token 5 + position, then eos 1
    (T5's ids: pad 0, eos 1, so the loop's unwritten filler, eos, is not HF's greedy pad)."""

    model = None

    def start(self, input_ids, attention_mask, max_length):
        lengths = ops.sum(ops.cast(attention_mask, "int32"), axis=1)  # [B]
        return lengths, ops.zeros_like(lengths)

    def step(self, tokens, index, state, memory):
        target = ops.where(index + 1 >= memory, 1, 5 + (index + memory) % 4)  # [N]
        return ops.one_hot(target, 12) * 4.0, state  # [N, V]


def _countdown(ids, mask, beams: int, chunk: int) -> tuple[np.ndarray, np.ndarray, list]:
    """(the one-batch loop's cropped ids, the serving function's, the loop's uncropped ids of each chunk)."""
    import tensorflow as tf

    plan = GenerationSettings(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0).updated(
        num_beams=beams, max_new_tokens=9).resolved()  # fmt: skip
    whole = tf.function(lambda i, m: generation._loop(Countdown(), plan, i, m)[::2])
    sequences, used = whole(ids, mask)
    served = tf.function(generation._serving(Countdown(), plan, chunk))(ids, mask)["sequences"]
    chunks = [whole(ids[start : start + chunk], mask[start : start + chunk])[0].numpy() for start in (0, chunk) if beams == 1]
    return sequences.numpy()[:, : int(used)], served.numpy(), chunks


def test_chunks_give_the_whole_batchs_ids():
    """The serving function's chunks (of 3, the last padded) give the one-batch loop's cropped ids: greedy's rows past
    a chunk's end hold pad, as HF's greedy appends it, and beam search's the filler, as HF's buffer holds it."""
    lengths = np.array([2, 6, 3, 8, 1, 4])
    ids = np.full((6, 8), 4, np.int32)
    mask = (np.arange(8)[None] < lengths[:, None]).astype(np.int32)  # [6, 8]
    expected, served, _ = _countdown(ids, mask, beams=3, chunk=4)
    assert np.array_equal(served, expected)
    expected, served, chunks = _countdown(ids, mask, beams=1, chunk=3)
    assert np.array_equal(served, expected)
    naive = np.concatenate([chunk[:, : expected.shape[1]] for chunk in chunks])  # the chunks' unwritten tails kept
    assert (naive != expected).any()  # negative control: greedy's tail past a chunk's end is eos there, HF's pad


def test_a_t5_keeps_its_generation_config_in_its_config():
    from tf_impl.hf import families

    config = hf_models.config("t5").to_dict()
    model = families.build(config, generation_config={"num_beams": 3, "decoder_start_token_id": 0})
    again = type(model).from_config(model.get_config())
    assert again.generation_config == {"num_beams": 3, "decoder_start_token_id": 0}
    assert again.generation_defaults()[0].num_beams == 3
