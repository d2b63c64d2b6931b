"""The old places of the public names the layout redesign moved (issue 16: shared/'s rooms, tf_impl/keras_compat/,
the models/ folders), kept working for one release: each use warns (DeprecationWarning) and names the new place.

Two tables, old module -> the modules its names live in now, searched in order:
- MOVED_MODULES: old modules that are gone (`shared.porting`). `install()` (run by `import shared`) puts a finder on
  sys.meta_path that answers an import of one with a shim module: each name read from it warns and returns the
  object at its new place. An old path the new API still exports (`tf_impl.backends`, in tf_impl's `__all__`) is
  that module itself, without a warning.
- MOVED_NAMES: modules still there whose names partly moved; each keeps them with
  `__getattr__ = moved.getattr_for(__name__)`.

A warning names the shortest public path: the package whose `__all__` exports the object (`shared.port.convert`,
`tf_impl.TorchAdam`), else the module holding it (`shared.port.endpoints.Endpoint`). Standard library only: the
places are imported by name when a name is first looked up, so no framework loads before the old code asks for one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

_MISSING = object()
REMOVED_IN = "0.2.0"  # the release that drops every old place below (this one is 0.1.0, pyproject.toml)
_MODELS = ("additive", "bahdanau_bigru", "luong", "reverse_task", "seq2seq", "tf_tutorial")

MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "shared.atomic": ("shared.io.atomic",),
    "shared.bench": ("shared.tools.bench_profiles", "shared.tools.bench_timing", "shared.tools.bench_results",
                     "shared.tools.native_stderr", "shared.tools.bench", "shared.tools.machine"),
    "shared.canonical": ("shared.core.canonical",),
    "shared.conversion": ("shared.port.conversion", "shared.core.leaves", "shared.port.pairing"),
    "shared.equality": ("shared.verify.equality",),
    "shared.evaluation": ("shared.train.evaluation",),
    "shared.fixtures": ("shared.verify.fixtures",),
    "shared.layouts": ("shared.port.layouts", "shared.core.renames", "shared.port.key_map_rules", "shared.port.regex_limits"),
    "shared.metrics": ("shared.train.metrics",),
    "shared.own_models": ("shared.port.own_models",),
    "shared.plots": ("shared.train.plots",),
    "shared.porting": ("shared.port.porting", "shared.port.endpoints", "shared.port.stages", "shared.port.formats"),
    # the port's formats, ends and stages (issue 60: a registry of formats, the port a pipeline)
    "shared.port.port_files": ("shared.port.formats", "shared.port.endpoints", "shared.port.stages",
                               "shared.port.file_metadata", "shared.io.sources"),
    "shared.references": ("shared.port.references", "shared.core.reference_runs"),
    "shared.report": ("shared.tools.report", "shared.tools.report.schema", "shared.tools.report.tables",
                      "shared.tools.report.ceilings", "shared.tools.report.selection",
                      "shared.tools.report.reading", "shared.tools.report.readme", "shared.tools.report.figures",
                      "shared.stacks"),  # fmt: skip
    "shared.reproduction": ("shared.tools.reproduction",),
    "shared.runner": ("shared.train.runner", "shared.train.runs", "shared.train.evaluation", "shared.specs", "shared.stacks"),
    "shared.safetensors_io": ("shared.io.safetensors_io",),
    "shared.taps": ("shared.core.taps",),
    "shared.teacher_forcing": ("shared.core.teacher_forcing",),
    "shared.training": ("shared.verify.training", "shared.core.optimizer_state", "shared.specs"),
    "shared.validation": ("shared.core.validation",),
    "shared.verification": ("shared.port.verification", "shared.core.reference_runs"),
    "shared.vocab": ("shared.data.vocab",),
    "tf_impl.backends": ("tf_impl.keras_compat.backends",),
    "tf_impl.layers": ("tf_impl.keras_compat.layers",),
    "tf_impl.optim": ("tf_impl.keras_compat.optim",),
    "tf_impl.serializable": ("tf_impl.keras_compat.serializable",),
    # each model module moved into models/; what the models share (gru_cell) into models/seq2seq
    **{f"{stack}.{model}": (f"{stack}.models.{model}", f"{stack}.models.seq2seq")
       for stack in ("torch_impl", "tf_impl") for model in _MODELS},
}  # fmt: skip

MOVED_NAMES: dict[str, tuple[str, ...]] = {
    "shared.data": ("shared.data.readers", "shared.data.corpora", "shared.documents"),
    # an own corpus's options and saved-copy checks, and its files read as lines, left parallel.py
    "shared.data.parallel": ("shared.data.parallel_options", "shared.data.text_files"),
    # convert's leaves (what the stacks' walks import) and its pairing, a key map's rules and regex limits, and what a
    # reference run gives, left conversion.py, layouts.py, references.py and verification.py
    "shared.port.conversion": ("shared.core.leaves", "shared.port.pairing"),
    "shared.port.layouts": ("shared.port.key_map_rules", "shared.port.regex_limits"),
    "shared.port.references": ("shared.core.reference_runs",),
    "shared.port.verification": ("shared.core.reference_runs",),
    "tf_impl.checkpoints": ("tf_impl.object_graph",),
    # the bench's profiles, timing, result files and stderr filter left bench.py (the command); the FLOP-ceiling
    # diagnosis and the row picking left the report's tables.py
    "shared.tools.bench": (
        "shared.tools.bench_profiles",
        "shared.tools.bench_timing",
        "shared.tools.bench_results",
        "shared.tools.native_stderr",
    ),
    "shared.tools.report.tables": ("shared.tools.report.ceilings", "shared.tools.report.selection"),
    # each stack's files and its ranks and devices left train.py for files.py and distributed.py
    "torch_impl.train": ("torch_impl.files", "torch_impl.distributed"),
    # each stack's tutorials' classes in one place: tutorials/ (references.py runs them on a file)
    "torch_impl.references": ("torch_impl.tutorials.trevett_nmt3",),
    "tf_impl.references": ("tf_impl.tutorials.nmt_2020",),
    "tf_impl.train": ("tf_impl.files", "tf_impl.distributed"),
}


def getattr_for(old: str, shim: bool = False):
    """A module-level `__getattr__` for `old`: a public name found in one of its places, with a warning; a shim's
    also answers `__all__` (its names, for `from old import *`)."""
    places = MOVED_MODULES.get(old) or MOVED_NAMES[old]

    def __getattr__(name: str):
        if shim and name == "__all__":
            return names(places)
        if name.startswith("_"):  # dunders and privates: what tools probe for is not a moved name
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        path, value = _find(old, places, name)
        warnings.warn(f"{old}.{name} moved to {path}: import it from there (the old path goes in release {REMOVED_IN})",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        return value

    return __getattr__


def _find(old: str, places: tuple[str, ...], name: str) -> tuple[str, object]:
    """(the shortest public path, the object) of `name` in the first of `places` holding it; modules are no names."""
    for place in places:  # a place's own names only: an old place holding a shim itself would warn a second time
        value = vars(importlib.import_module(place)).get(name, _MISSING)
        if value is not _MISSING and not isinstance(value, types.ModuleType):
            return public_path(_home(place, name, value), name, value), value
    raise AttributeError(f"module {old!r} has no attribute {name!r}, nor have its new places {', '.join(places)}")


def _home(place: str, name: str, value) -> str:
    """The module defining `value` where it holds it under `name` (a place may import it), else `place`."""
    home = getattr(value, "__module__", None)
    return home if isinstance(home, str) and getattr(sys.modules.get(home), name, None) is value else place


def public_path(place: str, name: str, value) -> str:
    """`package.name` for the outermost package above `place` whose `__all__` exports this very object, else `place.name`."""
    parts = place.split(".")
    for depth in range(1, len(parts)):
        package = sys.modules.get(".".join(parts[:depth]))
        if name in getattr(package, "__all__", ()) and getattr(package, name, None) is value:
            return f"{package.__name__}.{name}"
    return f"{place}.{name}"


def names(places: tuple[str, ...]) -> list[str]:
    """What a shim answers (its `dir()` and `__all__`): each place's `__all__`, or the names it defines itself."""
    found = set()
    for place in places:
        module = importlib.import_module(place)
        found.update(getattr(module, "__all__", None) or _defined_in(module))
    return sorted(found)


