"""torch's Trainer runs Adam fused (one kernel per weight): it must update exactly as torch's plain Adam does, also
from a state handed over by Keras, whose moments arrive as transposed (Fortran-ordered) arrays."""

from __future__ import annotations

import numpy as np
import torch

import torch_impl
from shared.verify.equality import assert_close
from shared.verify.training import EQUALITY_SPEC, fixture_batches, fixture_trainer

NAME = "reverse_bahdanau"


def _state_as_keras_hands_it_over(trainer) -> dict:
    """The trainer's Adam state with every matrix moment Fortran-ordered, as a transposed Keras kernel arrives."""
    state = trainer.optimizer_state()
    for moment in ("exp_avg", "exp_avg_sq"):
        state[moment] = {key: np.asfortranarray(value) for key, value in state[moment].items()}
    return state


def _one_step_from(state, plain: bool, load=None) -> dict:
    trainer = fixture_trainer(torch_impl, NAME, "float64", EQUALITY_SPEC)
    if plain:  # torch's own Adam, one op at a time over strided tensors: the rule the fused kernel must follow
        trainer.optimizer = torch.optim.Adam(
            trainer.variables, lr=EQUALITY_SPEC.lr, betas=EQUALITY_SPEC.betas, eps=EQUALITY_SPEC.eps
        )
    if load is None:
        trainer.load_optimizer_state(state)
    else:
        load(trainer, state)
    trainer.step(next(iter(fixture_batches(NAME, 1))))
    return torch_impl.get_weights(trainer.model)


def _trained_state() -> dict:
    return _state_as_keras_hands_it_over(_trainer_after(3))


def test_fused_adam_from_a_keras_ordered_state_updates_as_plain_adam():
    state = _trained_state()
    assert any(not array.flags["C_CONTIGUOUS"] for array in state["exp_avg"].values())  # the trap is present
    fused, plain = _one_step_from(state, plain=False), _one_step_from(state, plain=True)
    for key, value in plain.items():
        assert_close(fused[key], value, 1e-15, what=f"{key}: fused vs plain Adam")


def test_negative_control_moments_loaded_with_their_strides_are_misread_by_the_fused_kernel():
    state = _trained_state()

    def strided_load(trainer, state):  # the naive load: torch.as_tensor keeps the array's Fortran strides
        for key, param in trainer.model.named_parameters():
            moments = {name: torch.as_tensor(state[name][key]) for name in ("exp_avg", "exp_avg_sq")}
            trainer.optimizer.state[param] = {"step": torch.tensor(float(state["step"])), **moments}

    naive, plain = _one_step_from(state, plain=False, load=strided_load), _one_step_from(state, plain=True)
    worst = max(float(np.abs(naive[key] - value).max()) for key, value in plain.items())
    assert worst > 1e-6, "the fused kernel read strided moments correctly: the conversion guarded here is not needed"


def test_a_checkpoint_with_adams_state_holds_every_weights_moments_and_training_goes_on_as_before(tmp_path):
    """save_checkpoint / load_checkpoint (write_arrays: Adam's state_dict over every weight, in their order)."""
    trainer, batches = _trainer_after(3), list(fixture_batches(NAME, 4))
    trainer.save_checkpoint(tmp_path / "c.pt")
    saved = torch.load(tmp_path / "c.pt", weights_only=True)["optimizer"]["state"]
    assert sorted(saved) == list(range(len(trainer.variables)))  # a state for every weight, not the last one alone
    resumed = fixture_trainer(torch_impl, NAME, "float64", EQUALITY_SPEC)
    resumed.load_checkpoint(tmp_path / "c.pt")
    assert_close(resumed.step(batches[3]), trainer.step(batches[3]), 1e-15, what="the step after the checkpoint")


def _trainer_after(steps: int):
    trainer = fixture_trainer(torch_impl, NAME, "float64", EQUALITY_SPEC)
    for batch in fixture_batches(NAME, steps):
        trainer.step(batch)
    return trainer
