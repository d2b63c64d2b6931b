"""`rosetta port` (shared/porting.py) with both stacks: every model x direction x format, round trips,
a document's own checkpoint, and each bad request refused with nothing left behind."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
import torch

import tf_impl
import torch_impl
from shared import catalogue, fixtures, porting, safetensors_io
from shared.cli import main as rosetta
from tf_impl.train import save_native as save_keras
from torch_impl.train import save_native as save_torch

MODELS = catalogue.built()
SUFFIXES = {"torch": ".pt", "safetensors": ".safetensors", "keras_weights": ".weights.h5"}


def _overrides(name: str) -> dict:
    return dict(catalogue.get(name).fixture_config)


def _write_source(name: str, fmt: str, path, weights=None) -> dict:
    """A file of model `name` (fixture sizes) in `fmt` holding `weights` (default: the golden ones, float32)."""
    weights = {key: np.asarray(value, np.float32) for key, value in (weights or fixtures.load_golden(name).weights).items()}
    if fmt == "safetensors":
        safetensors_io.save(path, weights)
    else:
        stack, save = (torch_impl, save_torch) if fmt == "torch" else (tf_impl, save_keras)
        model = stack.build(name, "float32", **_overrides(name))
        stack.set_weights(model, weights)
        save(model, path)
    return weights


def _weights_of(name: str, fmt: str, path) -> dict:
    stack = tf_impl if fmt == "keras_weights" else torch_impl
    return stack.get_weights(porting.read(stack, path, porting.FORMATS[fmt], name, _overrides(name), "float32"))


@pytest.mark.parametrize(("source", "destination"), list(itertools.permutations(SUFFIXES, 2)))
@pytest.mark.parametrize("name", MODELS)
def test_every_model_ports_in_every_direction_and_verifies(tmp_path, name, source, destination):
    src, dst = tmp_path / f"m{SUFFIXES[source]}", tmp_path / f"out{SUFFIXES[destination]}"
    weights = _write_source(name, source, src)
    report = porting.port(src, dst, name, overrides=_overrides(name))
    assert report.ok, porting.render(report, "float32")
    names = [component.name for component in report.components]
    assert ("context" if catalogue.get(name).interface == "attention" else "logits") in names
    assert ("greedy ids" in names) == catalogue.get(name).variable_length
    ported = _weights_of(name, destination, dst)
    assert ported.keys() == weights.keys() and all(np.array_equal(ported[k], weights[k]) for k in weights)  # bit for bit
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, dst.name])  # no staging left


@pytest.mark.parametrize("name", ["reverse_bahdanau", "bahdanau_bigru", "luong_general", "tf_tutorial"])
def test_round_trips_give_back_bit_identical_arrays(tmp_path, name):
    start = _write_source(name, "torch", tmp_path / "a.pt")
    porting.port(tmp_path / "a.pt", tmp_path / "b.weights.h5", name, overrides=_overrides(name))
    porting.port(tmp_path / "b.weights.h5", tmp_path / "c.pt", name, overrides=_overrides(name))
    back = torch.load(tmp_path / "c.pt", weights_only=True)
    assert all(np.array_equal(back[key].numpy(), start[key]) for key in start)  # LSTM: two biases, a pure permutation
    porting.port(tmp_path / "c.pt", tmp_path / "d.weights.h5", name, overrides=_overrides(name))
    keras_b, keras_d = (_weights_of(name, "keras_weights", tmp_path / f) for f in ("b.weights.h5", "d.weights.h5"))
    assert all(np.array_equal(keras_d[key], keras_b[key]) for key in keras_b)


def test_a_documents_own_checkpoint_ports_without_renaming(tmp_path):
    from tests import doc_listings

    torch.manual_seed(0)
    listing = doc_listings.ReverseTaskV6()  # the document's class, at the document's sizes
    torch.save(listing.state_dict(), tmp_path / "v6.pt")
    report = porting.port(tmp_path / "v6.pt", tmp_path / "v6.weights.h5", "reverse_bahdanau")
    assert report.ok and (tmp_path / "v6.weights.h5").is_file()


def test_the_cli_prints_every_component_and_verifies_user_inputs(tmp_path, capsys):
    name = "luong_dot"
    _write_source(name, "torch", tmp_path / "m.pt")
    batch = fixtures.load_golden(name).batch
    np.savez(tmp_path / "batch.npz", src=batch["src"], src_len=batch["src_len"], tgt_in=batch["tgt_in"])
    argv = [
        "port",
        str(tmp_path / "m.pt"),
        str(tmp_path / "m.weights.h5"),
        "--model",
        name,
        "--inputs",
        str(tmp_path / "batch.npz"),
    ]
    assert rosetta(argv + [f"--set={k}={v}" for k, v in _overrides(name).items()]) == 0
    out = capsys.readouterr().out
    assert "attention weights, step 5" in out and "logits (--inputs)" in out and "greedy ids" in out and "ported." in out


def _port_error(tmp_path, capsys, argv) -> str:
    assert rosetta(["port", *argv]) == 2
    return capsys.readouterr().err


def test_bad_requests_fail_with_one_clear_error_and_leave_nothing(tmp_path, capsys):
    name = "reverse_luong_dot"
    sets = [f"--set={k}={v}" for k, v in _overrides(name).items()]
    _write_source(name, "torch", tmp_path / "m.pt")
    before = sorted(p.name for p in tmp_path.iterdir())
    err = _port_error(tmp_path, capsys, [str(tmp_path / "m.pt"), str(tmp_path / "o.weights.h5"), "--model", "nope"])
    assert "unknown model 'nope'" in err and "luong_general" in err
    err = _port_error(
        tmp_path, capsys, [str(tmp_path / "m.pt"), str(tmp_path / "o.weights.h5"), "--model", "reverse_bahdanau", *sets]
    )
    assert "missing keys" in err and "W_h.weight" in err  # a file of another model: HF-style key lists
    err = _port_error(tmp_path, capsys, [str(tmp_path / "m.pt"), str(tmp_path / "o.h5"), "--model", name, *sets])
    assert "cannot tell the format" in err
    err = _port_error(tmp_path, capsys, [str(tmp_path / "m.pt"), str(tmp_path / "o.weights.h5"), "--model", name])
    assert "mis-shaped keys" in err  # fixture-size weights into the document-size model
    err = _port_error(tmp_path, capsys, [str(tmp_path / "m.pt"), str(tmp_path / "no" / "o.pt"), "--model", name, *sets])
    assert "is not a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("damage", ["truncated", "not weights", "pickled code"])
def test_broken_or_unsafe_source_files_are_refused(tmp_path, capsys, damage):
    name, path, marker = "reverse_rnn", tmp_path / "m.pt", tmp_path / "executed"
    _write_source(name, "torch", path)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif damage == "not weights":
        path.write_bytes(b"hello, not a checkpoint\n" * 10)
    else:
        path.write_bytes(pickle.dumps(_Payload(str(marker)), protocol=2))
    sets = [f"--set={k}={v}" for k, v in _overrides(name).items()]
    err = _port_error(tmp_path, capsys, [str(path), str(tmp_path / "o.weights.h5"), "--model", name, *sets])
    assert "not a loadable torch state_dict" in err
    assert not marker.exists() and not (tmp_path / "o.weights.h5").exists()


class _Payload:
    """Unpickling this runs code: `weights_only=True` must refuse it."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_an_existing_destination_is_kept_without_force(tmp_path, capsys):
    name = "reverse_rnn"
    _write_source(name, "torch", tmp_path / "m.pt")
    (tmp_path / "o.safetensors").write_bytes(b"keep me")
    sets = [f"--set={k}={v}" for k, v in _overrides(name).items()]
    err = _port_error(tmp_path, capsys, [str(tmp_path / "m.pt"), str(tmp_path / "o.safetensors"), "--model", name, *sets])
    assert "exists: pass --force" in err and (tmp_path / "o.safetensors").read_bytes() == b"keep me"
    assert rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "o.safetensors"), "--model", name, "--force", *sets]) == 0


