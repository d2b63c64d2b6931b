"""keras-hub's own T5Seq2SeqLM as a port source (tf_impl/hf/keras_hub_t5.py), and mT5 in our Keras T5 (tf_impl/hf/t5.py),
against transformers' T5ForConditionalGeneration / MT5ForConditionalGeneration (eager attention, eval).

A user's keras-hub T5 built by hand as its docs show (v1.0-like relu tied; gated silu untied; plain exact gelu), saved
as `.keras`, ports to an HF folder that `from_pretrained` loads with no missing or unexpected key, logits within the
float32 policy; a gated exact gelu is refused naming the activation. keras-hub's float64 floor (its RMS variance in
float64 where HF's is float32) is measured, not hidden: ours computes the same weights to 1e-12.
Negative controls (the same comparison catches each naive variant): q/k/v kernels not transposed, wi_0/wi_1 swapped,
an untied head written as tied (HF then scales the output), gated exact gelu written as HF's 'gated-gelu' (tanh form),
the padding mask flipped, an mT5 read as T5 (decoder output scaled), an untied mT5 read as tied.
"""

from __future__ import annotations

import functools
import json

import keras
import keras_hub
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

from shared.hf import folders
from shared.port import porting
from tf_impl.hf import families, keras_hub_t5, t5, t5_layers

BOUNDS = {"float64": 1e-12, "float32": 1e-5}
USERS = {  # name -> T5Backbone arguments a user passes (keras-hub's docs: the default constructor, random weights)
    "v1.0 relu tied": {"activation": "relu", "use_gated_activation": False, "tie_embedding_weights": True},
    "gated silu untied": {"activation": "silu", "use_gated_activation": True, "tie_embedding_weights": False},
    "gelu": {"activation": "gelu", "use_gated_activation": False, "tie_embedding_weights": True},
}
SIZES = {"vocabulary_size": 48, "num_layers": 2, "num_heads": 2, "hidden_dim": 16, "intermediate_dim": 24,
         "key_value_dim": 8, "dropout": 0.0}  # fmt: skip
MT5 = {"vocab_size": 48, "d_model": 16, "d_kv": 8, "d_ff": 24, "num_layers": 2, "num_heads": 2,
       "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16}  # fmt: skip


def _numpy(tensor) -> np.ndarray:
    return keras.ops.convert_to_numpy(tensor)


def _batch() -> dict:
    """A ragged batch, right-padded with pad id 0: source lengths 7, 5, 3; target lengths 4, 6, 2."""
    rng = np.random.default_rng(1)
    source, target = rng.integers(1, 48, (3, 7)), rng.integers(1, 48, (3, 6))  # [B, S], [B, T]
    source_mask = (np.arange(7)[None] < np.array([[7], [5], [3]])).astype("int32")  # [B, S]
    target_mask = (np.arange(6)[None] < np.array([[4], [6], [2]])).astype("int32")  # [B, T]
    return {"encoder_token_ids": (source * source_mask).astype("int32"), "encoder_padding_mask": source_mask,
            "decoder_token_ids": (target * target_mask).astype("int32"), "decoder_padding_mask": target_mask}  # fmt: skip


@functools.cache
def _user_model(name: str, dtype: str = "float32", seed: int = 0):
    """A user's keras-hub T5Seq2SeqLM, every weight random (norms near 1): a swapped or untransposed matrix shows; made
    once per test module (no test changes it)."""
    backbone = keras_hub.models.T5Backbone(**SIZES, **USERS[name], dtype=dtype)
    model = keras_hub.models.T5Seq2SeqLM(backbone=backbone)
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        noise = rng.normal(size=tuple(variable.shape))
        variable.assign((1 + 0.2 * noise if "layer_norm" in variable.path else 0.5 * noise).astype(dtype))
    return model


def _hf_logits(path, dtype: str, batch: dict, checked: bool = True) -> np.ndarray:
    model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        path, attn_implementation="eager", dtype=getattr(torch, dtype), output_loading_info=True
    )
    if checked:
        assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        out = model.eval()(input_ids=torch.tensor(batch["encoder_token_ids"]),
                           attention_mask=torch.tensor(batch["encoder_padding_mask"]),
                           decoder_input_ids=torch.tensor(batch["decoder_token_ids"]),
                           decoder_attention_mask=torch.tensor(batch["decoder_padding_mask"]))  # fmt: skip
    return out.logits.numpy()  # [B, T, V]


