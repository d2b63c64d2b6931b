"""`tf_impl.models.reverse_task.attention_context`, one decoder step's context in ours's Bahdanau models: a broadcast
product and a sum outside XLA (TensorFlow's batched product of one row per example costs more there), the batched
product under XLA (whose CPU code runs it faster than the sum). Both forms compute the context, and a train step takes
the form of its mode."""

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


def test_a_tf_function_step_takes_the_sum_and_an_xla_step_the_product(monkeypatch):
    """Keras's `jit_compile` says which: a tf.function's step (the mode whose target this form met) runs the sum, an XLA
    step the product. Negative control: a model that took one form in every mode records the same flag for both."""
    import tf_impl
    from shared.verify.training import EQUALITY_SPEC, fixture_batches, fixture_trainer
    from tf_impl.models import reverse_task

    seen, real = [], reverse_task.attention_context
    monkeypatch.setattr(reverse_task, "attention_context", lambda *args: seen.append(args[2]) or real(*args))
    batch = next(fixture_batches("reverse_bahdanau", 1))
    for mode, compiled in (("function", False), ("xla", True)):
        seen.clear()
        fixture_trainer(tf_impl, "reverse_bahdanau", "float32", EQUALITY_SPEC, mode=mode).step(batch)
        assert seen and set(seen) == {compiled}, f"{mode}: {seen}"
