"""Port your own model (shared.port.conversion, `rosetta port --torch-model/--keras-model`): a zoo of user-like
models (tests/zoo), each ported both ways and verified in float64 and float32, the strict errors, and the
negative controls of the traps the leaf rules guard."""

from __future__ import annotations

import json
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch

import tf_impl.conversion as keras_side
import torch_impl.conversion as torch_side
from shared.cli import main as rosetta
from shared.core.canonical import RULES, LeafRule, recurrent_rule
from shared.port import formats
from shared.port.conversion import convert, verify
from tests.printed import load_as_printed
from tests.zoo import keras_models, torch_models
from tests.zoo.torch_models import HIDDEN, VOCAB

ZOO = ["bilstm_tagger", "gru_language_model", "luong_gru_decoder", "luong_lstm_decoder", "sentiment_lstm", "conv_gru_classifier"]
BOUNDS = {"float64": 1e-12, "float32": 1e-5}
SIDES = {"torch": (torch_side, torch_models), "tf": (keras_side, keras_models)}


def _inputs(name: str):
    rng = np.random.default_rng(7)
    tokens = rng.integers(1, VOCAB, size=(3, 9))
    if name.startswith("luong"):
        return rng.normal(size=(3, 5, HIDDEN)), tokens[:, :4]
    return tokens


def _build(side: str, name: str, dtype: str, seed: int = 0):
    torch.manual_seed(seed)
    keras.utils.set_random_seed(seed)
    stack, models = SIDES[side]
    return stack.build(getattr(models, name), dtype, _inputs(name))


def _worst(check) -> float:
    return max(component.max_abs for component in check.components)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("source", "target"), [("torch", "tf"), ("tf", "torch")])
@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_model_ports_both_ways(name, source, target, dtype):
    src, dst = _build(source, name, dtype, seed=1), _build(target, name, dtype, seed=2)
    assert _worst(verify(src, dst, _inputs(name))) > 1e-3  # two different initialisations differ
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the summed-bias warning, tested below
        conversion = convert(src, dst)
    check = verify(src, dst, _inputs(name))
    assert check.dtype == dtype and check.ok
    assert _worst(check) <= BOUNDS[dtype], conversion.render()


def test_a_sequential_pairs_by_kind_and_shape_and_names_every_pair():
    keras.backend.clear_session()  # Keras's auto names count from zero again
    src, dst = _build("torch", "bilstm_tagger", "float64"), _build("tf", "bilstm_tagger", "float64")
    with pytest.warns(UserWarning, match="training is not"):
        conversion = convert(src, dst)
    assert [(p.source.path, p.target.path, p.how) for p in conversion.pairs] == [
        ("word_embeddings", "embedding", "kind and shape"),  # each the only candidate of its kind and shapes
        ("lstm[0]", "bidirectional", "kind and shape"),
        ("lstm[1]", "bidirectional_1", "kind and shape"),
        ("hidden2tag", "dense", "kind and shape"),
    ]
    assert conversion.weights == 19 and "summed" in conversion.render()


def test_our_mirrored_twins_pair_by_name_and_convert_as_set_weights_does():
    import tf_impl
    import torch_impl
    from shared import catalogue
    from shared.verify import fixtures

    name = "luong_general"
    config = dict(catalogue.get(name).fixture_config)
    twin_torch, twin_keras = torch_impl.build(name, "float64", **config), tf_impl.build(name, "float64", **config)
    torch_impl.set_weights(twin_torch, fixtures.load_golden(name).weights)
    tf_impl.run(twin_keras, name, fixtures.load_golden(name).batch)  # build it
    conversion = convert(twin_torch, twin_keras)
    assert {pair.how for pair in conversion.pairs} == {"name"}
    expected = torch_impl.get_weights(twin_torch)
    assert all(np.array_equal(value, expected[key]) for key, value in tf_impl.get_weights(twin_keras).items())


