"""Golden files are compared with a fresh generation to float64 rounding: the drawn inputs byte for byte, the computed
floats within GOLDEN_ROUNDING (numpy only: the blobs are edited copies of a golden file)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from shared.io import safetensors_io
from shared.verify import fixtures

NAME = "reverse_bahdanau"


def _edited(edit, name: str = NAME) -> bytes:
    """The golden file of `name` as bytes, `edit(tensors)` applied first."""
    tensors, metadata = safetensors_io.load(fixtures.golden_path(name))
    edit(tensors)
    return safetensors_io.dumps(tensors, metadata)


def _nudge(key: str, by=None):
    """An edit moving the largest entry of `key` by `by`, or by one unit in its last place (None)."""

    def edit(tensors):
        array = tensors[key].copy()
        index = np.unravel_index(np.abs(array).argmax(), array.shape)
        array[index] = np.nextafter(array[index], np.inf) if by is None else array[index] + by
        tensors[key] = array

    return edit


def test_a_rounding_difference_is_no_difference_but_bytes_differ():
    """One ulp on a gradient (what another CPU's kernels give) is no difference; the byte comparison the golden test
    used to make fails on it (negative control)."""
    blob, path = _edited(_nudge("grads/W_h.weight")), fixtures.golden_path(NAME)
    assert fixtures.golden_differences(blob, path) == []
    assert blob != path.read_bytes()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_nudge("grads/W_h.weight", 1e-9), "grads/W_h.weight moved by 1.0e-09"),
        (_nudge("outputs/logits", 1e-6), "outputs/logits moved by 1.0e-06"),
        (_nudge("weights/W_h.weight"), "weights/W_h.weight differs"),  # drawn inputs: byte for byte, one ulp included
        (lambda tensors: tensors.pop("grads/v.weight"), "grads/v.weight gone"),
        (lambda tensors: tensors.update({"batch/src": tensors["batch/src"][:, :-1]}), "batch/src int64"),
    ],
)
def test_a_change_beyond_rounding_is_named_with_its_file(edit, expected):
    differences = fixtures.golden_differences(_edited(edit), fixtures.golden_path(NAME))
    assert len(differences) == 1 and expected in differences[0] and str(fixtures.golden_path(NAME)) in differences[0]


def test_greedy_decoding_keeps_its_token_ids_exact_and_its_attention_to_rounding():
    """luong_dot's greedy section: one ulp on its attention is rounding; one token id changed is a difference."""
    path = fixtures.golden_path("luong_dot")
    assert fixtures.golden_differences(_edited(_nudge("greedy/attention"), "luong_dot"), path) == []
    differences = fixtures.golden_differences(_edited(_nudge("greedy/tokens", 1), "luong_dot"), path)
    assert len(differences) == 1 and "greedy/tokens differs" in differences[0]


def test_regeneration_rewrites_only_a_file_that_changed(tmp_path, monkeypatch):
    """write_goldens keeps a file that agrees to rounding (not rewritten on a CPU that rounds otherwise) and rewrites
    one that moved; --check reports it without writing."""
    shutil.copy(fixtures.golden_path(NAME), tmp_path / f"{NAME}.safetensors")
    original = (tmp_path / f"{NAME}.safetensors").read_bytes()
    monkeypatch.setattr(fixtures, "GOLDEN_DIR", tmp_path)
    for edit, changed in ((_nudge("grads/W_h.weight"), []), (_nudge("grads/W_h.weight", 1e-9), [NAME])):
        blob = _edited(edit)
        monkeypatch.setattr(fixtures, "golden_bytes", lambda name, stack, blob=blob: blob)
        assert fixtures.write_goldens(None, [NAME], check=True) == changed
        assert (tmp_path / f"{NAME}.safetensors").read_bytes() == original
        assert fixtures.write_goldens(None, [NAME]) == changed
        assert (tmp_path / f"{NAME}.safetensors").read_bytes() == (blob if changed else original)
