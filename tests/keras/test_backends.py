"""The tf_impl models on Keras 3's other backends (tox env keras, one pytest per backend; KERAS_BACKEND names the
backend): the same code as on TensorFlow, proven against torch_impl. That env also runs test_cross's
`test_stacks_agree` (outputs, attention, gradients, greedy decoding) and test_training's 200-step curves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import tf_impl
import torch_impl
from shared import catalogue
from shared.verify import training
from shared.verify.equality import assert_close
from shared.verify.training import EQUALITY_SPEC
from tests import keras_fit, xla_profile
from tf_impl.keras_compat import backends
from tf_impl.keras_compat.layers import TorchLSTM

BACKEND = backends.name()


def test_keras_runs_on_the_backend_the_env_names():
    """A backend env that silently ran TensorFlow would prove nothing."""
    assert BACKEND == os.environ.get("KERAS_BACKEND", "tensorflow")


@pytest.mark.parametrize("name", ["luong_general", "reverse_bahdanau"])  # with schedules and without
def test_fit_follows_torchs_training_loop_on_this_backend(name):
    """200 `fit` steps on a dict of numpy arrays, TorchAdam with torch's clipping, float64 (JAX with x64)."""
    dtype, steps = "float64", training.EQUALITY_STEPS
    curve, weights = keras_fit.fit_fixture(name, dtype, keras_fit.torch_adam(), steps)
    reference = training.train_fixture(torch_impl, name, dtype, steps, EQUALITY_SPEC)
    training.assert_trained_alike(name, dtype, reference, {"curve": curve, "weights": weights}, steps)


def test_negative_control_kerass_own_promotion_computes_float64_in_float32():
    """Keras 3.15's type promotion, as it ships, demotes float64 to float32 here (keras-team/keras#23704): what
    backends.check_dtype undoes for float64 models, so that the float64 comparisons above can hold."""
    from keras.src.backend.common import dtypes

    table = dtypes.BIT64_TO_BIT32_DTYPE
    kept, table["float64"] = table["float64"], "float32"  # as Keras ships it on JAX and torch
    try:
        a = keras.ops.convert_to_tensor(np.full((2, 2), 1 / 3), "float64")
        demoted = keras.ops.convert_to_numpy(keras.ops.tanh(keras.ops.matmul(a, a)))
    finally:
        table["float64"] = kept
    exact = np.tanh(np.full((2, 2), 2 / 9))
    assert np.abs(demoted - exact).max() > 1e-10  # float32's rounding, not float64's
    tf_impl.build("reverse_rnn", "float64")  # check_dtype keeps float64 again
    assert keras.ops.convert_to_numpy(keras.ops.tanh(keras.ops.matmul(a, a))).dtype == np.float64


@pytest.mark.skipif(BACKEND != "jax", reason="only JAX computes float64 in float32 unless told (x64)")
def test_float64_without_jax_x64_is_refused():
    code = "import tf_impl; tf_impl.build('reverse_rnn', 'float64')"
    env = {**os.environ, "JAX_ENABLE_X64": "0"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "set JAX_ENABLE_X64=1" in result.stderr


def test_rosetta_equality_measures_on_the_backend_it_names(tmp_path):
    """What the model table's backend columns come from: `rosetta equality --backend`, its JSON naming it."""
    output = tmp_path / "equality.json"
    command = [sys.executable, "-m", "shared.cli", "equality", "reverse_rnn", "--backend", BACKEND, "--json", str(output)]
    env = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}  # the flag alone names it
    subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    record = json.loads(output.read_text())
    assert record["backend"] == BACKEND and not record["failures"]
    assert {(e["model"], e["dtype"]) for e in record["outputs"]} == {("reverse_rnn", "float64"), ("reverse_rnn", "float32")}


