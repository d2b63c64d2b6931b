"""torch's cudagraph mode (torch_impl.cuda_graphs), run on the CPU where it can be.

The CPU has no CUDA graphs, so a stand-in takes CudaGraphs' place: warming up runs the step, and the capture returns
a replay that runs the same step again on the captured inputs, as a graph reruns its kernels on the same memory.
What the stand-in leaves to the GraphedStep is what these tests hold it to: the batch copied into the captured inputs
before each replay, one capture per batch shape, the warm-up step rolled back, Adam capturable (its step counter and
bias correction as tensors), captures dropped when the optimizer's state is replaced. Each replayed step must equal
the eager one in float64. On a GPU the real capture was measured side by side (docs/report-and-bench.md).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import torch_impl
from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_close
from shared.verify.training import EQUALITY_SPEC, fixture_batches, fixture_trainer
from torch_impl import cuda_graphs
from torch_impl.train import Trainer

GRAPHED = ["additive_attention", "reverse_bahdanau", "reverse_luong_dot"]  # document 000's layer; document 001's GRU and LSTM


class Rerun:
    """CudaGraphs on the CPU: the warm-up runs the step; the replay runs it again."""

    @staticmethod
    def warm(function):
        function()

    @staticmethod
    def capture(function):
        return function


@pytest.fixture
def on_the_cpu(monkeypatch):
    """The cudagraph mode on the CPU: CudaGraphs replaced by the stand-in, the CUDA device check passed."""
    monkeypatch.setattr(cuda_graphs, "CudaGraphs", Rerun)
    monkeypatch.setattr(cuda_graphs, "check", lambda name, device, ranks: None)


def _train(name: str, mode: str, batches: list[dict]):
    trainer = fixture_trainer(torch_impl, name, "float64", EQUALITY_SPEC, mode=mode)
    losses = [trainer.step(batch) for batch in batches]
    return trainer, np.array(losses), torch_impl.get_weights(trainer.model)


def _assert_same_training(name: str, graphed: tuple, eager: tuple, bound: float = 1e-12) -> None:
    (_, graphed_losses, graphed_weights), (_, eager_losses, eager_weights) = graphed, eager
    assert_close(graphed_losses, eager_losses, bound, what=f"{name}: replayed vs eager losses")
    for key, value in eager_weights.items():
        assert_close(graphed_weights[key], value, bound, what=f"{name}: {key} after the replayed steps")


@pytest.mark.parametrize("name", GRAPHED)
def test_replayed_steps_update_as_the_eager_steps(name, on_the_cpu):
    batches = list(fixture_batches(name, 3))
    graphed, eager = _train(name, "cudagraph", batches), _train(name, "eager", batches)
    _assert_same_training(name, graphed, eager)
    trainer = graphed[0]
    assert len(trainer._update.captured) == 1  # three batches of one shape: one capture
    assert trainer.optimizer.defaults["capturable"] and trainer.optimizer_state()["step"] == 3


def test_negative_control_the_batches_differ_so_replaying_the_first_would_be_caught():
    batches = list(fixture_batches("reverse_bahdanau", 3))
    _, losses, _ = _train("reverse_bahdanau", "eager", batches)
    _, first_only, _ = _train("reverse_bahdanau", "eager", batches[:1] * 3)
    assert np.max(np.abs(losses - first_only)) > 1e-3


def test_negative_control_a_warm_up_step_left_in_place_would_be_caught(on_the_cpu, monkeypatch):
    monkeypatch.setattr(cuda_graphs, "_rolled_back", lambda params, optimizer: contextlib.nullcontext())
    batches = list(fixture_batches("reverse_bahdanau", 2))
    with pytest.raises(AssertionError):
        _assert_same_training("reverse_bahdanau", _train("reverse_bahdanau", "cudagraph", batches),
                              _train("reverse_bahdanau", "eager", batches), bound=1e-6)  # fmt: skip


def test_a_batch_of_another_shape_is_captured_anew(on_the_cpu):
    full, other = fixture_batches("reverse_luong_dot", 2)
    batches = [full, {key: value[:2] for key, value in other.items()}, full]  # the last batch of an epoch, and again
    graphed = _train("reverse_luong_dot", "cudagraph", batches)
    _assert_same_training("reverse_luong_dot", graphed, _train("reverse_luong_dot", "eager", batches))
    assert len(graphed[0]._update.captured) == 2


def test_a_loaded_optimizer_state_drops_the_captures_and_training_goes_on_as_eager(on_the_cpu):
    first, second = fixture_batches("reverse_bahdanau", 2)
    graphed = fixture_trainer(torch_impl, "reverse_bahdanau", "float64", EQUALITY_SPEC, mode="cudagraph")
    eager = fixture_trainer(torch_impl, "reverse_bahdanau", "float64", EQUALITY_SPEC)
    for trainer in (graphed, eager):
        trainer.step(first)
        trainer.load_optimizer_state(trainer.optimizer_state())
    assert not graphed._update.captured
    assert_close(graphed.step(second), eager.step(second), 1e-12, what="reverse_bahdanau: the step after a load")


def test_the_mode_refuses_the_cpu_a_varying_length_a_schedule_and_torchruns_ranks():
    with pytest.raises(ValueError, match="must be on a CUDA device, not cpu"):
        fixture_trainer(torch_impl, "reverse_bahdanau", "float64", EQUALITY_SPEC, mode="cudagraph")
    with pytest.raises(ValueError, match="luong_dot trains on batches of varying length"):
        cuda_graphs.check("luong_dot", "cuda", 1)
    with pytest.raises(ValueError, match="in one process"):
        cuda_graphs.check("reverse_bahdanau", "cuda", 2)
    step = cuda_graphs.GraphedStep(lambda tensors, schedule: None, [], None, graphs=Rerun)
    with pytest.raises(ValueError, match="schedule is drawn on the host"):
        step({}, np.ones(3, dtype=bool))


def test_a_step_that_cannot_be_captured_is_one_clear_error_naming_the_batch(on_the_cpu, monkeypatch):
    """On the H200 the listing's reverse_bahdanau at batch 1 (nn.GRU one step at a time, cuDNN) failed its capture
    with CUDA's "operation failed due to a previous error during capture" alone."""

    def refuse(function):
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    monkeypatch.setattr(Rerun, "capture", staticmethod(refuse))
    trainer = fixture_trainer(torch_impl, "reverse_bahdanau", "float64", EQUALITY_SPEC, mode="cudagraph")
    with pytest.raises(RuntimeError, match=r"batch of src \[3, 5\].*could not be captured as a CUDA graph.*eagerly or compiled"):
        trainer.step(next(fixture_batches("reverse_bahdanau", 1)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a GPU (the stand-in above runs on the CPU)")
@pytest.mark.parametrize("name", [name for name in catalogue.built() if not catalogue.get(name).variable_length])
def test_on_a_gpu_the_captured_steps_update_as_the_eager_steps(name):
    batches = list(fixture_batches(name, 3))

    def train(mode: str):
        model = fixtures.golden_model(torch_impl, name).cuda()
        trainer = Trainer(model, name, EQUALITY_SPEC, mode=mode)
        return trainer, np.array([trainer.step(batch) for batch in batches]), torch_impl.get_weights(model)

    _assert_same_training(name, train("cudagraph"), train("eager"))
