"""`rosetta port` (shared/port/porting.py) with both stacks: every model x direction x format, round trips,
a document's own checkpoint, Adam's state ported and training resumed from it, and each bad request
refused with nothing left behind."""

from __future__ import annotations

import itertools
import pickle

import keras
import numpy as np
import pytest
import torch

import tf_impl
import tf_impl.checkpoints
import torch_impl
from shared import catalogue
from shared.cli import main as rosetta
from shared.io import safetensors_io
from shared.port import formats, porting, stages
from shared.verify import fixtures
from shared.verify.equality import assert_close
from shared.verify.training import EQUALITY_SPEC, _train_steps, fixture_trainer, train_fixture
from tests.printed import load_as_printed, load_line
from tf_impl.files import load_keras, save_keras
from tf_impl.files import save_native as save_keras_weights
from torch_impl.files import save_native as save_torch

MODELS = catalogue.built()
SUFFIXES = {fmt.name: fmt.suffix for fmt in formats.FORMATS.values()}
SUFFIXES["tf_checkpoint"] = "_ckpt"  # a folder, as the tutorial's `checkpoint.save` leaves it
WRITERS = {"torch": (torch_impl, save_torch), "keras_weights": (tf_impl, save_keras_weights), "keras": (tf_impl, save_keras),
           "tf_checkpoint": (tf_impl, tf_impl.checkpoints.write)}  # fmt: skip


def _overrides(name: str) -> dict:
    return dict(catalogue.get(name).fixture_config)


def _write_source(name: str, fmt: str, path, weights=None) -> dict:
    """A file of model `name` (fixture sizes) in `fmt` holding `weights` (default: the golden ones, float32)."""
    weights = {key: np.asarray(value, np.float32) for key, value in (weights or fixtures.load_golden(name).weights).items()}
    if fmt == "safetensors":
        safetensors_io.save(path, weights)
    else:
        stack, save = WRITERS[fmt]
        model = stack.build(name, "float32", **_overrides(name))
        stack.set_weights(model, weights)
        save(model, path)
    return weights


def _weights_of(name: str, fmt: str, path) -> dict:
    stack = torch_impl if formats.FORMATS[fmt].stack == "torch" or fmt == "safetensors" else tf_impl
    return stack.get_weights(stages.read(stack, path, formats.FORMATS[fmt], name, _overrides(name), "float32")[0])


def _covering_ports() -> list[tuple[str, str, str]]:
    """(model, source format, destination format): every model reads and writes each format once (a cycle
    through the formats with a step of 1 to 4, by the model's index), so every one of the 20 directions is
    ported by 3 models; the product (240 ports) adds no rule, since the formats' readers and writers are
    the same for every model."""
    formats, ports = list(SUFFIXES), []
    for index, name in enumerate(MODELS):
        step = 1 + index % (len(formats) - 1)
        ports += [(name, formats[j], formats[(j + step) % len(formats)]) for j in range(len(formats))]
    return ports


def test_the_covering_ports_cover_every_model_and_direction():
    ports = _covering_ports()
    assert {(source, destination) for _, source, destination in ports} == set(itertools.permutations(SUFFIXES, 2))
    assert all({(n, f) for n, f, _ in ports} >= {(name, f) for f in SUFFIXES} for name in MODELS)
    assert all({(n, f) for n, _, f in ports} >= {(name, f) for f in SUFFIXES} for name in MODELS)


@pytest.mark.parametrize(("name", "source", "destination"), _covering_ports())
def test_every_model_ports_in_every_direction_and_verifies(tmp_path, name, source, destination):
    src, dst = tmp_path / f"m{SUFFIXES[source]}", tmp_path / f"out{SUFFIXES[destination]}"
    weights = _write_source(name, source, src)
    # the format named: a TF checkpoint of tf_tutorial also fits the 2021 tutorial's layout, refused unnamed
    report = porting.port(src, dst, name, to=destination, overrides=_overrides(name), source_format=source)
    assert report.ok, porting.render(report)
    names = [component.name for component in report.components]
    assert ("context" if catalogue.get(name).interface == "attention" else "logits") in names
    attention = [] if name == "reverse_rnn" else ["attention scores", "attention weights"]
    encoder = [] if name == "additive_attention" else ["source embeddings", "encoder outputs", "encoder state"]
    encoder = encoder[:2] if name == "tf_tutorial_mha" else encoder  # the 2022 tutorial's decoder starts from zeros
    assert set(encoder + attention) <= set(names)
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
    for component in ("source embeddings", "encoder outputs", "encoder state", "target embeddings", "logits (--inputs)"):
        assert f"  {component} " in out
    for component in ("attention scores", "attention weights", "context vectors"):
        assert len([line for line in out.splitlines() if line.startswith(f"  {component} ") and "per step" in line]) == 2
    assert "greedy ids" in out and "ported." in out


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
    assert rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "o.weights.h5"), "--model", name]) == 0  # sizes read
    (tmp_path / "o.weights.h5").unlink()
    err = _port_error(
        tmp_path, capsys, [str(tmp_path / "m.pt"), str(tmp_path / "o.weights.h5"), "--model", name, "--set=vocab_size=20"]
    )
    assert "mis-shaped keys" in err  # --set against the file's own sizes
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
    original = porting.compare_components

    def spoiled(*args):
        components = original(*args)
        index = [component.name for component in components].index("attention weights")
        components[index] = porting.Component("attention weights", 1.0, False, (0.0, 0.0, 0.0, 1.0), first_bad_step=3)
        return components

    monkeypatch.setattr(porting, "compare_components", spoiled)
    sets = [f"--set={k}={v}" for k, v in _overrides(name).items()]
    assert rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "o.weights.h5"), "--model", name, *sets]) == 1
    assert "not ported: attention weights, decoder step 3 differs" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