def test_a_port_that_does_not_verify_writes_nothing_and_names_the_component(tmp_path, capsys, monkeypatch):
    name = "reverse_bahdanau"
    _write_source(name, "torch", tmp_path / "m.pt")
    original = porting.verify

    def spoiled(*args):
        components = original(*args)
        components[3] = porting.Component(components[3].name, 1.0, False)  # as a wrong gate order would
        return components

    monkeypatch.setattr(porting, "verify", spoiled)
    sets = [f"--set={k}={v}" for k, v in _overrides(name).items()]
    assert rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "o.weights.h5"), "--model", name, *sets]) == 1
    assert "not ported: attention weights, step 3 differs" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_verification_catches_a_naive_conversion(tmp_path):
    """Negative control: the Keras file written with torch's GRU gate order (no r/z swap) fails verification."""
    name = "reverse_bahdanau"
    _write_source(name, "torch", tmp_path / "m.pt")
    reference = porting.read(torch_impl, tmp_path / "m.pt", porting.FORMATS["torch"], name, _overrides(name), "float32")
    candidate = tf_impl.build(name, "float32", **_overrides(name))
    weights = torch_impl.get_weights(reference)
    tf_impl.set_weights(candidate, weights)
    kernel = candidate.decoder.cell.kernel
    z, r, h = np.split(kernel.numpy(), 3, axis=1)
    kernel.assign(np.concatenate([r, z, h], axis=1))  # the naive copy keeps torch's r, z order
    batch = porting.synthetic_batch(
        name, porting.VERIFY_SIZES, config=catalogue.resolve_config(catalogue.get(name), "float32", _overrides(name))
    )
    components = porting.verify(name, "float32", torch_impl, reference, tf_impl, candidate, [batch])
    assert not all(component.ok for component in components)
