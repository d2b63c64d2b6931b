"""A preset on a file of the tutorial's it does not fit, both stacks in one process: one line saying the file is not
that layout, naming the keys the layout's files hold that it lacks and those it holds beyond them, in the file's own
names; never renames proposed for a key map, which a preset is not. With its negative control. (The key maps' own
cases: tests/shared/test_keymap_trust.py; the 2024 preset on the legacy file: tests/cross/test_port_layouts.py.)"""

from __future__ import annotations

import torch

from shared import failures
from shared.cli import main as rosetta
from shared.port import ambiguity, layouts
from tests.cross.test_port_layouts import _trained_trevett
from tests.tutorials import trevett_nmt3_2024


def _renamed_file(folder):
    """His notebook's file with one key of another name (`decoder.embedding` saved as `decoder.emb`)."""
    path = folder / "tut3-model.pt"
    _trained_trevett(trevett_nmt3_2024, path)
    state = torch.load(path)
    state["decoder.emb.weight"] = state.pop("decoder.embedding.weight")
    torch.save(state, path)
    return path


def _refused(capsys, path) -> str:
    assert rosetta(["port", str(path), str(path.parent / "o.keras"), "--from", "trevett-nmt3"]) == failures.EXIT_FAILED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and sorted(p.name for p in path.parent.iterdir()) == [path.name], err
    return err


def test_a_file_of_the_tutorial_with_a_key_of_another_name_is_not_the_presets_layout(tmp_path, capsys):
    path = _renamed_file(tmp_path)
    description = layouts.preset("trevett-nmt3").description
    assert _refused(capsys, path) == (
        f"rosetta port: {path} is not the trevett-nmt3 layout ({description}): that layout's files hold keys "
        f"decoder.embedding.weight, which {path} lacks; {path} holds decoder.emb.weight, which that layout's files do not"
    )


def test_negative_control_the_strict_read_alone_proposes_renames_for_a_key_map(tmp_path, capsys, monkeypatch):
    """Without the preset's check, the model's strict read refuses it as before: keys listed (sizes read wrongly from
    the file that lacks one) and renames proposed for a key map, never saying the file is not the layout."""
    path = _renamed_file(tmp_path)
    monkeypatch.setattr(ambiguity, "check_preset_fits", lambda *args: None)
    err = _refused(capsys, path)
    assert "weights do not fit" in err and "renames proposed by name and shape" in err and "not the trevett" not in err
