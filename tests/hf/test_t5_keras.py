"""Our Keras T5 (tf_impl/hf/t5.py) against transformers' T5ForConditionalGeneration (eager attention, eval), built from
a user's save_pretrained folder of a tiny random model: float64 equal to 1e-12 of the largest value, float32 within
1e-5, on a ragged padding batch: v1.0 (relu, tied, decoder output scaled), v1.1 as 5.23 saves it (gated-gelu, tied,
scale_decoder_outputs false), a pre-5.x v1.1/Flan/mT5-like folder (tie_word_embeddings false, its own lm_head.weight)
and gated-silu with fewer decoder layers and other bucket sizes.
Negative controls (the same comparison catches each naive variant): the RMS variance in the model's float64, or in
float32 summed in another order, or 1/sqrt by rsqrt; the decoder's buckets bidirectional, the encoder's causal, the
config's max_distance ignored; 1/sqrt(d_kv) attention scaling; the decoder output scaled by tie_word_embeddings
instead of scale_decoder_outputs, or never; exact gelu for gated-gelu; the padding mask flipped; the untied folder
read as tied. Also: hf_state -> write_folder -> from_pretrained, the `.keras` round trip, one error per bad input.
Each folder's model is built once per dtype and shared by the checks that read it (a check that alters it puts it
back); a check runs on the configs where it says something (float32: v1.0 and v1.1, the precision's code on both)."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import shutil

import keras
import numpy as np
import pytest
import torch
import transformers
from keras import ops
from safetensors.numpy import load_file, save_file

from shared.hf.folders import write_folder
from tf_impl.hf import t5, t5_layers, t5_weights
from tf_impl.hf.marian_layers import constant

BOUNDS = {"float64": 1e-12, "float32": 1e-5}
SIZES = {"vocab_size": 48, "d_model": 16, "d_kv": 8, "d_ff": 24, "num_layers": 2, "num_heads": 2,
         "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16, "decoder_start_token_id": 0}  # fmt: skip
CONFIGS = {
    "v1.0": {**SIZES, "feed_forward_proj": "relu"},
    "v1.1": {**SIZES, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},  # 5.23 saves tie true, scale false
    "v1.1 untied": {**SIZES, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},  # rewritten as before 5.x
    "gated-silu": {**SIZES, "feed_forward_proj": "gated-silu", "num_decoder_layers": 1, "d_kv": 4, "num_heads": 3,
                   "relative_attention_num_buckets": 6, "relative_attention_max_distance": 9},
}  # fmt: skip
OUTPUTS = ("logits", "encoder", "decoder")


def _numpy(tensor) -> np.ndarray:
    return keras.ops.convert_to_numpy(tensor)


def _batch() -> dict:
    """A ragged batch, right-padded (pad id 0): source lengths 9, 5, 3; target lengths 4, 7, 2."""
    rng = np.random.default_rng(1)
    source, target = rng.integers(1, 48, (3, 9)), rng.integers(1, 48, (3, 7))  # [B, S], [B, T]
    source_mask = (np.arange(9)[None] < np.array([[9], [5], [3]])).astype("int32")  # [B, S]
    target_mask = (np.arange(7)[None] < np.array([[4], [7], [2]])).astype("int32")  # [B, T]
    return {"encoder_token_ids": (source * source_mask).astype("int32"), "encoder_padding_mask": source_mask,
            "decoder_token_ids": (target * target_mask).astype("int32"), "decoder_padding_mask": target_mask}  # fmt: skip


def _as_before_5x(path) -> None:
    """A pre-5.x untied checkpoint: config.json says tie_word_embeddings false (no scale field), lm_head.weight its own."""
    config = json.loads((path / "config.json").read_text())
    config.pop("scale_decoder_outputs")
    (path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    state = load_file(path / "model.safetensors")
    state["lm_head.weight"] = np.random.default_rng(2).normal(size=state["shared.weight"].shape).astype("float32")
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})


NAMES = {}  # folder -> the name of its config


def make_folder(name: str, path):
    """A user's folder: T5ForConditionalGeneration from a config, random weights, saved."""
    NAMES[path] = name
    torch.manual_seed(0)
    transformers.T5ForConditionalGeneration(transformers.T5Config(**CONFIGS[name])).save_pretrained(path)
    if name == "v1.1 untied":
        _as_before_5x(path)
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """{name: a user's folder} for each of CONFIGS."""
    return {name: make_folder(name, tmp_path_factory.mktemp("t5")) for name in CONFIGS}


