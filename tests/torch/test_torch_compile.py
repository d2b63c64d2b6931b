"""torch.compile traces into the recurrent layers on the CPU (`allow_rnn`, torch_impl.train.compiled): the compiled
train step must update exactly as eager does, a packed (variable-length) encoder included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_impl
from shared.verify.equality import assert_close
from shared.verify.training import EQUALITY_SPEC, fixture_batches, fixture_trainer, step_schedules


def _losses_and_weights(name: str, mode: str, batches: list[dict]) -> tuple[list[float], dict]:
    trainer = fixture_trainer(torch_impl, name, "float64", EQUALITY_SPEC, mode=mode)
    schedules = step_schedules(name, EQUALITY_SPEC, batches)
    losses = [trainer.step(batch, schedule) for batch, schedule in zip(batches, schedules, strict=True)]
    return losses, torch_impl.get_weights(trainer.model)


@pytest.mark.parametrize("name", ["reverse_bahdanau", "luong_general"])  # a GRU per decoder step; a packed encoder
def test_a_compiled_train_step_traced_into_the_recurrent_layers_updates_as_eager(name):
    batches = list(fixture_batches(name, 3))
    torch._dynamo.utils.counters.clear()
    compiled_losses, compiled_weights = _losses_and_weights(name, "compile", batches)
    breaks = torch._dynamo.utils.counters["graph_break"]  # off: "Attempted to wrap RNN, GRU, or LSTM" at each layer
    assert not [reason for reason in breaks if "RNN, GRU, or LSTM" in reason]  # (packing still breaks: not traceable)
    eager_losses, eager_weights = _losses_and_weights(name, "eager", batches)
    assert_close(np.array(compiled_losses), np.array(eager_losses), 1e-12, what=f"{name}: compiled vs eager losses")
    for key, value in eager_weights.items():
        assert_close(compiled_weights[key], value, 1e-12, what=f"{name}: {key} after 3 compiled steps")


def test_negative_control_a_compiled_encoder_that_ignored_the_lengths_would_be_caught():
    """The fixture's sources are padded at their ends: reading them whole (packing lost) moves the loss."""
    batches = list(fixture_batches("luong_general", 3))
    unpacked = [{**batch, "src_len": np.full_like(batch["src_len"], batch["src"].shape[1])} for batch in batches]
    packed_losses, _ = _losses_and_weights("luong_general", "eager", batches)
    unpacked_losses, _ = _losses_and_weights("luong_general", "eager", unpacked)
    assert np.max(np.abs(np.array(packed_losses) - np.array(unpacked_losses))) > 1e-6
