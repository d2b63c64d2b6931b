"""Keras recurrent cells that keep PyTorch's two biases (stack-specific helper: torch needs no counterpart).

torch's nn.RNN and nn.LSTM add two biases per cell, `b_ih` and `b_hh`; Keras's SimpleRNN and LSTM add
one. A single summed bias gives the same forward pass but trains differently (see shared/core/canonical.py),
so these cells hold both, stacked as one `(2, G*units)` variable like Keras's own GRU with
`reset_after=True`. Keras's GRU already matches torch and is used as it is. `TorchLSTM` stacks layers
with torch's state layout `[L, B, H]` and between-layer dropout.
"""

from __future__ import annotations

import keras
from keras import ops

from tf_impl.keras_compat import backends


@keras.saving.register_keras_serializable(package="rosetta")
class TorchRNNCell(keras.layers.Layer):
    """Elman cell as torch's nn.RNN: `h' = tanh(x W_ih + b_ih + h W_hh + b_hh)`.

    Args:
        units: hidden size H.
    Variables: `kernel` `[I, H]`, `recurrent_kernel` `[H, H]`, `bias` `[2, H]` = [b_ih; b_hh].
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


@keras.saving.register_keras_serializable(package="rosetta")
class TorchLSTMCell(keras.layers.Layer):
    """LSTM cell as torch's nn.LSTM: gates `x W_ih + b_ih + h W_hh + b_hh` in torch's order (i, f, g, o).

    Args:
        units: hidden size H.
        projected_inputs: the inputs arrive as their share of the gates, `x W_ih + b_ih` `[B, 4H]` (`project`: what
            `TorchLSTM` computes for a whole sequence in one product); False: the inputs `x` `[B, I]` themselves.
    Variables: `kernel` `[I, 4H]`, `recurrent_kernel` `[H, 4H]`, `bias` `[2, 4H]` = [b_ih; b_hh].
    """

    def __init__(self, units: int, projected_inputs: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.projected_inputs = projected_inputs
        self.state_size = [units, units]
        self.output_size = units

    def build(self, input_shape):
        init = keras.initializers.RandomUniform(-(self.units**-0.5), self.units**-0.5)  # torch's default
        width = 4 * self.units
        self.kernel = self.add_weight(shape=(input_shape[-1], width), initializer=init, name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, width), initializer=init, name="recurrent_kernel")
        self.bias = self.add_weight(shape=(2, width), initializer=init, name="bias")

    def project(self, inputs):
        """The inputs' share of the gates, `x W_ih + b_ih`: `[..., I]` -> `[..., 4H]`."""
        return ops.matmul(inputs, self.kernel) + self.bias[0]

    def call(self, inputs, states, training=False):
        h_prev, c_prev = states  # [B, H], [B, H]
        input_share = inputs if self.projected_inputs else self.project(inputs)  # [B, 4H]
        gates = input_share + ops.matmul(h_prev, self.recurrent_kernel) + self.bias[1]  # [B, 4H]
        i, f, g, o = ops.split(gates, 4, axis=-1)  # each [B, H]
        c = ops.sigmoid(f) * c_prev + ops.sigmoid(i) * ops.tanh(g)  # [B, H]
        h = ops.sigmoid(o) * ops.tanh(c)  # [B, H]
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), "units": self.units, "projected_inputs": self.projected_inputs}


