"""Keras recurrent cells that keep PyTorch's two biases (stack-specific helper: torch needs no counterpart).

torch's nn.RNN and nn.LSTM add two biases per cell, `b_ih` and `b_hh`; Keras's SimpleRNN and LSTM add
one. A single summed bias gives the same forward pass but trains differently (see shared/canonical.py),
so these cells hold both, stacked as one `(2, G*units)` variable like Keras's own GRU with
`reset_after=True`. Keras's GRU already matches torch and is used as it is.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="rosetta")
class TorchRNNCell(keras.layers.Layer):
    """Elman cell as torch's nn.RNN: `h' = tanh(x W_ih + b_ih + h W_hh + b_hh)`.

    Args:
        units: hidden size H.
    Variables: `kernel` `(input_dim, H)`, `recurrent_kernel` `(H, H)`, `bias` `(2, H)` = [b_ih; b_hh].
    """

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units
        self.output_size = units

    def build(self, input_shape):
        init = keras.initializers.RandomUniform(-(self.units**-0.5), self.units**-0.5)  # torch's default
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer=init, name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units), initializer=init, name="recurrent_kernel")
        self.bias = self.add_weight(shape=(2, self.units), initializer=init, name="bias")

    def call(self, inputs, states, training=False):
        prev = states[0] if isinstance(states, (list, tuple)) else states  # [B, H]
        x_part = ops.matmul(inputs, self.kernel) + self.bias[0]  # [B, H]
        h_part = ops.matmul(prev, self.recurrent_kernel) + self.bias[1]  # [B, H]
        output = ops.tanh(x_part + h_part)  # [B, H]
        return output, [output]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def torch_rnn(units: int, name: str, dtype=None) -> keras.layers.RNN:
    """A batch-first Keras RNN layer over `TorchRNNCell` returning (sequence, final state), like nn.RNN."""
    cell = TorchRNNCell(units, name=f"{name}_cell", dtype=dtype)
    return keras.layers.RNN(cell, return_sequences=True, return_state=True, name=name, dtype=dtype)


def torch_gru(units: int, name: str, dtype=None) -> keras.layers.GRU:
    """A batch-first Keras GRU computing what nn.GRU computes (given weights mapped by shared.canonical)."""
    return keras.layers.GRU(
        units,
        activation="tanh",
        recurrent_activation="sigmoid",  # torch's gates use the logistic sigmoid, not hard_sigmoid
        reset_after=True,  # torch applies the reset gate after the recurrent matmul: r * (W_hn h + b_hn)
        return_sequences=True,
        return_state=True,
        name=name,
        dtype=dtype,
    )
