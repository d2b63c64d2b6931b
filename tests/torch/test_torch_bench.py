"""What ran in a torch.compile case: Inductor, Dynamo's graph breaks of that case alone, `allow_rnn` as set."""

from __future__ import annotations

import torch

from shared.tools import bench
from shared.verify.fixtures import synthetic_batch
from torch_impl import bench as torch_bench


def test_a_compiled_case_counts_its_own_graph_breaks():
    sizes = bench.small_sizes(bench.document_sizes("luong_general"))
    arrays = synthetic_batch("luong_general", sizes)
    torch_bench.start_case("cpu")
    call, path = torch_bench.make_call("luong_general", "train_step", "ours", "compile", arrays, sizes.tgt_len)
    call()
    compiled = path()
    # on the CPU Dynamo traces into nn.LSTM (allow_rnn); packing the padded sources still breaks the graph
    assert compiled["compiler"] == "inductor" and compiled["allow_rnn"] is True and compiled["graph_breaks"] > 0
    torch_bench.start_case("cpu")  # negative control: the next case does not inherit this one's breaks
    call, path = torch_bench.make_call("luong_general", "train_step", "ours", "eager", arrays, sizes.tgt_len)
    call()
    assert path() == {"cudnn": False, "compiler": None, "graph_breaks": None, "allow_rnn": None, "cuda_graphs": False}
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
