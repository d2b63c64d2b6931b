"""Trust on the new surface in Keras's own formats: `--force` never deletes a user's files (a folder is replaced
only where it holds one TF checkpoint and nothing else), errors name the destination, never the hidden staging
path, and a file whose name shows another format than `--from` says so."""

from __future__ import annotations

from pathlib import Path

import tf_impl
from shared.cli import main as rosetta
from tests.stack.test_reliability import NAME, SETS, _one_line_error, _source


def _port(source: Path, destination: Path, *extra: str) -> list[str]:
    return ["port", str(source), str(destination), "--model", NAME, *SETS, "--to", "tf_checkpoint", *extra]


def test_force_never_deletes_the_users_files_in_a_folder(tmp_path, capsys):
    source, out = _source(tf_impl, tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "results.csv").write_text("a,b\n")
    err = _one_line_error(capsys, _port(source, out, "--force"))
    assert f"{out} is a folder holding notes.txt, results.csv: --force replaces a file, or a folder holding one TF" in err
    assert sorted(path.name for path in out.iterdir()) == ["notes.txt", "results.csv"]
    assert (out / "notes.txt").read_text() == "mine"


def test_force_replaces_a_folder_holding_one_checkpoint_and_no_more(tmp_path, capsys):
    """Negative control of the refusal above: what a port wrote there is replaced; a folder of several
    checkpoints (a training's `training_checkpoints`) is not."""
    source, out = _source(tf_impl, tmp_path), tmp_path / "out"
    assert rosetta(_port(source, out)) == 0
    before = sorted(path.name for path in out.iterdir())
    assert rosetta(_port(source, out, "--force")) == 0 and sorted(path.name for path in out.iterdir()) == before
    capsys.readouterr()
    for name in before:
        if name != "checkpoint":
            (out / name.replace("ckpt-1", "ckpt-2")).write_bytes((out / name).read_bytes())
    err = _one_line_error(capsys, _port(source, out, "--force"))
    assert "is a folder holding 2 checkpoints" in err and (out / before[-1]).is_file()


def test_a_file_in_the_checkpoints_place_is_refused_naming_it_not_a_staging_path(tmp_path, capsys):
    source, out = _source(tf_impl, tmp_path), tmp_path / "out"
    out.write_text("a file of mine")
    err = _one_line_error(capsys, _port(source, out, "--force"))
    assert err.startswith(f"rosetta port: {out} is a file: a TensorFlow checkpoint is a folder") and ".rosetta-tmp" not in err
    assert out.read_text() == "a file of mine"


def test_a_file_named_as_another_format_than_from_says_both(tmp_path, capsys):
    source = _source(tf_impl, tmp_path)  # m.weights.h5
    for named, reads in (("torch", "PyTorch state_dict"), ("safetensors", "canonical safetensors"), ("keras", "Keras model")):
        err = _one_line_error(capsys, ["port", str(source), str(tmp_path / "o.pt"), "--model", NAME, *SETS, "--from", named])
        assert f"{source}: its name says Keras weights (.weights.h5), but --from {named} reads {reads} files" in err
    torch_file = tmp_path / "m.pt"
    torch_file.write_bytes(b"a torch file")
    err = _one_line_error(capsys, ["port", str(torch_file), str(tmp_path / "o.weights.h5"), "--from", "tf-nmt-2020"])
    assert "its name says PyTorch state_dict (.pt), but --from tf-nmt-2020 reads TensorFlow checkpoint files" in err
    assert "nothing there" not in err
