"""torch.compile traces into the recurrent layers on the CPU (`allow_rnn`, torch_impl.train.compiled): the compiled
train step must update exactly as eager does, a variable-length encoder included (packed in eager; compiled, the
masked loop `run_masked`, which Dynamo traces without a graph break)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_impl
from shared.verify.equality import assert_close
from shared.verify.training import EQUALITY_SPEC, fixture_batches, fixture_trainer, step_schedules
from torch_impl.inductor_ops import energy_tanh
from torch_impl.models.seq2seq import masked_direction, run_masked, run_rnn


def _losses_and_weights(name: str, mode: str, batches: list[dict]) -> tuple[list[float], dict]:
    trainer = fixture_trainer(torch_impl, name, "float64", EQUALITY_SPEC, mode=mode)
    schedules = step_schedules(name, EQUALITY_SPEC, batches)
    losses = [trainer.step(batch, schedule) for batch, schedule in zip(batches, schedules, strict=True)]
    return losses, torch_impl.get_weights(trainer.model)


# a GRU per decoder step; a padded encoder (packed in eager); Keras's masks (a masked GRU on each side, in eager packed)
# reverse_bahdanau and additive_attention: also the compiled energy's tanh (energy_tanh)
@pytest.mark.parametrize("name", ["reverse_bahdanau", "luong_general", "tf_tutorial_mha", "additive_attention"])
def test_a_compiled_train_step_traced_into_the_recurrent_layers_updates_as_eager(name):
    batches = list(fixture_batches(name, 3))
    torch._dynamo.utils.counters.clear()
    compiled_losses, compiled_weights = _losses_and_weights(name, "compile", batches)
    breaks = torch._dynamo.utils.counters["graph_break"]  # off: "Attempted to wrap RNN, GRU, or LSTM" at each layer
    assert not breaks  # packing would break at `int(batch_sizes[0])`: compiled, the encoder runs `run_masked`
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


LENGTHS = torch.tensor([7, 3, 5, 1, 6])  # [B]: every row ends at its own step, one after a single step


def _outputs_and_gradients(run, rnn, inputs, hidden):
    """A layer's outputs, final states and the gradients of a loss reading all of them (inputs and weights)."""
    outputs, final = run(rnn, inputs, LENGTHS, hidden)
    states = final if isinstance(final, tuple) else (final,)
    loss = (outputs**2).sum() + sum((state**3).sum() for state in states)
    return [value.detach() for value in (outputs, *states, *torch.autograd.grad(loss, [inputs, *rnn.parameters()]))]


def _layer_and_inputs(kind: type, **options):
    torch.manual_seed(0)
    rnn = kind(4, 6, batch_first=True, **options).double()
    inputs = torch.randn(len(LENGTHS), 7, 4, dtype=torch.float64, requires_grad=True)  # [B, S, I]
    states = torch.randn(rnn.num_layers * (2 if rnn.bidirectional else 1), len(LENGTHS), 6, dtype=torch.float64)
    return rnn, inputs, ((states, states / 2) if kind is torch.nn.LSTM else states)


@pytest.mark.parametrize(
    "kind, options",
    [
        (torch.nn.GRU, {"bidirectional": True}),  # document 002's encoder
        (torch.nn.LSTM, {"num_layers": 2}),  # document 003's
        (torch.nn.GRU, {"bias": False}),
        (torch.nn.RNN, {"num_layers": 2, "bidirectional": True}),
    ],
)
def test_the_masked_loop_computes_what_packing_computes(kind, options):
    rnn, inputs, hidden = _layer_and_inputs(kind, **options)
    packed, masked = (_outputs_and_gradients(run, rnn, inputs, hidden) for run in (run_rnn, run_masked))
    for number, (want, got) in enumerate(zip(packed, masked, strict=True)):
        assert_close(got, want, 1e-12, what=f"{kind.__name__} {options}: output/state/gradient {number}")