def test_rosetta_equality_refuses_a_backend_other_than_the_one_keras_runs_on():
    from shared import cli

    other = next(name for name in backends.BACKENDS if name != BACKEND)
    with pytest.raises(SystemExit, match=f"Keras already runs on {BACKEND}, not {other}"):
        cli.main(["equality", "reverse_rnn", "--backend", other])


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: eagerly it compiles every op for every new shape")
def test_inference_on_jax_is_one_jitted_program_per_shape_reading_the_current_weights():
    """`tf_impl.run` on JAX jits the forward pass over the variables' values: the same outputs as the eager pass
    (`trace` runs eagerly while taps record), one compiled program per input shape, and weights set after the first
    call are the ones used (negative control: a pass compiled with the weights as constants keeps the old outputs)."""
    from shared.specs import Sizes
    from shared.verify.fixtures import make_weights, synthetic_batch

    name = "reverse_bahdanau"
    model = tf_impl.build(name, "float64")
    shapes = {key: value.shape for key, value in tf_impl.get_weights(model).items()}
    batch = synthetic_batch(name, Sizes(3, 6, 6))
    first = tf_impl.run(model, name, batch)["logits"]
    tf_impl.set_weights(model, make_weights(name, shapes))
    jitted = tf_impl.run(model, name, batch)["logits"]
    eager = tf_impl.trace(model, name, batch)["logits"]
    assert np.abs(jitted - eager).max() <= 1e-12 and np.abs(first - eager).max() > 1e-3
    compiled = model._rosetta_jax_inference["run"][1]
    assert compiled._cache_size() == 1
    tf_impl.run(model, name, synthetic_batch(name, Sizes(3, 6, 4)))
    tf_impl.run(model, name, synthetic_batch(name, Sizes(3, 6, 4), seed=1))
    assert compiled._cache_size() == 2  # one program per shape, not per call

    import jax

    from shared import catalogue
    from tf_impl.contract import as_tensors, model_outputs

    tensors = as_tensors(model, batch)
    naive = jax.jit(lambda inputs: model_outputs(model, catalogue.get(name), inputs)["logits"])  # weights as constants
    before = np.asarray(naive(tensors))
    tf_impl.set_weights(model, {key: value / 2 for key, value in make_weights(name, shapes).items()})
    assert np.array_equal(np.asarray(naive(tensors)), before)  # stale: the old weights compiled in
    assert np.abs(tf_impl.run(model, name, batch)["logits"] - before).max() > 1e-3  # ours reads the new ones


def _recurrent_layers(model) -> list:
    return [layer for layer in backends.all_layers(model) if isinstance(layer, keras.layers.RNN)]


def _scanned_and_unrolled(make_layer, monkeypatch, inputs, mask) -> list[list[np.ndarray]]:
    """The outputs of `make_layer()` built as a scan and unrolled (`backends.unroll_recurrences` forced), the same
    weights, on `inputs [B, S, I]` with `mask [B, S]`."""
    layers = []
    for unroll in (False, True):
        monkeypatch.setattr(backends, "unroll_recurrences", lambda unroll=unroll: unroll)
        layers.append(make_layer(unroll))
        layers[-1].build(inputs.shape)
    layers[1].set_weights(layers[0].get_weights())
    assert [layer.unroll for layer in _recurrent_layers(layers[1])] == [True] * len(_recurrent_layers(layers[1]))
    return [[keras.ops.convert_to_numpy(t) for t in keras.tree.flatten(layer(inputs, mask=mask))] for layer in layers]


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: the backend that takes a product per step under XLA")
def test_a_jitted_bahdanau_step_on_jax_takes_its_context_over_the_encoder_outputs():
    """Under TensorFlow's XLA ours's Bahdanau step takes its context's share of the gates over the encoder outputs
    projected once before the loop (tests/tf/test_per_mode_forms.py); JAX, which takes a product per step
    (`backends.products_per_step`), keeps the batched product over `enc_out [B, S, H]` and the context kernel's product
    a step. A jitted train step here records that form, and its update equals torch's (test_stacks_agree). Negative
    control: TensorFlow's form would record `3 H` wide values."""
    from tests.tf.test_per_mode_forms import context_form, step_forms

    seen, trainer = step_forms("reverse_bahdanau", "xla", "attention_context", context_form)
    assert seen == {(True, trainer.model.hidden_size)}, seen