# ---- negative controls: each trap the rules guard, caught by verify ----


def _ported(source: str, name: str, rules=None):
    src, dst = _build(source, name, "float64", 1), _build("tf" if source == "torch" else "torch", name, "float64", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convert(src, dst, rules=rules)
    return verify(src, dst, _inputs(name))


def test_the_gru_gate_order_unswapped_is_caught():
    naive = {**RULES, "gru": recurrent_rule("gru", torch_gates="rzn", keras_gates="rzn")}
    for source in ("torch", "tf"):
        assert _ported(source, "gru_language_model").ok
        check = _ported(source, "gru_language_model", naive)
        assert not check.ok and _worst(check) > 1e-4  # the float64 bound is 1e-8


def test_a_stacked_bilstms_directions_swapped_are_caught():
    summed = RULES["lstm_summed"]

    def swap(arrays):  # each forward cell's arrays under the reverse cell's names and back
        return {key.removesuffix("_reverse") if key.endswith("_reverse") else f"{key}_reverse": value
                for key, value in arrays.items()}  # fmt: skip

    naive = {**RULES, "lstm_summed": LeafRule("lstm", lambda c: summed.to_keras(swap(c)), lambda k: swap(summed.from_keras(k)))}
    assert _ported("torch", "bilstm_tagger").ok
    check = _ported("torch", "bilstm_tagger", naive)
    assert not check.ok and _worst(check) > 1e-3


def _sgd_step(model, inputs, lr: float = 0.5) -> None:
    """One plain SGD step on the sum of squared outputs, in the model's own framework."""
    if isinstance(model, torch.nn.Module):
        model.zero_grad()
        output = model(torch.as_tensor(inputs))
        (output**2).sum().backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= lr * param.grad
        return
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(inputs, training=False) ** 2)
    for variable, grad in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables), strict=True):
        variable.assign_sub(lr * tf.convert_to_tensor(grad))  # the embedding's IndexedSlices made dense


def _two_bias_tagger():
    """The tagger with our two-bias Keras cells, as the summed-bias note advises."""
    from tf_impl.keras_compat.layers import TorchLSTMCell

    def bidirectional():
        return keras.layers.Bidirectional(keras.layers.RNN(TorchLSTMCell(HIDDEN), return_sequences=True))

    layers = [keras.Input(shape=(None,), dtype="int32"), keras.layers.Embedding(VOCAB, torch_models.EMBED),
              bidirectional(), bidirectional(), keras.layers.Dense(torch_models.TAGS)]  # fmt: skip
    return keras.Sequential(layers)


def test_a_summed_bias_lstm_drifts_after_one_sgd_step_and_two_biases_do_not():
    inputs = _inputs("bilstm_tagger")
    for keras_factory, drifts in ((keras_models.bilstm_tagger, True), (_two_bias_tagger, False)):
        src = _build("torch", "bilstm_tagger", "float64", 1)
        dst = keras_side.build(keras_factory, "float64", inputs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            convert(src, dst)
        assert bool(caught) == drifts  # the warning says it exactly where it happens
        assert _worst(verify(src, dst, inputs)) <= 1e-12  # forward equal either way
        _sgd_step(src, inputs)
        _sgd_step(dst, inputs)
        after = _worst(verify(src, dst, inputs))
        assert (after > 1e-6) if drifts else (after <= 1e-12), after


def test_a_keras_gru_with_reset_after_false_is_refused_saying_why():
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(VOCAB, 8),
                              keras.layers.GRU(HIDDEN, reset_after=False), keras.layers.Dense(3)])  # fmt: skip
    with pytest.raises(ValueError, match=r"reset_after=False applies the reset gate before the recurrent matmul"):
        convert(model, torch_models.ConvGRUClassifier())


# ---- strict: one error naming every problem, with pairs proposed ----


