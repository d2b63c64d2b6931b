"""The torch stack's paths for a GPU, run on the CPU where they can be.

On an H100 (torch 2.11, the device image) two of our paths failed where the CPU had passed every test: document 001's
Bahdanau decoders handed `torch.gru_cell` an input bias with a row per example, which CUDA's fused cell refuses
(`Expected 1-dimensional tensor ... 'input_bias' ... _thnn_fused_gru_cell_cuda`), and `torch.compile` was given
`isolate_recompiles`, which that torch does not take. Here a `torch.gru_cell` that checks CUDA's contract stands in
for the GPU's, and a `torch.compile` without the option for the older torch; each has a negative control.
"""

from __future__ import annotations

import pytest
import torch

import torch_impl
from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_all_close, assert_close, grad_bounds
from torch_impl import train
from torch_impl.models import seq2seq

ROW_BIAS_MODELS = ["reverse_bahdanau", "reverse_bahdanau_concat"]


def _cuda_gru_cell(real_cell):
    """`torch.gru_cell` with the check of CUDA's fused kernel (1-D biases or none) before the real cell."""

    def cell(inputs, state, input_weight, hidden_weight, input_bias=None, hidden_bias=None):
        for name, bias in (("input_bias", input_bias), ("hidden_bias", hidden_bias)):
            if bias is not None and bias.dim() != 1:
                raise RuntimeError(f"Expected 1-dimensional tensor, but got {bias.dim()}-dimensional tensor for '{name}'")
        return real_cell(inputs, state, input_weight, hidden_weight, input_bias, hidden_bias)

    return cell


def _loss_and_grads(name: str):
    golden = fixtures.load_golden(name)
    model = torch_impl.build(name, "float64", **catalogue.get(name).fixture_config)
    torch_impl.set_weights(model, golden.weights)
    return torch_impl.loss_and_grads(model, name, golden.batch, teacher_forcing=golden.schedule)


@pytest.mark.parametrize("name", ROW_BIAS_MODELS)
def test_on_a_device_whose_gru_cell_takes_1d_biases_the_bahdanau_decoders_train_to_the_cpus_gradients(name, monkeypatch):
    cpu_loss, cpu_grads = _loss_and_grads(name)
    monkeypatch.setattr(torch, "gru_cell", _cuda_gru_cell(torch.gru_cell))
    monkeypatch.setattr(seq2seq, "takes_row_bias", lambda device: False)
    loss, grads = _loss_and_grads(name)
    assert_close(loss, cpu_loss, 1e-12, what=f"{name} loss, the CUDA form")
    assert_all_close(grads, cpu_grads, grad_bounds(catalogue.get(name).tolerance, "float64"), f"{name} grads, the CUDA form")


def test_negative_control_the_row_bias_handed_to_cudas_cell_is_refused(monkeypatch):
    monkeypatch.setattr(torch, "gru_cell", _cuda_gru_cell(torch.gru_cell))
    with pytest.raises(RuntimeError, match="Expected 1-dimensional tensor"):
        _loss_and_grads("reverse_bahdanau")


def test_the_cpu_keeps_torchs_own_cell_and_a_gpu_gets_the_two_shares():
    assert seq2seq.takes_row_bias(torch.device("cpu"))
    assert not seq2seq.takes_row_bias(torch.device("cuda"))


def test_a_torch_whose_compile_has_no_isolate_recompiles_still_compiles(monkeypatch):
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda function: real_compile(function))  # torch 2.11's signature, in short
    torch._dynamo.reset()
    assert train.compiled(lambda x: x * 2 + 1, "cpu")(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]


def test_negative_control_isolate_recompiles_handed_to_such_a_compile_is_a_type_error(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda function: function)
    with pytest.raises(TypeError, match="isolate_recompiles"):
        torch.compile(lambda x: x, isolate_recompiles=True)
