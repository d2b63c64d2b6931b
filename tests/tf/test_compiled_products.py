"""The bench's count of what TensorFlow's XLA compiles (tf_impl/keras_compat/backends.compiled_products): the FLOPs of
the products of its optimized program, which merges a product the listing repeats where torch's count cannot."""

from __future__ import annotations

import pytest

HLO = """HloModule a_step, entry_computation_layout={(f32[32,10,100]{2,1,0})->f32[]}

%fused_product (param_0.2: f32[320,100], param_1.1: f32[100,50]) -> f32[320,50] {
  %param_0.2 = f32[320,100]{1,0} parameter(0)
  %param_1.1 = f32[100,50]{1,0} parameter(1)
  ROOT %dot.1 = f32[320,50]{1,0} dot(%param_0.2, %param_1.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (arg0.1: f32[32,10,10], arg1.1: f32[32,10,100]) -> f32[32,10,100] {
  %arg0.1 = f32[32,10,10]{2,1,0} parameter(0)
  %arg1.1 = f32[32,10,100]{2,1,0} parameter(1)
  ROOT %MatMul.2 = f32[32,10,100]{2,1,0} dot(%arg0.1, %arg1.1), lhs_batch_dims={0}, lhs_contracting_dims={2}, \
rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""


def test_the_products_of_an_hlo_module_are_counted_with_their_contracting_sizes():
    """A fused [320, 100] x [100, 50] product (3.2 MFLOP) and a batched [32, 10, 10] x [32, 10, 100] one (0.64 MFLOP):
    each 2 x its output's elements x its left operand's contracting size. Counting outputs alone (the naive count)
    would give 2 x (16,000 + 32,000) = 0.096 MFLOP."""
    from tf_impl.keras_compat.backends import compiled_products

    assert compiled_products(HLO) == 2 * 320 * 50 * 100 + 2 * 32 * 10 * 100 * 10


def test_xla_merges_the_products_the_listing_repeats():
    """Additive attention's listing projects the values (`W_2`) at each of its ten steps: torch counts ten forward
    products, while TensorFlow's XLA computes one and keeps the ten in the backward. So its compiled count of the
    listing over ours lies below torch's count of the products (6.29x) and above 1."""
    from shared.tools.bench_profiles import document_sizes
    from shared.verify.fixtures import synthetic_batch
    from tf_impl import bench
    from tf_impl.keras_compat.backends import compiled_products

    arrays = synthetic_batch("additive_attention", document_sizes("additive_attention"))
    counts = {
        impl: bench.compiled_cost("additive_attention", "train_step", impl, "xla", arrays) for impl in ("ours", "as_written")
    }
    ratio = counts["as_written"]["compiled_product_gflop"] / counts["ours"]["compiled_product_gflop"]
    assert 1.5 < ratio < 6.0, counts
    assert bench.compiled_cost("additive_attention", "train_step", "ours", "function", arrays) is None
    with pytest.raises(KeyError):  # a dot whose operand the text never defined: no silent zero
        compiled_products("ENTRY %m {\n  ROOT %d = f32[2,2]{1,0} dot(%x, %y), lhs_contracting_dims={1}\n}")


def test_tensorflows_xla_profile_sees_the_products_the_listing_repeats():
    """Under TensorFlow's XLA the step is one compiled program: XLA's CPU runtime's own trace events (each names its
    program and op, read from TensorFlow's profiler) and the program XLA wrote say what its products cost. As in a
    tf.function, the listing's step runs more products than ours's and both spend time in other ops (a fresh process, as the
    bench: XLA writes the programs only when told before its first compilation). Eagerly: no profile."""
    from tests import xla_profile

    split = xla_profile.reverse_bahdanau_xla_profiles("tensorflow")
    assert xla_profile.sees_the_products_the_listing_repeats(split) and split["eager"] is None, split
