"""Each catalogue option (tests/catalogue_options.py) computes the same function in both stacks: outputs, loss,
gradients and greedy decoding in float64, <= 1e-12 (gradients 1e-10)."""

from __future__ import annotations

import pytest

from shared.verify.equality import assert_close, assert_tokens_equal
from tests.catalogue_options import OPTIONS, option_model, option_results
from tests.conftest import MAXIMA, STACK_MODULES

F64 = 1e-12  # the equality policy's float64 bound on outputs
F64_GRADS = 1e-10


@pytest.mark.parametrize("case", OPTIONS)
def test_each_option_computes_the_same_function_in_both_stacks(case):
    name, overrides = OPTIONS[case]
    torch_impl, tf_impl = STACK_MODULES["torch"], STACK_MODULES["tf"]
    reference = option_model(torch_impl, name, overrides)
    weights = torch_impl.get_weights(reference)
    candidate = option_model(tf_impl, name, overrides, weights=weights)
    assert tf_impl.get_weights(candidate).keys() == weights.keys()
    ref, cand = option_results(torch_impl, reference, name), option_results(tf_impl, candidate, name)
    maxima = {key: assert_close(cand["outputs"][key], value, F64, what=f"{case} {key}") for key, value in ref["outputs"].items()}
    assert maxima.keys() == {"logits", "attention"}
    maxima["loss"] = assert_close(cand["loss"], ref["loss"], F64, what=f"{case} loss")
    assert cand["grads"].keys() == ref["grads"].keys()
    maxima["grads"] = max(assert_close(cand["grads"][k], g, F64_GRADS, what=f"{case} grad {k}") for k, g in ref["grads"].items())
    assert_tokens_equal(cand["greedy"]["tokens"], ref["greedy"]["tokens"], f"{case} greedy")
    maxima["greedy attention"] = assert_close(cand["greedy"]["attention"], ref["greedy"]["attention"], F64)
    MAXIMA[f"{name} ({case})", "float64"] = maxima
