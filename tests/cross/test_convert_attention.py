"""MultiHeadAttention as the frameworks ship it (shared.core.canonical's `multi_head_attention` rule): torch's
`nn.MultiheadAttention` (packed `in_proj_weight`, or separate q/k/v weights when kdim/vdim differ) <->
`keras.layers.MultiHeadAttention`, in user-written models (tests/zoo), both ways, float64 and float32, and
the traps, each with its negative control: the q/k/v block order, head splitting, mask polarity, heads
averaged by torch, Keras's float64 scale, and what cannot map refused saying why."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

import tf_impl.conversion as keras_side
import torch_impl.conversion as torch_side
from shared.core import canonical
from shared.core.canonical import RULES, LeafRule
from shared.port import pairing
from shared.port.conversion import convert, verify
from tests.zoo import keras_models, torch_models
from tests.zoo.torch_models import HEADS, HIDDEN, MODEL_DIM, VOCAB
from tf_impl.keras_compat import backends
from tf_impl.keras_compat.backends import float64_policy

RNG = np.random.default_rng(0)
_np = keras.ops.convert_to_numpy  # a Keras tensor of any backend as numpy
TOKENS = RNG.integers(1, VOCAB, (3, 7))
INPUTS = {"self_attention_classifier": TOKENS, "cross_attention_decoder": (RNG.normal(size=(3, 6, HIDDEN)) * 2, TOKENS[:, :4])}
BOUNDS = {"float64": 1e-12, "float32": 1e-5}  # max |diff| of outputs
SIDES = {"torch": (torch_side, torch_models), "tf": (keras_side, keras_models)}


def _build(side: str, name: str, dtype: str, seed: int):
    torch.manual_seed(seed)
    keras.utils.set_random_seed(seed)
    stack, models = SIDES[side]
    return stack.build(getattr(models, name), dtype, INPUTS[name])


def _pair(name: str):
    """(torch model, Keras model holding its weights), float64."""
    torch_model, keras_model = _build("torch", name, "float64", 1), _build("tf", name, "float64", 2)
    convert(torch_model, keras_model)
    return torch_model, keras_model


def _worst(check) -> float:
    return max(component.max_abs for component in check.components)


def _ported(name: str, source: str, dtype: str = "float64", rules=None):
    target = "tf" if source == "torch" else "torch"
    src, dst = _build(source, name, dtype, 1), _build(target, name, dtype, 2)
    convert(src, dst, rules=rules)
    return verify(src, dst, INPUTS[name])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("source", ["torch", "tf"])
@pytest.mark.parametrize("name", list(INPUTS))
def test_multi_head_attention_ports_both_ways(name, source, dtype):
    """Self-attention (packed in_proj) and cross-attention over another width (q/k/v weights apart); the
    decoder's second output is the attention weights, averaged over the heads on both sides."""
    check = _ported(name, source, dtype)
    assert check.ok and _worst(check) <= BOUNDS[dtype], check.components


def test_torchs_packed_and_separate_weights_come_back_bit_for_bit():
    for name, packed in (("self_attention_classifier", True), ("cross_attention_decoder", False)):
        torch_model, keras_model = _build("torch", name, "float32", 1), _build("tf", name, "float32", 2)
        before = {key: value.clone() for key, value in torch_model.state_dict().items()}
        convert(torch_model, keras_model)
        again = _build("torch", name, "float32", 3)
        convert(keras_model, again)
        assert ("attention.in_proj_weight" in before or "cross.in_proj_weight" in before) is packed
        assert all(torch.equal(again.state_dict()[key], value) for key, value in before.items())


# ---- the traps ----


def _naive(to_keras=None, from_keras=None) -> dict:
    rule = RULES["multi_head_attention"]
    return {
        **RULES,
        "multi_head_attention": LeafRule("multi_head_attention", to_keras or rule.to_keras, from_keras or rule.from_keras),
    }


