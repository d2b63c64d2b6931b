"""The public API one import deep (`from shared.port import convert, verify, port`), and the old places of the names the
layout redesign moved (shared/core/moved.py): each still answers, warns naming the new place, and returns the very
object there. Numpy only: the stacks' names are tests/cross/test_public_api.py's."""

from __future__ import annotations

import importlib
import importlib.machinery
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import shared
import shared.port
from shared.core import moved

REPO = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("torch", "tensorflow", "keras", "jax")
# each package's public names, in `__all__`'s order, with the module each comes from
PUBLIC = {
    "shared": {"CATALOGUE": "shared.catalogue", "ModelSpec": "shared.catalogue", "Tolerance": "shared.catalogue",
               "built": "shared.catalogue", "get": "shared.catalogue"},
    "shared.port": {"port": "shared.port.porting", "render": "shared.port.porting", "port_own": "shared.port.own_models",
                    "convert": "shared.port.conversion", "verify": "shared.port.conversion",
                    "read_weights": "shared.port.stages"},
}  # fmt: skip
# one name of each old place of shared/'s (the previous release's), and where its warning sends the reader
SHARED_MOVES = [
    ("shared.atomic", "write_atomic", "shared.io.atomic.write_atomic"),
    ("shared.bench", "time_calls", "shared.tools.machine.time_calls"),
    ("shared.canonical", "RULES", "shared.core.canonical.RULES"),
    ("shared.conversion", "convert", "shared.port.convert"),
    ("shared.data", "read_multi30k_text", "shared.data.readers.read_multi30k_text"),
    ("shared.data", "batches", "shared.data.corpora.batches"),
    ("shared.data", "dataset_for_model", "shared.documents.dataset_for_model"),
    ("shared.data.parallel", "layout", "shared.data.parallel_options.layout"),
    ("shared.data.parallel", "max_line_bytes", "shared.data.text_files.max_line_bytes"),
    ("shared.equality", "assert_close", "shared.verify.equality.assert_close"),
    ("shared.evaluation", "greedy_tokens", "shared.train.evaluation.greedy_tokens"),
    ("shared.fixtures", "make_batch", "shared.verify.fixtures.make_batch"),
    ("shared.layouts", "KeyMap", "shared.port.layouts.KeyMap"),
    ("shared.layouts", "propose_renames", "shared.core.renames.propose_renames"),
    ("shared.metrics", "bleu", "shared.train.metrics.bleu"),
    ("shared.own_models", "port_own", "shared.port.port_own"),
    ("shared.plots", "attention_heatmap", "shared.train.plots.attention_heatmap"),
    ("shared.port.conversion", "Leaf", "shared.core.leaves.Leaf"),
    ("shared.port.conversion", "OPTIONS", "shared.port.pairing.OPTIONS"),
    ("shared.port.layouts", "Rename", "shared.port.key_map_rules.Rename"),
    ("shared.port.layouts", "written_out_size", "shared.port.regex_limits.written_out_size"),
    ("shared.port.references", "Reference", "shared.core.reference_runs.Reference"),
    ("shared.port.verification", "traced", "shared.core.reference_runs.traced"),
    ("shared.porting", "convert", "shared.port.convert"),
    ("shared.porting", "port", "shared.port.port"),
    ("shared.porting", "Endpoint", "shared.port.endpoints.Endpoint"),
    ("shared.port.port_files", "endpoint", "shared.port.endpoints.endpoint"),
    ("shared.port.port_files", "read_weights", "shared.port.read_weights"),
    ("shared.port.port_files", "FORMATS", "shared.port.formats.FORMATS"),
    ("shared.port.port_files", "is_saved_model", "shared.io.sources.is_saved_model"),
    ("shared.porting", "PortReport", "shared.port.porting.PortReport"),
    ("shared.references", "Reference", "shared.core.reference_runs.Reference"),
    ("shared.report", "write_report", "shared.tools.report.write_report"),
    ("shared.report", "speed_table", "shared.tools.report.tables.speed_table"),
    ("shared.reproduction", "summarize", "shared.tools.reproduction.summarize"),
    ("shared.runner", "train", "shared.train.runner.train"),
    ("shared.runner", "load_run", "shared.train.runs.load_run"),
    ("shared.runner", "RunConfig", "shared.specs.RunConfig"),
    ("shared.safetensors_io", "save", "shared.io.safetensors_io.save"),
    ("shared.taps", "COMPONENTS", "shared.core.taps.COMPONENTS"),
    ("shared.teacher_forcing", "draw", "shared.core.teacher_forcing.draw"),
    ("shared.tools.bench", "PROFILES", "shared.tools.bench_profiles.PROFILES"),
    ("shared.tools.bench", "flag_slow_phases", "shared.tools.bench_timing.flag_slow_phases"),
    ("shared.tools.bench", "SCHEMA", "shared.tools.bench_results.SCHEMA"),
    ("shared.tools.bench", "is_chatter", "shared.tools.native_stderr.is_chatter"),
    ("shared.tools.report.tables", "flop_ceilings", "shared.tools.report.ceilings.flop_ceilings"),
    ("shared.tools.report.tables", "select", "shared.tools.report.selection.select"),
    ("shared.training", "train_fixture", "shared.verify.training.train_fixture"),
    ("shared.training", "optimizer_tensors", "shared.core.optimizer_state.optimizer_tensors"),
    ("shared.validation", "check_batch", "shared.core.validation.check_batch"),
    ("shared.verification", "Check", "shared.port.verification.Check"),
    ("shared.vocab", "Vocab", "shared.data.vocab.Vocab"),
]