# inputs [B, S, I] and a mask [B, S] of rows 6, 3 and 1 steps long
RAGGED = (np.random.default_rng(0).normal(size=(3, 6, 4)), np.arange(6)[None, :] < np.array([6, 3, 1])[:, None])


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: the backend whose GPU runs our LSTM stack unrolled")
def test_an_unrolled_lstm_stack_computes_what_its_scan_computes(monkeypatch):
    """On JAX with a GPU our LSTM stack unrolls its loops (`backends.unroll_recurrences`). Here, on the CPU, with that
    choice forced: outputs (zero at padded steps, as torch's packing) and final states equal the scanned stack's
    (which test_stacks_agree proves equal to torch's in this env), float64, ragged lengths, the same weights."""
    scanned, unrolled = _scanned_and_unrolled(lambda unroll: TorchLSTM(5, num_layers=2, dtype="float64"), monkeypatch, *RAGGED)
    assert len(scanned) == 3 and not scanned[0][2, 1:].any()  # outputs, h, c; padded steps zero
    for expected, actual in zip(scanned, unrolled, strict=True):
        assert_close(actual, expected, 1e-12, what="TorchLSTM unrolled")


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: Keras's unrolled loop on JAX")
def test_negative_control_kerass_unrolled_loop_repeats_the_last_output_at_padded_steps(monkeypatch):
    """Why `TorchLSTM` zeroes padded steps itself when unrolled: Keras 3.15's unrolled loop on JAX ignores
    `zero_output_for_mask` (its scan honours it), so a layer left to Keras differs there. Were Keras to fix it, this
    fails: the zeroing could go."""

    def gru(unroll):
        return keras.layers.GRU(5, return_sequences=True, return_state=True, zero_output_for_mask=True, unroll=unroll,
                                dtype="float64")  # fmt: skip

    (scanned, _), (unrolled, _) = _scanned_and_unrolled(gru, monkeypatch, *RAGGED)
    assert not scanned[2, 1:].any() and np.array_equal(unrolled[2, 1:], np.repeat(unrolled[2, :1], 5, 0))


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only, as above")
def test_every_lstm_of_document_003_unrolls_when_asked(monkeypatch):
    """The choice reaches each layer of the encoder's and the decoder's LSTM stacks (a layer built elsewhere would
    keep the scan on the GPU); the GRUs of the other documents keep theirs (unrolled, no gain was measured)."""
    monkeypatch.setattr(backends, "unroll_recurrences", lambda: True)
    for name, unrolled in (("luong_general", True), ("reverse_luong_general", False)):
        layers = _recurrent_layers(tf_impl.build(name, "float64", **catalogue.get(name).fixture_config))
        assert layers and [layer.unroll for layer in layers] == [unrolled] * len(layers), name


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: the backend whose `run` compiles a program per shape")
def test_rerun_greedy_on_jax_compiles_one_program_for_every_length(monkeypatch):
    """Document 001's greedy decoding reruns the teacher-forced decoder once per output token. On JAX every run
    takes the whole input (`compiles_per_shape`): the same tokens and attention as growing it a token a run, from one
    compiled program. Negative control: the growing input compiles one program per length."""
    from shared.specs import Sizes
    from shared.train.evaluation import rerun_greedy
    from shared.verify.fixtures import synthetic_batch

    name, steps = "reverse_bahdanau", 6
    src = synthetic_batch(name, Sizes(3, steps, steps))["src"]
    assert tf_impl.compiles_per_shape()
    fixed_model, growing_model = tf_impl.build(name, "float64"), tf_impl.build(name, "float64")
    tf_impl.set_weights(growing_model, tf_impl.get_weights(fixed_model))
    fixed = rerun_greedy(tf_impl, fixed_model, name, src, steps, sos_id=1)
    monkeypatch.setattr(tf_impl, "compiles_per_shape", lambda: False)
    growing = rerun_greedy(tf_impl, growing_model, name, src, steps, sos_id=1)
    assert np.array_equal(fixed[0], growing[0]) and np.abs(fixed[1] - growing[1]).max() <= 1e-12
    assert fixed_model._rosetta_jax_inference["run"][1]._cache_size() == 1
    assert growing_model._rosetta_jax_inference["run"][1]._cache_size() == steps


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: eagerly it compiles every op for every new shape")
def test_greedy_decoding_on_jax_runs_one_jitted_encoder_and_one_jitted_step():
    """Greedy decoding on JAX jits `encode` and `step` (`Seq2SeqBase.inference_steps`): the tokens and attention of
    the eager decoding (taps recording run it eagerly), from one compiled program each for every step of a batch."""
    from shared.core import taps
    from shared.verify import fixtures

    name = "luong_general"
    model, golden = fixtures.golden_model(tf_impl, name), fixtures.load_golden(name)
    jitted = tf_impl.greedy(model, name, golden.batch, max_len=fixtures.greedy_max_len(golden))
    with taps.recording():
        eager = tf_impl.greedy(model, name, golden.batch, max_len=fixtures.greedy_max_len(golden))
    assert np.array_equal(jitted["tokens"], eager["tokens"]) and jitted["tokens"].shape[1] > 1
    assert_close(jitted["attention"], eager["attention"], 1e-12, what="greedy attention")
    assert [model._rosetta_jax_inference[key][1]._cache_size() for key in ("encode", "step")] == [1, 1]