def test_the_qkv_block_order_swapped_is_caught():
    def key_first(canon):  # reads in_proj_weight as (k, q, v)
        keras_arrays = RULES["multi_head_attention"].to_keras(canon)
        keras_arrays["query_kernel"], keras_arrays["key_kernel"] = keras_arrays["key_kernel"], keras_arrays["query_kernel"]
        return keras_arrays

    check = _ported("self_attention_classifier", "torch", rules=_naive(to_keras=key_first))
    assert not check.ok and _worst(check) > 1e-4


def test_heads_split_dim_major_instead_of_head_major_is_caught():
    def dim_major(canon):  # a [in, H*D] kernel read as [in, D, H]
        keras_arrays = RULES["multi_head_attention"].to_keras(canon)
        for name in ("query_kernel", "key_kernel", "value_kernel"):
            kernel = keras_arrays[name]
            keras_arrays[name] = kernel.reshape(kernel.shape[0], -1, HEADS).transpose(0, 2, 1).reshape(kernel.shape)
        return keras_arrays

    check = _ported("self_attention_classifier", "torch", rules=_naive(to_keras=dim_major))
    assert not check.ok and _worst(check) > 1e-4


def test_kerass_float64_scale_is_made_exact_and_without_it_the_proof_fails(monkeypatch):
    """On TensorFlow, Keras casts its Python-float 1/sqrt(key_dim) through a float32 tensor
    (tensorflow/tensorflow#35938): float64 attention then differs from torch's by ~1e-9. With the scale made
    exact, 1e-16. Keras's JAX (x64) and torch backends cast a Python float exactly: no trap there."""
    assert _worst(_ported("cross_attention_decoder", "torch")) <= 1e-12
    monkeypatch.setattr(keras_side, "exact_float64", lambda model: 0)
    worst = _worst(_ported("cross_attention_decoder", "torch"))
    if backends.name() == "tensorflow":
        assert 1e-12 < worst < 1e-6, worst  # the trap: float32 rounding of the scale in a float64 model
    else:
        assert worst <= 1e-12, worst
    with float64_policy():
        layer = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=MODEL_DIM // HEADS)
        layer(np.zeros((1, 2, MODEL_DIM)), np.zeros((1, 3, MODEL_DIM)))
    assert backends.exact_float64(layer) == 1 and layer._inverse_sqrt_key_dim == 1 / np.sqrt(np.float64(5))


def test_mask_polarity_torch_ignores_where_true_keras_attends_where_true():
    """torch's key_padding_mask (True = ignore) is Keras's attention_mask inverted (True = attend), broadcast
    over the query rows; the same array given to both (the naive port of the call) differs."""
    torch_model, keras_model = (
        _build("torch", "cross_attention_decoder", "float64", 1),
        _build("tf", "cross_attention_decoder", "float64", 2),
    )
    convert(torch_model, keras_model)
    encoder_outputs, tokens = INPUTS["cross_attention_decoder"]
    padded = np.arange(encoder_outputs.shape[1]) >= np.array([[6], [4], [2]])  # [B, S]: True on pads
    query = torch_model.embedding(torch.as_tensor(tokens))
    memory = torch.as_tensor(encoder_outputs)
    expected = torch_model.cross(query, memory, memory, key_padding_mask=torch.as_tensor(padded))[0].detach().numpy()
    attend = np.broadcast_to(~padded[:, None, :], (3, tokens.shape[1], padded.shape[1]))  # [B, T, S]
    keras_query = keras_model.embedding(tokens)
    ported = _np(keras_model.cross(keras_query, encoder_outputs, attention_mask=attend))
    assert np.abs(ported - expected).max() <= 1e-12
    naive = keras_model.cross(keras_query, encoder_outputs, attention_mask=np.broadcast_to(padded[:, None, :], attend.shape))
    assert np.abs(_np(naive) - expected).max() > 1e-3