@keras.saving.register_keras_serializable(package="rosetta")
class TorchLSTM(keras.layers.Layer):
    """A stacked, batch-first LSTM with torch's interface: `(outputs, (h_n, c_n))`, states `[L, B, H]`.

    Like nn.LSTM(dropout=p), dropout applies to every layer's outputs but the last, in training only. Like torch's CPU
    LSTM, each layer projects its whole input sequence on `W_ih` in one product before its loop, which then adds
    only `h W_hh` a step (the cells take `projected_inputs`): faster on TensorFlow, in a tf.function and under XLA.
    Except on JAX, whose XLA CPU runtime takes the one product slower than one a step, as it does the output layer
    (`backends.products_per_step`): there the cells project each step (docs/measurements.md). On JAX with a GPU the
    layers unroll their loops (`backends.unroll_recurrences`).
    Args:
        units: hidden size H; num_layers: L; dropout: p between layers.
    """

    def __init__(self, units: int, num_layers: int = 1, dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.num_layers = num_layers
        self.dropout = dropout
        self.supports_masking = True  # the mask is passed on to every layer of the stack
        projected, unroll = not backends.products_per_step(), backends.unroll_recurrences()
        self.stack = [
            keras.layers.RNN(
                TorchLSTMCell(units, projected_inputs=projected, name=f"cell_l{i}", dtype=self.dtype_policy),
                return_sequences=True,
                return_state=True,
                zero_output_for_mask=True,  # zero outputs at padded steps, as torch's packing
                unroll=unroll,
                name=f"lstm_l{i}",
                dtype=self.dtype_policy,
            )
            for i in range(num_layers)
        ]
        self.inter_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        """Each layer with its input's width (`[B, S, E]`, then `[B, S, H]`), not its projected one's."""
        for layer in self.stack:
            layer.build(input_shape)
            input_shape = (*input_shape[:-1], self.units)

    def call(self, inputs, initial_state=None, mask=None, training=False):
        """`inputs [B, S, E]`, `initial_state` (h, c) each `[L, B, H]` or None -> outputs `[B, S, H]`, (h_n, c_n)."""
        x, hs, cs = inputs, [], []
        for i, layer in enumerate(self.stack):
            state = None if initial_state is None else [initial_state[0][i], initial_state[1][i]]
            steps_in = layer.cell.project(x) if layer.cell.projected_inputs else x  # [B, S, 4H] in one product, or [B, S, E]
            if x.shape[1] == 1 and mask is None:  # one step (a decoder fed step by step): the cell alone, no loop
                h, (_, c) = one_step(layer, steps_in[:, 0], state or self._zero_state(steps_in), training)  # [B, H] each
                x = ops.expand_dims(h, 1)  # [B, 1, H]
            else:
                x, h, c = layer(steps_in, initial_state=state, mask=mask, training=training)  # [B, S, H], [B, H], [B, H]
            if layer.unroll and mask is not None:  # Keras 3.15's unrolled JAX loop repeats the last output there
                x = ops.where(ops.expand_dims(mask, 2), x, ops.zeros_like(x))  # [B, S, H], zero at padded steps
            hs.append(h)
            cs.append(c)
            if i + 1 < self.num_layers:
                x = self.inter_dropout(x, training=training)
        return x, (ops.stack(hs), ops.stack(cs))  # [B, S, H], ([L, B, H], [L, B, H])

    def _zero_state(self, inputs) -> list:
        """Keras's initial state of a layer of the stack: zeros, (h, c) each `[B, H]`."""
        return [ops.zeros((ops.shape(inputs)[0], self.units), dtype=self.compute_dtype)] * 2

    def get_config(self):
        return {**super().get_config(), "units": self.units, "num_layers": self.num_layers, "dropout": self.dropout}

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # TensorFlow's object graph does not see layers kept in a Keras list: name them, or a
        # tf.train.Checkpoint of the model silently leaves the stack out (Keras's own files are unchanged)
        children = super()._trackable_children(save_type, **kwargs)
        return {**children, **{layer.name: layer for layer in self.stack}}


def torch_rnn(units: int, name: str, dtype=None) -> keras.layers.RNN:
    """A batch-first Keras RNN layer over `TorchRNNCell` returning (sequence, final state), like nn.RNN."""
    cell = TorchRNNCell(units, name=f"{name}_cell", dtype=dtype)
    return keras.layers.RNN(cell, return_sequences=True, return_state=True, zero_output_for_mask=True, name=name, dtype=dtype)


def torch_gru(units: int, name: str, dtype=None) -> keras.layers.GRU:
    """A batch-first Keras GRU computing what nn.GRU computes (given weights mapped by shared.core.canonical)."""
    return keras.layers.GRU(
        units,
        activation="tanh",
        recurrent_activation="sigmoid",  # torch's gates use the logistic sigmoid, not hard_sigmoid
        reset_after=True,  # torch applies the reset gate after the recurrent matmul: r * (W_hn h + b_hn)
        return_sequences=True,
        return_state=True,
        zero_output_for_mask=True,  # zero outputs at padded steps, as torch's packing (Bidirectional forces it)
        name=name,
        dtype=dtype,
    )


def one_step(layer: keras.layers.RNN, inputs, states: list, training=False):
    """What the recurrent `layer` computes over the one-step sequence `inputs [B, I]` from `states` (each `[B, H]`): its
    output `[B, H]` and new states, by its cell as the layer's loop would, without the loop Keras wraps even one step
    in (a while loop to trace on TensorFlow, a scan to compile on JAX). The decoders of documents 002 and 003 (under
    scheduled teacher forcing) run step by step: without that loop their train steps trace, compile and run faster
    (docs/measurements.md)."""
    return layer.cell(inputs, states, training=training)
