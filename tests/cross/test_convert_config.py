"""`convert` compares each pair's configuration (shared.port.pairing.OPTIONS), not only its kind and shapes: the
two silent wrong results of issue 59 as their users write them (a Keras `Attention(score_mode="dot", use_scale=True)`
against the torch twin computing the concat score; a Keras `GRU(go_backwards=True)` against a forward `nn.GRU`),
refused both ways naming the pair, the option and both values; every kind's options stated alike by both stacks;
matching configurations still port equal. Negative control: the comparison as it was (the walks stating only the
options compared before) says "ported" and the outputs differ."""

from __future__ import annotations

import re
import warnings

import keras
import keras_hub
import numpy as np
import pytest
import torch
from torch import nn

import tf_impl.conversion as keras_side
import torch_impl.conversion as torch_side
from shared.cli import main as rosetta
from shared.core.canonical import RULES
from shared.port.conversion import convert, verify
from shared.port.pairing import OPTIONS
from torch_impl import keras_layers

FEATURES, HIDDEN, VOCAB, CLASSES = 4, 6, 20, 3
RNG = np.random.default_rng(0)
QUERY_VALUE = (RNG.normal(size=(2, 3, FEATURES)), RNG.normal(size=(2, 5, FEATURES)))
TOKENS = RNG.integers(1, VOCAB, (3, 7))
# what the walks compared before issue 59: the negative control's comparison
COMPARED_BEFORE = {"eps", "normalized axes", "heads", "stride", "dilation", "groups", "padding", "activation",
                   "recurrent activation", "norm first"}  # fmt: skip


def _compare_as_before(monkeypatch) -> None:
    """Both walks state only the options compared before (no score mode, scale, direction, ...)."""
    for side in (torch_side, keras_side):

        def stripped(model, rules=None, walk=side.leaves):
            found = walk(model, rules)
            for leaf in found:
                leaf.facts = {name: value for name, value in leaf.facts.items() if name in COMPARED_BEFORE}
            return found

        monkeypatch.setattr(side, "leaves", stripped)


def _worst(check) -> float:
    return max(component.max_abs for component in check.components)


def _float64(factory, inputs):
    keras.utils.set_random_seed(1)
    return keras_side.build(factory, "float64", inputs)


# ---- the two reported cases, as their users write them ----


class TorchScorer(nn.Module):
    """The Keras docs' query-value attention in PyTorch, through the twin of Keras's Attention."""

    def __init__(self, **options):
        super().__init__()
        self.attention = keras_layers.Attention(**options)
        self.dense = nn.Linear(FEATURES, 2)

    def forward(self, query, value):
        return self.dense(self.attention([query, value]).mean(1))  # [B, 2]


def keras_scorer(**options) -> keras.Model:
    query, value = keras.Input((None, FEATURES)), keras.Input((None, FEATURES))
    attended = keras.layers.Attention(name="attention", **options)([query, value])  # [B, Tq, D]
    return keras.Model([query, value], keras.layers.Dense(2, name="dense")(keras.layers.GlobalAveragePooling1D()(attended)))


def _scorers(torch_options: dict, keras_options: dict):
    torch.manual_seed(0)
    keras_model = _float64(lambda: keras_scorer(**keras_options), QUERY_VALUE)
    keras_model.get_layer("attention").scale.assign(1.7)  # drawn away from its start, as after training
    return TorchScorer(**torch_options).double(), keras_model


def test_a_dot_score_against_the_twin_of_the_concat_score_is_refused_both_ways():
    torch_model, keras_model = _scorers({"score_mode": "concat"}, {"score_mode": "dot", "use_scale": True})
    for source, target, values in ((keras_model, torch_model, "'dot' != 'concat'"),
                                   (torch_model, keras_model, "'concat' != 'dot'")):  # fmt: skip
        with pytest.raises(ValueError, match=r"configuration differs: attention\.\w+ -> attention\.\w+: score mode " + values):
            convert(source, target)


