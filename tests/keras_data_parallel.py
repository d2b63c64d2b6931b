"""Data-parallel `fit` (tf_impl/keras_compat/distributed.py) against one device, in a process of its own: an engine
fixes its device count when it starts (JAX from XLA_FLAGS at import, TensorFlow at its first op). For
tests/keras/test_data_parallel.py (JAX) and tests/tf/test_data_parallel.py (TensorFlow's MirroredStrategy).

    python -m tests.keras_data_parallel OUT.json proof --devices 2 --steps 50 --dtype float64
    python -m tests.keras_data_parallel OUT.json controls --devices 2

The batches are padded fixture batches whose halves hold different numbers of non-pad targets (where a mean of
the replicas' means is another objective): even steps the fixture's 3 rows (6, 5, 4 targets; a 4th row, all
`<pad>` targets, appended so 2 devices split it: 11 against 4), odd steps 4 rows (6, 5, 4, 3: 11 against 7).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = "luong_general"  # scheduled teacher forcing, padded sources, 2 layers; dropout set to 0 by the fixture
PAD = 1  # its <pad> id (shared.catalogue)
BOUNDS = {"float64": 1e-12, "float32": 1e-5}  # max |N devices - 1 device|: curve, gradient norms, weights
# weights of a zero gradient in exact arithmetic (luong_general's attention bias: a constant added to every score):
# their gradient is rounding noise, which another summation order draws anew, and Adam steps it by lr * g / eps
# (measured after 50 steps: 1.8e-12 in float64, 3e-4 in float32); float32's bound is shared.verify.training's
ZERO_GRADIENT_BOUNDS = {"float64": 1e-10, "float32": 1e-3 * 50}


def run(backend: str, what: str, devices: int = 2, steps: int = 50, dtype: str = "float64", timeout: int = 600) -> dict:
    """This module in a new process on Keras's `backend` with `devices` CPU devices; its JSON result. `what`:
    "proof" (`steps` steps on one device and on `devices`), or "controls" (the first step of each naive setup)."""
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONHASHSEED": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if backend == "jax":
        env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_ENABLE_X64="1")
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "result.json"
        command = [sys.executable, "-m", "tests.keras_data_parallel", str(output), what, "--devices", str(devices),
                   "--steps", str(steps), "--dtype", dtype]  # fmt: skip
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(output.read_text())


def assert_proof(result: dict, dtype: str) -> None:
    """N devices trained as one: curve, gradient norms (TorchClipping's, before the clip) and weights within BOUNDS;
    on batches whose halves hold different numbers of targets."""
    assert result["targets_per_half"] == [[11, 4], [11, 7]], result["targets_per_half"]
    differences = result["max_diff"]
    for what in ("curve", "grad_norms", "weights"):
        assert differences[what] <= BOUNDS[dtype], (what, differences)
    assert differences["zero_gradient_weights"] <= ZERO_GRADIENT_BOUNDS[dtype], differences
    assert len(result["curve_many"]) == len(result["curve_one"]) == len(result["grad_norms_many"]) > 0
    assert max(result["grad_norms_one"]) > 0.5  # EQUALITY_SPEC's clip (0.5) engages: clipped alike


def step_batches(name: str, steps: int) -> list[dict]:
    """The batches of the module docstring, each from its own seeded generator."""
    from shared import catalogue
    from shared.verify import fixtures

    spec = catalogue.get(name)
    four = dataclasses.replace(spec, fixture_batch={**spec.fixture_batch, "B": 4})
    return [fixtures.make_batch(four if step % 2 else spec, rng=np.random.default_rng([34, step])) for step in range(steps)]


def train(name: str, dtype: str, batches: list, devices: int | None, loss=None, steps_alone: bool = False) -> dict:
    """`Trainer.train_epoch` (Keras's `fit`; `steps_alone`: `Trainer.step`) over `batches` from the golden weights,
    EQUALITY_SPEC (its clip engages), on one device (None) or data-parallel on `devices`: the curve, the gradient
    norms, the trained weights, and where the model's first weight lives."""
    import tf_impl
    from shared.verify import training
    from shared.verify.training import EQUALITY_SPEC
    from tf_impl.keras_compat import distributed

    schedules = training.step_schedules(name, EQUALITY_SPEC, batches)
    with distributed.data_parallel(devices) if devices else contextlib.nullcontext():
        trainer = training.fixture_trainer(tf_impl, name, dtype, EQUALITY_SPEC, loss=loss)
        curve: list[float] = []
        if steps_alone:
            curve = [trainer.step(batch, schedule) for batch, schedule in zip(batches, schedules, strict=True)]
        else:
            trainer.train_epoch(zip(batches, schedules, strict=True), lambda value: curve.append(value) or True)
    weights = tf_impl.get_weights(trainer.model)
    return {"curve": curve, "grad_norms": list(trainer.grad_norms), "weights": weights, "placed": _placed(trainer.model)}


def _placed(model) -> list[str]:
    """The devices holding the model's first variable: a JAX array's sharding, a MirroredVariable's copies."""
    value = model.trainable_variables[0].value
    if hasattr(value, "sharding"):
        return sorted(str(device) for device in value.sharding.device_set)
    return sorted(copy.device for copy in getattr(value, "values", [value]))


def _difference(a: dict, b: dict) -> dict[str, float]:
    """Max |a - b| of the curves, the gradient norms and the weights (the zero-gradient ones apart: ZERO_GRADIENT_BOUNDS)."""
    from shared import catalogue

    zero = catalogue.get(MODEL).zero_gradient_keys(b["weights"])
    weights = {key: float(np.abs(a["weights"][key] - value).max()) for key, value in b["weights"].items()}
    return {
        "curve": float(np.abs(np.subtract(a["curve"], b["curve"])).max()),
        "grad_norms": float(np.abs(np.subtract(a["grad_norms"], b["grad_norms"])).max()),
        "weights": max(value for key, value in weights.items() if key not in zero),
        "zero_gradient_weights": max((weights[key] for key in zero), default=0.0),
    }


def reference_step(name: str, dtype: str, batch: dict, schedule) -> dict[str, float]:
    """One device's first step on `batch`, from the contract (no `fit`): the loss, the gradient norm before clipping,
    and what a per-replica mean would report instead: the mean of the two halves' own masked means."""
    import tf_impl
    from shared import catalogue
    from shared.verify import fixtures

    model = tf_impl.build(name, dtype, **{**catalogue.get(name).fixture_config, "dropout": 0.0})
    tf_impl.set_weights(model, fixtures.load_golden(name).weights)
    loss, grads = tf_impl.loss_and_grads(model, name, batch, schedule)
    logits = tf_impl.run(model, name, batch, schedule)["logits"].astype(np.float64)  # [B, T, V]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    token_losses = -np.take_along_axis(log_probs, batch["tgt_out"][..., None], axis=-1)[..., 0]  # [B, T]
    real, middle = batch["tgt_out"] != PAD, len(token_losses) // 2
    naive = np.mean([token_losses[part][real[part]].mean() for part in (slice(0, middle), slice(middle, None))])
    norm = float(np.sqrt(sum(float((np.asarray(g, np.float64) ** 2).sum()) for g in grads.values())))
    return {
        "loss": float(loss),
        "grad_norm": norm,
        "mean_of_halves": float(naive),
        "numpy_loss": float(token_losses[real].mean()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("what", choices=("proof", "controls"))
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--dtype", default="float64")
    args = parser.parse_args(argv)

    from tf_impl.keras_compat import backends, distributed

    distributed.split_cpu(args.devices)  # TensorFlow: before its first op; JAX: checks XLA_FLAGS took
    with distributed.data_parallel(args.devices) as plan:
        result = {"backend": backends.name(), "devices": list(plan.devices)}
    if args.what == "proof":
        batches = step_batches(MODEL, args.steps)
        path = Path(tempfile.mkdtemp()) / "rows.txt"  # TensorFlow: the rows each replica's step sees
        loss = _rows_loss(path, args.dtype) if backends.name() == "tensorflow" else None
        one, many = train(MODEL, args.dtype, batches, None), train(MODEL, args.dtype, batches, args.devices, loss)
        if loss is not None:
            result["rows_per_replica"] = _rows(path)
        halves = (slice(0, 2), slice(2, None))
        result.update(
            curve_one=one["curve"],
            curve_many=many["curve"],
            grad_norms_one=one["grad_norms"],
            grad_norms_many=many["grad_norms"],
            max_diff=_difference(many, one),
            placed=many["placed"],
            targets_per_half=[[int((batch["tgt_out"][half] != PAD).sum()) for half in halves] for batch in batches[:2]],
        )
    else:
        result.update(_controls(args))
    args.output.write_text(json.dumps(result))


def _controls(args) -> dict:
    """The first step on the 3-row fixture batch (padded: 11 and 4 targets a half) against one device's: Keras's own
    loss; on TensorFlow also Keras's clipping order and `Trainer.step` (which goes through `fit` there)."""
    import keras

    from shared.verify import training
    from shared.verify.training import EQUALITY_SPEC
    from tf_impl.keras_compat import backends

    batches = step_batches(MODEL, 1)
    schedule = training.step_schedules(MODEL, EQUALITY_SPEC, batches)[0]
    padded = {key: np.concatenate([value, value[-1:]]) for key, value in batches[0].items()}
    padded["tgt_out"][-1] = PAD
    result = {"reference": reference_step(MODEL, args.dtype, padded, schedule)}
    stock = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD, dtype=args.dtype)
    runs = {"stock_loss": train(MODEL, args.dtype, batches, args.devices, loss=stock)}
    if backends.name() == "tensorflow":
        runs["clip_per_replica"] = _clipping_per_replica(batches, args)
        path = Path(tempfile.mkdtemp()) / "rows.txt"
        runs["trainer_step"] = train(MODEL, args.dtype, batches, args.devices, _rows_loss(path, args.dtype), steps_alone=True)
        result["trainer_step_rows_per_replica"] = _rows(path)
        result["xla"] = _xla_refusal(args.dtype, args.devices)
    return result | {key: {"loss": run["curve"][0], "grad_norm": run["grad_norms"][0]} for key, run in runs.items()}


def _xla_refusal(dtype: str, devices: int) -> str:
    """What Trainer(mode="xla") says under MirroredStrategy (distributed.check_mode)."""
    import tf_impl
    from shared.verify import training
    from shared.verify.training import EQUALITY_SPEC
    from tf_impl.keras_compat import distributed

    with distributed.data_parallel(devices):
        try:
            training.fixture_trainer(tf_impl, MODEL, dtype, EQUALITY_SPEC, mode="xla")
        except ValueError as error:
            return str(error)
    return "accepted"


def _clipping_per_replica(batches: list, args) -> dict:
    """Keras's own order under MirroredStrategy: each replica's gradients clipped, then summed (TorchClipping
    without its all-reduce before the clip)."""
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    from tf_impl.keras_compat import optim

    kept = optim.distributed.all_reduce_sum, optim.TorchClipping._all_reduce_sum_gradients
    optim.distributed.all_reduce_sum = lambda values: values
    optim.TorchClipping._all_reduce_sum_gradients = TFOptimizer._all_reduce_sum_gradients
    try:
        return train(MODEL, args.dtype, batches, args.devices)
    finally:
        optim.distributed.all_reduce_sum, optim.TorchClipping._all_reduce_sum_gradients = kept


def _rows_loss(path: Path, dtype: str):
    """fitting.loss_for's loss, writing to `path` the rows each replica's step sees (`tf.print`: it runs inside the
    traced step, once per replica)."""
    import tensorflow as tf

    from tf_impl.keras_compat.distributed import MaskedCrossEntropy

    class Rows(MaskedCrossEntropy):
        def __call__(self, y_true, y_pred, sample_weight=None):
            tf.print(tf.shape(y_true)[0], output_stream=f"file://{path}")
            return super().__call__(y_true, y_pred, sample_weight)

    return Rows(from_logits=True, ignore_class=PAD, dtype=dtype)


def _rows(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


if __name__ == "__main__":
    main()
