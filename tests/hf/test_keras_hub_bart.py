"""keras-hub's own BartSeq2SeqLM as a port target (tf_impl/hf/keras_hub_bart.py) against transformers'
BartForConditionalGeneration (eager attention, eval), on a user's save_pretrained folder of a tiny random BART with zero
final_logits_bias: float64 equal to 1e-12 of the largest value, float32 within 1e-5, on a ragged padding batch.
Negative controls (the same comparison catches each): positions loaded without BART's offset of 2, q/k/v kernels
reshaped without the transpose, and keras-hub's float64 left as it is (gelu's 1/sqrt(2) and MultiHeadAttention's
1/sqrt(key_dim) rounded to float32 on TensorFlow).
Also: each config keras-hub cannot compute is one error naming its field (and HF accepts it), a nonzero
final_logits_bias is refused by name, strict state checks, bit-for-bit round trips (state, `.keras`), and a user's own
keras-hub model written as an HF folder that transformers loads with no missing or unexpected key, equal logits."""

from __future__ import annotations

import json

import keras
import keras_hub
import numpy as np
import pytest
import torch
import transformers

from shared.hf import folders
from tests.zoo import hf_models as zoo
from tf_impl.hf import keras_hub_bart
from tf_impl.keras_compat import backends

BOUNDS = {"float64": 1e-12, "float32": 1e-5}
POSITIONS = zoo.POSITIONS


def _numpy(tensor) -> np.ndarray:
    return keras.ops.convert_to_numpy(tensor)


def _batch() -> dict:
    """A ragged batch, right-padded with pad id 1: source lengths 7, 5, 3; target lengths 4, 6, 2."""
    rng = np.random.default_rng(1)
    source, target = rng.integers(3, zoo.VOCAB, (3, 7)), rng.integers(3, zoo.VOCAB, (3, 6))  # [B, S], [B, T]
    source_mask = (np.arange(7)[None] < np.array([[7], [5], [3]])).astype("int32")  # [B, S]
    target_mask = (np.arange(6)[None] < np.array([[4], [6], [2]])).astype("int32")  # [B, T]
    return {"encoder_token_ids": np.where(source_mask == 1, source, 1).astype("int32"), "encoder_padding_mask": source_mask,
            "decoder_token_ids": np.where(target_mask == 1, target, 1).astype("int32"),
            "decoder_padding_mask": target_mask}  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A user's folder: BartForConditionalGeneration from a tiny config, random weights, zero final_logits_bias."""
    torch.manual_seed(0)
    model = transformers.AutoModelForSeq2SeqLM.from_config(zoo.config("bart"))
    path = tmp_path_factory.mktemp("bart")
    model.save_pretrained(path)
    return path


def _hf_logits(path, dtype: str, batch: dict) -> np.ndarray:
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager", dtype=getattr(torch, dtype))
    with torch.no_grad():
        out = model.eval()(input_ids=torch.tensor(batch["encoder_token_ids"]),
                           attention_mask=torch.tensor(batch["encoder_padding_mask"]),
                           decoder_input_ids=torch.tensor(batch["decoder_token_ids"]),
                           decoder_attention_mask=torch.tensor(batch["decoder_padding_mask"]))  # fmt: skip
    return out.logits.numpy()  # [B, T, V]


def _error(model, reference: np.ndarray, batch: dict) -> float:
    return float(np.abs(_numpy(model(batch)) - reference).max() / np.abs(reference).max())


def _loaded(path, dtype: str):
    read = folders.read_folder(path)
    model = keras_hub_bart.build(read.config, dtype=dtype)
    keras_hub_bart.load_hf_weights(model, read.arrays)
    return model, read


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_keras_hub_computes_hf_bart(folder, dtype):
    batch = _batch()
    model, _ = _loaded(folder, dtype)
    error = _error(model, _hf_logits(folder, dtype, batch), batch)
    print(f"keras-hub BartSeq2SeqLM vs HF eager, {dtype}: max error {error:.3g} of the largest logit")
    assert error <= BOUNDS[dtype]


def _no_offset(model, read):
    for side in ("encoder", "decoder"):
        table = read.arrays[f"model.{side}.embed_positions.weight"][:POSITIONS]  # [P, E]  rows 0.. instead of 2..
        getattr(model.backbone, f"{side}_position_embedding").position_embeddings.assign(table)


def _untransposed(model, read):
    attention = model.backbone.encoder_transformer_layers[0]._self_attention_layer
    for name, dense in (("q_proj", attention.query_dense), ("k_proj", attention.key_dense), ("v_proj", attention.value_dense)):
        weight = read.arrays[f"model.encoder.layers.0.self_attn.{name}.weight"]  # [N*h, E]
        dense.kernel.assign(weight.reshape(dense.kernel.shape))


def _float32_constants(model, read):
    """keras-hub's model as it comes: MultiHeadAttention's 1/sqrt(key_dim) and gelu's 1/sqrt(2) rounded to float32."""
    plain = keras_hub.models.BartSeq2SeqLM(keras_hub.models.BartBackbone(**keras_hub_bart.backbone_arguments(read.config),
                                                                         dtype="float64"))  # fmt: skip
    keras_hub_bart.load_hf_weights(plain, read.arrays)
    return plain