def test_a_fully_masked_query_row_is_nan_in_torch_and_zeros_in_keras():
    """The one place no mapping of weights or masks makes the two agree: every key masked. torch's softmax over
    nothing is NaN; Keras 3.15's masked Softmax zeroes the masked positions after the softmax (before, it gave a
    uniform row): its output row is then the output projection's bias alone."""
    torch_model, keras_model = _pair("cross_attention_decoder")
    encoder_outputs, tokens = INPUTS["cross_attention_decoder"]
    memory = torch.as_tensor(encoder_outputs)
    _, weights = torch_model.cross(torch_model.embedding(torch.as_tensor(tokens)), memory, memory,
                                   key_padding_mask=torch.ones(memory.shape[:2], dtype=torch.bool))  # fmt: skip
    assert torch.isnan(weights).all()
    nothing = np.zeros((3, tokens.shape[1], encoder_outputs.shape[1]), bool)
    _, scores = keras_model.cross(keras_model.embedding(tokens), encoder_outputs, return_attention_scores=True,
                                  attention_mask=nothing)  # fmt: skip
    assert not np.isnan(_np(scores)).any() and not _np(scores).any()


def test_kerass_per_head_scores_are_torchs_weights_only_averaged():
    """torch averages its attention weights over the heads (average_attn_weights=True); one Keras head alone
    is not them (the naive comparison)."""
    torch_model, keras_model = (
        _build("torch", "cross_attention_decoder", "float64", 1),
        _build("tf", "cross_attention_decoder", "float64", 2),
    )
    convert(torch_model, keras_model)
    encoder_outputs, tokens = INPUTS["cross_attention_decoder"]
    _, weights = torch_model(torch.as_tensor(encoder_outputs), torch.as_tensor(tokens))
    _, scores = keras_model.cross(keras_model.embedding(tokens), encoder_outputs, return_attention_scores=True)  # [B, H, T, S]
    assert np.abs(_np(scores).mean(axis=1) - weights.detach().numpy()).max() <= 1e-12
    assert np.abs(_np(scores)[:, 0] - weights.detach().numpy()).max() > 1e-3


# ---- what cannot map, refused saying why ----


@pytest.mark.parametrize(
    ("options", "message"),
    [({"add_bias_kv": True}, "add_bias_kv=True"), ({"add_zero_attn": True}, "add_zero_attn=True")],
)
def test_torch_options_keras_has_no_weights_for_are_refused(options, message):
    model = torch.nn.Sequential(torch.nn.MultiheadAttention(MODEL_DIM, HEADS, **options))
    with pytest.raises(ValueError, match=rf"0: nn.MultiheadAttention\({message}\)"):
        convert(model, _build("tf", "self_attention_classifier", "float32", 0))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key_dim": 4}, r"num_heads x key_dim = 3 x 4 is not the query's width 15"),
        ({"key_dim": 5, "value_dim": 4}, r"value_dim 4 is not key_dim 5"),
        ({"key_dim": 5, "output_shape": 7}, r"output_shape \(7,\) is not the query's width 15"),
        ({"key_dim": 5, "sliding_window": 2}, r"sliding_window 2: torch's attention sees every key"),
        ({"key_dim": 5, "use_gate": True}, r"use_gate: torch's attention has no output gate"),
    ],
)
def test_keras_options_torch_cannot_compute_are_refused(options, message):
    layer = keras.layers.MultiHeadAttention(num_heads=HEADS, **options)
    layer.build((1, 2, MODEL_DIM), (1, 3, MODEL_DIM))  # built, not called: JAX's fused kernel cannot run some of these
    with pytest.raises(ValueError, match=message):  # refused against nn.MultiheadAttention (else read as projections)
        pairing.pair_leaves(torch_side.leaves(torch.nn.MultiheadAttention(MODEL_DIM, HEADS)), keras_side.leaves(layer))


def test_different_head_counts_of_the_same_shapes_are_refused():
    """15 = 3 x 5 = 5 x 3: every weight has the same shape, the function differs; the heads are a fact."""
    torch_model = torch.nn.Sequential(torch.nn.MultiheadAttention(MODEL_DIM, 5, batch_first=True))
    layer = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=MODEL_DIM // HEADS)
    layer(np.zeros((1, 2, MODEL_DIM), np.float32), np.zeros((1, 3, MODEL_DIM), np.float32))
    with pytest.raises(ValueError, match=r"configuration differs: 0 -> .*heads 5 != 3"):
        convert(torch_model, layer)
    assert canonical.RULES["multi_head_attention"].kind == "multi_head_attention"