def _defined_in(module: types.ModuleType) -> list[str]:
    """The public names `module` defines (its own functions and classes, and its constants), not those it imports."""
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
            and getattr(value, "__module__", module.__name__) == module.__name__]  # fmt: skip


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers the imports of MOVED_MODULES' old paths, and of nothing else."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=f"moved to {MOVED_MODULES[fullname][0]}")

    def create_module(self, spec):
        return None  # a plain module, made a shim by exec_module

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__
        exported = _still_exported(old)
        if exported is not None:  # the import system returns what sys.modules holds after exec_module
            sys.modules[old] = exported
            return
        module.__doc__ = f"Moved: the names of {old} live in {', '.join(MOVED_MODULES[old])} (kept until release {REMOVED_IN})."
        module.__getattr__ = getattr_for(old, shim=True)
        module.__dir__ = lambda: names(MOVED_MODULES[old])


def _still_exported(old: str) -> types.ModuleType | None:
    """The module `old`'s parent package still exports under `old`'s last name (in its `__all__`), else None."""
    parent, _, leaf = old.rpartition(".")
    package = sys.modules.get(parent)
    value = getattr(package, leaf, None)
    return value if leaf in getattr(package, "__all__", ()) and isinstance(value, types.ModuleType) else None


_FINDER = _Finder()


def install() -> None:
    """Put the finder first on sys.meta_path (once): before the path finder, so a stale folder of an old module left
    behind by an upgrade (`shared/report/__pycache__`) cannot answer as an empty namespace package."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
