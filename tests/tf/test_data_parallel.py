"""Data-parallel training on TensorFlow (tf_impl/keras_compat/distributed.py): `Trainer` through Keras's `fit` under
MirroredStrategy on 2 logical CPU devices trains as one device does, and Keras's own defaults there (its loss, its
clipping order) are caught. The trainings run in a process of their own (tests/keras_data_parallel.py): TensorFlow
fixes its devices at its first op. tests/keras/test_data_parallel.py proves the same on JAX.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from shared import catalogue
from shared.train import runner
from shared.verify.equality import assert_close
from tests import keras_data_parallel
from tests.interrupted_runner import losses, small_run, start
from tf_impl import fitting
from tf_impl.keras_compat import distributed


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_50_fit_steps_on_2_replicas_give_one_devices_training(dtype):
    """Loss curve, TorchClipping's gradient norms (before the clip, which engages) and weights of 50 `fit` steps on
    2 replicas equal one device's, float64 to 1e-12 (float32 1e-5), on padded batches whose halves hold 11 and 4,
    11 and 7 targets (the 3-row batches padded to 4); each replica's step sees 2 rows."""
    result = keras_data_parallel.run("tensorflow", "proof", dtype=dtype)
    assert result["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert [copy.rsplit("/", 1)[-1] for copy in result["placed"]] == ["device:CPU:0", "device:CPU:1"]
    assert result["rows_per_replica"] == [2] * 2 * len(result["curve_many"])
    keras_data_parallel.assert_proof(result, dtype)


def test_negative_controls_kerass_loss_and_clipping_and_trainer_step_on_2_replicas():
    """The first step on the 3-row fixture batch (padded to 4: 11 and 4 targets a half) against one device's, in one
    process (the three trainings share its startup):

    - Keras's `SparseCategoricalCrossentropy(ignore_class=pad)`: each replica's own mean, scaled by 1/2, summed: it
      reports (and trains on) the mean of the two halves' means, 0.034 from the mean over the batch's 15 targets;
      fitting.loss_for's MaskedCrossEntropy gives the global mean (the proof above);
    - Keras's clipping order: its TensorFlow optimizer clips each replica's gradients, then sums them: TorchClipping
      without its all-reduce first sees a replica's norm (0.52), not the batch's (0.74);
    - Keras's `train_on_batch` hands every replica the whole batch; `Trainer.step` goes through `fit`: 2 rows each,
      one device's loss and norm;
    - Trainer mode "xla" is refused up front (Keras would compile both replicas' step as one XLA cluster on CPU:0,
      which cannot read CPU:1's variables: distributed.check_mode).
    """
    controls = keras_data_parallel.run("tensorflow", "controls")
    reference = controls["reference"]
    assert_close(reference["numpy_loss"], reference["loss"], 1e-12, what="the loss from the logits in numpy")
    assert abs(reference["mean_of_halves"] - reference["loss"]) > 0.01  # the batch shows the trap

    stock = controls["stock_loss"]
    assert_close(stock["loss"], reference["mean_of_halves"], 1e-12, what="Keras's loss on 2 replicas")
    assert abs(stock["grad_norm"] - reference["grad_norm"]) > 0.05  # another gradient too

    naive = controls["clip_per_replica"]
    assert_close(naive["loss"], reference["loss"], 1e-12, what="the loss before the update")
    assert abs(naive["grad_norm"] - reference["grad_norm"]) > 0.1

    assert controls["trainer_step_rows_per_replica"] == [2, 2]
    step = controls["trainer_step"]
    assert_close(step["loss"], reference["loss"], 1e-12, what="Trainer.step's loss on 2 replicas")
    assert_close(step["grad_norm"], reference["grad_norm"], 1e-12, what="Trainer.step's gradient norm on 2 replicas")
    assert controls["xla"].startswith("mode 'xla' does not run under MirroredStrategy"), controls["xla"]


# ---- in this process (one CPU device, fixed) ----


def test_more_devices_than_visible_are_refused_with_the_way_to_make_them():
    tf.constant(0)  # TensorFlow's devices are fixed from its first op
    with pytest.raises(ValueError, match=r"data_parallel\(2\) on tensorflow: 1 device\(s\) visible .* split_cpu\(2\)"):
        with distributed.data_parallel(2):
            pass
    with pytest.raises(ValueError, match="Virtual devices cannot be modified after being initialized"):
        distributed.split_cpu(2)


def test_one_data_parallel_at_a_time_and_devices_checked():
    with distributed.data_parallel(1) as plan:
        assert plan.replicas == 1 and distributed.replicas() == 1 and distributed.active() is plan
        with pytest.raises(ValueError, match="already active"):
            with distributed.data_parallel(1):
                pass
    assert distributed.active() is None
    for devices in (0, 1.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            with distributed.data_parallel(devices):
                pass


def test_pad_rows_append_rows_that_add_no_target():
    spec = catalogue.get("luong_general")
    inputs = {"src": np.arange(15).reshape(3, 5), "src_len": np.array([5, 4, 3]), "teacher_forcing": np.ones((3, 2), bool)}
    targets = np.arange(12).reshape(3, 4) + 2
    padded, padded_targets = distributed.pad_rows(spec, inputs, targets, shares=4)
    assert padded_targets.shape == (4, 4) and (padded_targets[3] == spec.pad_id).all()
    assert all(np.array_equal(value[3], inputs[key][2]) for key, value in padded.items())  # the last row's inputs
    assert distributed.pad_rows(spec, inputs, targets, shares=3) == (inputs, targets)  # divisible: as it is
    assert fitting.keras_batch(spec, {**inputs, "tgt_in": targets, "tgt_out": targets}, None)[1].shape == (3, 4)  # 1 device


def test_pad_rows_refuse_the_bare_attention_layers_uneven_batch():
    spec = catalogue.get(next(name for name, s in catalogue.CATALOGUE.items() if s.interface == "attention"))
    inputs = {"query": np.zeros((3, 2, 11)), "values": np.zeros((3, 4, 7))}
    with pytest.raises(ValueError, match="does not split across 2 devices"):
        distributed.pad_rows(spec, inputs, np.zeros((3, 2, 7)), shares=2)


# ---- rosetta train --devices N: the runner builds and trains inside data_parallel ----


def test_rosetta_train_on_2_devices_interrupted_and_resumed_on_one_follows_one_device(tmp_path):
    """`python -m shared.train.runner RUN tf --devices 2` (the process `rosetta train --stack tf --devices 2` starts)
    interrupted after step 3 (checkpoint at step 2), resumed here on one device: the loss log and the final metrics
    are one uninterrupted device's (float64, no dropout; the 16-row batches split 8 and 8 across the replicas)."""
    alone, split = small_run(tmp_path / "alone"), small_run(tmp_path / "split")
    runner.train(alone, "tf", progress=False)
    stopped = start(split, "tf", "--devices=2", stop_after=3)
    assert stopped.returncode != 0 and "interrupted" in stopped.stderr.lower() + stopped.stdout.lower(), stopped.stderr[-2000:]
    assert len(losses(split, "tf")) == 2  # the log as of the last checkpoint, written on 2 devices
    resumed = runner.train(split, "tf", progress=False, resume=True)
    assert np.abs(losses(split, "tf") - losses(alone, "tf")).max() <= 1e-12 and len(losses(alone, "tf")) == 8
    assert abs(resumed["loss"] - json.loads((alone / "tf" / "eval.json").read_text())["loss"]) <= 1e-12


def test_devices_are_for_keras(capsys):
    from shared.cli import main as rosetta

    assert rosetta(["train", "reverse_bahdanau", "--stack", "torch", "--devices", "2"]) != 0
    assert "--devices is Keras's data-parallel fit: pass --stack tf (torch: --nproc-per-node)" in capsys.readouterr().err