@pytest.fixture(scope="module", params=list(CONFIGS))
def folder(request, saved):
    return saved[request.param]


def pairs(table: dict) -> list:
    """(config name, check name) for each check of `table` (name -> (the configs it runs on, ...))."""
    return [(name, check) for check, (names, *_) in table.items() for name in names]


def hf_model(path, dtype: str):
    return transformers.T5ForConditionalGeneration.from_pretrained(path, attn_implementation="eager",
                                                                   dtype=getattr(torch, dtype)).eval()  # fmt: skip


def hf_outputs(model, batch: dict) -> dict:
    with torch.no_grad():
        out = model(input_ids=torch.tensor(batch["encoder_token_ids"]),
                    attention_mask=torch.tensor(batch["encoder_padding_mask"]),
                    decoder_input_ids=torch.tensor(batch["decoder_token_ids"]),
                    decoder_attention_mask=torch.tensor(batch["decoder_padding_mask"]), output_hidden_states=True)  # fmt: skip
    return {"logits": out.logits.numpy(), "encoder": out.encoder_last_hidden_state.numpy(),
            "decoder": out.decoder_hidden_states[-1].numpy()}  # fmt: skip


def config_of(path) -> dict:
    return json.loads((path / "config.json").read_text())


def ours(path, dtype: str, config: dict | None = None):
    model = t5.build(config or config_of(path), dtype=dtype)
    t5.load_hf_weights(model, load_file(path / "model.safetensors"))
    return model


def our_outputs(model, batch: dict) -> dict:
    hidden = model.backbone(batch)
    return {"logits": _numpy(model(batch)), "encoder": _numpy(hidden["encoder_sequence_output"]),
            "decoder": _numpy(hidden["decoder_sequence_output"])}  # fmt: skip


def errors_of(mine: dict, reference: dict) -> dict:
    """Each output's max absolute difference relative to the reference's largest value."""
    return {k: float(np.abs(mine[k] - reference[k]).max() / np.abs(reference[k]).max()) for k in OUTPUTS}


@functools.cache
def shared(path, dtype: str):
    """Our model of the folder in `dtype`, built once for the checks that read it (one that alters it restores it)."""
    return ours(path, dtype)


@functools.cache
def reference(path, dtype: str) -> dict:
    """HF's outputs of the folder on the ragged batch, once."""
    return hf_outputs(hf_model(path, dtype), _batch())


@contextlib.contextmanager
def restored(model):
    """The shared model as it was once the block ends: its variables and its buckets' direction put back."""
    values = [_numpy(variable) for variable in model.weights]
    biases = [model.backbone.encoder_relative_bias, model.backbone.decoder_relative_bias]
    directions = [bias.bidirectional for bias in biases]
    try:
        yield model
    finally:
        for variable, value in zip(model.weights, values, strict=True):
            variable.assign(value)
        for bias, direction in zip(biases, directions, strict=True):
            bias.bidirectional = direction


def _assert_computes_hf(folder, dtype: str) -> None:
    errors = errors_of(our_outputs(shared(folder, dtype), _batch()), reference(folder, dtype))
    print(f"{NAMES[folder]} {dtype}: {errors}")
    assert max(errors.values()) < BOUNDS[dtype], errors


def test_ours_computes_hf_t5(folder):
    _assert_computes_hf(folder, "float64")


@pytest.mark.parametrize("name", ["v1.0", "v1.1"])
def test_ours_computes_hf_t5_in_float32(saved, name):
    _assert_computes_hf(saved[name], "float32")


def _norm_in_model_dtype(self, x):
    return self.weight * (x / ops.sqrt(ops.mean(x * x, axis=-1, keepdims=True) + constant(self.epsilon, x)))


def _norm_float32_mean(self, x):
    variance = ops.mean(ops.square(ops.cast(x, "float32")), axis=-1, keepdims=True)  # the backend's own sum order
    return self.weight * (x * ops.cast(1.0 / ops.sqrt(variance + np.float32(self.epsilon)), x.dtype))


