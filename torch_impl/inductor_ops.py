"""What torch.compile's CPU code generator (Inductor) runs faster in another form of the same function: torch only
(Keras's compilers, XLA on TensorFlow and JAX, have their own fast tanh; its Keras models keep `ops.tanh`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def traced_for_cpu(tensor: torch.Tensor) -> bool:
    """Whether torch.compile is tracing code that runs on the CPU, where Inductor's code takes the forms below."""
    return torch.compiler.is_compiling() and tensor.device.type == "cpu"


class _ExpTanh(torch.autograd.Function):
    """tanh as `1 - 2 / (exp(2x) + 1)`, its backward tanh's own `g (1 - y^2)` from the saved output."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = 1 - 2 / (torch.exp(2 * x) + 1)  # exp overflows to inf past |x| ~ 44 (float32): y is then exactly 1 or -1
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


def energy_tanh(energy: torch.Tensor) -> torch.Tensor:
    """tanh of an additive score's energy `[..., S, A]` (ours; the listings as written keep torch.tanh): torch.tanh
    eagerly and on a GPU; traced by torch.compile on the CPU, `1 - 2 / (exp(2x) + 1)`: Inductor's CPU tanh (Sleef's
    `tanhf`, recomputed in the backward) is slower than this exp form, and compiled train steps gain by it
    (docs/measurements.md). The same function to a few float32 ulps (1.8e-7 at most on N(0, 1) inputs) and 1e-16 in
    float64, saturating exactly (exp's inf gives 1): a compiled train step still updates as eager to 1e-12
    (tests/torch/test_torch_compile.py)."""
    if traced_for_cpu(energy):
        return _ExpTanh.apply(energy)
    return torch.tanh(energy)


def table_rows(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """`table [V, D]`'s rows at `ids [...]` -> `[..., D]` (ours's projected-embedding lookups): F.embedding eagerly and
    on a GPU; traced by torch.compile on the CPU, a one-hot product, whose backward is one product too: Inductor's CPU
    backward of the lookup, a scatter of the `[B, T, D]` gradient onto the table's rows, is a costly share of a
    compiled step (docs/measurements.md)."""
    if traced_for_cpu(table):
        return torch.matmul(F.one_hot(ids, table.shape[0]).to(table.dtype), table)  # [..., V] @ [V, D]
    return F.embedding(ids, table)


class StateProducts:
    """What a Bahdanau decoder step reads from s_{t-1}: the score's query `W_q s + b_q` `[B, A]` and the GRU's hidden
    gates `W_hh s + b_hh` `[B, 3H]`. Under torch.compile, one product with the two weights stacked once before the loop
    (the cell's pointwise ops fuse there, as the Keras twin's always do); eagerly the query alone, the gates left to
    torch's own C++ cell (`gru_cell_row_bias`), which dispatches them faster than the cell's ops one by one from Python."""

    def __init__(self, query_weight, query_bias, hidden_weight, hidden_bias):
        self.query_weight, self.query_bias, self.merged = query_weight, query_bias, torch.compiler.is_compiling()
        self.sizes = [query_weight.shape[0], hidden_weight.shape[0]]  # A, 3H
        if self.merged:
            self.weight = torch.cat([query_weight, hidden_weight])  # [A + 3H, H]
            self.bias = torch.cat([query_bias, hidden_bias])  # [A + 3H]

    def __call__(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.merged:
            return F.linear(state, self.query_weight, self.query_bias), None  # [B, A]
        query, hidden_share = F.linear(state, self.weight, self.bias).split(self.sizes, dim=1)  # [B, A], [B, 3H]
        return query, hidden_share