def test_the_concat_score_paired_as_before_is_ported_and_computes_another_function(monkeypatch):
    """Negative control: paired by kind and shape with the options unseen, `convert` succeeds; the outputs differ."""
    torch_model, keras_model = _scorers({"score_mode": "concat"}, {"score_mode": "dot", "use_scale": True})
    _compare_as_before(monkeypatch)
    done = convert(keras_model, torch_model)
    assert [(pair.source.path, pair.target.path, pair.how) for pair in done.pairs] == [
        ("attention.scale", "attention.concat_score_weight", "kind and shape"), ("dense", "dense", "name")]  # fmt: skip
    assert _worst(verify(keras_model, torch_model, QUERY_VALUE)) > 1e-2


def test_the_same_score_still_ports_equal_both_ways():
    for source in ("tf", "torch"):
        torch_model, keras_model = _scorers({"use_scale": True}, {"score_mode": "dot", "use_scale": True})
        src, dst = (keras_model, torch_model) if source == "tf" else (torch_model, keras_model)
        assert {pair.how for pair in convert(src, dst).pairs} == {"name"}
        assert _worst(verify(src, dst, QUERY_VALUE)) <= 1e-12


class TorchClassifier(nn.Module):
    """A GRU classifier as a PyTorch user writes it: the last state of a forward GRU (`flip`: reading the
    tokens from the last, as Keras's go_backwards)."""

    def __init__(self, flip: bool = False):
        super().__init__()
        self.flip = flip
        self.embedding = nn.Embedding(VOCAB, FEATURES)
        self.gru = nn.GRU(FEATURES, HIDDEN, batch_first=True)
        self.dense = nn.Linear(HIDDEN, CLASSES)

    def forward(self, tokens):
        x = self.embedding(tokens)  # [B, S, E]
        return self.dense(self.gru(x.flip(1) if self.flip else x)[1][0])  # [B, C]


def keras_classifier(go_backwards: bool = True) -> keras.Model:
    gru = keras.layers.GRU(HIDDEN, go_backwards=go_backwards, name="gru")
    layers = [keras.Input((None,), dtype="int32"), keras.layers.Embedding(VOCAB, FEATURES, name="embedding"), gru,
              keras.layers.Dense(CLASSES, name="dense")]  # fmt: skip
    return keras.Sequential(layers)


def _classifiers(flip: bool = False, go_backwards: bool = True):
    torch.manual_seed(0)
    return TorchClassifier(flip).double(), _float64(lambda: keras_classifier(go_backwards), TOKENS)


def test_a_backwards_gru_against_a_forward_nn_gru_is_refused_both_ways_with_or_without_inputs():
    torch_model, keras_model = _classifiers()
    for source, target, values in ((keras_model, torch_model, "True != False"), (torch_model, keras_model, "False != True")):
        before = _weights(target)
        with pytest.raises(ValueError, match=rf"gru -> gru: go backwards {values}\): pass inputs="):
            convert(source, target)
        with pytest.raises(ValueError, match=rf"go backwards {values}\), and with them the models' outputs differ on the inputs"):
            convert(source, target, inputs=TOKENS)
        assert all(np.array_equal(a, b) for a, b in zip(before, _weights(target), strict=True))  # the target keeps its weights


def _weights(model) -> list[np.ndarray]:
    if isinstance(model, nn.Module):
        return [param.detach().numpy().copy() for param in model.parameters()]
    return [np.array(weight) for weight in model.get_weights()]


def test_the_backwards_gru_paired_as_before_is_ported_and_computes_another_function(monkeypatch):
    """Negative control: with the direction unseen, `convert` pairs every layer by name; the outputs differ."""
    torch_model, keras_model = _classifiers()
    _compare_as_before(monkeypatch)
    assert {pair.how for pair in convert(keras_model, torch_model).pairs} == {"name"}
    assert _worst(verify(keras_model, torch_model, TOKENS)) > 1e-3  # the float64 bound is 1e-12


def test_a_model_reversing_the_tokens_itself_is_settled_by_running_both_and_the_same_direction_ports():
    """Positive controls: a torch model flipping its input computes Keras's go_backwards (settled on the inputs,
    and said); two forward GRUs port without inputs."""
    torch_model, keras_model = _classifiers(flip=True)
    done = convert(keras_model, torch_model, inputs=TOKENS)
    assert "go backwards True != False); running both models on the inputs settled them" in done.render()
    assert _worst(verify(keras_model, torch_model, TOKENS)) <= 1e-12
    torch_model, keras_model = _classifiers(go_backwards=False)
    convert(torch_model, keras_model)
    assert _worst(verify(torch_model, keras_model, TOKENS)) <= 1e-12


