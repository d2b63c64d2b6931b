"""The stacks' public API one import deep (`from tf_impl import TorchAdam, loss_for`), the same names on both sides
where both stacks have the concept, and the old places of the stacks' names the layout redesign moved
(shared/core/moved.py): each warns naming the new place and gives its very object. Both stacks in one process, torch
imported first."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings

import pytest
import torch  # noqa: F401  (before TensorFlow, as everywhere in the suite)

import tf_impl
import torch_impl
from shared.core import moved
from tests.shared.test_public_api import check_exports, check_shim, table_entries

CONTRACT = ("build", "get_weights", "set_weights", "run", "trace", "loss_and_grads", "greedy", "generate", "compiles_per_shape")
# each package's public names, in `__all__`'s order, with the module each comes from
PUBLIC = {
    "torch_impl": {**dict.fromkeys(CONTRACT, "torch_impl.contract"), "Trainer": "torch_impl.train"},
    "tf_impl": {**dict.fromkeys(CONTRACT, "tf_impl.contract"), "Trainer": "tf_impl.train", "backends": "tf_impl.keras_compat",
                "TorchAdam": "tf_impl.keras_compat.optim", "TorchClipping": "tf_impl.keras_compat.optim",
                "make_optimizer": "tf_impl.keras_compat.optim", "loss_for": "tf_impl.fitting"},
}  # fmt: skip
# Keras's alone: which backend runs, and what Keras needs to train as torch does (torch has it built in)
KERAS_ONLY = {"backends", "TorchAdam", "TorchClipping", "make_optimizer", "loss_for"}
# one class of each old model module (both stacks), and the other old places of the stacks' names
MODEL_CLASSES = {"additive": "AdditiveAttention", "bahdanau_bigru": "Seq2Seq", "luong": "Model",
                 "reverse_task": "ReverseTaskV0", "seq2seq": "Seq2SeqBase", "tf_tutorial": "BahdanauAttention"}  # fmt: skip
STACK_MOVES = [
    ("tf_impl.optim", "TorchAdam", "tf_impl.TorchAdam"),
    ("tf_impl.optim", "global_norm", "tf_impl.keras_compat.optim.global_norm"),
    ("tf_impl.layers", "TorchLSTM", "tf_impl.keras_compat.layers.TorchLSTM"),
    ("tf_impl.serializable", "CatalogueModel", "tf_impl.keras_compat.serializable.CatalogueModel"),
    ("tf_impl.checkpoints", "resolve", "tf_impl.object_graph.resolve"),
    ("torch_impl.reverse_task", "gru_cell", "torch_impl.models.seq2seq.gru_cell"),
    ("torch_impl.train", "save_native", "torch_impl.files.save_native"),
    ("torch_impl.train", "on_devices", "torch_impl.distributed.on_devices"),
    ("tf_impl.train", "load_keras", "tf_impl.files.load_keras"),
    ("tf_impl.train", "ranks", "tf_impl.distributed.ranks"),
    ("torch_impl.references", "TrevettSeq2Seq", "torch_impl.tutorials.trevett_nmt3.TrevettSeq2Seq"),
    ("tf_impl.references", "NmtEncoder", "tf_impl.tutorials.nmt_2020.NmtEncoder"),
    *[(f"{stack}.{module}", name, f"{stack}.models.{module}.{name}")
      for stack in ("torch_impl", "tf_impl") for module, name in MODEL_CLASSES.items()],
]  # fmt: skip


def unmirrored(torch_names, tf_names) -> set[str]:
    """The public names of one stack only, beyond Keras's own."""
    return set(torch_names) ^ (set(tf_names) - KERAS_ONLY)


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_each_stack_exports_exactly_its_public_names(package):
    check_exports(importlib.import_module(package), PUBLIC[package])


def test_both_stacks_export_the_same_names_but_kerass_own():
    assert unmirrored(torch_impl.__all__, tf_impl.__all__) == set()


def test_negative_control_a_name_of_one_stack_only_is_found():
    assert unmirrored(torch_impl.__all__, [name for name in tf_impl.__all__ if name != "Trainer"]) == {"Trainer"}


def test_the_public_names_need_no_warning():
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from tf_impl import TorchAdam, loss_for, Trainer; from torch_impl import Trainer as TorchTrainer", namespace)
    assert namespace["TorchAdam"].__module__ == "tf_impl.keras_compat.optim"
    assert namespace["TorchTrainer"] is importlib.import_module("torch_impl.train").Trainer


def test_every_old_place_of_the_stacks_has_a_checked_name():
    checked = {old for old, _, _ in STACK_MOVES} | {"tf_impl.backends"}  # still exported: its own test
    assert checked == table_entries("tf_impl.") | table_entries("torch_impl.")


@pytest.mark.parametrize(("old", "name", "new"), STACK_MOVES, ids=[f"{old}.{name}" for old, name, _ in STACK_MOVES])
def test_an_old_place_warns_naming_the_new_one_and_gives_its_object(old, name, new):
    check_shim(importlib.import_module(old), name, new)


def test_the_issues_import_line_works_and_warns():
    namespace = {}
    with pytest.warns(DeprecationWarning, match="tf_impl.optim.TorchAdam moved to tf_impl.TorchAdam:"):
        exec("from tf_impl.optim import TorchAdam", namespace)
    assert namespace["TorchAdam"] is tf_impl.TorchAdam


def test_an_old_module_path_the_package_still_exports_is_that_module(monkeypatch):
    """`import tf_impl.backends` (tf_impl's `__all__` holds backends): the module itself, silently, and the package's
    attribute left as it was (a shim bound there would make every tf_impl.backends.name() warn)."""
    backends = importlib.import_module("tf_impl.keras_compat.backends")
    monkeypatch.delitem(sys.modules, "tf_impl.backends", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        imported = importlib.import_module("tf_impl.backends")
        assert imported is backends and tf_impl.backends is backends and backends.name()


@pytest.mark.parametrize("old", sorted(set(moved.MOVED_MODULES) & (table_entries("tf_impl.") | table_entries("torch_impl."))))
def test_an_old_module_is_gone_so_the_shim_shadows_no_file(old):
    parent, _, _ = old.rpartition(".")
    assert importlib.machinery.PathFinder.find_spec(old, importlib.import_module(parent).__path__) is None