class _Swapped(torch.nn.Module):
    """A user's module registering its two Linear layers in the other order than the Keras model calls them."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(HIDDEN, 2)
        self.body = torch.nn.Linear(4, HIDDEN)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def _mlp() -> keras.Model:
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(HIDDEN, activation="relu"), keras.layers.Dense(2)])


def test_layers_registered_in_another_order_pair_by_their_shapes():
    keras.backend.clear_session()
    src, dst = _Swapped().double(), keras_side.build(_mlp, "float64")
    conversion = convert(src, dst)
    assert [(p.source.path, p.target.path, p.how) for p in conversion.pairs] == [
        ("head", "dense_1", "kind and shape"), ("body", "dense", "kind and shape")]  # fmt: skip
    assert verify(src, dst, np.random.default_rng(0).normal(size=(3, 4))).ok


def test_pairs_that_do_not_fit_are_listed_with_a_key_map_proposed_that_then_ports():
    keras.backend.clear_session()
    src, dst = _Swapped().double(), keras_side.build(_mlp, "float64")
    with pytest.raises(ValueError, match=r"mis-shaped pairs: head \(Linear\) -> dense \(Dense\)") as error:
        convert(src, dst, key_map={"head": "dense", "body": "dense_1"})  # a wrong key map
    proposal = json.loads(str(error.value).split("--key-map): ")[1])
    assert proposal == {"head": "dense_1", "body": "dense"}
    conversion = convert(src, dst, key_map=proposal)
    assert {pair.how for pair in conversion.pairs} == {"key map"}
    assert verify(src, dst, np.random.default_rng(0).normal(size=(3, 4))).ok


def test_missing_leftover_unsupported_and_differing_layers_are_named():
    src = torch_models.BiLSTMTagger()
    one_layer = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(VOCAB, 8),
                                  keras.layers.Bidirectional(keras.layers.LSTM(HIDDEN, return_sequences=True)),
                                  keras.layers.Dense(5)])  # fmt: skip
    with pytest.raises(ValueError, match=r"source layers left over: lstm\[1\] \(nn.LSTM layer 1\)"):
        convert(src, one_layer)
    norm = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    stock = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.LayerNormalization()])
    with pytest.raises(ValueError, match=r"configuration differs: 1 -> layer_normalization: eps 1e-05 != 0.001"):
        convert(norm, stock)
    batch_norm = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    with pytest.raises(ValueError, match=r"no conversion rule for 1 \(nn.BatchNorm1d\)"):
        convert(batch_norm, stock)
    with pytest.raises(ValueError, match="no weights yet"):
        convert(src, keras.Sequential([keras.layers.Dense(4)]))
    with pytest.raises(ValueError, match="both models are torch models"):
        convert(src, torch_models.BiLSTMTagger())


# ---- the command line ----


CLI_PORTS = [("sentiment_lstm", "m.pt", "out.keras"), ("sentiment_lstm", "m.weights.h5", "out.pt"),
             ("sentiment_lstm", "m.keras", "out.safetensors"), ("gru_language_model", "m.pt", "out.weights.h5")]  # fmt: skip


@pytest.mark.parametrize(("name", "source", "destination"), CLI_PORTS)
def test_the_cli_ports_your_own_classes_verified_and_read_back(tmp_path, capsys, monkeypatch, name, source, destination):
    """...and the report's last line, run as printed, loads the file into your model (gru_language_model's Keras
    model is subclassed: built by a call on the batch first)."""
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "batch.npz", _inputs(name))
    src = _build("torch" if source.endswith(".pt") else "tf", name, "float32", 3)
    formats.detect(tmp_path / source, destination=True).write_own(src, tmp_path / source)  # the user's own file
    flags = ["--torch-model", f"tests.zoo.torch_models:{name}", "--inputs", str(tmp_path / "batch.npz")]
    if not source.endswith(".keras"):
        flags += ["--keras-model", f"tests.zoo.keras_models:{name}"]
    code = rosetta(["port", str(tmp_path / source), str(tmp_path / destination), *flags])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "float64 (bound" in out and "float32 beside it" in out and "bit for bit" in out and "\nported.\nload it: " in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["batch.npz", source, destination])
    loaded = load_as_printed(out)
    assert verify(src, loaded, _inputs(name)).ok  # the user's model, loaded as the report says


def test_the_cli_writes_nothing_when_your_models_differ(tmp_path, capsys, monkeypatch):
    np.savez(tmp_path / "batch.npz", _inputs("gru_language_model"))
    formats.FORMATS["torch"].write_own(_build("torch", "gru_language_model", "float32"), tmp_path / "m.pt")
    monkeypatch.setitem(RULES, "gru", recurrent_rule("gru", torch_gates="rzn", keras_gates="rzn"))
    code = rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "out.keras"), "--torch-model",
                    "tests.zoo.torch_models:gru_language_model", "--keras-model", "tests.zoo.keras_models:gru_language_model",
                    "--inputs", str(tmp_path / "batch.npz")])  # fmt: skip
    assert code == 1 and "not ported: output[0] differs (nothing written)" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch.npz", "m.pt"]


def test_the_cli_asks_for_what_it_needs(tmp_path, capsys):
    formats.FORMATS["torch"].write_own(torch_models.SentimentLSTM(), tmp_path / "m.pt")
    base = ["port", str(tmp_path / "m.pt"), str(tmp_path / "out.keras"), "--torch-model", "tests.zoo.torch_models:sentiment_lstm"]
    assert rosetta(base) == 2 and "--keras-model MODULE:FACTORY" in capsys.readouterr().err
    assert rosetta([*base, "--keras-model", "tests.zoo.keras_models:sentiment_lstm"]) == 2
    assert "--inputs BATCH.npz is needed" in capsys.readouterr().err
    assert rosetta([*base, "--model", "luong_general"]) == 2 and "--model port catalogue models" in capsys.readouterr().err


def test_the_readmes_example_runs_as_written():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text.split("## Porting your own model", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    with pytest.warns(UserWarning, match="training is not"):
        exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102 (our own README's code)
    assert verify(namespace["torch_model"], namespace["tagger"], np.arange(40).reshape(2, 20)).ok


def lambda_tagger() -> keras.Model:
    """A Keras user's model with a Lambda layer (Python code in the graph)."""
    doubled = keras.layers.Lambda(lambda x: x * 2.0)
    return keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(VOCAB, 8), doubled,
                             keras.layers.GRU(HIDDEN), keras.layers.Dense(3)])  # fmt: skip