def test_the_cli_refuses_the_backwards_gru_in_one_line_naming_the_option_and_writes_nothing(tmp_path, capsys):
    np.savez(tmp_path / "batch.npz", TOKENS)
    torch.save(TorchClassifier().state_dict(), tmp_path / "m.pt")
    flags = ["--torch-model", "tests.cross.test_convert_config:TorchClassifier", "--keras-model",
             "tests.cross.test_convert_config:keras_classifier", "--inputs", str(tmp_path / "batch.npz")]  # fmt: skip
    assert rosetta(["port", str(tmp_path / "m.pt"), str(tmp_path / "out.weights.h5"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "gru -> gru: go backwards False != True" in err and "outputs differ" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch.npz", "m.pt"]


# ---- every kind's options: stated alike by both stacks, a difference refused both ways ----


def _functional(layer, shape: tuple, dtype: str = "float32", call=None) -> keras.Model:
    """`layer` in a functional model over one input (`call(layer, x)`: how it is called)."""
    x = keras.Input(shape, dtype=dtype)
    return keras.Model(x, (call or (lambda lay, y: lay(y)))(layer, x))


def _sequence(layer):
    return _functional(layer, (5, FEATURES))


def _attending(layer):
    return _functional(layer, (5, FEATURES), call=lambda lay, x: lay([x, x]))


def _self_attending(layer):
    return _functional(layer, (5, FEATURES), call=lambda lay, x: lay(x, x))


K = keras.layers
MATCHING = {  # one layer of each kind and form as each framework writes it, configured alike
    "linear": (lambda: nn.Linear(FEATURES, 4), lambda: _functional(K.Dense(4, name="layer"), (FEATURES,))),
    "embedding": (lambda: nn.Embedding(VOCAB, 4), lambda: _functional(K.Embedding(VOCAB, 4, name="layer"), (5,), "int32")),
    "rnn": (lambda: nn.RNN(FEATURES, 4, batch_first=True), lambda: _sequence(K.SimpleRNN(4, name="layer"))),
    "gru": (lambda: nn.GRU(FEATURES, 4, batch_first=True), lambda: _sequence(K.GRU(4, name="layer"))),
    "bidirectional gru": (lambda: nn.GRU(FEATURES, 4, bidirectional=True),
                          lambda: _sequence(K.Bidirectional(K.GRU(4), name="layer"))),
    "bidirectional rnn": (lambda: nn.RNN(FEATURES, 4, bidirectional=True),
                          lambda: _sequence(K.Bidirectional(K.SimpleRNN(4), name="layer"))),
    "lstm": (lambda: nn.LSTM(FEATURES, 4), lambda: _sequence(K.LSTM(4, name="layer"))),
    "bidirectional lstm": (lambda: nn.LSTM(FEATURES, 4, bidirectional=True),
                           lambda: _sequence(K.Bidirectional(K.LSTM(4), name="layer"))),
    "layer_norm": (lambda: nn.LayerNorm(FEATURES, eps=1e-3), lambda: _sequence(K.LayerNormalization(name="layer"))),
    "conv1d": (lambda: nn.Conv1d(FEATURES, 4, 3), lambda: _sequence(K.Conv1D(4, 3, name="layer"))),
    "multi_head_attention": (lambda: nn.MultiheadAttention(FEATURES, 2, batch_first=True),
                             lambda: _self_attending(K.MultiHeadAttention(2, key_dim=2, name="layer"))),
    "parameter": (lambda: keras_layers.Attention(use_scale=True, score_mode="concat"),
                  lambda: _attending(K.Attention(use_scale=True, score_mode="concat", name="layer"))),
}  # fmt: skip
# the options no single layer above states: a Transformer block's, on its self-attention (tests/cross/test_transformers.py)
BLOCK_OPTIONS = {("multi_head_attention", "norm first"), ("multi_head_attention", "activation")}


def _leaves(torch_layer: nn.Module, keras_model: keras.Model):
    return torch_side.leaves(nn.ModuleDict({"layer": torch_layer})), keras_side.leaves(keras_model)


def test_the_table_lists_every_kind_of_leaf_rule_and_both_stacks_state_each_layers_options_alike():
    assert set(OPTIONS) == {rule.kind for rule in RULES.values()}
    stated = set()
    for make_torch, make_keras in MATCHING.values():
        torch_leaves, keras_leaves = _leaves(make_torch(), make_keras())
        for torch_leaf, keras_leaf in zip(torch_leaves, keras_leaves, strict=True):
            assert torch_leaf.facts == keras_leaf.facts, (torch_leaf.describe(), keras_leaf.describe())
            stated |= {(torch_leaf.kind, name) for name in torch_leaf.facts}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the stock LSTM's summed bias (tests/cross/test_convert.py)
            convert(nn.ModuleDict({"layer": make_torch()}), make_keras())  # alike: they pair
    assert stated | BLOCK_OPTIONS == {(kind, name) for kind, names in OPTIONS.items() for name in names}


def test_a_walk_stating_an_option_the_table_does_not_list_is_caught(monkeypatch):
    """Negative control of the table: an option a stack states outside it is an error, never compared silently."""
    monkeypatch.setattr(torch_side, "_simple_facts", lambda module, kind: {"colour": "blue"})
    with pytest.raises(ValueError, match=r"options no entry of shared.port.pairing.OPTIONS lists.*: layer \(Linear\): colour"):
        convert(nn.ModuleDict({"layer": nn.Linear(FEATURES, 4)}), MATCHING["linear"][1]())


DIFFERING = [  # (torch layer, Keras model, the option, torch's value, Keras's value)
    (lambda: nn.Linear(FEATURES, 4, bias=False), MATCHING["linear"][1], "bias", False, True),
    (lambda: nn.Embedding(VOCAB, 4, max_norm=1.0), MATCHING["embedding"][1], "max norm", 1.0, None),
    (lambda: nn.RNN(FEATURES, 4, nonlinearity="relu", batch_first=True), MATCHING["rnn"][1], "activation", "relu", "tanh"),
    (MATCHING["gru"][0], lambda: _sequence(K.GRU(4, recurrent_activation="hard_sigmoid", name="layer")),
     "recurrent activation", "sigmoid", "hard_sigmoid"),
    (lambda: nn.LSTM(FEATURES, 4, bias=False), MATCHING["lstm"][1], "bias", False, True),
    (lambda: nn.GRU(FEATURES, 4, bidirectional=True), MATCHING["gru"][1], "bidirectional", True, False),
    (MATCHING["gru"][0], lambda: _sequence(K.GRU(4, go_backwards=True, name="layer")), "go backwards", False, True),
    (MATCHING["bidirectional gru"][0], lambda: _sequence(K.Bidirectional(K.GRU(4), merge_mode="ave", name="layer")),
     "merge mode", "concat", "ave"),
    (lambda: nn.LayerNorm(FEATURES), MATCHING["layer_norm"][1], "eps", 1e-5, 1e-3),
    (lambda: nn.LayerNorm(5, eps=1e-3), lambda: _sequence(K.LayerNormalization(axis=1, name="layer")),
     "normalized axes", "the last 1", "axis [1] of rank 3"),
    (MATCHING["layer_norm"][0], lambda: _sequence(K.LayerNormalization(rms_scaling=True, name="layer")),
     "rms scaling", False, True),
    (lambda: nn.Conv1d(FEATURES, 4, 3, bias=False), MATCHING["conv1d"][1], "bias", False, True),
    (lambda: nn.Conv1d(FEATURES, 4, 3, dilation=2), MATCHING["conv1d"][1], "dilation", 2, 1),
    (lambda: nn.MultiheadAttention(FEATURES, 2, bias=False, batch_first=True), MATCHING["multi_head_attention"][1],
     "bias", False, True),
    (lambda: nn.MultiheadAttention(FEATURES, 4, batch_first=True),
     lambda: _self_attending(K.MultiHeadAttention(1, 4, name="layer")), "heads", 4, 1),
    (lambda: keras_layers.Attention(score_mode="concat"), lambda: _attending(K.Attention(use_scale=True, name="layer")),
     "score mode", "concat", "dot"),
    (lambda: keras_layers.Attention(score_mode="concat"),
     lambda: _attending(K.Attention(use_scale=True, score_mode="concat", name="layer")), "use scale", False, True),
    (lambda: nn.Embedding(5, FEATURES), lambda: _sequence(keras_hub.layers.PositionEmbedding(5, name="layer")),
     "lookup", "ids", "positions"),
]  # fmt: skip


@pytest.mark.parametrize(("make_torch", "make_keras", "option", "torch_value", "keras_value"), DIFFERING,
                         ids=[f"{type(case[0]()).__name__} {case[2]}" for case in DIFFERING])  # fmt: skip
def test_a_differing_option_of_any_kind_is_refused_both_ways_naming_the_pair_the_option_and_both_values(
    make_torch, make_keras, option, torch_value, keras_value
):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rms_scaling's deprecation
        torch_model, keras_model = nn.ModuleDict({"layer": make_torch()}), make_keras()
    for source, target, (first, second) in ((torch_model, keras_model, (torch_value, keras_value)),
                                             (keras_model, torch_model, (keras_value, torch_value))):  # fmt: skip
        named = rf"layer(\.\w+)? -> layer(\.\w+)?: {re.escape(f'{option} {first!r} != {second!r}')}"
        with pytest.raises(ValueError, match=named):
            convert(source, target)


# ---- a torch position table against keras-hub's PositionEmbedding (issue 61: refused, then a key map misread) ----


class TorchTokensAndPositions(nn.Module):
    """Token and position embeddings as torch users write them: a position table looked up at `arange(length)`."""

    def __init__(self, positions_by_ids: bool = False):
        super().__init__()
        self.tok, self.pos, self.positions_by_ids = nn.Embedding(VOCAB, FEATURES), nn.Embedding(7, FEATURES), positions_by_ids
        self.dense = nn.Linear(FEATURES, CLASSES)

    def forward(self, ids):
        positions = ids % 7 if self.positions_by_ids else torch.arange(ids.shape[1])  # [B, T] or [T]
        return self.dense(self.tok(ids) + self.pos(positions))  # [B, T, C]


def keras_tokens_and_positions() -> keras.Model:
    ids = keras.Input((7,), dtype="int32")
    embedded = keras_hub.layers.TokenAndPositionEmbedding(VOCAB, 7, FEATURES, name="embedding")(ids)  # [B, T, D]
    return keras.Model(ids, keras.layers.Dense(CLASSES, name="dense")(embedded))


def test_a_torch_position_table_ports_to_kerass_position_embedding_settled_by_running_both():
    torch.manual_seed(0)
    for source, target in ((TorchTokensAndPositions().double(), _float64(keras_tokens_and_positions, TOKENS)),
                           (_float64(keras_tokens_and_positions, TOKENS), TorchTokensAndPositions().double())):  # fmt: skip
        with pytest.raises(ValueError, match=r"lookup '(ids|positions)' != '(positions|ids)'\): pass inputs="):
            convert(source, target)
        done = convert(source, target, inputs=TOKENS)
        assert "running both models on the inputs settled them" in done.render()
        assert _worst(verify(source, target, TOKENS)) <= 1e-12


def test_negative_control_a_position_table_looked_up_by_token_ids_is_refused_on_the_inputs():
    torch.manual_seed(0)
    source, target = TorchTokensAndPositions(positions_by_ids=True).double(), _float64(keras_tokens_and_positions, TOKENS)
    with pytest.raises(ValueError, match=r"lookup 'ids' != 'positions'\), and with them the models' outputs differ"):
        convert(source, target, inputs=TOKENS)


def test_a_key_map_pairing_two_kinds_says_the_kinds_differ_not_equal_shapes():
    """The misleading refusal of issue 61 ("weight (8, 16) != value (8, 16)"): a pair of two kinds names them."""
    torch.manual_seed(0)
    source, target = nn.ModuleDict({"layer": nn.Embedding(7, FEATURES)}), _attending(K.Attention(use_scale=True, name="layer"))
    with pytest.raises(ValueError, match="no rule converts one into the other") as refused:
        convert(source, target, key_map={"layer": "layer.scale"})
    assert "mis-shaped pairs: layer (Embedding) -> layer.scale" in str(refused.value)
