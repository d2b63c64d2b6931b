"""Writes document 004's checkpoints as the users of TensorFlow's NMT tutorial did, for tests/tf/test_tf_checkpoints.py.

It runs in its process's own Keras: Keras 3 in the test process, Keras 2 in a subprocess started with
`TF_USE_LEGACY_KERAS=1` (set before TensorFlow is imported):

    python tests/tutorials/tf_nmt_writer.py FOLDER REVISION:OPTIMIZER [REVISION:OPTIMIZER ...]

writes one subfolder `REVISION-OPTIMIZER` per job. It imports TensorFlow, numpy and one transcription of the
tutorial (tf_nmt_2020.py or tf_nmt_2021.py, by path), nothing of the project. Each job trains the tutorial's
`Encoder` and `Decoder` a few steps with its `train_step`, then saves what the tutorial's users saved:

    training_checkpoints/   tf.train.Checkpoint(optimizer=..., encoder=..., decoder=...).save(...ckpt)
    parts/                  encoder.save_weights / decoder.save_weights: TF format `enc`, `dec` (Keras 2),
                            `encoder.weights.h5`, `decoder.weights.h5` (Keras 3)
    expected.npz            what the writer holds: `var/<path>`, Adam's `m/<path>` and `v/<path>` (paths as the
                            object graph names them: `encoder/gru/cell/kernel`), `step`, and the tutorial's
                            teacher-forced `logits (B, T, V)` and `attention (B, T, S)` on `src (B, S)`,
                            `tgt_in (B, T)`

OPTIMIZER is `adam` (`tf.keras.optimizers.Adam()`, the tutorial's) or `legacy_adam` (Keras 2 only:
`tf.keras.optimizers.legacy.Adam()`, what `tf.keras.optimizers.Adam()` was up to TF 2.10, with slot variables).
"""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

SIZES = {"vocab_inp_size": 23, "vocab_tar_size": 19, "embedding_dim": 7, "units": 11, "batch_sz": 3}
SRC_LEN, TGT_LEN = 8, 6
STEPS = 3


def keras_major() -> int:
    """2 when `tf.keras` is the legacy Keras (tf_keras), else 3."""
    return 2 if "tf_keras" in type(tf.keras.layers.Dense(1)).__module__ else 3