class LambdaTagger(torch.nn.Module):
    """Its PyTorch twin."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, 8)
        self.gru = torch.nn.GRU(8, HIDDEN, batch_first=True)
        self.dense = torch.nn.Linear(HIDDEN, 3)

    def forward(self, tokens):
        return self.dense(self.gru(self.embedding(tokens) * 2.0)[1][0])


def test_a_keras_file_of_a_model_with_a_lambda_is_refused_naming_the_layer_not_a_staging_path(tmp_path, capsys):
    keras.backend.clear_session()  # Keras's auto names count from zero again: the layer is `lambda` in any test order
    np.savez(tmp_path / "batch.npz", _inputs("gru_language_model"))
    torch.save(LambdaTagger().state_dict(), tmp_path / "m.pt")
    flags = ["--torch-model", "tests.cross.test_convert:LambdaTagger", "--keras-model", "tests.cross.test_convert:lambda_tagger",
             "--inputs", str(tmp_path / "batch.npz")]  # fmt: skip
    assert rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "out.keras"), *flags]) == 2
    err = capsys.readouterr().err
    assert "holds Lambda layers (lambda)" in err and "write .weights.h5 instead" in err and ".rosetta-tmp" not in err
    assert rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "out.weights.h5"), *flags]) == 0  # the advice works
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch.npz", "m.pt", "out.weights.h5"]
