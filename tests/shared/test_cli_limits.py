"""`rosetta train`'s ranks and devices, refused where the batch or the machine cannot serve them (one line naming the
flag, the limit and the way past it, before anything is made or started), and `rosetta models`' table. Nothing is
spawned here: torch's launcher, the stacks' processes and their device counts are replaced by recorders, which the
negative controls show the unguarded command would have called."""

from __future__ import annotations

import os
import subprocess

import pytest

from shared import catalogue, cli, stacks
from shared.train import runner, runs
from tests.interrupted_runner import CLI_FLAGS, small_run

TRAIN = ["train", "reverse_bahdanau", *CLI_FLAGS]  # a small reverse task, batch 16 (64 training examples)


class FakeStack:
    """A stack's parallel module as the command line and the runner use it: its GPUs, and torch's launcher, recorded."""

    def __init__(self, gpus: int = 0):
        self.gpus, self.launched = gpus, []

    def accelerators(self) -> int:
        return self.gpus

    def launch(self, ranks: int, argv: list[str]) -> int:
        self.launched.append((ranks, argv))
        return 0

    def leave_ranks(self) -> None:
        pass


@pytest.fixture
def machine(monkeypatch):
    """A machine of 2 CPU cores and no GPU, where torch's ranks and the stacks' processes are recorded, not started."""
    fake, children = FakeStack(), []
    monkeypatch.setattr(stacks, "import_module", lambda stack, module: fake)  # the command's and the runner's checks
    monkeypatch.setattr(subprocess, "call", lambda command: children.append(command) or 0)
    monkeypatch.setattr(runner, "usable_cores", lambda: 2)
    fake.children = children
    return fake


def _refused(capsys, argv: list[str], *parts: str) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(part in err for part in parts), err


def test_more_ranks_or_devices_than_a_batch_holds_are_refused_before_anything_is_made(tmp_path, machine, capsys, monkeypatch):
    """Negative control: without the check, the ranks are launched (`--batch-size 1`: torchrun's ChildFailedError
    once per rank, at the first step)."""
    ranks = [*TRAIN, "--run-dir", str(tmp_path / "ranks"), "--stack", "torch", "--nproc-per-node", "2", "--batch-size", "1"]
    _refused(capsys, ranks, "--nproc-per-node 2: a batch holds 1 example(s), fewer than the 2 ranks", "--batch-size 2 or more")
    devices = [*TRAIN, "--run-dir", str(tmp_path / "devices"), "--stack", "tf", "--devices", "999"]
    _refused(capsys, devices, "--devices 999: a batch holds 16 example(s), fewer than the 999 devices", "use at most 16")
    assert not list(tmp_path.iterdir()) and not machine.launched and not machine.children
    monkeypatch.setattr(runner, "check_parallel", lambda *args, **kwargs: None)
    assert cli.main(ranks) == 0 and machine.launched[0][0] == 2


def test_ranks_beyond_the_cores_are_refused_unless_oversubscribed(tmp_path, machine, capsys, monkeypatch):
    """2 cores: 3 ranks refused, naming the cores and --oversubscribe; with it they start, each told so. Negative
    control: without the check, 1000 ranks of a batch of 2000 would be launched."""
    ranks = [*TRAIN, "--run-dir", str(tmp_path / "run"), "--stack", "torch", "--nproc-per-node", "3"]
    _refused(capsys, ranks, "--nproc-per-node 3: this process may use 2 CPU core(s)", "--oversubscribe")
    assert not machine.launched and not (tmp_path / "run").exists()
    assert cli.main([*ranks, "--oversubscribe"]) == 0
    (count, argv), = machine.launched  # fmt: skip
    assert count == 3 and "--oversubscribe" in argv
    many = [*TRAIN, "--run-dir", str(tmp_path / "many"), "--stack", "torch", "--nproc-per-node", "1000", "--batch-size", "2000"]
    _refused(capsys, many, "--nproc-per-node 1000: this process may use 2 CPU core(s), one for each; use at most 2")
    monkeypatch.setattr(runner, "check_parallel", lambda *args, **kwargs: None)
    assert cli.main(many) == 0 and machine.launched[-1][0] == 1000


def test_ranks_beyond_the_gpus_are_refused_even_oversubscribed(tmp_path, machine, capsys):
    machine.gpus = 2
    ranks = [*TRAIN, "--run-dir", str(tmp_path / "run"), "--stack", "torch", "--nproc-per-node", "4", "--oversubscribe"]
    _refused(capsys, ranks, "--nproc-per-node 4: 2 GPU(s) visible, one for each; use at most 2")
    assert cli.main([*ranks[:-3], "--nproc-per-node", "2"]) == 0 and machine.launched[0][0] == 2


