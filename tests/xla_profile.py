"""The op profile of Keras's compiled train step (tf_impl.bench.op_profile in mode xla), taken as the bench takes it: in
a fresh process whose bench.configure had XLA write each step's program before XLA read its flags. And the check every
stack's profile tests share (`sees_the_products_the_listing_repeats`: torch eager, a tf.function, XLA, JAX)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROFILE_STEPS = """
import json
from shared.specs import Sizes
from shared.verify.fixtures import synthetic_batch
from tf_impl import bench

bench.configure(1)  # before XLA reads its flags: it writes each train step's program (bench._keep_train_step_programs)
arrays = synthetic_batch("reverse_bahdanau", Sizes(16, 8, 8))
split = {}
for impl in ("ours", "as_written"):
    call = bench.make_call("reverse_bahdanau", "train_step", impl, "xla", arrays, 8)[0]
    call()
    split[impl] = bench.op_profile(call, "xla")
split["eager"] = bench.op_profile(call, "eager")
print(json.dumps(split))
"""


def reverse_bahdanau_xla_profiles(keras_backend: str) -> dict:
    """reverse_bahdanau's compiled train step profiled on `keras_backend`, ours and as written, and an eager profile
    (None): {"ours": {"product_ms", "other_ms", "product_ops"}, "as_written": {...}, "eager": None}."""
    from shared.tools.machine import thread_environment

    env = {**os.environ, "KERAS_BACKEND": keras_backend, "JAX_ENABLE_X64": "0",
           "XLA_FLAGS": thread_environment(1)["XLA_FLAGS"]}  # the bench's flags  # fmt: skip
    found = subprocess.run([sys.executable, "-c", PROFILE_STEPS], capture_output=True, text=True, env=env, timeout=600)
    assert found.returncode == 0, found.stderr[-2000:]
    return json.loads(found.stdout.strip().splitlines()[-1])


def sees_the_products_the_listing_repeats(split: dict) -> bool:
    """Whether the profiles of reverse_bahdanau's train step (`split`: ours and as written) tell the listing's products
    repeated at every decoder step: more products run a call than ours (a count, which the program fixes; their times
    move with the other test worker's load), and each step spends time in products and in other ops."""
    ours, as_written = split["ours"], split["as_written"]
    counted = as_written["product_ops"] > ours["product_ops"] > 0
    return counted and min(ours["product_ms"], ours["other_ms"], as_written["product_ms"], as_written["other_ms"]) > 0