# ---- training: 200 steps of torch's Adam and clipping in both stacks, from the ported weights ----

STEPS, LR, CLIP = 200, 1e-2, 0.5
LABELS = np.random.default_rng(5).integers(0, 2, len(TOKENS))


def _torch_curve(model, optimizer=None) -> list[float]:
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=LR)
    curve = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.as_tensor(TOKENS)), torch.as_tensor(LABELS))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        curve.append(loss.item())
    return curve


def _keras_curve(model, optimizer) -> list[float]:
    """STEPS updates in a user's loop on any Keras backend (backends.value_and_gradients: a GradientTape on
    TensorFlow, jax.value_and_grad, torch's autograd)."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype="float64")  # not floatx: float32
    variables, curve = model.trainable_variables, []

    def compute_loss():  # one function for every step: JAX compiles it once
        return loss_fn(LABELS, model(TOKENS, training=True))

    for _ in range(STEPS):
        loss, gradients = backends.value_and_gradients(compute_loss, variables)
        optimizer.apply_gradients(zip(gradients, variables, strict=True))
        curve.append(float(_np(loss)))
    return curve


def test_200_training_steps_of_torchs_adam_follow_one_curve_in_both_stacks():
    """The self-attention classifier ported torch -> Keras, then 200 steps of Adam with torch's clipping in
    each (TorchAdam in Keras): one loss curve in float64, and Adam's moments of the attention map by its leaf
    rule; stock Keras Adam (epsilon hat) leaves the curve (control)."""
    from tf_impl.keras_compat.optim import TorchAdam

    torch_model, keras_model = _pair("self_attention_classifier")
    stock = _build("tf", "self_attention_classifier", "float64", 2)
    convert(torch_model, stock)
    torch_adam, keras_adam = torch.optim.Adam(torch_model.parameters(), lr=LR), TorchAdam(LR, clip_grad_norm=CLIP)
    expected = _torch_curve(torch_model, torch_adam)
    curve = _keras_curve(keras_model, keras_adam)
    assert np.abs(np.array(curve) - expected).max() <= 1e-9
    assert expected[-1] < 0.5 * expected[0]  # it did train
    assert verify(torch_model, keras_model, TOKENS).components[0].max_abs <= 1e-9  # the trained weights agree
    # Adam's moments of the attention, torch's through the same leaf rule, are Keras's slots
    layer = next(layer for layer in keras_model.layers if isinstance(layer, keras.layers.MultiHeadAttention))
    for moment, slots in (("exp_avg", keras_adam._momentums), ("exp_avg_sq", keras_adam._velocities)):
        canon = {name: torch_adam.state[param][moment].numpy() for name, param in torch_model.attention.named_parameters()}
        mapped = RULES["multi_head_attention"].to_keras(canon)
        for name, variable in keras_side.attention_variables(layer).items():
            slot = _np(slots[keras_adam._get_variable_index(variable)])
            assert np.abs(np.reshape(mapped[name], variable.shape) - slot).max() <= 1e-9 * max(1.0, np.abs(slot).max()), name
    drifted = _keras_curve(stock, keras.optimizers.Adam(LR, global_clipnorm=CLIP))
    assert np.abs(np.array(drifted) - expected).max() > 1e-6


# ---- the TF tutorial as it is today (2022 rewrite: MultiHeadAttention + Add + LayerNormalization) ----


def _nmt_2022(side: str, dtype: str, eps: float | None = None):
    from tests.tutorials import tf_nmt_2022
    from tests.zoo import tf_nmt_2022_torch

    inputs = tuple(np.asarray(array) for array in tf_nmt_2022.example_batch())  # no padding: see below
    torch.manual_seed(1)
    keras.utils.set_random_seed(2)
    if side == "tf":
        return keras_side.build(tf_nmt_2022.translator, dtype, inputs), inputs  # its call takes (context, target_in)
    model = torch_side.build(tf_nmt_2022_torch.translator, dtype, inputs)
    if eps is not None:
        model.decoder.attention.layernorm.eps = eps
    return model, inputs


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("source", ["torch", "tf"])
def test_the_2022_tf_tutorials_translator_ports_both_ways_with_its_pytorch_twin(source, dtype):
    """The tutorial's own classes (tests/tutorials/tf_nmt_2022.py) and a PyTorch twin written with
    nn.MultiheadAttention: every layer pairs by name; logits and the kept attention weights agree. The twin sums
    its bidirectional GRU's halves itself (Keras's merge_mode='sum'), which running both models settles."""
    keras_model, inputs = _nmt_2022("tf", dtype)
    torch_model, _ = _nmt_2022("torch", dtype)
    src, dst = (torch_model, keras_model) if source == "torch" else (keras_model, torch_model)
    done = convert(src, dst, inputs=inputs)
    assert {pair.how for pair in done.pairs} == {"name"} and len(done.pairs) == 7
    assert "merge mode 'concat' != 'sum'" in done.render() or "merge mode 'sum' != 'concat'" in done.render()
    torch_logits = torch_model(*(torch.as_tensor(array) for array in inputs)).detach().numpy()
    keras_logits = np.asarray(keras_model(inputs))
    assert np.abs(torch_logits - keras_logits).max() <= BOUNDS[dtype]
    attention = torch_model.decoder.attention.last_attention_weights.detach().numpy()
    assert np.abs(attention - np.asarray(keras_model.decoder.last_attention_weights)).max() <= BOUNDS[dtype]


def test_the_twin_with_torchs_default_layer_norm_epsilon_is_refused():
    """Negative control: nn.LayerNorm's 1e-5 is not Keras's LayerNormalization default 1e-3."""
    keras_model, _ = _nmt_2022("tf", "float32")
    torch_model, _ = _nmt_2022("torch", "float32", eps=1e-5)
    with pytest.raises(ValueError, match=r"decoder.attention.layernorm -> decoder.attention.layernorm: eps 1e-05 != 0.001"):
        convert(torch_model, keras_model)


def test_kerass_implicit_masks_from_mask_zero_are_torchs_key_padding_mask_on_every_real_row():
    """`Embedding(mask_zero=True)` gives Keras's MultiHeadAttention a query and a value mask: pad keys are
    ignored (torch: `key_padding_mask=(tokens == 0)`, True = ignore) and a pad query row is fully masked
    (Keras 3.15: uniform weights on its fused path, zeros on its explicit one), where torch attends from it.
    Equal on every real row; the pad rows differ (pinned); without the key mask every row differs (control)."""
    torch_model, _ = _pair("self_attention_classifier")
    with float64_policy():
        embedding = keras.layers.Embedding(VOCAB, MODEL_DIM, mask_zero=True)
        attention = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=MODEL_DIM // HEADS)
        tokens = np.where(np.arange(7) < np.array([[7], [5], [3]]), TOKENS, 0)  # [B, S], right-padded with 0
        attention(embedding(tokens), embedding(tokens))
    backends.exact_float64(attention)  # float64 to 1e-12: the scale in float64 (see its test above)
    convert(torch_model.embedding, embedding)
    convert(torch_model.attention, attention)
    x = torch_model.embedding(torch.as_tensor(tokens))
    pads = torch.as_tensor(tokens == 0)
    expected = torch_model.attention(x, x, x, key_padding_mask=pads, need_weights=False)[0].detach().numpy()
    unmasked = torch_model.attention(x, x, x, need_weights=False)[0].detach().numpy()
    keras_x = embedding(tokens)
    ported = _np(attention(keras_x, keras_x))  # the masks ride on keras_x
    real = tokens != 0
    assert np.abs(ported[real] - expected[real]).max() <= 1e-12
    assert np.abs(ported[~real] - expected[~real]).max() > 1e-3
    assert np.abs(ported[real] - unmasked[real]).max() > 1e-3