def test_both_stacks_with_ranks_launch_torchs_then_start_tfs(tmp_path, machine):
    run = str(tmp_path / "run")
    assert cli.main([*TRAIN, "--run-dir", run, "--stack", "both", "--nproc-per-node", "2"]) == 0
    assert [(count, argv[:2]) for count, argv in machine.launched] == [(2, [run, "torch"])]
    assert [command[3:5] for command in machine.children] == [[run, "tf"]]


def test_keras_devices_are_checked_by_the_runner_before_any_is_made(tmp_path, machine, capsys, monkeypatch):
    """The tf stack's process counts Keras's GPUs (the command line cannot without starting Keras's backend): on 2
    cores `--devices 3` is refused before training starts, passed with --oversubscribe. Negative control: without
    the check the runner trains on them (the CPU split into 3, or 999)."""
    run = small_run(tmp_path / "run")
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # the runner sets JAX's host devices
    trained = []
    monkeypatch.setattr(runner, "train", lambda *args: trained.append(args) or {"rank": 0})
    assert runner.main([str(run), "tf", "--devices", "3", "--quiet"]) == 2
    assert "rosetta train (tf): --devices 3: this process may use 2 CPU core(s)" in capsys.readouterr().err and not trained
    assert runner.main([str(run), "tf", "--devices", "3", "--quiet", "--oversubscribe"]) == 0 and trained[-1][-1] == 3
    machine.gpus = 2
    assert runner.main([str(run), "tf", "--devices", "3", "--quiet", "--oversubscribe"]) == 2
    assert "--devices 3: 2 GPU(s) visible" in capsys.readouterr().err
    monkeypatch.setattr(runner, "check_parallel", lambda *args, **kwargs: None)
    assert runner.main([str(run), "tf", "--devices", "999", "--quiet"]) == 0 and trained[-1][-1] == 999


def test_a_short_last_batch_is_refused_to_ranks_once_per_machine(tmp_path, machine, capsys, monkeypatch):
    """17 training examples in batches of 16 leave a last batch of 1 a pass: 2 ranks cannot share it (Keras pads it for
    its devices). The runner of each rank refuses it before training; only the machine's first rank says so. Negative
    control: without the check the ranks train, to fail at that batch."""
    run = tmp_path / "run"
    runs.create_run(run, "reverse_bahdanau", corpus_options={"train_size": 17, "val_size": 16, "test_size": 16}, batch_size=16)
    trained = []
    monkeypatch.setattr(runner, "train", lambda *args: trained.append(args) or {"rank": 0})
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("0", "1"):
        monkeypatch.setenv("LOCAL_RANK", rank)
        try:
            code = runner.main([str(run), "torch", "--quiet"])
        except SystemExit as stopped:  # a rank after the first: the same refusal, not said again
            code = stopped.code
        assert code == 2 and not trained
        said = capsys.readouterr().err
        assert (said.count("\n"), "holds 1, fewer than the 2 ranks" in said) == ((1, True) if rank == "0" else (0, False))
    for examples, refused in ((17, True), (18, False), (32, False), (None, False)):
        if refused:
            with pytest.raises(ValueError, match="the last batch of each pass over the 17 training examples holds 1"):
                runner.check_parallel("--nproc-per-node", 2, 16, 0, examples=examples)
        else:
            runner.check_parallel("--nproc-per-node", 2, 16, 0, examples=examples)
    monkeypatch.setattr(runner, "check_parallel", lambda *args, **kwargs: None)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert runner.main([str(run), "torch", "--quiet"]) == 0 and trained


def test_the_models_table_lines_up_on_its_longest_cells(capsys):
    """Negative control: the fixed widths it had, which the longest document classes overflow."""
    assert cli.main(["models"]) == 0
    assert _lines_up(capsys.readouterr().out.splitlines())
    fixed = [f"{name:26} {doc:4} {doc_class:40} {module:16} {status}" for name, doc, doc_class, module, status in _cells()]
    assert not _lines_up(fixed)


def _cells() -> list[tuple]:
    """The table's header and rows, cell by cell."""
    rows = [(spec.name, spec.document, spec.doc_class, f"{spec.module}.py", "built" if spec.built else "not yet built")
            for spec in catalogue.CATALOGUE.values()]  # fmt: skip
    return [("name", "doc", "document class", "module", "status"), *rows]


def _lines_up(lines: list[str]) -> bool:
    """Every row's cells start where the header's titles do."""
    (titles, *cells), (header, *rows) = _cells(), lines
    starts = [header.index(title) for title in titles]
    return len(rows) == len(cells) and all(
        line[start : start + len(cell)] == cell and line[start - 1 : start] in ("", " ")
        for line, row in zip(rows, cells, strict=True)
        for start, cell in zip(starts, row, strict=True)
    )
