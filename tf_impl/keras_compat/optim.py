"""Optimisation pieces Keras lacks for following PyTorch exactly (stack-specific: torch has them built in).

`TorchAdam` is torch.optim.Adam's update rule, `TorchAdamW` torch.optim.AdamW's; `clip_grad_norm` is
torch.nn.utils.clip_grad_norm_.
`make_optimizer` also offers stock Keras Adam and per-variable `clipnorm`, so the drift they cause can
be measured (shared.verify.training.TrainSpec names them).
"""

from __future__ import annotations

import contextlib

import keras
from keras import ops

from shared.specs import TrainSpec
from tf_impl.keras_compat import distributed


class TorchClipping:
    """Mixin of a Keras optimizer: gradients as torch hands them to its optimizer.

    - `tf.IndexedSlices` (an Embedding's gradient, one slice per token occurrence) are summed into dense rows
      first, as torch's embedding gradient is: squaring slices before summing repeats would give Adam's second
      moment and the clipping norm wrong values.
    - `clip_grad_norm`: torch's `clip_grad_norm_(parameters, max_norm)` before every update, all gradients
      scaled by `min(1, max_norm / (global norm + 1e-6))` (None: no clipping). Keras's own `clipnorm` clips
      each variable alone and `global_clipnorm` divides by `max(norm, max_norm)`: neither is torch's rule.
    - `grad_norm`: the global gradient norm of the last update, before clipping (what `clip_grad_norm_`
      returns; `rosetta train` logs it). On JAX, whose compiled step carries only the optimizer's `variables`, it
      is one of them there (files still hold Adam's alone: `save_own_variables`); read it after Keras syncs the
      state (`train_on_batch` does; in `fit`, a callback's `self.model`).
    - data parallelism (keras_compat/distributed.py): under TensorFlow's MirroredStrategy each replica's gradients
      are summed across replicas before the clipping (Keras clips each replica's own, then sums), so the clip and
      `grad_norm` see the global gradient; JAX's step is global already.
    """

    def __init__(self, *args, clip_grad_norm=None, **kwargs):
        if clip_grad_norm is not None and not clip_grad_norm > 0:
            raise ValueError(f"clip_grad_norm must be positive or None, got {clip_grad_norm!r}")
        if clip_grad_norm is not None and any(kwargs.get(k) for k in ("clipnorm", "global_clipnorm", "clipvalue")):
            raise ValueError("clip_grad_norm (torch's rule) replaces Keras's clipnorm / global_clipnorm / clipvalue: pass one")
        super().__init__(*args, **kwargs)
        self.clip_grad_norm = None if clip_grad_norm is None else float(clip_grad_norm)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        # set past Keras's tracking: a log of the last step, no state of the optimizer (files keep Adam's slots only);
        # the same on every replica (the gradients are summed first): the first one's is kept
        norm = keras.Variable(0.0, dtype="float64", trainable=False, name="grad_norm", aggregation="only_first_replica")
        object.__setattr__(self, "_grad_norm", norm)

    @property
    def grad_norm(self) -> float:
        return float(ops.convert_to_numpy(self._grad_norm))

    @property
    def variables(self):
        """Keras's, and on JAX `grad_norm`'s too: its stateless step returns these alone (else the norm stays 0)."""
        found = super().variables
        carried = keras.backend.backend() == "jax" and hasattr(self, "_grad_norm") and not getattr(self, "_in_files", False)
        return [*found, self._grad_norm] if carried else found

    def save_own_variables(self, store):
        with self._files_view():
            super().save_own_variables(store)

    def load_own_variables(self, store):
        with self._files_view():
            super().load_own_variables(store)

    @contextlib.contextmanager
    def _files_view(self):
        """`variables` as Keras's files hold them (no `grad_norm`), inside."""
        object.__setattr__(self, "_in_files", True)
        try:
            yield
        finally:
            object.__setattr__(self, "_in_files", False)

    def apply(self, grads, trainable_variables=None):
        # inside MirroredStrategy's per-replica step: the replicas' gradients summed here, before the clipping
        return super().apply(distributed.all_reduce_sum([dense(g) for g in grads]), trainable_variables)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """Keras's TensorFlow optimizer sums the replicas' gradients after clipping; `apply` summed them before."""
        return grads_and_vars

    def _clip_gradients(self, grads):
        clipped, norm = clip_grad_norm(grads, self.clip_grad_norm)
        self._grad_norm.assign(ops.cast(norm, "float64"))
        return clipped if self.clip_grad_norm is not None else super()._clip_gradients(grads)

    def get_config(self):
        return {**super().get_config(), "clip_grad_norm": self.clip_grad_norm}


@keras.saving.register_keras_serializable(package="rosetta")
class KerasAdam(TorchClipping, keras.optimizers.Adam):
    """Stock Keras Adam's rule (its "epsilon hat", its `clipnorm` / `global_clipnorm`), with TorchClipping's
    options: the naive setups whose drift the tests and the report measure."""