def _error(actual: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(np.asarray(actual, np.float64) - reference).max() / np.abs(reference).max())


def _written(model, path, config=None, state=None):
    folders.write_folder(path, config or keras_hub_t5.hf_config(model), state or keras_hub_t5.hf_state(model))
    return path


@pytest.mark.parametrize("name", list(USERS))
def test_keras_hub_t5_written_as_hf_computes_the_users_model(name, tmp_path):
    batch, model = _batch(), _user_model(name)
    reference = _hf_logits(_written(model, tmp_path), "float32", batch)
    error = _error(_numpy(model(batch)), reference)
    print(f"{name}: float32 keras-hub vs HF {error:.2e}")
    assert error <= BOUNDS["float32"]


@pytest.mark.parametrize("name", ["v1.0 relu tied", "gated silu untied"])
def test_float64_floor_is_keras_hubs_and_ours_is_exact(name, tmp_path):
    """keras-hub in float64 is not HF's float64 (variance dtype): its floor measured; ours on the same weights 1e-12."""
    batch, model = _batch(), _user_model(name)
    path = _written(model, tmp_path)
    reference = _hf_logits(path, "float64", batch)
    read = folders.read_folder(path)
    hub = keras_hub_t5.build(read.config, dtype="float64")
    keras_hub_t5.load_hf_weights(hub, read.arrays)
    ours = t5.build(read.config, dtype="float64")
    t5.load_hf_weights(ours, read.arrays)
    floor, exact = _error(_numpy(hub(batch)), reference), _error(_numpy(ours(batch)), reference)
    print(f"{name}: float64 keras-hub vs HF {floor:.2e}, ours vs HF {exact:.2e}")
    assert exact <= BOUNDS["float64"] < floor <= BOUNDS["float32"]


def _swap_gate(state: dict) -> dict:
    return {k.replace("wi_0", "wi_x").replace("wi_1", "wi_0").replace("wi_x", "wi_1"): v for k, v in state.items()}


def _untransposed(state: dict) -> dict:
    return {k: (v.T.copy() if k.endswith(("q.weight", "k.weight", "v.weight")) else v) for k, v in state.items()}


NAIVE = {  # name -> (user model, how a naive port writes config or state)
    "q/k/v not transposed": ("v1.0 relu tied", None, _untransposed),
    "wi_0 and wi_1 swapped": ("gated silu untied", None, _swap_gate),
    "untied head written as tied": ("gated silu untied", {"tie_word_embeddings": True}, None),
}


@pytest.mark.parametrize("naive", list(NAIVE))
def test_naive_ports_are_caught(naive, tmp_path):
    name, config_change, state_change = NAIVE[naive]
    batch, model = _batch(), _user_model(name)
    config, state = keras_hub_t5.hf_config(model) | (config_change or {}), keras_hub_t5.hf_state(model)
    reference = _hf_logits(_written(model, tmp_path, config, state_change(state) if state_change else state), "float32", batch)
    assert _error(_numpy(model(batch)), reference) > 1e-3


