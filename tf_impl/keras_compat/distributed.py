"""Data-parallel training on Keras's own engines: each global batch split across devices, computing what one
device computes (stack-specific: torch_impl's training loop is its own).

    with distributed.data_parallel(2):
        model = tf_impl.build(name, ...)
        trainer = Trainer(model, name, spec)
        trainer.train_epoch(steps, after_step)       # Keras's `fit`, each batch split in two

- JAX: `keras.distribution.DataParallel` over the backend's devices (GPUs, or CPU devices that XLA makes of the host
  when `XLA_FLAGS=--xla_force_host_platform_device_count=N` is set before JAX is imported: `cpu_environment`).
  Keras jits one global step over sharded arrays: the loss, its gradients and the clipping norm are the global ones.
- TensorFlow: `tf.distribute.MirroredStrategy` over the GPUs, or over logical CPU devices (`split_cpu`, before
  TensorFlow initialises its devices). Keras runs the step once per replica on its share of the batch and sums the
  gradients; two of its defaults would train another objective, both fixed here:
  - the loss: a per-replica `ignore_class` mean, scaled by 1/N, is the mean of the replicas' means, not the mean
    over the global batch's non-pad targets when replicas hold different numbers of them. `fitting.loss_for`'s
    `MaskedCrossEntropy` divides each replica's sum by the all-reduced count.
  - the clipping: Keras clips each replica's gradients before summing them; TorchClipping sums them first
    (optim.TorchClipping.apply), so torch's global-norm clip and `grad_norm` see the global gradient.
  `fit` distributes its batches; Keras's `train_on_batch` hands every replica the whole batch, so `Trainer.step`
  goes through `fit` there.
- Keras's torch backend has no data parallelism of its own: refused.

Batch sizes the device count does not divide are padded: JAX refuses them ("Sharding NamedSharding(...) implies that
array axis 0 is partitioned 2 times, but the dimension size is 3"), MirroredStrategy splits them unevenly (a replica
left empty when the batch has fewer rows than devices). `pad_rows` (`fitting.keras_batch` calls it, so `Trainer`'s
batches are padded) appends copies of the last row whose targets are all `<pad>`: they add nothing to the loss,
its token count or the gradients (measured: the 3-row batches of the tests, padded to 4 on 2 devices, train as the
3 rows on one). Document 000's bare attention layer (a mean over every output: no pad) is refused an uneven batch.
A user's own `model.fit(x, y, batch_size=...)` is not padded: give it a batch size the device count divides and a
row count it divides too (the last batch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import keras
import numpy as np

from shared import specs
from tf_impl.keras_compat import backends

ENGINES = ("jax", "tensorflow")  # the backends with a data-parallel `fit` of their own


@dataclass(frozen=True)
class Plan:
    """An active `data_parallel`: the backend, its devices and Keras's (or TensorFlow's) distribution object."""

    backend: str
    devices: tuple[str, ...]
    distribution: object  # keras.distribution.DataParallel or tf.distribute.MirroredStrategy

    @property
    def replicas(self) -> int:
        return len(self.devices)


_ACTIVE: list[Plan] = []


@contextlib.contextmanager
def data_parallel(devices: int | None = None) -> Iterator[Plan]:
    """Inside, `tf_impl.build`, `Trainer(...)` and its `train_epoch` / `step` (Keras's `fit`) run data-parallel on
    `devices` devices (None: every GPU, or every CPU device there is); yields the Plan.

    Build the model and the Trainer inside (TensorFlow places their variables by the strategy, JAX by the
    distribution) and train inside (JAX's `fit` shards only while the distribution is set). ValueError when the
    backend has no data parallelism or fewer devices are visible than asked (with how to make them)."""
    if _ACTIVE:
        raise ValueError("data_parallel is already active: one at a time")
    plan = _plan(devices)
    scope = plan.distribution.scope()
    _ACTIVE.append(plan)
    try:
        with scope:
            yield plan
    finally:
        _ACTIVE.pop()


def active() -> Plan | None:
    """The Plan of the `data_parallel` block we are in, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def replicas() -> int:
    """How many shares Keras splits a batch into here: the active `data_parallel`'s devices, else a user's own
    `tf.distribute` strategy scope or `keras.distribution` (JAX), else 1."""
    if _ACTIVE:
        return _ACTIVE[-1].replicas
    backend = backends.name()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.distribute.get_strategy().num_replicas_in_sync
    if backend == "jax":
        distribution = keras.distribution.distribution()
        if distribution is not None:
            mesh = distribution.device_mesh
            return int(mesh.shape[mesh.axis_names.index(distribution.batch_dim_name)])
    return 1


def check_mode(mode: str) -> None:
    """Refuse Trainer mode "xla" on TensorFlow's replicas (ValueError): Keras compiles the step of every replica as
    one XLA cluster on the first device, which cannot read the others' copies of the variables (measured: "Trying
    to access resource encoder/embeddings/replica_1/70 ... located in device .../device:CPU:1 from device
    .../device:CPU:0"). "function" and "eager" run there; on JAX every mode is XLA's anyway."""
    if mode == "xla" and backends.name() == "tensorflow" and replicas() > 1:
        raise ValueError(
            "mode 'xla' does not run under MirroredStrategy: Keras compiles every replica's step as one XLA cluster on"
            " the first device, which cannot read the other replicas' variables; use mode 'function'"
        )


def accelerators() -> int:
    """The GPUs (TPUs) Keras's backend trains on, one a device; 0 on a CPU, whose devices `split_cpu` makes of its
    cores. TensorFlow's physical devices only: its logical ones stay unmade (split_cpu). ValueError on a backend
    without data parallelism."""
    backend = backends.name()
    if backend == "jax":
        import jax

        return sum(device.platform != "cpu" for device in jax.devices())
    if backend != "tensorflow":
        raise ValueError(_no_engine(backend))
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def cpu_environment(devices: int) -> dict[str, str]:
    """Environment variables that give a new process `devices` CPU devices on JAX (XLA's host device count; read
    once, when JAX is imported). TensorFlow's are made in the process: `split_cpu`."""
    return specs.host_devices_environment(devices)


def split_cpu(devices: int) -> None:
    """TensorFlow: split the host CPU into `devices` logical devices, for MirroredStrategy on a machine without
    GPUs. Only before TensorFlow initialises its devices (its first op): afterwards ValueError with TensorFlow's
    reason. JAX: checks the XLA_FLAGS of `cpu_environment` took effect."""
    backend = backends.name()
    if backend == "jax":
        import jax

        found = len(jax.devices("cpu"))
        if found != devices:
            raise ValueError(f"JAX has {found} CPU devices, not {devices}: start Python with {cpu_environment(devices)}")
        return
    if backend != "tensorflow":
        raise ValueError(_no_engine(backend))
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
    except RuntimeError as error:  # "Virtual devices cannot be modified after being initialized"
        raise ValueError(f"TensorFlow's CPU devices are fixed already ({error}): call split_cpu({devices}) first") from None


def pad_rows(spec, inputs: dict, targets: np.ndarray, shares: int | None = None) -> tuple[dict, np.ndarray]:
    """Keras's `(x, y)` with rows appended until `shares` (default: `replicas()`) divides the batch: copies of
    the last row whose targets are all `<pad>`, so the loss, its token count and the gradients are unchanged.
    Document 000's layer (no pad to hide a row behind) is refused an uneven batch."""
    shares = replicas() if shares is None else shares
    rows = len(targets)
    missing = -rows % shares
    if not missing:
        return inputs, targets
    if spec.interface == "attention":
        raise ValueError(
            f"a batch of {rows} rows does not split across {shares} devices, and {spec.name}'s loss (a mean over every"
            " output) has no pad rows to fill it with: use a batch size divisible by the device count"
        )
    inputs = {key: np.concatenate([value, np.repeat(value[-1:], missing, axis=0)]) for key, value in inputs.items()}
    targets = np.concatenate([targets, np.full((missing, *targets.shape[1:]), spec.pad_id, targets.dtype)])
    return inputs, targets


def in_replicas() -> int:
    """How many replicas compute this step when called inside TensorFlow's per-replica step (MirroredStrategy's
    `run`); 1 everywhere else (one replica, JAX's global step, torch)."""
    if backends.name() != "tensorflow":
        return 1
    import tensorflow as tf

    if tf.distribute.in_cross_replica_context():
        return 1
    return tf.distribute.get_replica_context().num_replicas_in_sync


def all_reduce_sum(values: list) -> list:
    """`values` (tensors, None kept) summed across TensorFlow's replicas inside a per-replica step; as they are
    elsewhere."""
    if in_replicas() == 1:
        return values
    import tensorflow as tf

    present = [value for value in values if value is not None]
    summed = iter(tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, present))
    return [None if value is None else next(summed) for value in values]


@keras.saving.register_keras_serializable(package="rosetta")
class MaskedCrossEntropy(keras.losses.SparseCategoricalCrossentropy):
    """Keras's `SparseCategoricalCrossentropy(ignore_class=pad)`: the mean over the batch's non-pad targets (torch's
    `cross_entropy(ignore_index=pad)`), which stays that mean when TensorFlow's MirroredStrategy splits the batch.

    One replica (and JAX's global step): Keras's own loss, as it is. N replicas: each returns its own sum over its
    non-pad targets divided by the count over all replicas (an all-reduce), so the gradients Keras sums across
    replicas are the global mean's, and its reported loss (each replica's value times N, averaged) is that mean.
    Keras's own loss there returns the replica's mean over 1/N: the mean of the replicas' means, another objective
    whenever the replicas hold different numbers of non-pad targets."""

    def __call__(self, y_true, y_pred, sample_weight=None):
        if in_replicas() == 1:
            return super().__call__(y_true, y_pred, sample_weight)
        if sample_weight is not None:
            raise ValueError("MaskedCrossEntropy takes no sample weights across replicas (Keras's weighting is per replica)")
        import tensorflow as tf
        from keras.src.backend import get_keras_mask  # not public: Keras's own losses read masks through it

        in_mask = get_keras_mask(y_pred)  # Keras's own loss honours the logits' mask too
        with keras.name_scope(self.name):
            y_pred = keras.ops.convert_to_tensor(y_pred, dtype=self.dtype)
            y_true = keras.ops.convert_to_tensor(y_true, dtype=self.dtype)
            losses = self.call(y_true, y_pred)  # zero at ignored targets, their mask attached
            mask = get_keras_mask(losses)  # the non-ignored targets (every one without ignore_class)
            mask = keras.ops.ones_like(losses, dtype="bool") if mask is None else mask
            mask = mask if in_mask is None else mask & in_mask
            local_sum = keras.ops.sum(keras.ops.where(mask, losses, keras.ops.zeros_like(losses)))
            count = keras.ops.sum(keras.ops.cast(mask, self.dtype))
            total = tf.stop_gradient(tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, count))
            return keras.ops.divide_no_nan(local_sum, total)


