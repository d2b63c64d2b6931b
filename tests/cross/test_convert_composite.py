"""`convert` and the composite attention (issue 61): a Keras MultiHeadAttention against torch attention written from
nn.Linear layers (q/k/v/out apart, through F.scaled_dot_product_attention or by hand; nanoGPT's packed c_attn), the
pairs settled by running both models; keras-hub's TokenAndPositionEmbedding against two nn.Embedding. Negative
controls: q and k swapped, heads split interleaved, a packed c_attn read in another order: each refused on the inputs."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

import tf_impl.conversion as keras_side
import torch_impl.conversion as torch_side
from shared.port.conversion import convert, verify
from tests.zoo import keras_io_transformer as zoo

BOUNDS = {"float64": 1e-12, "float32": 1e-5}  # max |diff| of outputs (the equality policy's)
DIFFER = r"and with them the models' outputs differ on the inputs \(output differs by .*check the attention's code"


def _transformers(dtype: str, **attention):
    keras.backend.clear_session()  # Keras's automatic names (`transformer_encoder`) start again: a key map names them
    torch.manual_seed(1)
    keras.utils.set_random_seed(2)
    twin = torch_side.build(lambda: zoo.TorchTransformer(**attention), dtype)
    return twin, keras_side.build(zoo.keras_io_transformer, dtype, zoo.BATCH)


def _gpts(dtype: str, order: str = "qkv"):
    torch.manual_seed(1)
    keras.utils.set_random_seed(2)
    return torch_side.build(lambda: zoo.TinyGPT(order), dtype), keras_side.build(zoo.keras_gpt, dtype, zoo.TOKENS)


def _worst(source, target, inputs) -> float:
    check = verify(source, target, inputs)
    assert check.ok, check.components
    return max(component.max_abs for component in check.components)


def _loaded(model, fresh, folder):
    """`model`'s weights saved and loaded into `fresh` as each framework's users do (state_dict; .weights.h5)."""
    if isinstance(model, torch.nn.Module):
        torch.save(model.state_dict(), folder / "converted.pt")
        fresh.load_state_dict(torch.load(folder / "converted.pt"))
    else:
        model.save_weights(folder / "converted.weights.h5")
        fresh.load_weights(folder / "converted.weights.h5")
    return fresh


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("by_hand", [False, True], ids=["sdpa", "by hand"])
@pytest.mark.parametrize("source", ["torch", "tf"])
def test_the_keras_io_transformer_ports_both_ways_with_its_torch_twin(tmp_path, source, by_hand, dtype):
    """Its attention is four nn.Linear in torch and one MultiHeadAttention (key_dim=embed_dim) in Keras: every pair is
    settled by running both models, and the converted model, saved and loaded, computes the user's own."""
    twin, published = _transformers(dtype, by_hand=by_hand)
    user, target = (twin, published) if source == "torch" else (published, twin)
    with pytest.raises(ValueError, match=r"paired with the projections of .*attention \(MultiHeadAttention, 2 heads of 16\)"):
        convert(user, target)
    done = convert(user, target, inputs=zoo.BATCH)
    assert "attention.q_proj (Linear)" in done.render() and "running both models on the inputs settled them" in done.render()
    fresh = _transformers(dtype, by_hand=by_hand)[0 if source == "tf" else 1]
    assert _worst(user, _loaded(target, fresh, tmp_path), zoo.BATCH) <= BOUNDS[dtype]


def test_the_old_multihead_attention_message_shows_only_beside_nn_multihead_attention():
    twin, published = _transformers("float32")
    with pytest.raises(ValueError) as refused:
        convert(published, twin)
    assert "num_heads x key_dim" not in str(refused.value) and "pass inputs=" in str(refused.value)
    torch_mha = torch.nn.Sequential(torch.nn.Embedding(zoo.VOCAB, zoo.EMBED), torch.nn.MultiheadAttention(zoo.EMBED, 2))
    with pytest.raises(ValueError, match=r"num_heads x key_dim = 2 x 16 is not the query's width 16 \(torch's embed_dim"):
        convert(published, torch_mha)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("source", ["torch", "tf"])
