"""Keras's own training API on the catalogue models: `compile` / `fit` / `evaluate` / `predict` (any Keras 3
backend), with the loss of shared.verify.training's spec and the same input checks as the contract's `run`.

    model = tf_impl.build("luong_general")
    model.compile(optimizer=TorchAdam(1e-3, clip_grad_norm=1.0), loss=fitting.loss_for(model))
    model.fit({"src": src, "src_len": src_len, "tgt_in": tgt_in}, tgt_out, batch_size=128, epochs=10)

Stack-specific: torch has no `fit`; its training loop is torch_impl/train.py's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

import keras
import numpy as np

from shared import catalogue
from shared.core import teacher_forcing as schedules
from shared.core.validation import check_batch
from tf_impl.keras_compat import backends, distributed

INPUT_KEYS = ("src", "tgt_in", "src_len", "teacher_forcing")  # a tuple input holds them in this order
_FIXED_LENGTH_KEYS = INPUT_KEYS[:2]  # document 001's models: no padded sources, always teacher-forced


def loss_for(model) -> keras.losses.Loss:
    """Cross-entropy from logits, mean over non-pad targets: shared.verify.training's loss, as torch's
    `cross_entropy(ignore_index=pad)` (Keras's `ignore_class` divides by the count of non-pad targets), in the
    model's dtype (Keras's default, floatx, would compute a float64 model's loss in float32). Keras's own loss on
    one device; under TensorFlow's MirroredStrategy still the mean over the global batch's non-pad targets
    (keras_compat/distributed.py: Keras's would be the mean of the replicas' means)."""
    pad_id = catalogue.get(model.rosetta_name).pad_id
    return distributed.MaskedCrossEntropy(
        from_logits=True, ignore_class=pad_id, dtype=model.compute_dtype, name="masked_cross_entropy"
    )


def keras_batch(spec: catalogue.ModelSpec, arrays: Mapping, schedule) -> tuple[dict, np.ndarray]:
    """A checked contract batch (shared.core.validation.prepare's arrays and schedule) as Keras's `(x, y)`: the
    schedule repeated per row; for document 000's layer, `{"query", "values"}` and a zero target. Data-parallel
    (keras_compat/distributed.py), rows whose targets are all `<pad>` appended until the devices split it evenly."""
    if spec.interface == "attention":
        inputs, targets = dict(arrays), np.zeros(arrays["query"].shape[:2] + arrays["values"].shape[2:], arrays["query"].dtype)
        return distributed.pad_rows(spec, inputs, targets)
    inputs = {key: arrays[key] for key in INPUT_KEYS if key in arrays}
    if schedule is not None:
        inputs["teacher_forcing"] = np.repeat(schedule[None, :], arrays["tgt_in"].shape[0], axis=0)  # [B, T - 1]
    return distributed.pad_rows(spec, inputs, arrays["tgt_out"])


@contextlib.contextmanager
def floatx_as(dtype: str):
    """Keras's floatx set to `dtype` inside the block (a metric or loss tracker built there computes in it)."""
    previous = keras.config.floatx()
    keras.config.set_floatx(dtype)
    try:
        yield
    finally:
        keras.config.set_floatx(previous)


class ModelDtypeMetrics:
    """Mixin of a Keras Model: `compile` makes its loss and metric trackers in the model's dtype (Keras's
    default, floatx, would round a float64 model's reported loss to float32); `fit` under a tf.distribute
    strategy takes a boolean input (the teacher-forcing schedule)."""

    def compile(self, *args, **kwargs):
        with floatx_as(self.compute_dtype):
            super().compile(*args, **kwargs)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Keras 3.15's TensorFlow `fit` under a strategy builds from its first batch averaged across the replicas
        (`strategy.reduce("MEAN")`, an AddN), which refuses booleans ("Value for attr 'T' of bool is not in the
        list of allowed values"): the first replica's share builds alike (only shapes and dtypes are read)."""
        if iterator is not None and data_batch is None and getattr(self, "_distribute_strategy", None) is not None:
            import tensorflow as tf

            strategy = self.distribute_strategy
            for _, _, batches in iterator:
                data_batch = keras.tree.map_structure(
                    lambda value: (
                        strategy.experimental_local_results(value)[0]
                        if isinstance(value, tf.distribute.DistributedValues)
                        else value
                    ),
                    next(batches),
                )
                break
            iterator = None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    # with `compile` overridden, Keras restores a `.keras` file's compilation only through overrides of these two
    def get_compile_config(self):
        return super().get_compile_config()

    def compile_from_config(self, config):
        """Keras's own steps (its base refuses an overridden `compile`): deserialize, compile, build the optimizer."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if getattr(self, "optimizer", None) is not None and self.built:
            self.optimizer.build(self.trainable_variables)  # its variables, which the file's then load into


class AttentionTrainer(ModelDtypeMetrics, keras.Model):
    """Document 000's bare attention layer as a Keras Model, for `fit`: input `{"query", "values"}`, output the
    context vectors `[B, T, De]`; its spec's loss, `mean(context^2)`, is the mean squared error to zeros."""

    def __init__(self, layer, **kwargs):
        super().__init__(dtype=layer.dtype_policy, **kwargs)
        self.layer = layer
        self.built = True

    def call(self, inputs, training=None):
        return self.layer.attend(inputs["query"], inputs["values"])[0]  # [B, T, De]

    def default_loss(self) -> keras.losses.Loss:
        return keras.losses.MeanSquaredError(dtype=self.compute_dtype)


class KerasInputs(ModelDtypeMetrics):
    """Mixin of the top-level Keras class of every sequence model: `call` takes Keras's one input as well as
    the document's signature, and `fit` / `evaluate` / `predict` check numpy inputs as `run` does.

    The one input: a dict `{"src", "tgt_in"}` (`"src_len"` and `"teacher_forcing"` for models with padded
    sources), or a tuple in INPUT_KEYS' order; `teacher_forcing` is `[B, T - 1]` booleans, each row the
    step's schedule (shared.core.teacher_forcing), so Keras can slice it by batch as the other inputs.
    The output: logits `[B, T, V]`, batch-first; the target `y` is `tgt_out [B, T]`.
    """

    def keras_call(self, inputs, training=None):
        """Logits `[B, T, V]` of Keras's one input (see the class); `training` turns dropout on."""
        named = self.named_inputs(inputs)
        extras = {key: named[key] for key in INPUT_KEYS[2:] if key in named}  # src_len [B], teacher_forcing [B, T - 1]
        return self.decode(named["src"], named["tgt_in"], **extras, training=bool(training))[0]

    def named_inputs(self, inputs) -> dict:
        """Keras's one input as a dict by INPUT_KEYS; a wrong structure or key is one ValueError."""
        allowed = self.input_keys()
        takes = f"{self.rosetta_name} takes a dict of {', '.join(allowed)} (src and tgt_in required), or a tuple in that order"
        if isinstance(inputs, (tuple, list)):
            if not 2 <= len(inputs) <= len(allowed):
                raise ValueError(f"{takes}: got a tuple of {len(inputs)}")
            inputs = dict(zip(allowed, inputs, strict=False))
        if not isinstance(inputs, Mapping):
            raise ValueError(f"{takes}: got {type(inputs).__name__}")
        unknown = [key for key in inputs if key not in allowed]
        missing = [key for key in _FIXED_LENGTH_KEYS if key not in inputs]
        if unknown or missing:
            raise ValueError(f"{takes}: got unknown keys {unknown}, missing {missing}")
        return dict(inputs)

    def default_loss(self) -> keras.losses.Loss:
        return loss_for(self)

    def input_keys(self) -> tuple[str, ...]:
        return INPUT_KEYS if catalogue.get(self.rosetta_name).variable_length else _FIXED_LENGTH_KEYS

    def fit(self, x=None, y=None, *args, **kwargs):
        self.check_keras_data(x, y)
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        self.check_keras_data(x, y)
        return super().evaluate(x, y, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self.check_keras_data(x, None)
        return super().predict(x, *args, **kwargs)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        self.check_keras_data(x, y)
        return super().train_on_batch(x, y, *args, **kwargs)

    def test_on_batch(self, x, y=None, *args, **kwargs):
        self.check_keras_data(x, y)
        return super().test_on_batch(x, y, *args, **kwargs)

    def predict_on_batch(self, x):
        self.check_keras_data(x, None)
        return super().predict_on_batch(x)

    def check_keras_data(self, x, y) -> None:
        """Arrays (numpy, lists, tensors) get `run`'s checks: keys, ranks, id ranges, lengths, batch sizes.
        A dataset (`tf.data`, `PyDataset`, a generator) is checked by the model's call, batch by batch, for
        its structure; its values reach the layers unchecked (check them where the dataset is made)."""
        if not isinstance(x, (Mapping, tuple, list)):
            return
        named = self.named_inputs(x)
        batch = {key: value for key, value in named.items() if key != "teacher_forcing"}
        if y is not None:
            batch["tgt_out"] = y
        spec = catalogue.get(self.rosetta_name)
        rows, length = check_batch(spec, self.rosetta_config, batch, with_targets=y is not None)["tgt_in"].shape
        schedules.check(spec, named.get("teacher_forcing"), length, rows=rows)


class Batches(keras.utils.PyDataset):
    """An epoch's `(x, y)` batches for `fit`, in order. (A Python generator would do, but Keras 3.15's `fit` on
    TensorFlow runs one update more than the batches it reports for one: docs/measurements.md.)"""

    def __init__(self, batches: list):
        super().__init__()
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int):
        return self.batches[index]


def epoch_input(batches: list):
    """`fit`'s input for one epoch of `(x, y)` batches whose lengths vary (a real corpus's): `Batches`, and on
    TensorFlow a tf.data pipeline whose signature leaves every dimension free. Keras's TensorFlow adapter infers
    a PyDataset's signature from its first two batches only (NUM_BATCHES_FOR_TENSOR_SPEC): two batches of
    length 16 fix 16, and a later one of 24 fails (what `rosetta train --stack tf` met on Multi30k)."""
    if backends.name() != "tensorflow":
        return Batches(batches)
    import tensorflow as tf

    signature = keras.tree.map_structure(lambda array: tf.TensorSpec((None,) * np.ndim(array), array.dtype), batches[0])
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))


class AfterStep(keras.callbacks.Callback):
    """`fit`'s hook for tf_impl.train.Trainer.train_epoch: each step's own loss (the metrics reset before it:
    Keras's logs otherwise hold the epoch's running mean) handed to `after_step`, which stops `fit` by returning
    False; the optimizer's gradient norm (TorchClipping's `grad_norm`) appended to `grad_norms` first."""

    def __init__(self, optimizer, grad_norms: list, after_step: Callable[[float], bool]):
        super().__init__()
        self.optimizer, self.grad_norms, self.after_step = optimizer, grad_norms, after_step

    def on_train_batch_begin(self, batch, logs=None):
        self.model.reset_metrics()

    def on_train_batch_end(self, batch, logs=None):
        self.model  # noqa: B018 (on JAX, reading `model` syncs the compiled step's state: the optimizer's grad_norm)
        self.grad_norms.append(self.optimizer.grad_norm)
        if not self.after_step(float(logs["loss"])):
            self.model.stop_training = True
