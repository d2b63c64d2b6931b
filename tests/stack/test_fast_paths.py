"""Ours (hoisted out of the decoder loop) computes the function of the documents' listings as written.

Per stack: every model built twice from the golden weights, `as_written=True` and ours, compared in
float64 on outputs, loss and gradients, with the golden teacher-forcing schedule (the loop path) and
without one (ours then runs the output layer once, and Luong's decoder over the whole target).
The golden files themselves are computed as written (shared/verify/fixtures.py), so test_stack's golden
comparison holds ours to the torch listing too. Negative controls: a wrong column block of a split
Linear, and a score without its bias, are caught.
"""

from __future__ import annotations

import pytest

from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_all_close, assert_close, grad_bounds, output_bounds

MODELS = catalogue.built()
SCHEDULES = ["golden schedule", "teacher forcing"]


def _pair(stack, name, **options):
    golden = fixtures.load_golden(name)
    models = []
    for as_written in (True, False):
        model = stack.build(name, "float64", as_written=as_written, **{**catalogue.get(name).fixture_config, **options})
        stack.set_weights(model, golden.weights)
        models.append(model)
    return golden, models


def _compare(stack, name, schedule_kind, options=None, break_ours=None):
    golden, (written, ours) = _pair(stack, name, **(options or {}))
    if break_ours:
        break_ours(ours)
    schedule = golden.schedule if schedule_kind == "golden schedule" else None
    tolerance = catalogue.get(name).tolerance
    expected = stack.run(written, name, golden.batch, teacher_forcing=schedule)
    actual = stack.run(ours, name, golden.batch, teacher_forcing=schedule)
    assert_all_close(actual, expected, output_bounds(tolerance, "float64"), name)
    loss_written, grads_written = stack.loss_and_grads(written, name, golden.batch, teacher_forcing=schedule)
    loss, grads = stack.loss_and_grads(ours, name, golden.batch, teacher_forcing=schedule)
    assert_close(loss, loss_written, tolerance.f64_outputs, what=f"{name} loss")
    return assert_all_close(grads, grads_written, grad_bounds(tolerance, "float64"), f"{name} grads")


@pytest.mark.parametrize("schedule_kind", SCHEDULES)
@pytest.mark.parametrize("name", MODELS)
def test_ours_equals_the_listing_as_written(stack, name, schedule_kind):
    _compare(stack, name, schedule_kind)


FED = {"feed_state": True}  # document 004's decoder given its previous state (the fixtures leave it off)


def test_ours_equals_the_tutorial_as_written_with_its_state_fed(stack):
    _compare(stack, "tf_tutorial", "teacher forcing", FED)


def test_negative_control_a_fed_tutorial_without_its_recurrent_share_is_caught(stack):
    def skip_recurrent_share(ours):  # ours's teacher-forced decoder, as if the state started each step from zeros
        ours.decoder.feed_state = False

    with pytest.raises(AssertionError):
        _compare(stack, "tf_tutorial", "teacher forcing", FED, break_ours=skip_recurrent_share)


def test_as_written_is_a_build_option_of_every_model(stack):
    for name in MODELS:
        model = stack.build(name, "float64", **catalogue.get(name).fixture_config)
        assert getattr(model, "as_written", None) is False, name
        assert stack.build(name, "float64", as_written=True, **catalogue.get(name).fixture_config).as_written is True


def _wrong_block_keys(stack):
    """ConcatScore.keys taking the decoder's column block of W_a instead of the encoder's."""
    if stack.__name__ == "torch_impl":
        import torch.nn.functional as F

        return lambda self, enc_out: F.linear(enc_out, self.W_a.weight[:, : self.hidden_size], self.W_a.bias)
    from keras import ops

    return lambda self, enc_out: ops.matmul(enc_out, self.W_a.kernel[: self.hidden_size]) + self.W_a.bias


def _keys_without_bias(stack):
    """document 002's Attention.keys forgetting fc1's bias when splitting the Linear."""
    if stack.__name__ == "torch_impl":
        import torch.nn.functional as F

        return lambda self, outputs: F.linear(outputs, self.fc1.weight[:, self.decoder_hidden_size :])
    from keras import ops

    return lambda self, outputs: ops.matmul(outputs, self.fc1.kernel[self.decoder_hidden_size :])


@pytest.mark.parametrize(
    ("name", "module", "cls", "naive"),
    [
        ("reverse_bahdanau_concat", "reverse_task", "ConcatScore", _wrong_block_keys),
        ("bahdanau_bigru", "bahdanau_bigru", "Attention", _keys_without_bias),
    ],
)
def test_negative_control_a_wrong_hoist_is_caught(stack, monkeypatch, name, module, cls, naive):
    import importlib

    target = getattr(importlib.import_module(f"{stack.__name__}.models.{module}"), cls)
    monkeypatch.setattr(target, "keys", naive(stack))
    with pytest.raises(AssertionError, match="exceeds"):
        _compare(stack, name, "teacher forcing")
