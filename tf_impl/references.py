"""References for `rosetta port` in Keras: the user's Keras model in float64, a `.keras` file's own model, and
the TensorFlow NMT tutorial's model that the tf presets port (shared.port.references says what a reference is).

A Keras model cannot be widened in place, and `tf.train.Checkpoint.restore` does not cast: to run the user's
model in float64, `in_float64` calls their callable again under a float64 dtype policy on a float64 copy of
their file (same keys and object graph, values widened exactly).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from shared.core import moved
from shared.core.reference_runs import Reference
from shared.io.sources import is_saved_model
from tf_impl.keras_compat.backends import exact_float64, float64_policy  # tf_impl.references.float64_policy: as before
from tf_impl.object_graph import SAVED_MODEL_VARIABLES, resolve
from tf_impl.tutorials import nmt_2020

# what a key map may name (`"reference"`, `"runner"`): a key map is data, passed around like a checkpoint
SHIPPED = ("tf_nmt_2020", "tf_nmt_2021", "run_tf_nmt", "tf_nmt_2022", "run_tf_nmt_2022")


def in_float64(model, builder, source: str) -> tuple[object, str]:
    """The user's model built again in float64 from a widened copy of `source`; the float32 model where that
    does not give float64 variables (a model that fixes its own dtype, a file kind not copied here)."""
    folder = Path(tempfile.mkdtemp(prefix="rosetta-float64-"))
    try:
        widened = _widened_source(source, folder)
        if widened is None:
            return model, "float32"
        try:
            with float64_policy():
                made = builder(widened)
        except Exception:  # their code may fix float32 somewhere (a tf.zeros state): compare in float32 then
            return model, "float32"
        variables = [variable for part in _parts_or_model(made) for variable in part.weights]
        if variables and all(str(np.dtype(variable.dtype)) == "float64" for variable in variables):
            return made, "float64"
        return model, "float32"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _widened_source(source: str, folder: Path) -> str | None:
    """`source` (a path, or `part=path,...`) with every file copied into `folder` in float64."""
    if "=" in source:
        pairs = [item.partition("=") for item in source.split(",")]
        copies = [_widened_file(Path(path), folder / part) for part, _, path in pairs]
        if None in copies:
            return None
        return ",".join(f"{part}={copy}" for (part, _, _), copy in zip(pairs, copies, strict=True))
    return _widened_file(Path(source), folder / "source")


def _widened_file(path: Path, folder: Path) -> str | None:
    folder.mkdir(parents=True)
    if path.name.endswith(".weights.h5"):
        return str(_widened_h5(path, folder / path.name))
    if is_saved_model(path):  # its graph as it is; its variables widened (the reference reads only those)
        copy = folder / path.name
        copy.joinpath(*SAVED_MODEL_VARIABLES).parent.mkdir(parents=True)
        shutil.copyfile(path / "saved_model.pb", copy / "saved_model.pb")
        _widened_checkpoint(resolve(path), copy.joinpath(*SAVED_MODEL_VARIABLES))
        return str(copy)
    prefix = _checkpoint_prefix(path)
    if prefix is None:
        return None
    copy = folder / Path(prefix).name
    _widened_checkpoint(prefix, copy)
    if path.is_dir():  # a folder as `Checkpoint.save` leaves it: the user reads tf.train.latest_checkpoint(folder)
        (folder / "checkpoint").write_text(f'model_checkpoint_path: "{copy.name}"\nall_model_checkpoint_paths: "{copy.name}"\n')
        return str(folder)
    return str(copy) + (".index" if path.name.endswith(".index") else "")


def _widened_checkpoint(prefix: str, copy: Path) -> None:
    """The checkpoint `prefix` written again at `copy`, every float tensor in float64 (keys and graph kept)."""
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_dtype_map())
    tensors = [_widen(reader.get_tensor(name)) for name in names]
    tf.raw_ops.SaveV2(prefix=str(copy), tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)


def _checkpoint_prefix(path: Path) -> str | None:
    if path.is_dir():
        return tf.train.latest_checkpoint(str(path))
    if path.name.endswith(".index"):
        return str(path)[: -len(".index")]
    return str(path) if Path(f"{path}.index").is_file() else None


def _widen(value):
    """A float array as float64; anything else (step counters, the object graph's bytes) as it is."""
    array = np.asarray(value)
    return array.astype(np.float64) if array.dtype.kind == "f" else value


def _widened_h5(path: Path, copy: Path) -> Path:
    import h5py

    with h5py.File(path, "r") as source, h5py.File(copy, "w") as target:

        def visit(name, item):
            if isinstance(item, h5py.Dataset):
                target.create_dataset(name, data=_widen(item[()]))
            else:
                target.require_group(name)

        source.visititems(visit)
        for key, value in source.attrs.items():
            target.attrs[key] = value
    return copy


def keras_file_reference(path: Path, name: str) -> Reference:
    """A `.keras` source's model as Keras loads it (its own config and weights), run through the contract."""
    import tf_impl
    from shared.core.reference_runs import traced
    from tf_impl.files import load_keras

    model, _ = load_keras(path)
    return Reference(f"the model Keras loads from {path}", "float32", lambda batch: traced(tf_impl, model, name, batch))


# ---- TensorFlow's NMT-with-attention tutorial (tf_impl/tutorials/nmt_2020.py), the model the tf-nmt presets port ----


def _nmt(path: str, w1_on_query: bool) -> nmt_2020.NmtParts:
    """The tutorial's model at the sizes the checkpoint shows, its variables created by one call, then the
    checkpoint read into it through the object graph (tf_impl.checkpoints: Keras 2 and Keras 3 files alike)."""
    import tf_impl
    from shared import catalogue
    from shared.io.sources import source_parts
    from tf_impl import checkpoints

    source = source_parts(path) or path
    spec = catalogue.get("tf_tutorial")
    shapes = checkpoints.canonical_shapes(source, tf_impl.build("tf_tutorial", **spec.fixture_config))
    sizes = catalogue.sizes_from_weights(spec, shapes) or _h5_part_sizes(source)
    vocab_inp, vocab_tar, embedding, units = (
        sizes[key] for key in ("vocab_inp_size", "vocab_tar_size", "embedding_dim", "units")
    )
    encoder = nmt_2020.NmtEncoder(vocab_inp, embedding, units, 1)
    parts = nmt_2020.NmtParts(encoder, nmt_2020.NmtDecoder(vocab_tar, embedding, units, 1, w1_on_query))
    run_tf_nmt(parts, {"src": np.zeros((1, 2), np.int64), "tgt_in": np.zeros((1, 1), np.int64)})
    checkpoints.read(source, parts)
    return parts


def _h5_part_sizes(source) -> dict:
    """The tutorial's sizes from its Keras 3 part files (`encoder.weights.h5`, `decoder.weights.h5`), whose
    datasets are named by position: each Embedding's `vars/0` `[V, E]`, the encoder GRU's `vars/1` `[H, 3H]`."""
    import h5py

    if not isinstance(source, dict):
        raise ValueError(f"{source}: no sizes readable (a TensorFlow checkpoint or the tutorial's part files)")
    with h5py.File(source["encoder"], "r") as encoder, h5py.File(source["decoder"], "r") as decoder:
        (vocab_inp, embedding), vocab_tar = encoder["embedding/vars/0"].shape, decoder["embedding/vars/0"].shape[0]
        units = encoder["gru/cell/vars/1"].shape[0]
    return {"vocab_inp_size": vocab_inp, "vocab_tar_size": vocab_tar, "embedding_dim": embedding, "units": units}


def tf_nmt_2020(path) -> nmt_2020.NmtParts:
    """The 2019 to February 2020 tutorial (W1 on the values) holding the checkpoint at `path`."""
    return _nmt(str(path), w1_on_query=False)


def tf_nmt_2021(path) -> nmt_2020.NmtParts:
    """The February 2020 to May 2021 tutorial (W1 on the query) holding the checkpoint at `path`."""
    return _nmt(str(path), w1_on_query=True)


# ---- the same tutorial as it is today (tensorflow/text, the 2022 rewrite): the model tf-nmt-2022 ports ----


def tf_nmt_2022(path):
    """The 2022 tutorial's own `Translator` (tf_impl/tutorials/nmt_2022.py) at the sizes the file shows, built by
    one call, holding `path`: a `.weights.h5` file (the tutorial's `model.save_weights`) loaded by its own
    `load_weights`; a SavedModel folder (the tutorial's `tf.saved_model.save(export, 'translator')`) or a TF
    checkpoint restored by TensorFlow's own `tf.train.Checkpoint`, the model at the root or under one name (the
    export's `model`). Under a float64 dtype policy (shared.port.references) the MultiHeadAttention's scale is
    made exact (`exact_float64`: on TensorFlow Keras rounds 1/sqrt(units) to float32)."""
    from shared import catalogue
    from tf_impl import build, checkpoints
    from tf_impl.tutorials.nmt_2022 import Translator

    spec = catalogue.get("tf_tutorial_mha")
    sizes = catalogue.sizes_from_weights(spec, checkpoints.canonical_shapes(path, build(spec.name, **spec.fixture_config)))
    if set(sizes) != set(spec.weight_sizes):
        raise ValueError(f"{path}: the 2022 tutorial's sizes ({', '.join(spec.weight_sizes)}) are not readable from it")
    model = Translator(sizes["units"], sizes["context_vocab_size"], sizes["target_vocab_size"])
    run_tf_nmt_2022(model, {"src": np.ones((1, 2), np.int64), "tgt_in": np.ones((1, 1), np.int64)})  # builds it
    exact_float64(model)
    if str(path).endswith(".weights.h5"):
        model.load_weights(str(path))
    else:
        _restore(str(path), model)
    return model


def _restore(path: str, model) -> None:
    """TensorFlow's own restore of a checkpoint's (a SavedModel's) variables into `model`, which must take every
    one of its own; what the model does not hold (the export's text processors) is left, silently."""
    from tf_impl.object_graph import Stored

    names = {variable.split("/")[0] for variable in Stored(path).variables}
    if names <= {"encoder", "decoder"}:
        holder = tf.train.Checkpoint(root=model)  # tf.saved_model.save(translator, ...)
    elif len(names) == 1:
        holder = tf.train.Checkpoint(**{names.pop(): model})  # tf.saved_model.save(Export(translator), ...)
    else:
        raise ValueError(f"{path}: holds {', '.join(sorted(names))} at its root; the tutorial's model is there or under one name")
    status = holder.read(resolve(path))
    status.expect_partial()
    status.assert_existing_objects_matched()


def run_tf_nmt_2022(model, batch: dict) -> dict[str, np.ndarray]:
    """The 2022 tutorial's `logits = model((context, target_in))`, teacher forced, with what it keeps: the
    attention averaged over its head (`decoder.last_attention_weights`) and the encoder's output."""
    from shared.core.reference_runs import ATTENTION_WEIGHTS, LOGITS
    from shared.core.taps import ENCODER_OUTPUTS

    src, tgt_in = tf.constant(batch["src"]), tf.constant(batch["tgt_in"])
    logits = model((src, tgt_in))  # [B, T, V]
    return {
        ENCODER_OUTPUTS: model.encoder(src).numpy(),  # [B, S, H]
        ATTENTION_WEIGHTS: model.decoder.last_attention_weights.numpy(),  # [B, T, S]
        LOGITS: logits.numpy(),
    }


def _parts_or_model(made) -> list:
    """The Keras objects a reference returned: the model, or the parts of a pair or dict."""
    if isinstance(made, dict):
        return list(made.values())
    return list(made) if isinstance(made, (tuple, list)) else [made]


def _parts_of(model) -> tuple:
    """(encoder, decoder) from an object holding them as attributes, a dict, or a pair."""
    if isinstance(model, dict):
        return model["encoder"], model["decoder"]
    if isinstance(model, (tuple, list)):
        return tuple(model)
    return model.encoder, model.decoder


def run_tf_nmt(model, batch: dict) -> dict[str, np.ndarray]:
    """The tutorial's `train_step` forward, teacher forced: the encoder from a zero state, then the decoder step
    by step from the encoder's state, fed `tgt_in`; encoder outputs and state, attention weights, logits."""
    from shared.core.reference_runs import ATTENTION_WEIGHTS, LOGITS
    from shared.core.taps import ENCODER_OUTPUTS, ENCODER_STATE

    encoder, decoder = _parts_of(model)
    src, tgt_in = tf.constant(batch["src"]), tf.constant(batch["tgt_in"])
    dtype = encoder.compute_dtype  # float64 for a reference built under a float64 policy
    enc_output, enc_hidden = encoder(src, tf.zeros((src.shape[0], encoder.enc_units), dtype))  # [B, S, H], [B, H]
    dec_hidden, logits, weights = enc_hidden, [], []
    for t in range(tgt_in.shape[1]):
        predictions, dec_hidden, attention = decoder(tgt_in[:, t : t + 1], dec_hidden, enc_output)  # [B, V], [B, H], [B, S, 1]
        logits.append(predictions)
        weights.append(attention[:, :, 0])
    return {
        ENCODER_OUTPUTS: enc_output.numpy(),
        ENCODER_STATE: enc_hidden.numpy(),
        ATTENTION_WEIGHTS: tf.stack(weights, 1).numpy(),  # [B, T, S]
        LOGITS: tf.stack(logits, 1).numpy(),  # [B, T, V]
    }


__getattr__ = moved.getattr_for(__name__)  # the tutorial's classes moved to tf_impl/tutorials/: they warn