def resolve(path: str):
    """The object at a dotted path (`shared.port.convert`)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def check_exports(package: types.ModuleType, homes: dict[str, str]) -> None:
    """`__all__` is exactly these names, in this order, each the very object of its home module."""
    assert list(package.__all__) == list(homes)
    for name, home in homes.items():
        assert getattr(package, name) is getattr(importlib.import_module(home), name), f"{package.__name__}.{name}"


def check_shim(old: types.ModuleType, name: str, new: str) -> None:
    """`old.name` warns naming `new` (the whole path) and is the very object at `new`."""
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old.__name__}.{name} moved to {new}:")):
        value = getattr(old, name)
    assert value is resolve(new)


def loaded_by(statement: str, watched: tuple[str, ...] = FRAMEWORKS) -> set[str]:
    """The watched top-level modules that `statement` loads in a fresh interpreter."""
    code = f"import sys; {statement}; print(' '.join(sorted({set(watched)!r} & set(sys.modules))))"
    return set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())


def table_entries(prefix: str) -> set[str]:
    """The old modules of both tables whose path starts with `prefix`."""
    return {old for old in (*moved.MOVED_MODULES, *moved.MOVED_NAMES) if old.startswith(prefix)}


# ---- the public API ----


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_each_package_exports_exactly_its_public_names(package):
    check_exports(importlib.import_module(package), PUBLIC[package])


def test_negative_control_a_name_left_out_of_all_or_another_object_is_caught():
    short = types.ModuleType("shared.port")
    short.__all__ = [name for name in PUBLIC["shared.port"] if name != "verify"]
    vars(short).update({name: getattr(shared.port, name) for name in PUBLIC["shared.port"]})
    with pytest.raises(AssertionError):
        check_exports(short, PUBLIC["shared.port"])
    other = types.ModuleType("shared.port")
    other.__all__ = list(PUBLIC["shared.port"])
    vars(other).update({name: getattr(shared.port, name) for name in PUBLIC["shared.port"]}, convert=lambda *args: None)
    with pytest.raises(AssertionError, match="shared.port.convert"):
        check_exports(other, PUBLIC["shared.port"])


def test_the_public_api_and_the_old_places_load_no_framework():
    public = "from shared.port import port, render, port_own, convert, verify, read_weights"
    old = "from shared.porting import convert, verify; import shared.report, shared.runner, shared.training"
    assert loaded_by(public) == set()
    assert loaded_by(old) == set()


def test_negative_control_the_probe_sees_a_module_loaded():
    assert loaded_by("import json", ("json", "csv")) == {"json"}


# ---- the old places ----


def test_every_old_place_of_shared_has_a_checked_name():
    assert {old for old, _, _ in SHARED_MOVES} == table_entries("shared.")


@pytest.mark.parametrize(("old", "name", "new"), SHARED_MOVES, ids=[f"{old}.{name}" for old, name, _ in SHARED_MOVES])
def test_an_old_place_warns_naming_the_new_one_and_gives_its_object(old, name, new):
    check_shim(importlib.import_module(old), name, new)


def test_the_issues_import_line_works_and_warns():
    namespace = {}
    with pytest.warns(DeprecationWarning) as record:
        exec("from shared.porting import convert, verify", namespace)
    assert [str(warning.message).split(":")[0] for warning in record] == [
        "shared.porting.convert moved to shared.port.convert",
        "shared.porting.verify moved to shared.port.verify",
    ]
    assert namespace["convert"] is shared.port.convert and namespace["verify"] is shared.port.verify


def test_star_import_of_an_old_place_gives_its_names():
    namespace = {}
    with pytest.warns(DeprecationWarning):
        exec("from shared.porting import *", namespace)
    assert {"convert", "verify", "port", "render", "PortReport", "FORMATS"} <= set(namespace)
    assert {"convert", "port", "Endpoint"} <= set(dir(importlib.import_module("shared.porting")))


def test_a_name_no_place_holds_is_an_attribute_error_without_a_warning():
    porting, data = importlib.import_module("shared.porting"), importlib.import_module("shared.data")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for module, name in ((porting, "no_such_name"), (porting, "__wrapped__"), (data, "no_such_name")):
            with pytest.raises(AttributeError, match=f"module '{module.__name__}' has no attribute '{name}'"):
                getattr(module, name)
        assert callable(data.load_corpus)  # a name of its own: no warning


def test_negative_control_a_silent_misdirecting_or_wrong_shim_is_caught():
    convert = resolve("shared.port.convert")

    def shim(message: str | None, value) -> types.ModuleType:
        module = types.ModuleType("shared.porting")

        def __getattr__(name):
            if message:
                warnings.warn(message, DeprecationWarning, stacklevel=2)
            return value

        module.__getattr__ = __getattr__
        return module

    for broken in (shim(None, convert), shim("shared.porting.convert moved to shared.port.porting.convert:", convert)):
        with pytest.raises(pytest.fail.Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pytest.warns passes on the warning it did not match
            check_shim(broken, "convert", "shared.port.convert")
    with pytest.raises(AssertionError):
        check_shim(shim("shared.porting.convert moved to shared.port.convert:", resolve("shared.port.verify")), "convert",
                   "shared.port.convert")  # fmt: skip


@pytest.mark.parametrize("old", sorted(set(moved.MOVED_MODULES) & table_entries("shared.")))
def test_an_old_module_is_gone_so_the_shim_shadows_no_file(old):
    parent, _, leaf = old.rpartition(".")
    assert importlib.machinery.PathFinder.find_spec(old, importlib.import_module(parent).__path__) is None


def test_import_shared_installs_the_finder_once():
    moved.install()
    assert sum(finder is moved._FINDER for finder in sys.meta_path) == 1


def test_a_shim_names_the_release_that_removes_it_which_is_after_this_one():
    """The warning says when the old path goes (moved.REMOVED_IN), a release after the one pyproject.toml names."""
    version = re.search(r'^version = "([\d.]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)[1]
    assert tuple(map(int, moved.REMOVED_IN.split("."))) > tuple(map(int, version.split(".")))
    with pytest.warns(DeprecationWarning, match=re.escape(f"(the old path goes in release {moved.REMOVED_IN})")):
        importlib.import_module("shared.porting").convert  # noqa: B018
