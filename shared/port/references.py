"""Verification against the user's own model: a *reference* runs the model a file came from (or goes to).

`rosetta port --reference MODULE:CALLABLE` names a callable of the user's, `CALLABLE(path: str)`, that is
given the checkpoint's path (for a source in parts, `encoder=PATH,decoder=PATH`, the same string) and
returns either
- their model with the file loaded, as they load it (a torch `nn.Module`, or a Keras model or layer): it is
  called by the layout's *runner* (the presets name one; `--from PRESET`), in float64 where the model can
  be (torch: a float64 copy; Keras: the callable is called again under a float64 dtype policy on a float64
  copy of the file), else in its own float32; or
- a function `batch -> logits` (or a dict of components): `batch` holds `src` `[B, S]` int64 and `tgt_in`
  `[B, T]` int64 (decoder inputs, `<sos>` first), every source sentence full length (tutorial models do not
  mask padding); `logits` is `[B, T, V]`, `logits[:, t]` predicting the token after `tgt_in[:, t]`. It is
  compared at the precision it computes.

A runner `RUNNER(model, batch) -> dict` returns `logits` and any of the components it can see, by the names
of shared.core.taps plus `attention weights` (`[B, T, S]`); per decoder step ones are `[B, T, ...]`.

A preset's own reference is our transcription of the tutorial's classes (torch_impl/references.py,
tf_impl/references.py) holding the file, loaded the tutorial's way. Either is made a shared.core.reference_runs.Reference.

What the user's code prints while it is imported, builds and runs goes to stderr (prints_to_stderr): `rosetta port`'s
stdout is its report alone, whose verdict no print of theirs follows or buries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from shared import stacks
from shared.core import moved, reference_runs
from shared.core.taps import COMPONENTS

KNOWN = (*COMPONENTS, reference_runs.ATTENTION_WEIGHTS, reference_runs.LOGITS)
STACK_OF_MODULE = {"torch": "torch", "keras": "tf", "tensorflow": "tf", "tf_keras": "tf"}
SHIPPED_MODULES = ("torch_impl.references", "tf_impl.references")


def load_callable(text: str, what: str = "--reference", shipped: bool = False) -> Callable:
    """`MODULE:CALLABLE` imported (the current folder is on the path, as for `python -m`). `shipped`: only
    a tutorial model this package ships (a key map's reference or runner: a data file names no other code)."""
    module_name, sep, attribute = text.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{what} takes MODULE:CALLABLE (e.g. my_nmt:load_model), got {text!r}")
    if shipped and module_name not in SHIPPED_MODULES:
        raise ValueError(f"{what} {text}: a key map may name only the tutorial models of {' and '.join(SHIPPED_MODULES)}")
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{what} {text}: cannot import {module_name} ({error})") from None
    found = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise ValueError(f"{what} {text}: {module_name} has no {attribute}")
    if not callable(found):
        raise ValueError(f"{what} {text}: {attribute} is not callable")
    if shipped and attribute not in getattr(module, "SHIPPED", ()):
        raise ValueError(f"{what} {text}: not one of the tutorial models {module_name} ships ({', '.join(module.SHIPPED)})")
    return found


@contextlib.contextmanager
def prints_to_stderr() -> Iterator[None]:
    """Within the block, what is printed to stdout goes to stderr: Python's prints, and writes to the file descriptor
    (a subprocess, an extension module's own)."""
    if sys.stdout is not None:
        sys.stdout.flush()
    saved = _stdout_onto_stderr()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if sys.stderr is not None:
            sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _stdout_onto_stderr() -> int | None:
    """Descriptor 1 pointed at descriptor 2's file; a copy of the old one to restore, or None where either is missing
    (Python's prints are redirected all the same)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _printing_to_stderr(run: Callable) -> Callable:
    """`run`, each call's prints sent to stderr."""

    @functools.wraps(run)
    def quiet(*args, **kwargs):
        with prints_to_stderr():
            return run(*args, **kwargs)

    return quiet


def make(builder_text: str, runner_text: str | None, source: str, shipped: bool = False) -> reference_runs.Reference:
    """The reference `builder_text` builds from `source`, run by `runner_text` where it returns a model;
    `shipped`: the builder comes from a key map (only a shipped tutorial model). A runner always comes from
    a key map. The user's code, imported, called and run, prints to stderr."""
    with prints_to_stderr():
        made = _make(builder_text, runner_text, source, shipped)
    return dataclasses.replace(made, run=_printing_to_stderr(made.run))


def _make(builder_text: str, runner_text: str | None, source: str, shipped: bool) -> reference_runs.Reference:
    builder = load_callable(builder_text, "reference" if shipped else "--reference", shipped)
    made = builder(source)
    stack = stack_of(made)
    if stack is None:
        if not callable(made):
            raise ValueError(
                f"--reference {builder_text} returned {type(made).__name__}: return a model or a function batch -> logits"
            )
        return reference_runs.Reference(
            f"{builder_text}({source}), a function", "its own", lambda batch: as_components(made(batch), builder_text)
        )
    if runner_text is None:
        raise ValueError(
            f"--reference {builder_text} returned a {type(made).__name__}, and rosetta does not know how to call it: "
            "name the layout it follows (--from PRESET, whose runner calls it) or return a function batch -> logits"
        )
    runner = load_callable(runner_text, "runner", shipped=True)
    references = stacks.import_module(stack, "references")
    model, dtype = references.in_float64(made, builder, source)
    title = f"{builder_text}({source}), a {type(made).__name__} called by {runner_text}"
    return reference_runs.Reference(title, dtype, lambda batch: as_components(runner(model, batch), runner_text))


def stack_of(made) -> str | None:
    """The framework of a returned model (by its class's module; for a pair or dict of parts, the first
    part's), None for anything else."""
    if isinstance(made, (tuple, list, dict)) and made:
        return stack_of(next(iter(made.values())) if isinstance(made, dict) else made[0])
    for cls in type(made).__mro__:
        stack = STACK_OF_MODULE.get(cls.__module__.split(".")[0])
        if stack is not None:
            return stack
    return None


def as_components(output, where: str) -> dict[str, np.ndarray]:
    """A reference's output as named numpy components: a bare array is the logits."""
    if not isinstance(output, dict):
        output = {reference_runs.LOGITS: output}
    unknown = sorted(set(output) - set(KNOWN))
    if unknown:
        raise ValueError(f"{where} returned unknown components {', '.join(unknown)}; known: {', '.join(KNOWN)}")
    return {name: _numpy(value) for name, value in output.items()}


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
    return np.asarray(value)


__getattr__ = moved.getattr_for(__name__)  # Reference and the names a reference adds, moved to shared.core.reference_runs, warn