NAIVE_GRU_FAILURES = [("encoder", "encoder outputs"), ("decoder", "attention scores, decoder step 1")]


@pytest.mark.parametrize(("layer", "first_failure"), NAIVE_GRU_FAILURES)
def test_verification_catches_a_naive_conversion_and_names_where_it_starts(tmp_path, layer, first_failure):
    """Negative control: a Keras GRU holding torch's gate order (no r/z swap) fails verification, and the
    first component that differs is where that GRU first acts (the decoder's state enters at step 1)."""
    name = "reverse_bahdanau"
    _write_source(name, "torch", tmp_path / "m.pt")
    reference, _ = stages.read(torch_impl, tmp_path / "m.pt", formats.FORMATS["torch"], name, _overrides(name), "float32")
    candidate = tf_impl.build(name, "float32", **_overrides(name))
    tf_impl.set_weights(candidate, torch_impl.get_weights(reference))
    kernel = getattr(candidate, layer).cell.kernel
    z, r, h = np.split(kernel.numpy(), 3, axis=1)
    kernel.assign(np.concatenate([r, z, h], axis=1))  # the naive copy keeps torch's r, z order
    batch = porting.verification_batch(name, catalogue.resolve_config(catalogue.get(name), "float32", _overrides(name)))
    components = porting.compare_components(name, "float32", torch_impl, reference, tf_impl, candidate, [batch])
    failure = next(component for component in components if not component.ok)
    assert failure.where() == first_failure


# ---- Adam's state through files: --with-optimizer, and training resumed from the ported checkpoint ----

RESUME_AFTER, RESUME_FOR = 12, 12
# each checkpoint pair once, each model in both directions (a covering set: CI's 25 minutes)
RESUMED_PORTS = [
    ("luong_general", torch_impl, ".pt", ".keras"),
    ("luong_general", tf_impl, ".weights.h5", ".pt"),
    ("reverse_bahdanau", torch_impl, ".pt", ".weights.h5"),
    ("reverse_bahdanau", tf_impl, ".keras", ".pt"),
]


def _training_config(name: str) -> dict:
    """The fixture config fixture_trainer builds: dropout off."""
    return {**_overrides(name), **({"dropout": 0.0} if "dropout" in _overrides(name) else {})}


@pytest.mark.parametrize(("name", "first", "written", "ported"), RESUMED_PORTS, ids=lambda x: getattr(x, "__name__", x))
def test_training_resumed_from_a_ported_checkpoint_follows_the_same_curve(tmp_path, name, first, written, ported):
    """N steps in one stack, its checkpoint ported with --with-optimizer, M more steps in the other stack:
    the N + M curve and weights of one run in the first stack (float64)."""
    second = tf_impl if first is torch_impl else torch_impl
    reference = train_fixture(first, name, "float64", RESUME_AFTER + RESUME_FOR, EQUALITY_SPEC)
    before = fixture_trainer(first, name, "float64", EQUALITY_SPEC)
    _train_steps(before, name, EQUALITY_SPEC, 0, RESUME_AFTER)
    before.save_checkpoint(tmp_path / f"a{written}")
    report = porting.port(tmp_path / f"a{written}", tmp_path / f"b{ported}", name, overrides=_training_config(name),
                          dtype="float64", with_optimizer=True)  # fmt: skip
    assert report.ok and {"Adam exp_avg", "Adam exp_avg_sq", "Adam step"} <= {c.name for c in report.components}
    after = fixture_trainer(second, name, "float64", EQUALITY_SPEC)  # golden weights: the checkpoint replaces them
    after.load_checkpoint(tmp_path / f"b{ported}")
    curve = _train_steps(after, name, EQUALITY_SPEC, RESUME_AFTER, RESUME_AFTER + RESUME_FOR)
    assert_close(curve, reference["curve"][RESUME_AFTER:], 1e-9, what=f"{name} resumed curve")
    weights = second.get_weights(after.model)
    for key, value in reference["weights"].items():
        assert_close(weights[key], value, 1e-9, what=f"{name} {key}")