def test_the_bench_reads_xlas_own_cost_of_a_jitted_train_step_on_jax():
    """On JAX the bench records XLA's cost model of the compiled forward and backward: reverse_bahdanau's listing does
    more arithmetic than ours (it projects the encoder's outputs at every decoder step, and the gradients of those
    products are not one product XLA could merge); reverse_rnn's ours is its listing (negative control: the same
    program costs the same). On TensorFlow, its program's products (tests/tf/test_compiled_products.py). Other
    modes, other tasks and Keras's torch backend: no cost."""
    from shared.specs import Sizes
    from shared.verify.fixtures import synthetic_batch
    from tf_impl import bench as keras_bench

    def cost(name, impl, mode="xla", task="train_step"):
        return keras_bench.compiled_cost(name, task, impl, mode, synthetic_batch(name, Sizes(4, 6, 5)))

    if BACKEND == "torch":
        assert cost("reverse_rnn", "ours") is None
        return
    counted = {"jax": ("compiled_gflop", "compiled_mb"), "tensorflow": ("compiled_product_gflop",)}[BACKEND]
    ours, listing = cost("reverse_bahdanau", "ours"), cost("reverse_bahdanau", "as_written")
    assert set(ours) == set(counted) and min(ours.values()) > 0
    assert listing[counted[0]] > 1.1 * ours[counted[0]], (listing, ours)
    assert cost("reverse_rnn", "ours") == cost("reverse_rnn", "as_written")
    assert cost("reverse_rnn", "ours", mode="eager") is None and cost("reverse_rnn", "ours", task="greedy") is None


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: the backend whose compiled steps XLA's cost model costs")
def test_the_compiled_cost_counts_every_step_of_a_recurrent_loop():
    """reverse_rnn's step at twice the lengths does about twice the work, and its cost says so: the bench costs it with
    its recurrent layers unrolled. Costed as it runs (negative control: Keras's GRUs as scans), XLA's cost model counts
    each loop's body once, and the longer step seems to cost little more than the shorter one (its embeddings and
    output layer)."""
    from shared.specs import Sizes
    from shared.verify.fixtures import synthetic_batch
    from tf_impl import bench as keras_bench
    from tf_impl import contract

    def costs(sizes):
        arrays = synthetic_batch("reverse_rnn", sizes)
        scanned = backends.compiled_cost(*contract.loss_closure(keras_bench.build("reverse_rnn", "ours"), "reverse_rnn", arrays))
        return keras_bench.compiled_cost("reverse_rnn", "train_step", "ours", "xla", arrays), scanned

    (unrolled, scanned), (unrolled_twice, scanned_twice) = costs(Sizes(4, 6, 6)), costs(Sizes(4, 12, 12))
    assert 1.8 < unrolled_twice["compiled_gflop"] / unrolled["compiled_gflop"] < 2.2
    assert scanned_twice["compiled_gflop"] / scanned["compiled_gflop"] < 1.5  # the trap: a loop counted once


HLO = """HloModule jit_train_step, entry_computation_layout={()}

%fused_computation.73 (param_0: f32[640,4935], param_1: f32[1024,4935]) -> f32[640,1024] {
  %param_0 = f32[640,4935]{1,0} parameter(0)
  %param_1 = f32[1024,4935]{1,0} parameter(1)
  ROOT %dot.7 = f32[640,1024]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}

%fused_computation.21 (param_0.1: f32[1024,4935]) -> f32[] {
  %param_0.1 = f32[1024,4935]{1,0} parameter(0)
  %constant.1 = f32[] constant(0)
  ROOT %reduce.2 = f32[] reduce(%param_0.1, %constant.1), dimensions={0,1}, to_apply=%add
}

%body.1 (state: (s32[], f32[64,1024])) -> (s32[], f32[64,1024]) {
  %state = (s32[], f32[64,1024]{1,0}) parameter(0)
  %dot.111 = f32[64,1024]{1,0} dot(%gte.1, %gte.2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %tuple.4 = (s32[], f32[64,1024]{1,0}) tuple(%gte.0, %dot.111)
}

ENTRY %main.9 (a: f32[640,4935], b: f32[1024,4935]) -> f32[] {
  %a = f32[640,4935]{1,0} parameter(0)
  %ynn_fusion.73 = f32[640,1024]{1,0} fusion(%a, %b), kind=kCustom, calls=%fused_computation.73
  %ynn_fusion.21 = f32[] fusion(%b), kind=kCustom, calls=%fused_computation.21
  %while.25 = (s32[], f32[64,1024]{1,0}) while(%tuple.1), condition=%cond.1, body=%body.1
  ROOT %wrapped_add.3 = f32[] add(%ynn_fusion.21, %ynn_fusion.21)
}
"""


