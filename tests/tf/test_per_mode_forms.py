"""The forms ours's document 001 models take by mode in Keras (tf_impl/models/reverse_task.py). One decoder step's
context (`attention_context`): a broadcast product and a sum outside XLA (TensorFlow's batched product of one row per
example costs more there), the batched product under XLA (whose CPU code runs it faster than the sum), under
TensorFlow's over the encoder outputs already projected by the GRU's context kernel (one product a step fewer). The
Luong concat model's scores of every step (`additive_scores`): `v`'s product outside XLA, a multiply and a sum under it.
Each form computes what the other does, a train step takes the form of its mode, and the XLA forms compute the listing,
taps included."""

from __future__ import annotations

import numpy as np
import pytest

from shared.verify.equality import assert_close


@pytest.mark.parametrize("compiled", [False, True])
def test_each_form_is_the_weighted_sum_of_the_values(compiled):
    from tf_impl.models.reverse_task import attention_context

    rng = np.random.default_rng(0)
    probs, values = rng.random((3, 5)), rng.normal(size=(3, 5, 4))  # [B, S], [B, S, H]
    expected = np.einsum("bs,bsh->bh", probs, values)  # [B, H]
    assert_close(np.asarray(attention_context(probs, values, compiled)), expected, 1e-15, what=f"compiled={compiled}")


def step_forms(name: str, mode: str, function_name: str, form) -> tuple[set, object]:
    """The forms one fixture-size train step of `name` in `mode` takes, each call of tf_impl.models.reverse_task's
    `function_name` in it recorded as `form(*its arguments)`; and the trainer that ran it."""
    import tf_impl
    from shared.verify.training import EQUALITY_SPEC, fixture_batches, fixture_trainer
    from tf_impl.models import reverse_task

    seen, real = [], getattr(reverse_task, function_name)

    def recording(*args, **kwargs):
        seen.append(form(*args, **kwargs))
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reverse_task, function_name, recording)
        trainer = fixture_trainer(tf_impl, name, "float32", EQUALITY_SPEC, mode=mode)
        trainer.step(next(fixture_batches(name, 1)))
    return set(seen), trainer


def context_form(probs, values, compiled=False) -> tuple[bool, int]:
    """An `attention_context` call's form: whether it took XLA's product, and how wide its values are."""
    return compiled, values.shape[-1]


def test_a_tf_function_step_takes_the_sum_and_an_xla_step_the_product_over_projected_values():
    """Keras's `jit_compile` says which: a tf.function's step (the mode whose target this form met) runs the sum over
    the encoder outputs `[B, S, H]`, an XLA step the product over their share of the gates `[B, S, 3H]`. Negative
    control: a model that took one form in every mode records the same (flag, width) for both."""
    for mode, compiled, gates in (("function", False, 1), ("xla", True, 3)):
        seen, trainer = step_forms("reverse_bahdanau", mode, "attention_context", context_form)
        assert seen == {(compiled, gates * trainer.model.hidden_size)}, f"{mode}: {seen}"


@pytest.mark.parametrize("summed", [False, True])
def test_each_form_of_the_additive_scores_is_v_dot_tanh(summed):
    import keras

    from tf_impl.models.reverse_task import additive_scores

    rng = np.random.default_rng(0)
    keys, queries, v = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 3, 4)), rng.normal(size=4)  # [B, S, A], [B, T, A]
    layer = keras.layers.Dense(1, use_bias=False, dtype="float64")
    layer.build((None, 4))
    layer.kernel.assign(v[:, None])
    expected = np.einsum("btsa,a->bts", np.tanh(keys[:, None] + queries[:, :, None]), v)  # [B, T, S]
    assert_close(np.asarray(additive_scores(layer, keys, queries, summed)), expected, 1e-15, what=f"summed={summed}")


@pytest.mark.parametrize(("name", "xla_sums"), [("reverse_luong_concat", True), ("reverse_bahdanau", False)])
def test_an_xla_step_sums_the_luong_concat_scores_of_every_step(name, xla_sums):
    """Under XLA the Luong concat model's scores of every step at once are a sum over A, in a tf.function `v`'s
    product; a Bahdanau decoder's scores of one step are the product in both modes (JAX's XLA takes its sum slower).
    Negative control: a model that took one form in every mode records the same flag for both."""
    for mode, summed in (("function", False), ("xla", xla_sums)):
        seen, _ = step_forms(name, mode, "additive_scores", lambda v, keys, queries, summed=False: summed)
        assert seen == {summed}, f"{name} {mode}: {seen}"


def _xla_form(model):
    model.jit_compile = True  # ours's XLA form, run eagerly: the code XLA traces


@pytest.mark.parametrize("name", ["reverse_bahdanau", "reverse_bahdanau_concat", "reverse_luong_concat"])
def test_the_xla_form_computes_the_listing_and_taps_its_context_vectors(name):
    """Ours's XLA forms equal the listing as written in float64 (outputs, loss, gradients: test_fast_paths' comparison),
    and the taps record the context vectors `[B, T, H]` the listing's do, though the Bahdanau XLA form's steps never form them.
    Negative control: the context vectors a step late are caught."""
    import tf_impl
    from shared.core import taps
    from tests.stack.test_fast_paths import _compare, _pair

    _compare(tf_impl, name, "teacher forcing", break_ours=_xla_form)
    golden, (written, ours) = _pair(tf_impl, name)
    _xla_form(ours)
    recorded = {}
    for which, model in (("as written", written), ("ours", ours)):
        with taps.recording() as tapped:
            tf_impl.run(model, name, golden.batch)
        recorded[which] = taps.collect(tapped, np.asarray)[taps.CONTEXT_VECTORS]  # [B, T, H]
    assert_close(recorded["ours"], recorded["as written"], 1e-12, what=f"{name} context vectors")
    late = np.concatenate([recorded["ours"][:, :1], recorded["ours"][:, :-1]], axis=1)  # [B, T, H], a step late
    with pytest.raises(AssertionError):
        assert_close(late, recorded["as written"], 1e-12, what=f"{name} context vectors a step late")