def test_gated_exact_gelu_is_refused_and_the_naive_tanh_port_is_caught(tmp_path):
    """HF reads 'gated-gelu' as gelu_new (tanh form); keras-hub's 'gelu' is exact: writing it so changes the model."""
    backbone = keras_hub.models.T5Backbone(**SIZES, activation="gelu", use_gated_activation=True)
    model = keras_hub.models.T5Seq2SeqLM(backbone=backbone)
    for contract in (keras_hub_t5.hf_state, keras_hub_t5.hf_config):
        with pytest.raises(ValueError, match="activation 'gelu' with use_gated_activation=True: HF's T5 reads 'gated-gelu'"):
            contract(model)
    model.save(tmp_path / "user.keras")
    with pytest.raises(ValueError, match="activation 'gelu'"):
        porting.port(tmp_path / "user.keras", tmp_path / "out", to="hf")
    assert not (tmp_path / "out").exists()
    naive = keras_hub_t5.derived_config(_user_model("v1.0 relu tied")) | {"feed_forward_proj": "gated-gelu"}
    state = {key: np.ascontiguousarray(_numpy(variable).T if transpose else _numpy(variable))
             for names, variable, transpose in keras_hub_t5.targets(model) for key in names}  # fmt: skip
    reference = _hf_logits(_written(model, tmp_path / "naive", naive, state), "float32", _batch())
    assert _error(_numpy(model(_batch())), reference) > 1e-5


def test_a_users_keras_file_ports_to_a_folder_hf_loads(tmp_path):
    """`rosetta port` of the gated untied user's file (the port writes with hf_config and hf_state, which
    test_keras_hub_t5_written_as_hf_computes_the_users_model checks on every user's model, tied ones too)."""
    batch, model = _batch(), _user_model("gated silu untied")
    model.save(tmp_path / "user.keras")
    report = porting.port(tmp_path / "user.keras", tmp_path / "out", to="hf")
    assert report.ok, porting.render(report)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "t5"
    assert _error(_numpy(model(batch)), _hf_logits(tmp_path / "out", "float32", batch)) <= BOUNDS["float32"]


def test_flipped_padding_mask_is_caught(tmp_path):
    batch, model = _batch(), _user_model("v1.0 relu tied")
    reference = _hf_logits(_written(model, tmp_path), "float32", batch)
    flipped = batch | {key: 1 - batch[key] for key in ("encoder_padding_mask", "decoder_padding_mask")}
    assert _error(_numpy(model(flipped)), reference) > 1e-3


@pytest.mark.parametrize("bidirectional", [True, False])
def test_keras_hubs_fixed_buckets_are_hfs(bidirectional):
    relative = np.arange(-300, 301, dtype="int32")[None, :]  # [1, K]
    hub = keras_hub.src.models.t5.t5_multi_head_attention.T5MultiHeadAttention._relative_position_bucket
    theirs = _numpy(hub(keras.ops.convert_to_tensor(relative), bidirectional, 32, 128))
    ours = _numpy(t5_layers.relative_position_bucket(keras.ops.convert_to_tensor(relative), bidirectional, 32, 128))
    naive = _numpy(t5_layers.relative_position_bucket(keras.ops.convert_to_tensor(relative), bidirectional, 32, 64))
    assert np.array_equal(theirs, ours) and not np.array_equal(theirs, naive)


def test_round_trips_and_the_dispatch(tmp_path):
    model = _user_model("gated silu untied")
    config = keras_hub_t5.hf_config(model)
    rebuilt = keras_hub_t5.build(config)
    keras_hub_t5.load_hf_weights(rebuilt, keras_hub_t5.hf_state(model))
    assert all(np.array_equal(_numpy(a), _numpy(b)) for a, b in zip(model.weights, rebuilt.weights, strict=True))
    rebuilt.save(tmp_path / "m.keras")
    loaded = families.load_keras(tmp_path / "m.keras")
    assert isinstance(loaded, keras_hub_t5.HfT5Seq2SeqLM) and families.hf_config(loaded) == families.hf_config(rebuilt)
    assert isinstance(families.build(config), t5.T5Seq2SeqLM)  # ours is preferred
    assert families.describe(model) == "keras_hub.models.T5Seq2SeqLM"


BAD_CONFIGS = {  # field -> a value T5Config takes that keras-hub's T5Backbone cannot compute
    "num_decoder_layers": 1, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 64,
    "feed_forward_proj": "gated-gelu", "model_type": "mt5",
}  # fmt: skip


