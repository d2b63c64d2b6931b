"""torch's profiler in `rosetta bench` (torch_impl.bench.op_profile) writes none of its start and stop markers
(kineto's `USDT: ... profiler_start`, on stderr at every log level that keeps its errors), and lets through what else
is written to stderr meanwhile."""

from __future__ import annotations

import contextlib
import os

import torch

from torch_impl import bench as torch_bench

ERROR_LINE = "E: a line the bench must not swallow"


def _step():
    """A call with a product and an error line written to stderr's file descriptor, as native code writes it."""
    torch.ones(8, 8) @ torch.ones(8, 8)
    os.write(2, f"{ERROR_LINE}\n".encode())


def test_the_op_profile_writes_no_profiler_markers_and_keeps_other_lines(capfd):
    split = torch_bench.op_profile(_step, "eager")
    err = capfd.readouterr().err
    assert split["product_ops"] > 0
    assert "USDT" not in err and "profiler_st" not in err
    assert err.count(ERROR_LINE) == torch_bench.machine.PROFILED_CALLS


def test_negative_control_the_op_profile_without_its_filter_writes_the_markers(capfd, monkeypatch):
    monkeypatch.setattr(torch_bench.native_stderr, "native_stderr_filtered", contextlib.nullcontext)  # as it was
    torch_bench.op_profile(_step, "eager")
    err = capfd.readouterr().err
    assert "USDT:" in err and "profiler_start" in err and "profiler_stop" in err
