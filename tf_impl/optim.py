"""Optimisation pieces Keras lacks for following PyTorch exactly (stack-specific: torch has them built in).

`TorchAdam` is torch.optim.Adam's update rule; `clip_grad_norm` is torch.nn.utils.clip_grad_norm_.
`make_optimizer` also offers stock Keras Adam and per-variable `clipnorm`, so the drift they cause can
be measured (shared.training.TrainSpec names them).
"""

from __future__ import annotations

import keras
from keras import ops

from shared.training import TrainSpec


@keras.saving.register_keras_serializable(package="rosetta")
class TorchAdam(keras.optimizers.Optimizer):
    """Adam with torch.optim.Adam's update, which Keras's Adam does not follow:

    torch: `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)` (eps added to sqrt(v_hat));
    Keras: `p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)` ("epsilon hat"), its beta
    powers computed in the variable's dtype. Here the bias corrections are computed in float64 and cast,
    as torch computes them in Python floats; `m` moves by lerp as torch's does. The learning rate is a
    Python float, as torch's (a float32 Keras variable would round 1e-3).
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
        exp_avg = self._momentums[self._get_variable_index(variable)]
        exp_avg_sq = self._velocities[self._get_variable_index(variable)]
        self.assign(exp_avg, exp_avg + (gradient - exp_avg) * (1.0 - self.beta_1))  # torch: exp_avg.lerp_
        self.assign(exp_avg_sq, exp_avg_sq * self.beta_2 + gradient * gradient * (1.0 - self.beta_2))
        denom = ops.sqrt(exp_avg_sq) / bias_correction2_sqrt + self.epsilon
        self.assign_sub(variable, step_size * (exp_avg / denom))

    def get_config(self):
        config = super().get_config()
        exact = {"learning_rate": self.torch_lr}  # the Python float, not the float32 variable's value
        return {**config, **exact, "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}


def clip_grad_norm(gradients: list, max_norm: float | None) -> tuple[list, object]:
    """torch.nn.utils.clip_grad_norm_: scale every gradient by min(1, max_norm / (global norm + 1e-6)).

    Returns the scaled gradients and the global norm before clipping (None max_norm: no scaling).
    Keras's `global_clipnorm` divides by max(norm, max_norm) with no 1e-6; `clipnorm` clips each
    variable on its own.
    """
    present = [g for g in gradients if g is not None]
    total = ops.norm(ops.stack([ops.norm(ops.reshape(g, (-1,))) for g in present]))
    if max_norm is None:
        return gradients, total
    coef = ops.minimum(max_norm / (total + 1e-6), 1.0)
    return [None if g is None else g * ops.cast(coef, g.dtype) for g in gradients], total


def make_optimizer(spec: TrainSpec) -> keras.optimizers.Optimizer:
    """TorchAdam (the spec), or stock Keras Adam; Keras's own `clipnorm` (per variable) or `global_clipnorm`
    when the spec asks for them (torch's global clipping is `clip_grad_norm`, applied by the trainer)."""
    keras_clip = {"per_variable": "clipnorm", "keras_global": "global_clipnorm"}.get(spec.clipping)
    clip = {keras_clip: spec.clip_norm} if keras_clip and spec.clip_norm else {}
    beta_1, beta_2 = spec.betas
    if spec.optimizer == "keras_adam":
        return keras.optimizers.Adam(spec.lr, beta_1=beta_1, beta_2=beta_2, epsilon=spec.eps, **clip)
    return TorchAdam(spec.lr, beta_1=beta_1, beta_2=beta_2, epsilon=spec.eps, **clip)