@pytest.mark.parametrize("naive", [_no_offset, _untransposed, _float32_constants], ids=lambda f: f.__name__.strip("_"))
def test_naive_variants_are_caught(folder, naive):
    batch = _batch()
    model, read = _loaded(folder, "float64")
    model = naive(model, read) or model
    error = _error(model, _hf_logits(folder, "float64", batch), batch)
    print(f"naive {naive.__name__.strip('_')}: max error {error:.3g}")
    assert error > BOUNDS["float64"]


REFUSED = {"decoder_layers": 3, "decoder_attention_heads": 4, "decoder_ffn_dim": 32, "activation_function": "gelu_new",
           "scale_embedding": True, "tie_word_embeddings": False}  # fmt: skip


@pytest.mark.parametrize("field", list(REFUSED))
def test_each_config_keras_hub_cannot_compute_is_refused_by_name(field):
    config = zoo.config("bart").to_dict() | {field: REFUSED[field]}
    transformers.AutoModelForSeq2SeqLM.from_config(transformers.BartConfig(**config))  # HF computes it
    with pytest.raises(ValueError, match=f"config.json field '{field}'.*our own BART model") as raised:
        keras_hub_bart.build(config)
    assert "\n" not in str(raised.value)


def test_the_base_config_builds_and_other_families_are_refused():
    assert isinstance(keras_hub_bart.build(zoo.config("bart").to_dict()), keras_hub_bart.MODELS)  # negative control
    with pytest.raises(ValueError, match="config.json field 'model_type': 'mbart'"):
        keras_hub_bart.build(zoo.config("mbart").to_dict())
    assert keras_hub_bart.training_differences(zoo.config("bart").to_dict()) == ["attention_dropout"]


def test_nonzero_final_logits_bias_is_refused_by_name(folder):
    model, read = _loaded(folder, "float32")
    keras_hub_bart.load_hf_weights(model, read.arrays | {"final_logits_bias": np.zeros((1, zoo.VOCAB), "float32")})
    with pytest.raises(ValueError, match="final_logits_bias is nonzero"):
        keras_hub_bart.load_hf_weights(model, read.arrays | {"final_logits_bias": np.ones((1, zoo.VOCAB), "float32")})


def test_bad_state_is_one_error_listing_every_problem(folder):
    model, read = _loaded(folder, "float32")
    state = dict(read.arrays)
    del state["model.encoder.layers.1.fc2.bias"]
    state["model.encoder.layers.0.fc1.weight"] = state["model.encoder.layers.0.fc1.weight"].T
    state["lm_head.weight"] = state["lm_head.weight"] + 1
    state["extra.weight"] = np.zeros(3, "float32")
    with pytest.raises(ValueError) as raised:
        keras_hub_bart.load_hf_weights(model, state)
    for phrase in ("missing: model.encoder.layers.1.fc2.bias", "shape: model.encoder.layers.0.fc1.weight",
                   "tied keys disagree", "unexpected: extra.weight"):  # fmt: skip
        assert phrase in str(raised.value)


def test_state_and_keras_file_round_trip_bit_for_bit(folder, tmp_path):
    model, read = _loaded(folder, "float64")
    state = keras_hub_bart.hf_state(model)
    assert set(state) == set(read.arrays)
    for key, value in read.arrays.items():
        kept = value[2:] if key.endswith("embed_positions.weight") else value  # HF's rows 0, 1 are never read
        assert np.array_equal((state[key][2:] if key.endswith("embed_positions.weight") else state[key]), kept), key
    model.save(tmp_path / "bart.keras")
    loaded = keras.saving.load_model(tmp_path / "bart.keras")
    assert keras_hub_bart.hf_config(loaded) == keras_hub_bart.hf_config(model) == read.config | {"dtype": "float64"}
    again = keras_hub_bart.build(keras_hub_bart.hf_config(loaded), dtype="float64")
    keras_hub_bart.load_hf_weights(again, keras_hub_bart.hf_state(loaded))
    assert all(np.array_equal(_numpy(a), _numpy(b)) for a, b in zip(model.weights, again.weights, strict=True))


def test_users_keras_hub_model_becomes_an_hf_folder(tmp_path):
    """A BartSeq2SeqLM built by hand (float64), saved as `.keras`, loaded, written as an HF folder: transformers loads
    it with no missing or unexpected key and computes its logits (keras-hub's float64 made exact to compare)."""
    keras.utils.set_random_seed(3)
    backbone = keras_hub.models.BartBackbone(vocabulary_size=zoo.VOCAB, num_layers=2, num_heads=2, hidden_dim=16,
                                             intermediate_dim=24, max_sequence_length=20, dtype="float64")  # fmt: skip
    keras_hub.models.BartSeq2SeqLM(backbone=backbone).save(tmp_path / "mine.keras")
    mine = keras.saving.load_model(tmp_path / "mine.keras")
    config = keras_hub_bart.hf_config(mine)
    folders.write_folder(tmp_path / "hf", config, keras_hub_bart.hf_state(mine))
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["attention_dropout"] == backbone.dropout
    loaded, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf", attn_implementation="eager",
                                                                      dtype=torch.float64, output_loading_info=True)  # fmt: skip
    assert not info["missing_keys"] and not info["unexpected_keys"]
    batch = _batch()
    reference = _hf_logits(tmp_path / "hf", "float64", batch)
    assert _error(mine, reference, batch) > BOUNDS["float64"]  # keras-hub's own float64: constants in float32
    backends.exact_float64(mine)
    assert _error(mine, reference, batch) <= BOUNDS["float64"]