@keras.saving.register_keras_serializable(package="rosetta")
class TorchAdam(TorchClipping, keras.optimizers.Optimizer):
    """Adam with torch.optim.Adam's update, which Keras's Adam does not follow:

    torch: `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)` (eps added to sqrt(v_hat));
    Keras: `p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)` ("epsilon hat"), its beta
    powers computed in the variable's dtype. Here the bias corrections are computed in float64 and cast,
    as torch computes them in Python floats; `m` moves by lerp as torch's does. The learning rate is a
    Python float, as torch's (a float32 Keras variable would round 1e-3).

    A Keras optimizer like any (`model.compile(optimizer=TorchAdam(1e-3, clip_grad_norm=1.0))`, or
    `apply_gradients` in a `GradientTape` loop), on any Keras 3 backend; TorchClipping gives it torch's
    gradients and clipping.
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, name="torch_adam", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.torch_lr, self.beta_1, self.beta_2, self.epsilon = float(learning_rate), beta_1, beta_2, epsilon

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        # Keras Adam's slots, names and order: a file either writes loads into the other (torch's exp_avg, exp_avg_sq)
        self._momentums, self._velocities = self.add_optimizer_variables(var_list, ["momentum", "velocity"])

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        step = ops.cast(self.iterations + 1, "float64")
        # convert_to_tensor(.., float64), not cast: casting a Python float goes through float32 first
        bias_correction1 = 1.0 - ops.power(ops.convert_to_tensor(self.beta_1, "float64"), step)
        bias_correction2 = 1.0 - ops.power(ops.convert_to_tensor(self.beta_2, "float64"), step)
        step_size = ops.cast(self.torch_lr / bias_correction1, dtype)
        bias_correction2_sqrt = ops.cast(ops.sqrt(bias_correction2), dtype)
        gradient = ops.cast(gradient, dtype)
        # the constants as tensors of the variable's dtype: Keras's torch backend makes a bare Python float a
        # float32 tensor before it multiplies (0.999 off by 1.3e-8: float64 Adam drifted 1e-11 a step)
        beta_2, keep_1, keep_2, eps = (ops.convert_to_tensor(c, dtype) for c in (
            self.beta_2, 1.0 - self.beta_1, 1.0 - self.beta_2, self.epsilon))  # fmt: skip
        exp_avg = self._momentums[self._get_variable_index(variable)]
        exp_avg_sq = self._velocities[self._get_variable_index(variable)]
        self.assign(exp_avg, exp_avg + (gradient - exp_avg) * keep_1)  # torch: exp_avg.lerp_
        self.assign(exp_avg_sq, exp_avg_sq * beta_2 + gradient * gradient * keep_2)
        denom = ops.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
        self.assign_sub(variable, step_size * (exp_avg / denom))

    def get_config(self):
        config = super().get_config()
        exact = {"learning_rate": self.torch_lr}  # the Python float, not the float32 variable's value
        return {**config, **exact, "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package="rosetta")
class TorchAdamW(TorchAdam):
    """torch.optim.AdamW: decoupled weight decay as torch applies it, `p *= 1 - lr * weight_decay` before TorchAdam's
    step (torch's default weight_decay 0.01). Keras's AdamW decays by `p - p * wd * lr` with its float32 learning
    rate, then steps by its "epsilon hat": not torch's. `exclude_from_weight_decay` works as on any Keras optimizer
    (torch's parameter groups with weight_decay 0)."""

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=1e-2, name="torch_adamw",
                 **kwargs):  # fmt: skip
        if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)) or not weight_decay >= 0:
            raise ValueError(f"weight_decay must be a number >= 0 (torch.optim.AdamW's), got {weight_decay!r}")
        # Keras's own weight decay stays off (its rule is not torch's): update_step decays
        super().__init__(learning_rate, beta_1, beta_2, epsilon, name=name, **kwargs)
        self.torch_weight_decay = float(weight_decay)

    def update_step(self, gradient, variable, learning_rate):
        if self.torch_weight_decay and self._use_weight_decay(variable):
            # 1 - lr * wd in Python floats, as torch's, then cast
            keep = ops.convert_to_tensor(1.0 - self.torch_lr * self.torch_weight_decay, variable.dtype)
            self.assign(variable, variable * keep)
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "weight_decay": self.torch_weight_decay}


def clip_grad_norm(gradients: list, max_norm: float | None) -> tuple[list, object]:
    """torch.nn.utils.clip_grad_norm_: scale every gradient by min(1, max_norm / (global norm + 1e-6)).

    Returns the scaled gradients and the global norm before clipping (None max_norm: no scaling).
    Keras's `global_clipnorm` divides by max(norm, max_norm) with no 1e-6; `clipnorm` clips each
    variable on its own.
    """
    total = global_norm(gradients)
    if max_norm is None:
        return gradients, total
    coef = ops.minimum(max_norm / (total + 1e-6), 1.0)
    return [None if g is None else g * ops.cast(coef, g.dtype) for g in gradients], total


def dense(gradient):
    """A gradient as a dense tensor: TensorFlow's IndexedSlices (an Embedding's: a slice per token occurrence)
    with the repeats summed per row, as torch's embedding gradient; other backends' gradients are dense."""
    if gradient is None or keras.backend.backend() != "tensorflow":
        return gradient
    import tensorflow as tf

    return tf.convert_to_tensor(gradient)


def global_norm(gradients: list):
    """The norm of all gradients together (None entries skipped)."""
    present = [dense(g) for g in gradients if g is not None]
    return ops.norm(ops.stack([ops.norm(ops.reshape(g, (-1,))) for g in present]))


def make_optimizer(spec: TrainSpec) -> keras.optimizers.Optimizer:
    """The spec's optimizer: TorchAdam with torch's global clipping (`clip_grad_norm`), or stock Keras Adam;
    Keras's own `clipnorm` (per variable) or `global_clipnorm` where the spec asks for them."""
    clip = {"global": "clip_grad_norm", "per_variable": "clipnorm", "keras_global": "global_clipnorm"}[spec.clipping]
    options = {"beta_1": spec.betas[0], "beta_2": spec.betas[1], "epsilon": spec.eps}
    options.update({clip: spec.clip_norm} if spec.clip_norm else {})
    return (KerasAdam if spec.optimizer == "keras_adam" else TorchAdam)(spec.lr, **options)