def test_negative_control_a_backward_direction_that_reversed_the_padding_too_would_be_caught():
    """A backward direction reading each row's padded sequence reversed whole starts on padding, not its last token."""
    rnn, inputs, hidden = _layer_and_inputs(torch.nn.GRU, bidirectional=True)

    def reversed_whole(rnn, inputs, lengths, hidden):
        outputs, final = run_masked(rnn, inputs, lengths, hidden)  # [B, S, 2H], [2, B, H]
        weights = [getattr(rnn, f"{kind}_l0_reverse") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        every_step = torch.ones(inputs.shape[:2], dtype=torch.bool)  # [B, S]
        backward, (state,) = masked_direction("GRU", inputs, every_step, (hidden[1],), weights, reverse=True)
        return torch.cat([outputs[..., : rnn.hidden_size], backward], 2), torch.stack([final[0], state])

    packed, naive = (_outputs_and_gradients(run, rnn, inputs, hidden)[:2] for run in (run_rnn, reversed_whole))
    assert max(float((a - b).abs().max()) for a, b in zip(packed, naive, strict=True)) > 1e-3


@pytest.mark.parametrize("allow_rnn, packed", [(True, False), (False, True)])
def test_compiled_the_encoder_is_a_masked_loop_only_where_dynamo_traces_recurrent_layers(allow_rnn, packed):
    """On the CPU (`allow_rnn`) the masked loop keeps the graph whole; elsewhere (a GPU: each layer one cuDNN call)
    the layer stays packed, which breaks the graph."""
    rnn, inputs, hidden = _layer_and_inputs(torch.nn.GRU, bidirectional=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch._dynamo.config.patch(allow_rnn=allow_rnn):
        outputs, _ = torch.compile(run_rnn)(rnn, inputs.detach(), LENGTHS, hidden)
    assert bool(torch._dynamo.utils.counters["graph_break"]) is packed
    assert_close(outputs.detach(), run_rnn(rnn, inputs, LENGTHS, hidden)[0].detach(), 1e-12, what="compiled encoder")


# every regime of tanh: 0, tiny, ordinary, past float32's exp overflow (|x| > 44), past float64's (|x| > 355)
ENERGIES = [0.0, 1e-30, -1e-8, 0.3, -2.0, 9.0, -20.0, 50.0, -50.0, 400.0, -400.0, 1e30, -1e30]


def _tanh_and_gradient(tanh, dtype: torch.dtype, compile_it: bool) -> tuple[torch.Tensor, torch.Tensor]:
    energy = torch.tensor(ENERGIES, dtype=dtype, requires_grad=True)
    run = torch.compile(tanh, fullgraph=True) if compile_it else tanh
    value = run(energy)
    (gradient,) = torch.autograd.grad((value * torch.linspace(1, 2, len(ENERGIES), dtype=dtype)).sum(), energy)
    return value.detach(), gradient


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-15), (torch.float32, 3e-7)])
def test_the_compiled_energy_tanh_is_tanh_to_rounding_saturation_and_gradient_included(dtype, tolerance):
    torch._dynamo.reset()
    want = _tanh_and_gradient(torch.tanh, dtype, compile_it=False)
    compiled = _tanh_and_gradient(energy_tanh, dtype, compile_it=True)
    for what, got, expected in zip(("values", "gradients"), compiled, want, strict=True):
        assert torch.isfinite(got).all(), f"compiled energy_tanh ({dtype}): {what} {got}"
        assert_close(got.numpy(), expected.numpy(), tolerance, what=f"compiled energy_tanh ({dtype}): {what}")
    eager = _tanh_and_gradient(energy_tanh, dtype, compile_it=False)
    assert all(torch.equal(got, expected) for got, expected in zip(eager, want, strict=True))  # eagerly torch.tanh itself


def test_the_compiled_energy_tanh_takes_the_exp_form_not_torch_tanh():
    """The branch is taken: compiled in float32 the values differ from torch.tanh's in their last bits somewhere."""
    torch._dynamo.reset()
    energy = torch.linspace(-3, 3, 1001)
    compiled = torch.compile(energy_tanh, fullgraph=True)(energy)
    assert not torch.equal(compiled, torch.tanh(energy))


