"""`tf_impl.models.seq2seq.run_gru` (ours for document 001's GRU encoders and Luong decoders: a GRU's inputs projected in
one product before its loop) computes what Keras's own GRU layer computes: outputs, final state and every gradient."""

from __future__ import annotations

import numpy as np
import pytest

from shared.verify.equality import assert_close


def _gru_and_inputs():
    from tf_impl.keras_compat.layers import torch_gru

    rng = np.random.default_rng(0)
    inputs, state = rng.normal(size=(3, 5, 4)), rng.normal(size=(3, 6))  # [B, T, I], [B, H]
    layer = torch_gru(6, name="gru", dtype="float64")
    layer.build(inputs.shape)
    for variable in layer.weights:  # nonzero biases: a misplaced b_hn shows
        variable.assign(rng.normal(size=variable.shape))
    return layer, inputs, state


def _outputs_and_gradients(run, layer, inputs, state):
    import tensorflow as tf

    inputs = tf.constant(inputs)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs, final = run(inputs)
        loss = tf.reduce_sum(outputs**2) + tf.reduce_sum(final**3)
    return [np.asarray(value) for value in (outputs, final, *tape.gradient(loss, [inputs, *layer.weights]))]


@pytest.mark.parametrize("initial", ["zeros", "given"])
def test_run_gru_computes_what_kerass_gru_computes(initial):
    from tf_impl.models.seq2seq import run_gru

    layer, inputs, state = _gru_and_inputs()
    state = None if initial == "zeros" else state
    keras_gru = _outputs_and_gradients(lambda x: layer(x, initial_state=state), layer, inputs, state)
    ours = _outputs_and_gradients(lambda x: run_gru(layer, x, state), layer, inputs, state)
    for number, (want, got) in enumerate(zip(keras_gru, ours, strict=True)):
        assert_close(got, want, 1e-12, what=f"output/state/gradient {number}")


def test_negative_control_b_hn_outside_the_reset_gate_would_be_caught():
    """The classic GRU trap (Keras's reset_after=False rule): `r * (h W_hn) + b_hn` for `r * (h W_hn + b_hn)`."""
    from keras import ops

    from tf_impl.models.seq2seq import over_time

    layer, inputs, state = _gru_and_inputs()
    cell = layer.cell

    def b_hn_outside(x):
        def step(h, x_t):
            x_z, x_r, x_h = ops.split(ops.matmul(x_t, cell.kernel) + cell.bias[0], 3, axis=1)
            h_z, h_r, h_h = ops.split(ops.matmul(h, cell.recurrent_kernel), 3, axis=1)
            b_z, b_r, b_h = ops.split(cell.bias[1], 3)
            z, r = ops.sigmoid(x_z + h_z + b_z), ops.sigmoid(x_r + h_r + b_r)
            h = z * h + (1 - z) * ops.tanh(x_h + r * h_h + b_h)
            return h, h

        final, outputs = over_time(step, ops.convert_to_tensor(state), x)
        return outputs, final

    keras_gru = _outputs_and_gradients(lambda x: layer(x, initial_state=state), layer, inputs, state)
    naive = _outputs_and_gradients(b_hn_outside, layer, inputs, state)
    assert np.max(np.abs(naive[0] - keras_gru[0])) > 1e-3


@pytest.mark.parametrize(
    ("name", "ours_runs"),
    [("reverse_bahdanau", ["encoder"]), ("reverse_luong_dot", ["encoder", "decoder"]), ("reverse_rnn", [])],
)
def test_document_001s_gru_models_run_their_grus_through_it_and_the_listing_through_kerass_layer(monkeypatch, name, ours_runs):
    """Ours runs every GRU that takes a whole sequence (each Bahdanau model's encoder; a Luong model's encoder and
    decoder) through `run_gru`; as written, none. Negative control: the vanilla RNN model, whose layers are no GRU,
    runs none either way."""
    from tf_impl import contract
    from tf_impl.models import reverse_task

    ran = []
    real = reverse_task.run_gru
    monkeypatch.setattr(reverse_task, "run_gru", lambda layer, *args: ran.append(layer.name) or real(layer, *args))
    tokens = np.arange(12).reshape(2, 6) % 20  # [B, S] and [B, T] token ids
    for as_written, expected in ((False, ours_runs), (True, [])):
        ran.clear()
        contract.build(name, "float32", as_written=as_written).decode(tokens, tokens)
        assert ran == expected, f"{name} as_written={as_written}"


LENGTHS = np.array([5, 2, 4])  # [B]: row 0 unpadded, rows 1 and 2 padded after their last token


def _mask():
    return np.arange(5)[None, :] < LENGTHS[:, None]  # [B, T]