def _plan(devices: int | None) -> Plan:
    backend = backends.name()
    if backend not in ENGINES:
        raise ValueError(_no_engine(backend))
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int) or devices < 1):
        raise ValueError(f"devices must be a positive integer or None, got {devices!r}")
    found = _jax_devices() if backend == "jax" else _tf_devices()
    if devices is not None and len(found) < devices:
        visible = f"{len(found)} device(s) visible ({', '.join(found)})"
        raise ValueError(f"data_parallel({devices}) on {backend}: {visible}; {_more(backend, devices)}")
    chosen = tuple(found[: devices or len(found)])
    if backend == "jax":
        return Plan(backend, chosen, keras.distribution.DataParallel(devices=list(chosen)))
    if chosen not in _STRATEGIES:
        import tensorflow as tf

        _STRATEGIES[chosen] = tf.distribute.MirroredStrategy(devices=list(chosen))
    return Plan(backend, chosen, _STRATEGIES[chosen])


# One MirroredStrategy per set of devices for the process: each numbers its collectives from the same start, and
# TensorFlow keeps a collective's shape by its number, so a second strategy's all-reduce of another shape aborts
# ("Shape mismatch in the collective instance 100 ... expected shape [4779] but another member in the group
# expected shape [1]": measured, the second of two trainings in one process)
_STRATEGIES: dict[tuple[str, ...], object] = {}


def _jax_devices() -> list[str]:
    """The GPUs (TPUs) JAX sees, else its CPU devices: Keras's names (`gpu:0`, `cpu:1`)."""
    return keras.distribution.list_devices()


def _tf_devices() -> list[str]:
    """TensorFlow's logical GPUs, else its logical CPUs, as device names (`/device:CPU:1`)."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    return [device.name for device in (gpus or tf.config.list_logical_devices("CPU"))]


def _more(backend: str, devices: int) -> str:
    if backend == "jax":
        return f"on a CPU, start Python with {cpu_environment(devices)} (JAX reads it once, when imported)"
    return f"on a CPU, call split_cpu({devices}) before TensorFlow's first op"


def _no_engine(backend: str) -> str:
    return (
        f"data_parallel runs on Keras's {' or '.join(ENGINES)} backend, not {backend!r}: Keras's torch backend has no"
        " data-parallel fit of its own"
    )
