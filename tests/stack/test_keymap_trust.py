"""A `--reference` of the user's that prints, in each stack alone: what their code prints (Python's print and writes
to the file descriptor alike) goes to stderr, so `rosetta port`'s stdout is its report alone, ending with its verdict,
whichever it is. With its negative control. (The key maps' own cases: tests/shared/test_keymap_trust.py.)"""

from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path

import numpy as np
import pytest

from shared import catalogue
from shared.cli import main as rosetta
from shared.port import references
from shared.verify import fixtures
from tests.stack.test_reliability import NAME, _destination, _port, _source

STACK_OF_SUFFIX = {".pt": "torch_impl", ".h5": "tf_impl"}  # the sources _source writes: m.pt, m.weights.h5
PRINTED = ("loading", "descriptor: loaded", "a batch of")  # what the reference below prints


def printing_reference(path: str, off: float = 0.0):
    """The user's reference: a function batch -> logits of NAME holding the file's weights (`off` added to its logits),
    which prints as it loads, through Python and the file descriptor, and at every call."""
    print(f"loading {path}")
    os.write(1, b"descriptor: loaded\n")
    stack = importlib.import_module(STACK_OF_SUFFIX[Path(path).suffix])
    model = stack.build(NAME, "float32", **catalogue.get(NAME).fixture_config)
    stack.set_weights(model, {key: np.float32(value) for key, value in fixtures.load_golden(NAME).weights.items()})

    def logits(batch: dict) -> np.ndarray:
        print(f"a batch of {len(batch['src'])} sentences")
        return stack.run(model, NAME, batch)["logits"] + off  # [B, T, V]

    return logits


def printing_wrong_reference(path: str):
    """The same model, its logits off by one: the port is refused."""
    return printing_reference(path, off=1.0)


def _ported(stack, folder: Path, capfd, reference: str) -> tuple[Path, int, str, str]:
    """`rosetta port` of NAME's checkpoint against `reference` (this module's): the source, exit code, stdout, stderr."""
    source = _source(stack, folder)
    code = rosetta(_port(source, _destination(stack, folder), "--reference", f"{__name__}:{reference}"))
    out, err = capfd.readouterr()
    return source, code, out, err


@pytest.mark.parametrize("reference", ["printing_reference", "printing_wrong_reference"])
def test_what_a_reference_prints_goes_to_stderr_and_stdout_ends_with_the_verdict(stack, tmp_path, capfd, reference):
    source, code, out, err = _ported(stack, tmp_path, capfd, reference)
    lines = out.splitlines()
    assert lines[0].startswith(f"{source} ("), out  # stdout: the report, from its first line ...
    if reference == "printing_reference":
        assert code == 0 and lines[-2] == "ported." and lines[-1].startswith("load it: "), out  # ... to its verdict
    else:
        assert code == 1 and lines[-1] == "not ported: logits differs (nothing written)", out
    assert not any(printed in out for printed in PRINTED) and all(printed in err for printed in PRINTED), (out, err)


def test_negative_control_without_the_redirection_the_users_prints_come_first_on_stdout(stack, tmp_path, capfd, monkeypatch):
    """The reference run as before, printing to stdout: the report no longer is stdout, its lines follow the user's."""
    monkeypatch.setattr(references, "prints_to_stderr", contextlib.nullcontext)
    source, code, out, _ = _ported(stack, tmp_path, capfd, "printing_reference")
    assert code == 0 and out.splitlines()[0] == f"loading {source}"
    assert all(printed in out for printed in PRINTED)