@pytest.mark.parametrize("field", list(BAD_CONFIGS))
def test_config_keras_hub_cannot_compute_names_its_field(field):
    config = keras_hub_t5.derived_config(_user_model("v1.0 relu tied"))
    with pytest.raises(ValueError, match=f"config.json field '{field}'"):
        keras_hub_t5.build(config | {field: BAD_CONFIGS[field]})
    transformers.AutoConfig.for_model(**({"model_type": "t5"} | config | {field: BAD_CONFIGS[field]}))  # HF takes it


def test_bad_state_is_one_error_listing_every_problem():
    model = _user_model("v1.0 relu tied")
    state = keras_hub_t5.hf_state(model)
    state.pop("decoder.block.1.layer.2.DenseReluDense.wo.weight")
    state["encoder.extra.weight"] = np.zeros(3, "float32")
    state["lm_head.weight"] = state["lm_head.weight"] + 1
    with pytest.raises(ValueError) as caught:
        keras_hub_t5.load_hf_weights(model, state)
    for words in ("missing: decoder.block.1.layer.2.DenseReluDense.wo.weight", "unexpected: encoder.extra.weight",
                  "tied keys disagree: shared.weight and lm_head.weight"):  # fmt: skip
        assert words in str(caught.value)


# ---- mT5: our T5 built from model_type "mt5" ----


@pytest.fixture(scope="module")
def mt5_folders(tmp_path_factory):
    """A tiny random MT5ForConditionalGeneration as 5.23 saves it, and as a pre-5.x mT5 checkpoint has it (config.json
    tie_word_embeddings false, its own lm_head.weight)."""
    torch.manual_seed(0)
    hf = transformers.AutoModelForSeq2SeqLM.from_config(transformers.MT5Config(**MT5), attn_implementation="eager")
    tied, untied = tmp_path_factory.mktemp("mt5"), tmp_path_factory.mktemp("mt5_untied")
    hf.save_pretrained(tied)
    hf.save_pretrained(untied)
    arrays = load_file(untied / "model.safetensors")
    arrays["lm_head.weight"] = np.random.default_rng(2).normal(size=arrays["shared.weight"].shape).astype("float32")
    save_file(arrays, untied / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((untied / "config.json").read_text())
    (untied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    return {"tied": tied, "untied": untied}


def _ours(path, dtype: str, **change):
    read = folders.read_folder(path)
    assert read.model_type == "mt5"
    model = families.build(read.config | change, dtype=dtype)
    families.load_hf_weights(model, read.arrays)
    return model


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_ours_computes_hf_mt5(mt5_folders, kind, dtype="float64"):  # float32: the round trip below
    batch = _batch()
    reference = _hf_logits(mt5_folders[kind], dtype, batch, checked=False)
    error = _error(_numpy(_ours(mt5_folders[kind], dtype)(batch)), reference)
    print(f"mT5 {kind} {dtype}: ours vs HF {error:.2e}")
    assert error <= BOUNDS[dtype]


@pytest.mark.parametrize("naive", ["read as t5", "untied read as tied"])
def test_naive_mt5_is_caught(mt5_folders, naive):
    batch = _batch()
    kind, change = ("tied", {"model_type": "t5"}) if naive == "read as t5" else ("untied", {"tie_word_embeddings": True})
    reference = _hf_logits(mt5_folders[kind], "float64", batch, checked=False)
    try:
        model = _ours(mt5_folders[kind], "float64", **change)
    except ValueError as error:  # the untied head refused as tied: caught too
        assert "tied keys disagree" in str(error)
        return
    assert _error(_numpy(model(batch)), reference) > 1e-3


@pytest.mark.parametrize("kind", ["tied", "untied"])
def test_mt5_folder_round_trip(mt5_folders, kind, tmp_path):
    batch, model = _batch(), _ours(mt5_folders[kind], "float32")
    folders.write_folder(tmp_path, families.hf_config(model), families.hf_state(model))
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "mt5"
    assert _error(_numpy(model(batch)), _hf_logits(tmp_path, "float32", batch)) <= BOUNDS["float32"]