def test_a_checkpoint_ported_without_the_optimizer_cannot_resume(tmp_path, capsys):
    """Negative control: a weights-only port holds no Adam state; resuming from it, or asking for it, fails clearly."""
    name = "reverse_bahdanau"
    trainer = fixture_trainer(torch_impl, name, "float64", EQUALITY_SPEC)
    _train_steps(trainer, name, EQUALITY_SPEC, 0, 2)
    torch_impl.files.save_native(trainer.model, tmp_path / "weights.pt")
    trainer.save_checkpoint(tmp_path / "checkpoint.pt")
    porting.port(tmp_path / "checkpoint.pt", tmp_path / "b.weights.h5", name, overrides=_training_config(name))
    with pytest.raises(ValueError, match="holds no optimizer state"):
        fixture_trainer(tf_impl, name, "float64", EQUALITY_SPEC).load_checkpoint(tmp_path / "b.weights.h5")
    porting.port(tmp_path / "checkpoint.pt", tmp_path / "b.keras", name, overrides=_training_config(name))
    with pytest.raises(ValueError, match="holds no optimizer state"):
        fixture_trainer(tf_impl, name, "float64", EQUALITY_SPEC).load_checkpoint(tmp_path / "b.keras")
    sets = [f"--set={k}={v}" for k, v in _training_config(name).items()]
    err = _port_error(tmp_path, capsys, [str(tmp_path / "weights.pt"), str(tmp_path / "c.keras"), "--model", name,
                                         "--with-optimizer", *sets])  # fmt: skip
    assert "weights.pt: holds no optimizer state" in err and not (tmp_path / "c.keras").exists()


def test_a_stock_keras_adam_checkpoint_ports_momentum_velocity_and_iterations(tmp_path):
    """A Keras model compiled with keras.optimizers.Adam, three updates, `save_weights`: its `momentum`,
    `velocity` and `iterations` arrive as torch's `exp_avg`, `exp_avg_sq` and `step`, by parameter."""
    import tensorflow as tf

    name = "reverse_luong_dot"
    model = tf_impl.build(name, "float32", **_overrides(name))
    optimizer = keras.optimizers.Adam(1e-3)
    model.compile(optimizer=optimizer)
    batch = fixtures.load_golden(name).batch
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch["src"], batch["tgt_in"])))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
    model.save_weights(tmp_path / "k.weights.h5")
    report = porting.port(tmp_path / "k.weights.h5", tmp_path / "t.pt", name, overrides=_overrides(name), with_optimizer=True)
    assert report.ok
    checkpoint = torch.load(tmp_path / "t.pt", weights_only=True)
    names = [key for key, _ in torch_impl.build(name, "float32", **_overrides(name)).named_parameters()]
    expected = tf_impl.files.adam_state(model, optimizer)
    for index, key in enumerate(names):
        state = checkpoint["optimizer"]["state"][index]
        assert int(state["step"]) == 3
        assert np.array_equal(state["exp_avg"].numpy(), expected["exp_avg"][key]), key
        assert np.array_equal(state["exp_avg_sq"].numpy(), expected["exp_avg_sq"][key]), key
    assert np.abs(expected["exp_avg"]["decoder.weight_hh_l0"]).max() > 0  # the moments are not trivially zero