def test_negative_control_the_textbook_exp_form_overflows_to_nan_where_energy_tanh_saturates():
    """`(e^2x - 1) / (e^2x + 1)`: inf / inf past float32's overflow. The saturation test above catches it."""
    torch._dynamo.reset()
    textbook = lambda x: (torch.exp(2 * x) - 1) / (torch.exp(2 * x) + 1)  # noqa: E731
    values, _ = _tanh_and_gradient(textbook, torch.float32, compile_it=True)
    assert not torch.isfinite(values).all()


def _compiled_graphs(function, *args) -> tuple[object, list[str]]:
    """`function(*args)` under torch.compile on the CPU, and the code of the graphs Dynamo handed its backend."""
    torch._dynamo.reset()
    codes = []

    def backend(graph, example_inputs):
        codes.append(graph.code)
        return graph.forward

    return torch.compile(function, backend=backend, fullgraph=True)(*args), codes


def test_compiled_ours_looks_up_its_projected_table_by_a_one_hot_product_to_the_lookups_values_and_gradient():
    """`table_rows`: Inductor's CPU backward of an embedding lookup is a slow scatter; compiled, the lookup is a one-hot
    product (its backward a product too), with the lookup's values and the table's gradient. Negative control: eagerly
    it is F.embedding itself, and the compiled graph holds no embedding."""
    from torch_impl.inductor_ops import table_rows

    generator = torch.Generator().manual_seed(0)
    table = torch.randn(20, 12, dtype=torch.float64, generator=generator).requires_grad_()  # [V, D]
    ids = torch.randint(0, 20, (4, 6), generator=generator)  # [B, T]
    weights = torch.randn(4, 6, 12, dtype=torch.float64, generator=generator)  # [B, T, D]

    def weighted(lookup):
        (gradient,) = torch.autograd.grad((lookup * weights).sum(), table)
        return lookup.detach(), gradient

    rows, codes = _compiled_graphs(table_rows, table, ids)
    assert any("one_hot" in code for code in codes) and not any("embedding" in code for code in codes)
    expected = weighted(torch.nn.functional.embedding(ids, table))
    for got, want in zip(weighted(rows), expected, strict=True):
        assert_close(got.numpy(), want.numpy(), 1e-15, what="compiled table_rows")
    assert torch.equal(table_rows(table, ids), torch.nn.functional.embedding(ids, table))


def test_compiled_a_bahdanau_step_reads_its_state_in_one_product_and_eagerly_leaves_the_gates_to_the_cell():
    """`StateProducts`: compiled, the query and the GRU's hidden gates come from one product with the two weights
    stacked (the graph holds one linear), and equal the two products apart. Negative control: eagerly it gives the
    query alone (the gates are torch's own cell's)."""
    from torch_impl.inductor_ops import StateProducts

    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(*shape, dtype=torch.float64, generator=generator) for shape in ((5, 4), (5,), (9, 4), (9,))]
    query_weight, query_bias, hidden_weight, hidden_bias = weights  # [A, H], [A], [3H, H], [3H]
    state = torch.randn(3, 4, dtype=torch.float64, generator=generator)  # [B, H]
    (query, hidden_share), codes = _compiled_graphs(lambda s: StateProducts(*weights)(s), state)
    assert sum(code.count("torch._C._nn.linear") for code in codes) == 1
    assert_close(query.numpy(), torch.nn.functional.linear(state, query_weight, query_bias).numpy(), 1e-15, what="query")
    assert_close(hidden_share.numpy(), torch.nn.functional.linear(state, hidden_weight, hidden_bias).numpy(), 1e-15, what="gates")
    eager_query, eager_share = StateProducts(*weights)(state)
    assert eager_share is None and torch.equal(eager_query, torch.nn.functional.linear(state, query_weight, query_bias))