def _norm_rsqrt(self, x):
    variance = t5_layers.torch_cpu_sum(ops.square(ops.cast(x, "float32"))) / np.float32(x.shape[-1])
    return self.weight * (x * ops.cast(ops.rsqrt(variance + np.float32(self.epsilon)), x.dtype))


def _flip(side: str):
    def alter(model):
        bias = getattr(model.backbone, f"{side}_relative_bias")
        bias.bidirectional = not bias.bidirectional

    return alter


def _scaled_attention(model):
    for block in model.backbone.encoder_blocks + model.backbone.decoder_blocks:
        for attention in (block.self_attention, block.cross_attention):
            if attention is not None:
                attention.q.kernel.assign(attention.q.kernel * attention.head_dim**-0.5)


NORMS = {"RMS variance in float64": _norm_in_model_dtype, "RMS variance by the backend's float32 mean": _norm_float32_mean,
         "RMS by the backend's rsqrt": _norm_rsqrt}  # fmt: skip
NAIVE = {  # name -> (configs it applies to, config change, change to the loaded model)
    "decoder buckets bidirectional": (("v1.0",), {}, _flip("decoder")),
    "encoder buckets causal": (("v1.0",), {}, _flip("encoder")),
    "max_distance ignored (128)": (("v1.0", "gated-silu"), {"relative_attention_max_distance": 128}, None),
    "1/sqrt(d_kv) attention scaling": (("v1.0",), {}, _scaled_attention),
    "decoder output never scaled": (("v1.0",), {"scale_decoder_outputs": False}, None),
    "scaled by tie_word_embeddings": (("v1.1",), {"scale_decoder_outputs": None}, None),
    "exact gelu for gated-gelu": (("v1.1",), {"dense_act_fn": "gelu"}, None),
}


@pytest.mark.parametrize("naive", list(NORMS))
def test_naive_rms_norms_are_caught(saved, naive, monkeypatch):
    """On v1.0: every config's norms are T5LayerNorm's one `call` (patched on the class: the shared model computes it)."""
    folder = saved["v1.0"]
    monkeypatch.setattr(t5_layers.T5LayerNorm, "call", NORMS[naive])
    errors = errors_of(our_outputs(shared(folder, "float64"), _batch()), reference(folder, "float64"))
    print(f"{naive}: {errors}")
    assert min(errors.values()) > BOUNDS["float64"], errors


@pytest.mark.parametrize(("name", "naive"), pairs(NAIVE))
def test_naive_variants_are_caught(saved, name, naive):
    folder, (_, change, alter) = saved[name], NAIVE[naive]
    model = ours(folder, "float64", {**config_of(folder), **change}) if change else shared(folder, "float64")
    with restored(model):
        if alter:
            alter(model)
        errors = errors_of(our_outputs(model, _batch()), reference(folder, "float64"))
    print(f"{naive}: {errors}")
    assert errors["logits"] > BOUNDS["float64"], errors


def test_flipped_padding_mask_is_caught(saved):
    folder, batch = saved["v1.1"], _batch()
    flipped = {**batch, **{k: 1 - batch[k] for k in ("encoder_padding_mask", "decoder_padding_mask")}}
    errors = errors_of(our_outputs(shared(folder, "float64"), flipped), reference(folder, "float64"))
    assert errors["logits"] > BOUNDS["float64"], errors


@pytest.mark.parametrize("name", ["v1.1 untied", "gated-silu"])
def test_round_trip_through_hf_folder(saved, name, tmp_path):
    """hf_state -> write_folder -> from_pretrained: no missing or unexpected key, HF's logits equal ours; and
    load_hf_weights(hf_state(m)) reproduces m bit for bit. Untied (its own lm_head) and tied with a scaled decoder
    output (gated-silu, as v1.0), fewer decoder layers and other buckets."""
    folder = saved[name]
    model, batch = shared(folder, "float64"), _batch()
    state = t5.hf_state(model)
    assert set(state) == set(hf_model(folder, "float64").state_dict())
    write_folder(tmp_path / "out", t5.hf_config(model), state, source=folder)
    loaded, info = transformers.T5ForConditionalGeneration.from_pretrained(
        tmp_path / "out", attn_implementation="eager", output_loading_info=True)  # fmt: skip
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    errors = errors_of(our_outputs(model, batch), hf_outputs(loaded.double().eval(), batch))
    assert max(errors.values()) < BOUNDS["float64"], errors
    again = t5.build(t5.hf_config(model), dtype="float64")
    t5.load_hf_weights(again, state)
    assert np.array_equal(_numpy(again(batch)), _numpy(model(batch)))


