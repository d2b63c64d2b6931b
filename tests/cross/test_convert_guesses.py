"""`convert` never pairs layers by a silent guess (shared.port.conversion): models written by others (d2l's
Bahdanau seq2seq in its PyTorch and TensorFlow chapters, tests/zoo/d2l_*.py) pair by name through a
`hparams` dict; same-kind, same-shape layers paired in order are settled by running both models or refused
with the key map that settles them; a lazy model is one clear error. Each with its negative control."""

from __future__ import annotations

import json
import warnings

import keras
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tf_impl.conversion as keras_side
from shared.port import layouts
from shared.port.conversion import convert, verify
from tests.zoo import d2l_tensorflow, d2l_torch

SRC, TGT, VALID = (
    np.random.default_rng(0).integers(1, 18, (3, 7)),
    np.random.default_rng(1).integers(1, 18, (3, 5)),
    np.array([7, 4, 2]),
)
D2L_INPUTS = (SRC, TGT, VALID)  # d2l's forward(enc_X, dec_X, enc_valid_lens): ragged sources, masked attention


def _d2l_torch(dtype: str, seed: int = 0):
    """d2l's torch model as its chapter builds it; its LazyLinear layers exist after one call."""
    torch.manual_seed(seed)
    model = d2l_torch.bahdanau_seq2seq()
    d2l_torch.run_once(model, *(torch.as_tensor(array) for array in D2L_INPUTS))
    return model.double() if dtype == "float64" else model


def _d2l_keras(dtype: str, seed: int = 1):
    keras.utils.set_random_seed(seed)
    with warnings.catch_warnings():  # Keras cannot trace d2l's *args call symbolically; the eager call builds it
        warnings.simplefilter("ignore")
        return keras_side.build(d2l_tensorflow.bahdanau_seq2seq, dtype, D2L_INPUTS)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("direction", ["torch->keras", "keras->torch"])
def test_d2ls_bahdanau_seq2seq_ports_both_ways_pairing_every_layer_by_name(direction, dtype):
    """d2l's Keras model holds its encoder and decoder in a `hparams` dict too: each layer is named by its
    shortest path, so all ten pair by name (W_k and W_q have the same shape: an order would be a guess)."""
    torch_model, keras_model = _d2l_torch(dtype), _d2l_keras(dtype)
    source, target = (torch_model, keras_model) if direction == "torch->keras" else (keras_model, torch_model)
    assert not verify(source, target, D2L_INPUTS).ok  # two initialisations differ
    done = convert(source, target)
    assert {pair.how for pair in done.pairs} == {"name"} and len(done.pairs) == 10
    assert not any(pair.target.path.startswith("hparams") or pair.source.path.startswith("hparams") for pair in done.pairs)
    check = verify(source, target, D2L_INPUTS)
    worst = max(component.max_abs for component in check.components)
    assert check.ok and worst <= {"float64": 1e-12, "float32": 1e-5}[dtype], worst


def test_a_lazy_torch_model_is_one_clear_error():
    unrun = d2l_torch.bahdanau_seq2seq()
    with pytest.raises(
        ValueError, match=r"has lazy parameters not yet initialised \(decoder.attention.W_k.weight.*call it on a batch first"
    ):
        convert(unrun, _d2l_keras("float32"))


# ---- same kind, same shape: a guess, settled by running both models or refused ----

UNITS = 6


class TorchScorer(torch.nn.Module):
    """Additive attention as a PyTorch user writes it: W_q registered before W_k."""

    def __init__(self):
        super().__init__()
        self.W_q = torch.nn.Linear(UNITS, UNITS, bias=False)
        self.W_k = torch.nn.Linear(UNITS, UNITS, bias=False)
        self.w_v = torch.nn.Linear(UNITS, 1, bias=False)

    def forward(self, queries, keys):
        features = torch.tanh(self.W_q(queries)[:, :, None] + self.W_k(keys)[:, None])  # [B, T, S, U]
        weights = F.softmax(self.w_v(features).squeeze(-1), dim=-1)  # [B, T, S]
        return weights @ keys  # [B, T, U]