def test_nanogpts_packed_c_attn_and_two_embeddings_port_both_ways(tmp_path, source, dtype):
    """c_attn [3E, E] is the MultiHeadAttention's q, k, v in that order; wte and wpe (looked up at arange) are
    keras-hub's TokenAndPositionEmbedding's two tables."""
    gpt, keras_gpt = _gpts(dtype)
    user, target = (gpt, keras_gpt) if source == "torch" else (keras_gpt, gpt)
    done = convert(user, target, inputs=zoo.TOKENS)
    assert "attn.c_attn (Linear)" in done.render() and "attn.qkv (MultiHeadAttention, 2 heads of 8: its q, k, v" in done.render()
    assert "wpe (Embedding)" in done.render() and "embedding.position_embedding (PositionEmbedding)" in done.render()
    fresh = _gpts(dtype)[0 if source == "tf" else 1]
    assert _worst(user, _loaded(target, fresh, tmp_path), zoo.TOKENS) <= BOUNDS[dtype]


# ---- negative controls: what a naive conversion would port silently ----


def _refused_and_kept(source, target, inputs, **options):
    before = [weight.copy() for weight in _weights(target)]
    with pytest.raises(ValueError, match=DIFFER):
        convert(source, target, inputs=inputs, **options)
    assert all(np.array_equal(a, b) for a, b in zip(before, _weights(target), strict=True))


def _weights(model) -> list[np.ndarray]:
    if isinstance(model, torch.nn.Module):
        return [p.detach().numpy().copy() for p in model.parameters()]
    return [np.asarray(w) for w in model.get_weights()]


def test_q_and_k_swapped_by_the_order_guess_are_caught_and_a_key_map_settles_them():
    """A twin registering k_proj before q_proj: paired in order, q and k are swapped (the scores transposed)."""
    twin, published = _transformers("float64", key_first=True)
    _refused_and_kept(twin, published, zoo.BATCH)
    blocks = {"encoder.attention": "transformer_encoder.attention", "decoder.attention_1": "transformer_decoder.attention_1",
              "decoder.attention_2": "transformer_decoder.attention_2"}  # fmt: skip
    key_map = {f"{t}.{a}_proj": f"{k}.{b}" for t, k in blocks.items() for a, b in (("q", "query"), ("k", "key"))}
    convert(twin, published, key_map=key_map, inputs=zoo.BATCH)
    assert _worst(twin, published, zoo.BATCH) <= 1e-12
    swapped = {path: key_map[_other(path)] for path in key_map}  # a key map naming q and k crosswise: run, refused
    _refused_and_kept(_transformers("float64")[0], published, zoo.BATCH, key_map=swapped)


def _other(path: str) -> str:
    return path.replace("q_proj", "k_proj") if "q_proj" in path else path.replace("k_proj", "q_proj")


def test_heads_split_interleaved_are_caught():
    """`view(B, T, D, H)`: head h holds features h, H + h, ...; Keras's head h holds h*D .. h*D + D-1."""
    twin, published = _transformers("float64", interleaved=True)
    _refused_and_kept(published, twin, zoo.BATCH)
    _refused_and_kept(twin, _transformers("float64")[1], zoo.BATCH)


@pytest.mark.parametrize("order", ["kqv", "qvk"])
def test_a_packed_c_attn_read_in_another_order_is_caught(order):
    gpt, keras_gpt = _gpts("float64", order)
    _refused_and_kept(gpt, keras_gpt, zoo.TOKENS)
    _refused_and_kept(keras_gpt, gpt, zoo.TOKENS)


def test_a_mis_shaped_pair_names_both_layers_and_their_shapes():
    gpt, keras_gpt = _gpts("float32")
    key_map = {"wte": "embedding.position_embedding", "wpe": "embedding.token_embedding"}
    with pytest.raises(ValueError, match=r"mis-shaped pairs: wte \(Embedding\) -> embedding.position_embedding "
                                         r"\(PositionEmbedding\): weight \(40, 16\) != weight \(8, 16\)"):  # fmt: skip
        convert(gpt, keras_gpt, key_map=key_map, inputs=zoo.TOKENS)