def test_hand_built_model_gets_a_config_hf_reads_alike(tmp_path):
    """A backbone built without hf_config: the derived config.json makes HF compute what ours does."""
    arguments = {k: v for k, v in t5.from_hf_config(CONFIGS["v1.1"]).items() if k != "hf_config"}
    model = t5.T5Seq2SeqLM(t5.T5Backbone(**arguments, dtype="float64"))
    rng = np.random.default_rng(3)
    for variable in model.weights:
        variable.assign(rng.normal(size=variable.shape))
    write_folder(tmp_path / "out", t5.hf_config(model), t5.hf_state(model))
    errors = errors_of(our_outputs(model, _batch()), hf_outputs(hf_model(tmp_path / "out", "float64"), _batch()))
    assert max(errors.values()) < BOUNDS["float64"], errors


def test_keras_file_round_trip(saved, tmp_path):
    """The untied v1.1: every variable of the tied model and its own lm_head (v1.0's on JAX and torch:
    tests/keras/test_hf_t5_backends.py)."""
    folder = saved["v1.1 untied"]
    model, batch = shared(folder, "float64"), _batch()
    model.save(tmp_path / "t5.keras")
    loaded = keras.saving.load_model(tmp_path / "t5.keras")
    assert np.array_equal(_numpy(loaded(batch)), _numpy(model(batch)))
    assert t5.hf_config(loaded) == {**config_of(folder), "dtype": "float64"}


def test_untied_folder_read_as_tied_is_refused(saved):
    folder = saved["v1.1 untied"]
    tied = t5.build({**config_of(folder), "tie_word_embeddings": True}, dtype="float64")
    with pytest.raises(ValueError, match="tied keys disagree: shared.weight and lm_head.weight"):
        t5.load_hf_weights(tied, load_file(folder / "model.safetensors"))
    with restored(shared(folder, "float64")) as model:
        model.lm_head.kernel.assign(model.backbone.token_embedding.embeddings)  # what reading it as tied computes
        errors = errors_of(our_outputs(model, _batch()), reference(folder, "float64"))
    assert errors["logits"] > BOUNDS["float64"], errors


def test_cross_attention_bias_key_is_ignored_as_hf_ignores_it(saved, tmp_path):
    """Old checkpoints carry decoder block 0's EncDecAttention.relative_attention_bias: HF drops it, so do we."""
    path = shutil.copytree(saved["v1.0"], tmp_path / "t5")
    state = load_file(path / "model.safetensors")
    key = t5_weights.IGNORED[0]
    save_file({**state, key: np.ones((8, 2), "float32")}, path / "model.safetensors", metadata={"format": "pt"})
    with restored(shared(saved["v1.0"], "float64")) as model:
        t5.load_hf_weights(model, load_file(path / "model.safetensors"))
        errors = errors_of(our_outputs(model, _batch()), hf_outputs(hf_model(path, "float64"), _batch()))
    assert max(errors.values()) < BOUNDS["float64"], errors


@pytest.mark.parametrize("dim", [3, 8, 16, 24, 40, 64, 100, 512, 768])
def test_rms_variance_is_torchs_float32_mean_bit_for_bit(dim):
    """torch_cpu_sum reproduces torch's CPU float32 sum order; the backend's own mean (negative control) does not."""
    x = (np.random.default_rng(dim).normal(size=(2000, dim)) * 3).astype("float32")
    reference = torch.tensor(x).pow(2).mean(-1, keepdim=True).numpy()
    squares = ops.convert_to_tensor(x * x)
    assert np.array_equal(_numpy(t5_layers.torch_cpu_sum(squares) / np.float32(dim)), reference)
    if dim >= 16:
        assert not np.array_equal(_numpy(ops.mean(squares, axis=-1, keepdims=True)), reference)