def test_the_jax_profile_tells_products_by_the_program_not_by_their_names():
    """XLA's CPU runtime names an op by its fusion: `ynn_fusion.73` wraps the output layer's gradient product and
    `ynn_fusion.21` a gradient norm's sum. `hlo_kinds` reads what each fusion computes (a dot inside: a product), a loop
    and its body's dot apart. Negative control: telling them by name takes the sum for a product, like the dot."""
    from tf_impl.bench import hlo_kinds

    kinds = hlo_kinds(HLO)
    assert {op: kinds[op] for op in ("ynn_fusion.73", "ynn_fusion.21", "dot.111", "while.25", "wrapped_add.3")} == {
        "ynn_fusion.73": "product", "ynn_fusion.21": "other", "dot.111": "product", "while.25": "control",
        "wrapped_add.3": "other",
    }  # fmt: skip
    by_name = {op: "product" if op.startswith(("dot", "ynn")) else "other" for op in kinds}
    assert by_name["ynn_fusion.21"] != kinds["ynn_fusion.21"]


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: the backend whose jitted steps XLA's CPU runtime runs op by op")
def test_the_jax_profile_sees_the_products_the_listing_repeats():
    """reverse_bahdanau's listing projects the encoder's outputs at every decoder step, ours once: in the jitted step's
    profile (a fresh process: XLA writes the programs only when told before JAX starts), the listing's step runs more
    products than ours's, and both spend time in products and in other ops. Eagerly: no profile."""
    split = xla_profile.reverse_bahdanau_xla_profiles("jax")
    assert xla_profile.sees_the_products_the_listing_repeats(split) and split["eager"] is None, split


@pytest.mark.parametrize("name", [name for name in catalogue.built() if catalogue.get(name).document in ("002", "003", "004")])
def test_ours_decodes_as_the_listing_exactly_on_the_backends_the_catalogue_names(name):
    """The bench times no twin where the catalogue says ours is the listing on this backend (`listing_on`: luong_dot on
    JAX); the model must then decode as the listing, and elsewhere not (negative control: luong_general on JAX, and
    every model on Keras's torch backend, decode as ours)."""
    from tf_impl import contract

    spec = catalogue.get(name)
    model = contract.build(name, "float32", **spec.fixture_config)
    if not hasattr(model, "decodes_as_written"):
        pytest.skip(f"{name} decodes by its own classes")
    assert model.decodes_as_written() == (BACKEND in spec.listing_on)


@pytest.mark.skipif(BACKEND != "jax", reason="JAX only: XLA sizes its CPU pool by the CPUs the process may run on")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a machine of one CPU runs every pool on one")
def test_a_one_thread_jax_bench_runs_on_one_cpu_and_every_xla_flag_holds(tmp_path):
    """XLA has no flag for its pool's size: a bench process at 1 thread is pinned to one CPU before JAX's client starts,
    and records it. Every one of the bench's XLA_FLAGS holds: a flag after them (the dump of the programs) is obeyed.
    Negative control: after the bare `intra_op_parallelism_threads=1` the bench once passed, XLA's parser stopped and
    the dump was dropped."""
    from shared.tools.machine import thread_environment

    code = (
        "from tf_impl.keras_compat import backends; backends.set_threads(1); import jax; "
        "jax.jit(lambda x: x * 2)(jax.numpy.ones(2)).block_until_ready(); print(backends.thread_settings()['cpus'])"
    )

    def run(flags: str, dump) -> str:
        env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_dump_to={dump}"}
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert found.returncode == 0, found.stderr[-2000:]
        return found.stdout.split()[-1]

    assert run(thread_environment(1)["XLA_FLAGS"], tmp_path / "bench") == "1"
    assert any((tmp_path / "bench").iterdir())
    run("--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1", tmp_path / "bare")  # negative control
    assert not (tmp_path / "bare").exists() or not any((tmp_path / "bare").iterdir())