class KerasScorer(keras.Model):
    """The same in Keras, with its own names and the key projection built first."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.key_projection = keras.layers.Dense(UNITS, use_bias=False)
        self.query_projection = keras.layers.Dense(UNITS, use_bias=False)
        self.score = keras.layers.Dense(1, use_bias=False)

    def call(self, queries, keys):
        features = keras.ops.tanh(self.query_projection(queries)[:, :, None] + self.key_projection(keys)[:, None])
        weights = keras.ops.softmax(keras.ops.squeeze(self.score(features), -1), axis=-1)
        return weights @ keys


SCORER_INPUTS = (np.random.default_rng(2).normal(size=(2, 3, UNITS)), np.random.default_rng(3).normal(size=(2, 5, UNITS)))
SETTLING_KEY_MAP = {"W_q": "query_projection", "W_k": "key_projection", "w_v": "score"}


def _scorers():
    torch.manual_seed(0)
    keras.utils.set_random_seed(0)
    return TorchScorer().double(), keras_side.build(KerasScorer, "float64", SCORER_INPUTS)


def test_same_shape_layers_paired_in_order_are_refused_without_inputs_with_the_key_map_that_settles_them():
    source, target = _scorers()
    before = [variable.numpy().copy() for variable in target.weights]
    with pytest.raises(ValueError, match=r"2 pairs were made by order") as error:
        convert(source, target)
    message = str(error.value)
    assert "W_q (Linear) -> key_projection; W_k (Linear) -> query_projection" in message  # the guess, named
    assert "pass inputs=" in message and '"W_q": "key_projection"' in message
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, target.weights, strict=True))  # untouched


def test_a_wrong_guess_is_caught_by_running_both_models_and_the_target_keeps_its_weights():
    """Negative control of the naive convert: the crosswise pairs load (every shape fits) and the outputs are
    off; with inputs the difference is found, named, and nothing is kept."""
    source, target = _scorers()
    before = [variable.numpy().copy() for variable in target.weights]
    with pytest.raises(ValueError, match=r"the models' outputs differ on the inputs \(output differs by") as error:
        convert(source, target, inputs=SCORER_INPUTS)
    assert "W_q (Linear) -> key_projection" in str(error.value)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, target.weights, strict=True))
    done = convert(source, target, key_map=SETTLING_KEY_MAP)  # the key map settles it
    assert {pair.how for pair in done.pairs} == {"key map"}
    check = verify(source, target, SCORER_INPUTS)
    assert check.ok and check.components[0].max_abs <= 1e-12


def test_a_right_guess_is_kept_once_both_models_agree_and_the_report_says_so():
    source = TorchScorer().double()
    keras.utils.set_random_seed(0)

    class InOrder(KerasScorer):  # the query projection built first: the order guess is right
        def __init__(self, **kwargs):
            keras.Model.__init__(self, **kwargs)
            self.query_projection = keras.layers.Dense(UNITS, use_bias=False)
            self.key_projection = keras.layers.Dense(UNITS, use_bias=False)
            self.score = keras.layers.Dense(1, use_bias=False)

    target = keras_side.build(InOrder, "float64", SCORER_INPUTS)
    done = convert(source, target, inputs=SCORER_INPUTS)
    assert [pair.how for pair in done.pairs] == ["order", "order", "kind and shape"]
    assert "running both models on the inputs settled them" in done.render()
    assert verify(source, target, SCORER_INPUTS).ok


def test_a_key_map_entry_that_pairs_nothing_is_refused():
    source, target = _scorers()
    with pytest.raises(ValueError, match=r"the key map pairs no source layer with 'W_z'"):
        convert(source, target, key_map={**SETTLING_KEY_MAP, "W_z": "score"})
    renames = layouts.parse({"renames": [{"prefix": "W_", "to": "x_"}, {"prefix": "nope", "to": "y"}]}, "map.json")
    with pytest.raises(ValueError, match=r"pairs no source layer with renames\[1\] \(prefix 'nope' -> 'y'\)"):
        convert(source, target, key_map=renames)
    assert json.dumps(SETTLING_KEY_MAP)  # the settling map is plain JSON, as --key-map reads it


class DictHeldScorer(keras.Model):
    """The Keras scorer holding its layers in a dict first, under other keys (as a config dict would), then as
    the attributes torch's twin names."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        layers = {"key": keras.layers.Dense(UNITS, use_bias=False), "query": keras.layers.Dense(UNITS, use_bias=False),
                  "score": keras.layers.Dense(1, use_bias=False)}  # fmt: skip
        self.hparams = layers
        self.W_q, self.W_k, self.w_v = layers["query"], layers["key"], layers["score"]

    def call(self, queries, keys):
        features = keras.ops.tanh(self.W_q(queries)[:, :, None] + self.W_k(keys)[:, None])
        return keras.ops.softmax(keras.ops.squeeze(self.w_v(features), -1), axis=-1) @ keys


def test_a_layer_held_twice_is_named_by_its_shortest_path_and_without_it_the_pairing_is_a_guess(monkeypatch):
    """Named by its shortest path, each layer pairs by name. Negative control: named by the first path a walk
    meets (`hparams.key`), W_q and W_k (same kind and shape) pair in order, crosswise: refused without inputs."""
    torch.manual_seed(0)
    source, target = TorchScorer().double(), keras_side.build(DictHeldScorer, "float64", SCORER_INPUTS)
    assert {pair.how for pair in convert(source, target).pairs} == {"name"}

    def first_path(leaves):
        kept = {}
        for leaf in leaves:
            kept.setdefault(tuple(id(handle) for handle in leaf.handles), leaf)
        return list(kept.values())

    monkeypatch.setattr(keras_side, "shortest_paths", first_path)
    with pytest.raises(
        ValueError, match=r"2 pairs were made by order .*W_q \(Linear\) -> hparams.key; W_k \(Linear\) -> hparams.query"
    ):
        convert(source, target)