@pytest.mark.parametrize(("buckets", "distance"), [(32, 128), (8, 16), (6, 9), (64, 256)])
def test_buckets_are_hfs(buckets, distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = np.arange(-600, 600)[None, :]
    for bidirectional in (True, False):
        reference = T5Attention._relative_position_bucket(torch.tensor(relative), bidirectional, buckets, distance).numpy()
        mine = t5_layers.relative_position_bucket(ops.convert_to_tensor(relative, "int32"), bidirectional, buckets, distance)
        assert np.array_equal(_numpy(mine), reference), bidirectional


@pytest.mark.parametrize("proj", ["relu", "gated-gelu", "gated-silu", "gelu", "gelu_new", "gated-gelu_new"])
def test_feed_forward_parsed_as_t5config(proj):
    config = transformers.T5Config(feed_forward_proj=proj)
    assert t5.feed_forward({"feed_forward_proj": proj}) == (config.dense_act_fn, config.is_gated_act)
    x = np.linspace(-4, 4, 41)
    reference = transformers.activations.ACT2FN[config.dense_act_fn](torch.tensor(x)).numpy()
    assert np.abs(_numpy(t5_layers.ACTIVATIONS[config.dense_act_fn](ops.convert_to_tensor(x))) - reference).max() < 1e-14


BAD_CONFIGS = {  # field -> a value we cannot honour
    "feed_forward_proj": "gated-mish", "dense_act_fn": "mish", "is_gated_act": "yes", "d_kv": 0, "num_heads": "2",
    "num_decoder_layers": -1, "dropout_rate": 1.0, "layer_norm_epsilon": 0, "relative_attention_num_buckets": 2,
    "relative_attention_max_distance": 4, "model_type": "bart", "pad_token_id": 48, "decoder_start_token_id": -1,
    "tie_word_embeddings": "false", "scale_decoder_outputs": 1,
}  # fmt: skip


@pytest.mark.parametrize("field", list(BAD_CONFIGS))
def test_bad_config_names_its_field(field):
    with pytest.raises(ValueError, match=f"config.json field '{field}'"):
        t5.build({**CONFIGS["v1.0"], field: BAD_CONFIGS[field]})


BAD_STATES = {  # change -> words the one error must hold
    "missing": (lambda s: s.pop("encoder.block.1.layer.1.DenseReluDense.wo.weight"),
                "missing: encoder.block.1.layer.1.DenseReluDense.wo.weight"),
    "unexpected": (lambda s: s.update({"encoder.extra.weight": np.zeros(3)}), "unexpected: encoder.extra.weight"),
    "shape": (lambda s: s.update({"decoder.final_layer_norm.weight": np.zeros(7)}),
              "shape: decoder.final_layer_norm.weight is (7,)"),
    "tied disagree": (lambda s: s.update({"encoder.embed_tokens.weight": s["shared.weight"] + 1}),
                      "tied keys disagree: shared.weight and encoder.embed_tokens.weight"),
}  # fmt: skip


@pytest.mark.parametrize("bad", list(BAD_STATES))
def test_bad_state_is_one_error(saved, bad):
    """Refused before any variable is set (load_hf_weights checks the whole state first): the shared model is kept."""
    state = {k: v.numpy().copy() for k, v in hf_model(saved["v1.0"], "float32").state_dict().items()}
    change, words = BAD_STATES[bad]
    change(state)
    with pytest.raises(ValueError, match="does not fit the model") as error:
        t5.load_hf_weights(shared(saved["v1.0"], "float64"), state)
    assert words in str(error.value)


def test_dropout_rate_applied_in_training_only():
    model = t5.build({**CONFIGS["v1.0"], "dropout_rate": 0.5})
    batch = _batch()
    assert np.array_equal(_numpy(model(batch)), _numpy(model(batch)))
    assert not np.allclose(_numpy(model(batch, training=True)), _numpy(model(batch)))
    assert math.isclose(model.backbone.encoder_blocks[0].feed_forward.dropout.rate, 0.5)