def load_tutorial(revision: str):
    """The transcription of the tutorial's `revision` ("2020" or "2021") as a module."""
    path = Path(__file__).with_name(f"tf_nmt_{revision}.py")
    spec = importlib.util.spec_from_file_location(f"tf_nmt_{revision}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`inp (B, S)` and `targ (B, T)` token ids; targets padded with 0 after a ragged length (the loss masks them)."""
    rng = np.random.default_rng(seed)
    inp = rng.integers(1, SIZES["vocab_inp_size"], (SIZES["batch_sz"], SRC_LEN))  # [B, S]
    targ = rng.integers(1, SIZES["vocab_tar_size"], (SIZES["batch_sz"], TGT_LEN))  # [B, T]
    targ[0, TGT_LEN - 2 :] = 0
    return inp, targ


def build(tutorial):
    """The tutorial's `Encoder` and `Decoder` at SIZES (Keras's unseeded initial weights), called once on a
    sample as the notebook does, which creates their variables."""
    sizes = (SIZES["embedding_dim"], SIZES["units"], SIZES["batch_sz"])
    encoder = tutorial.Encoder(SIZES["vocab_inp_size"], *sizes)
    decoder = tutorial.Decoder(SIZES["vocab_tar_size"], *sizes)
    inp, _ = batch(0)
    sample_output, sample_hidden = encoder(tf.constant(inp), encoder.initialize_hidden_state())
    decoder(tf.ones((SIZES["batch_sz"], 1)), sample_hidden, sample_output)
    return encoder, decoder


def logits(encoder, decoder, src: np.ndarray, tgt_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tutorial's decoder step by step with teacher forcing (its `train_step` forward): logits `(B, T, V)`
    and attention weights `(B, T, S)`."""
    enc_output, dec_hidden = encoder(tf.constant(src), tf.zeros((src.shape[0], encoder.enc_units)))  # [B, S, H], [B, H]
    steps, weights = [], []
    for t in range(tgt_in.shape[1]):
        predictions, dec_hidden, attention_weights = decoder(tf.constant(tgt_in[:, t : t + 1]), dec_hidden, enc_output)
        steps.append(predictions.numpy())  # [B, V]
        weights.append(attention_weights.numpy()[:, :, 0])  # [B, S]
    return np.stack(steps, 1), np.stack(weights, 1)


def named_variables(encoder, decoder) -> dict:
    """Every variable by its object-graph path (`decoder/attention/W1/kernel`), walked by attribute."""
    owners = {
        "encoder/embedding": encoder.embedding,
        "encoder/gru/cell": encoder.gru.cell,
        "decoder/embedding": decoder.embedding,
        "decoder/gru/cell": decoder.gru.cell,
        "decoder/fc": decoder.fc,
        **{f"decoder/attention/{name}": getattr(decoder.attention, name) for name in ("W1", "W2", "V")},
    }
    return {f"{prefix}/{_short_name(v)}": v for prefix, layer in owners.items() for v in layer.trainable_weights}


def _short_name(variable) -> str:
    """`kernel` from Keras 3's `kernel` and Keras 2's `decoder/fc/kernel:0`."""
    return variable.name.split("/")[-1].split(":")[0]


def moments(optimizer, variable) -> tuple[np.ndarray, np.ndarray]:
    """Adam's first and second moments of `variable`, wherever this optimizer keeps them."""
    if hasattr(optimizer, "get_slot"):  # Keras 2, optimizer of TF <= 2.10: slot variables
        return optimizer.get_slot(variable, "m").numpy(), optimizer.get_slot(variable, "v").numpy()
    if hasattr(optimizer, "_index_dict"):  # Keras 2, optimizer of TF 2.11+
        index = optimizer._index_dict[optimizer._var_key(variable)]
    else:  # Keras 3
        index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index].numpy(), optimizer._velocities[index].numpy()


def make_optimizer(name: str):
    return {"adam": lambda: tf.keras.optimizers.Adam(), "legacy_adam": lambda: tf.keras.optimizers.legacy.Adam()}[name]()


def save_parts(encoder, decoder, folder: Path) -> None:
    """The tutorial's models saved one by one: TF-format checkpoints in Keras 2, `.weights.h5` in Keras 3."""
    folder.mkdir(parents=True)
    if keras_major() == 2:
        encoder.save_weights(str(folder / "enc"))  # no .h5 suffix: Keras 2 writes a TF checkpoint
        decoder.save_weights(str(folder / "dec"))
    else:
        encoder.save_weights(str(folder / "encoder.weights.h5"))
        decoder.save_weights(str(folder / "decoder.weights.h5"))


def write(folder, revision: str = "2020", optimizer_name: str = "adam", steps: int = STEPS, seed: int = 0) -> Path:
    """One job: train, save the tutorial's checkpoint, its parts and expected.npz under `folder`; the folder."""
    folder = Path(folder)
    tutorial = load_tutorial(revision)
    encoder, decoder = build(tutorial)
    optimizer = make_optimizer(optimizer_name)
    inp, targ = batch(seed)
    eager = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)  # the notebook's @tf.function, untraced: a graph of the unrolled decoder costs ~10 s
    try:
        losses = tutorial.train_steps(encoder, decoder, optimizer, tf.constant(inp), tf.constant(targ), steps)
    finally:
        tf.config.run_functions_eagerly(eager)

    checkpoint_dir = str(folder / "training_checkpoints")  # the notebook's own lines
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
    checkpoint = tf.train.Checkpoint(optimizer=optimizer, encoder=encoder, decoder=decoder)
    checkpoint.save(file_prefix=checkpoint_prefix)
    save_parts(encoder, decoder, folder / "parts")

    src, tgt = batch(seed + 1)
    expected = {"step": np.array(int(optimizer.iterations.numpy())), "losses": np.array(losses), "src": src}
    expected["tgt_in"] = tgt[:, :-1]
    expected["logits"], expected["attention"] = logits(encoder, decoder, src, tgt[:, :-1])
    for path, variable in named_variables(encoder, decoder).items():
        expected[f"var/{path}"] = variable.numpy()
        expected[f"m/{path}"], expected[f"v/{path}"] = moments(optimizer, variable)
    np.savez(folder / "expected.npz", **expected)
    return folder


def main(argv: list[str]) -> None:
    for job in argv[1:]:
        revision, optimizer_name = job.split(":")
        print(write(Path(argv[0]) / f"{revision}-{optimizer_name}", revision, optimizer_name), f"Keras {keras_major()}")


if __name__ == "__main__":
    main(sys.argv[1:])