def test_a_keras_file_names_its_model_and_config(tmp_path, capsys):
    name = "reverse_luong_dot"
    _write_source(name, "keras", tmp_path / "m.keras")
    model, _ = load_keras(tmp_path / "m.keras")
    assert type(model).__name__ == "ReverseTaskV8" and model.rosetta_config == catalogue.resolve_config(
        catalogue.get(name), "float32", _overrides(name)
    )
    sets = [f"--set={k}={v}" for k, v in _overrides(name).items()]
    err = _port_error(
        tmp_path, capsys, [str(tmp_path / "m.keras"), str(tmp_path / "o.pt"), "--model", "reverse_luong_general", *sets]
    )
    assert "holds model 'reverse_luong_dot', not 'reverse_luong_general'" in err
    err = _port_error(
        tmp_path, capsys, [str(tmp_path / "m.keras"), str(tmp_path / "o.pt"), "--model", name, "--set=vocab_size=20"]
    )
    assert "saved with vocab_size=19" in err and "drop those --set" in err
    assert rosetta(["port", str(tmp_path / "m.keras"), str(tmp_path / "o.pt"), "--model", name]) == 0  # its own config
    (tmp_path / "o.pt").unlink()
    assert rosetta(["port", str(tmp_path / "m.keras"), str(tmp_path / "o.safetensors")]) == 0  # the file names the model
    assert "model reverse_luong_dot" in capsys.readouterr().out
    assert rosetta(["port", str(tmp_path / "o.safetensors"), str(tmp_path / "o.pt")]) == 0  # so does a canonical safetensors
    for written in ("o.pt", "o.safetensors"):
        (tmp_path / written).unlink()
    (tmp_path / "bad.keras").write_bytes(b"PK not really a zip")
    err = _port_error(tmp_path, capsys, [str(tmp_path / "bad.keras"), str(tmp_path / "o.pt"), "--model", name, *sets])
    assert "not a loadable .keras file" in err
    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    plain.save(tmp_path / "plain.keras")
    err = _port_error(tmp_path, capsys, [str(tmp_path / "plain.keras"), str(tmp_path / "o.pt"), "--model", name, *sets])
    assert "holds a Sequential, not a catalogue model" in err
    err = _port_error(tmp_path, capsys, [str(tmp_path / "plain.keras"), str(tmp_path / "o.pt")])
    assert "name the catalogue model" in err  # negative control: a .keras file of no catalogue model names none
    code = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda x: x * 2)])
    code.save(tmp_path / "code.keras")
    err = _port_error(tmp_path, capsys, [str(tmp_path / "code.keras"), str(tmp_path / "o.pt"), "--model", name, *sets])
    assert "not a loadable .keras file" in err and "safe_mode" in err  # a lambda's bytecode is refused, never run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.keras", "code.keras", "m.keras", "plain.keras"]


# ---- every port says what to build: the printed line, run as printed, computes the user's function ----


def _feeding_user_model(path) -> dict:
    """Document 004's model built with a non-default option (feed_state=True), golden weights, saved as the
    user's `.keras` file (which names its config); its config."""
    name = "tf_tutorial"
    config = {**_overrides(name), "feed_state": True}
    user = tf_impl.build(name, "float32", **config)
    tf_impl.set_weights(user, {key: np.asarray(value, np.float32) for key, value in fixtures.load_golden(name).weights.items()})
    save_keras(user, path)
    return config


@pytest.mark.parametrize("destination", list(SUFFIXES))
def test_every_port_ends_with_the_line_that_loads_it_into_the_model_it_computes(tmp_path, destination):
    """A .pt, .weights.h5 or TF checkpoint names no config: the printed line must build the model with
    feed_state=True. Run as printed, it computes the user's function; the catalogue's default model holding
    the same weights does not (negative control)."""
    name = "tf_tutorial"
    _feeding_user_model(tmp_path / "user.keras")
    report = porting.port(tmp_path / "user.keras", tmp_path / f"out{SUFFIXES[destination]}", name, to=destination)
    printed = porting.render(report)
    assert report.ok, printed
    assert ("feed_state=True" in load_line(printed)) is (destination != "keras")  # a .keras file names it itself
    model = load_as_printed(printed)
    stack = torch_impl if destination in ("torch", "safetensors") else tf_impl
    batch = porting.verification_batch(name, report.config)
    expected = tf_impl.run(load_keras(tmp_path / "user.keras")[0], name, batch)["logits"]  # the user's model
    error = np.abs(stack.run(model, name, batch)["logits"] - expected).max()
    assert error < 1e-5
    default = stack.build(name, "float32", **{**report.config, "feed_state": False})
    stack.set_weights(default, stack.get_weights(model))
    assert np.abs(stack.run(default, name, batch)["logits"] - expected).max() > 100 * max(error, 1e-7)


def test_a_ported_safetensors_file_carries_its_config(tmp_path, capsys):
    """A port's canonical safetensors names its model and config (as a .keras file does): ported on, the
    option arrives without --set; a --set that contradicts it is refused."""
    _feeding_user_model(tmp_path / "user.keras")
    porting.port(tmp_path / "user.keras", tmp_path / "a.safetensors", "tf_tutorial")
    report = porting.port(tmp_path / "a.safetensors", tmp_path / "b.pt", "tf_tutorial")
    assert report.ok and report.config["feed_state"] is True and "feed_state=True" in load_line(porting.render(report))
    err = _port_error(tmp_path, capsys, [str(tmp_path / "a.safetensors"), str(tmp_path / "c.pt"), "--model", "tf_tutorial",
                                         "--set", "feed_state=false"])  # fmt: skip
    assert "a.safetensors: saved with feed_state=True; drop those --set" in err and not (tmp_path / "c.pt").exists()
