"""What ran in a torch.compile case: Inductor, Dynamo's graph breaks of that case alone, `allow_rnn` as set."""

from __future__ import annotations

import pytest
import torch

from shared.tools import bench
from shared.verify.fixtures import synthetic_batch
from torch_impl import bench as torch_bench
from torch_impl.models import seq2seq


def test_a_compiled_case_counts_its_own_graph_breaks(monkeypatch):
    sizes = bench.small_sizes(bench.document_sizes("luong_general"))
    arrays = synthetic_batch("luong_general", sizes)
    torch_bench.start_case("cpu")
    call, path = torch_bench.make_call("luong_general", "train_step", "ours", "compile", arrays, sizes.tgt_len)
    call()
    # on the CPU Dynamo traces into nn.LSTM (allow_rnn) and the padded sources run as a masked loop: no break
    assert path() == {"cudnn": False, "compiler": "inductor", "graph_breaks": 0, "allow_rnn": True, "cuda_graphs": False}
    memory = seq2seq.Seq2SeqBase.memory

    def memory_with_a_break(self, encoder_outputs, src_len):
        torch._dynamo.graph_break()
        return memory(self, encoder_outputs, src_len)

    monkeypatch.setattr(seq2seq.Seq2SeqBase, "memory", memory_with_a_break)
    torch_bench.start_case("cpu")
    call, path = torch_bench.make_call("luong_general", "train_step", "ours", "compile", arrays, sizes.tgt_len)
    call()
    assert path()["graph_breaks"] > 0
    torch_bench.start_case("cpu")  # negative control: the next case does not inherit this one's breaks
    call, path = torch_bench.make_call("luong_general", "train_step", "ours", "eager", arrays, sizes.tgt_len)
    call()
    assert path() == {"cudnn": False, "compiler": None, "graph_breaks": None, "allow_rnn": None, "cuda_graphs": False}
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0


def _compiled_path(name: str) -> dict:
    sizes = bench.small_sizes(bench.document_sizes(name))
    torch_bench.start_case("cpu")
    call, path = torch_bench.make_call(name, "train_step", "ours", "compile", synthetic_batch(name, sizes), sizes.tgt_len)
    call()
    return path()


def test_each_model_in_one_process_compiles_its_own_graph_past_dynamos_recompile_limit():
    """A bench process compiles `Trainer._forward_loss` for model after model; by default they share Dynamo's 8
    recompiles and the ninth runs eager. With the limit lowered to 1, two models each still compile."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=1):
        assert [_compiled_path(name)["compiler"] for name in ("reverse_rnn", "reverse_luong_dot")] == ["inductor"] * 2


def test_negative_control_a_shared_compile_runs_the_second_model_eager_and_the_case_says_so(monkeypatch):
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda function, isolate_recompiles: real_compile(function))
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=1):
        assert _compiled_path("reverse_rnn")["compiler"] == "inductor"
        with pytest.raises(RuntimeError, match="torch.compile ran eager"):
            _compiled_path("reverse_luong_dot")


def test_the_cuda_graph_mode_alone_on_the_cpu_is_one_clear_error_and_no_file(tmp_path):
    profile = bench.restrict(bench.get_profile("smoke"), modes=["cudagraph"])
    with pytest.raises(ValueError, match="cudagraph mode runs on a GPU only"):
        bench.measure("torch", profile, 1, tmp_path)
    assert not list(tmp_path.rglob("*"))