@pytest.mark.parametrize("zero_output", [True, False], ids=["zero_output", "previous_output"])
@pytest.mark.parametrize("backwards", [False, True], ids=["forward", "go_backwards"])
def test_run_gru_with_a_mask_computes_what_kerass_masked_gru_computes(backwards, zero_output):
    """Padded rows: the state holds through the padding and the outputs there are zeros (`zero_output_for_mask`) or
    the last real step's output (`zero_output_for_mask=False`, document 004's decoder GRU); a `go_backwards` layer
    starts at each row's end, so its padding comes first and leaves the zero state as it is."""
    from tf_impl.models.seq2seq import run_gru

    layer, inputs, state = _gru_and_inputs()
    layer.go_backwards, layer.zero_output_for_mask = backwards, zero_output
    mask = _mask()
    keras_gru = _outputs_and_gradients(lambda x: layer(x, mask=mask), layer, inputs, state)
    ours = _outputs_and_gradients(lambda x: run_gru(layer, x, mask=mask), layer, inputs, state)
    for number, (want, got) in enumerate(zip(keras_gru, ours, strict=True)):
        assert_close(got, want, 1e-12, what=f"output/state/gradient {number}")
    padded = ours[0][1, 2:] if not backwards else ours[0][1, :3]  # row 1's padded steps' outputs
    at_padding = 0 if zero_output or backwards else ours[0][1, 1]  # a backwards row's padding comes before any output
    assert np.all(padded == at_padding)
    unmasked = _outputs_and_gradients(lambda x: run_gru(layer, x), layer, inputs, state)  # negative control
    assert np.max(np.abs(unmasked[1] - keras_gru[1])) > 1e-3  # a padded row's final state moved on through its padding
    if not (zero_output or backwards):  # negative control: zeros where Keras repeats the previous output
        layer.zero_output_for_mask = True
        zeros_at_padding = _outputs_and_gradients(lambda x: run_gru(layer, x, mask=mask), layer, inputs, state)
        assert np.max(np.abs(zeros_at_padding[0] - keras_gru[0])) > 1e-3


def test_run_bidirectional_gru_computes_what_kerass_bidirectional_layer_computes():
    """Document 002's encoder: outputs `[B, T, 2H]` (the backward direction's put back in time order) and each
    direction's final state, with every gradient, where the rows are padded."""
    import keras
    import tensorflow as tf

    from tf_impl.keras_compat.layers import torch_gru
    from tf_impl.models.seq2seq import run_bidirectional_gru

    rng = np.random.default_rng(1)
    inputs, mask = tf.constant(rng.normal(size=(3, 5, 4))), _mask()
    layer = keras.layers.Bidirectional(torch_gru(6, "gru", "float64"), name="gru", dtype="float64")
    layer.build(inputs.shape)
    for variable in layer.weights:
        variable.assign(rng.normal(size=variable.shape))

    def outputs_and_gradients(run):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs, forward, backward = run()
            loss = tf.reduce_sum(outputs**2) + tf.reduce_sum(forward**3) + tf.reduce_sum(backward**3)
        return [np.asarray(value) for value in (outputs, forward, backward, *tape.gradient(loss, [inputs, *layer.weights]))]

    keras_layer = outputs_and_gradients(lambda: layer(inputs, mask=mask))
    ours = outputs_and_gradients(lambda: run_bidirectional_gru(layer, inputs, mask))
    for number, (want, got) in enumerate(zip(keras_layer, ours, strict=True)):
        assert_close(got, want, 1e-12, what=f"outputs/states/gradient {number}")


@pytest.mark.parametrize(("name", "module"), [("bahdanau_bigru", "seq2seq"), ("tf_tutorial", "tf_tutorial")])
def test_the_real_data_models_encoders_run_through_it_in_ours_and_through_kerass_layer_as_written(monkeypatch, name, module):
    """Document 002's bidirectional encoder (each direction) and document 004's encoder: ours through `run_gru`,
    the listing through Keras's GRU (negative control: as written, none)."""
    import importlib

    from shared import catalogue
    from tf_impl import contract
    from tf_impl.models import seq2seq

    ran = []
    patched = importlib.import_module(f"tf_impl.models.{module}")
    real = seq2seq.run_gru
    monkeypatch.setattr(patched, "run_gru", lambda layer, *args, **kwargs: ran.append(layer.name) or real(layer, *args, **kwargs))
    tokens, lengths = np.arange(18).reshape(3, 6) % 7 + 4, np.array([6, 3, 5])  # [B, S] token ids past the specials
    for as_written in (False, True):
        ran.clear()
        model = contract.build(name, "float32", as_written=as_written, **catalogue.get(name).fixture_config)
        model.decode(tokens, tokens, lengths)
        assert bool(ran) is not as_written and len(ran) == {True: 0, False: 2 if name == "bahdanau_bigru" else 1}[as_written]
