"""Our Keras MarianMT (tf_impl/hf/marian.py) against transformers' MarianMTModel (eager attention, eval), built from
a user's save_pretrained folder of a tiny random model: float64 equal to 1e-12 of the largest value, float32 within
1e-5, on a ragged padding batch, for the tied default, separate decoder embeddings of their own vocabulary, and
tie_word_embeddings false (every matrix apart; read as tied, caught). Dropout rates (dropout, attention_dropout,
activation_dropout) build, save and load, are ignored by inference and applied in training.
Negative controls (the same comparison catches each naive variant): interleaved sin/cos, positions not rounded to
float32 as HF's, no scale_embedding, no final_logits_bias, the padding mask's polarity flipped, the folder's file read
as if it held every tied key. Also: the `.keras` round trip (bit for bit) and one error per bad config or state.
Each folder's model is built once per dtype and shared by the checks that read it (a build costs more than the checks);
a check that alters it puts it back. float32 is checked on the tied config: the precision is the same code on every
config, which float64 proves."""

from __future__ import annotations

import contextlib
import functools
import json

import keras
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from tf_impl.hf import marian, marian_layers, marian_weights

BOUNDS = {"float64": 1e-12, "float32": 1e-5}
SIZES = {"d_model": 16, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
         "encoder_ffn_dim": 24, "decoder_ffn_dim": 24, "max_position_embeddings": 32, "scale_embedding": True}  # fmt: skip
CONFIGS = {  # Marian's checkpoints: swish, scaled embeddings; pad = decoder_start = the last token
    "tied": {**SIZES, "vocab_size": 48, "pad_token_id": 47, "decoder_start_token_id": 47, "activation_function": "swish"},
    "separate decoder vocab": {**SIZES, "vocab_size": 48, "decoder_vocab_size": 40, "pad_token_id": 39,
                               "decoder_start_token_id": 39, "share_encoder_decoder_embeddings": False,
                               "activation_function": "gelu"},
}  # fmt: skip
OUTPUTS = ("logits", "encoder", "decoder")


def _numpy(tensor) -> np.ndarray:
    """A Keras output as numpy on any backend (np.asarray refuses torch's tensors that require grad)."""
    return keras.ops.convert_to_numpy(tensor)


def _batch(pad: int) -> dict:
    """A ragged batch, right-padded: source lengths 7, 5, 3; target lengths 4, 6, 2 (pad ids where the mask is 0)."""
    rng = np.random.default_rng(1)
    source, target = rng.integers(0, pad, (3, 7)), rng.integers(0, pad, (3, 6))  # [B, S], [B, T]
    source_mask = (np.arange(7)[None] < np.array([[7], [5], [3]])).astype("int32")  # [B, S]
    target_mask = (np.arange(6)[None] < np.array([[4], [6], [2]])).astype("int32")  # [B, T]
    return {"encoder_token_ids": np.where(source_mask == 1, source, pad).astype("int32"),
            "encoder_padding_mask": source_mask,
            "decoder_token_ids": np.where(target_mask == 1, target, pad).astype("int32"),
            "decoder_padding_mask": target_mask}  # fmt: skip


def _save(config: dict, path):
    """A user's folder: MarianMTModel from a config, random weights and a nonzero final_logits_bias, saved."""
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**config))
    model.final_logits_bias.normal_()  # nonzero in Marian checkpoints
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    """{name: a user's folder} for each of CONFIGS."""
    return {name: _save(config, tmp_path_factory.mktemp("marian")) for name, config in CONFIGS.items()}


@pytest.fixture(scope="module", params=list(CONFIGS))
def folder(request, folders):
    return folders[request.param]


def _hf(path, dtype: str):
    model = transformers.MarianMTModel.from_pretrained(path, attn_implementation="eager", dtype=getattr(torch, dtype))
    return model.eval()


def _hf_outputs(model, batch: dict) -> dict:
    with torch.no_grad():
        out = model(input_ids=torch.tensor(batch["encoder_token_ids"]),
                    attention_mask=torch.tensor(batch["encoder_padding_mask"]),
                    decoder_input_ids=torch.tensor(batch["decoder_token_ids"]),
                    decoder_attention_mask=torch.tensor(batch["decoder_padding_mask"]), output_hidden_states=True)  # fmt: skip
    return {"logits": out.logits.numpy(), "encoder": out.encoder_last_hidden_state.numpy(),
            "decoder": out.decoder_hidden_states[-1].numpy()}  # fmt: skip


def _config(path) -> dict:
    return json.loads((path / "config.json").read_text())


def _ours(path, dtype: str, config: dict | None = None):
    model = marian.MarianSeq2SeqLM.from_hf_config(config or _config(path), dtype=dtype)
    marian_weights.load_hf_weights(model, load_file(path / "model.safetensors"))
    return model


def _our_outputs(model, batch: dict) -> dict:
    hidden = model.backbone(batch)
    return {"logits": _numpy(model(batch)), "encoder": _numpy(hidden["encoder_sequence_output"]),
            "decoder": _numpy(hidden["decoder_sequence_output"])}  # fmt: skip


def _errors(ours: dict, reference: dict) -> dict:
    """Each output's max absolute difference relative to the reference's largest value."""
    return {k: float(np.abs(ours[k] - reference[k]).max() / np.abs(reference[k]).max()) for k in OUTPUTS}


@functools.cache
def _shared(folder, dtype: str):
    """Our model of `folder` in `dtype`, built once for the tests that read it (one that alters it restores it)."""
    return _ours(folder, dtype)


@functools.cache
def _reference(folder, dtype: str) -> dict:
    """HF's outputs of `folder` on its ragged batch, once."""
    return _hf_outputs(_hf(folder, dtype), _batch(_config(folder)["pad_token_id"]))


def _assert_computes_hf(folder, dtype: str) -> None:
    """Ours holding `folder` against HF's model of it on the ragged batch: every output within the dtype's bound."""
    batch = _batch(_config(folder)["pad_token_id"])
    errors = _errors(_our_outputs(_shared(folder, dtype), batch), _reference(folder, dtype))
    print(f"{folder.name} {dtype}: {errors}")
    assert max(errors.values()) < BOUNDS[dtype], errors


def test_ours_computes_hf_marian(folder):
    _assert_computes_hf(folder, "float64")


def test_ours_computes_hf_marian_in_float32(folders):
    _assert_computes_hf(folders["tied"], "float32")


def _interleaved(n_positions: int, dim: int, dtype: str) -> np.ndarray:
    """The naive table: sin and cos interleaved (XLM's, the Transformer paper's), not Marian's halves."""
    angles = np.arange(n_positions)[:, None] / np.power(10000, 2 * (np.arange(dim) // 2) / dim)  # [P, E]
    return np.where(np.arange(dim) % 2 == 0, np.sin(angles), np.cos(angles)).astype(dtype)


def _unrounded(n_positions: int, dim: int, dtype: str) -> np.ndarray:
    """Marian's halves computed in float64 and kept there: HF rounds them through float32 first."""
    angles = np.arange(n_positions)[:, None] / np.power(10000, 2 * np.arange(dim // 2) / dim)  # [P, E/2]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(dtype)


def _set_tables(model, table_fn) -> None:
    for positions in (model.backbone.encoder_embed_positions, model.backbone.decoder_embed_positions):
        positions.table = table_fn(positions.max_positions, positions.dim, "float64")


def _no_bias(model) -> None:
    model.final_logits_bias.bias.assign(np.zeros(model.final_logits_bias.bias.shape))


NAIVE = {  # name -> (config change, change to the loaded model, the folders it is checked on)
    "interleaved sin/cos": ({}, lambda m: _set_tables(m, _interleaved), tuple(CONFIGS)),
    "positions not rounded to float32": ({}, lambda m: _set_tables(m, _unrounded), tuple(CONFIGS)),
    "no final_logits_bias": ({}, _no_bias, tuple(CONFIGS)),
    "no scale_embedding": ({"scale_embedding": False}, None, ("tied",)),  # one scale for both sides: a build, once
}


@contextlib.contextmanager
def _restored(model):
    """The shared model as it was once the block ends: its position tables and every variable put back."""
    positions = (model.backbone.encoder_embed_positions, model.backbone.decoder_embed_positions)
    tables, values = [layer.table for layer in positions], [_numpy(variable) for variable in model.weights]
    try:
        yield model
    finally:
        for layer, table in zip(positions, tables, strict=True):
            layer.table = table
        for variable, value in zip(model.weights, values, strict=True):
            variable.assign(value)


@pytest.mark.parametrize(("name", "naive"), [(name, naive) for naive, (*_, names) in NAIVE.items() for name in names])
def test_naive_variants_are_caught(folders, name, naive):
    folder, (change, alter, _) = folders[name], NAIVE[naive]
    batch = _batch(_config(folder)["pad_token_id"])
    model = _ours(folder, "float64", {**_config(folder), **change}) if change else _shared(folder, "float64")
    with _restored(model):
        if alter:
            alter(model)
        errors = _errors(_our_outputs(model, batch), _reference(folder, "float64"))
    print(f"{naive}: {errors}")
    assert errors["logits"] > BOUNDS["float64"], errors


def test_flipped_padding_mask_is_caught(folder):
    batch = _batch(_config(folder)["pad_token_id"])
    flipped = {**batch, **{k: 1 - batch[k] for k in ("encoder_padding_mask", "decoder_padding_mask")}}
    errors = _errors(_our_outputs(_shared(folder, "float64"), flipped), _reference(folder, "float64"))
    assert errors["logits"] > BOUNDS["float64"], errors


def test_the_saved_file_writes_tied_keys_once(folder):
    """HF's file lacks the tied names (lm_head.weight, ...): a loader that wants every state_dict() key is refused."""
    saved = load_file(folder / "model.safetensors")
    full = _hf(folder, "float64").state_dict()
    missing = sorted(set(full) - set(saved))
    assert "lm_head.weight" in missing, missing
    with _restored(_shared(folder, "float64")) as model:
        marian_weights.load_hf_weights(model, {k: v.numpy() for k, v in full.items()})  # every key, tables checked


def test_keras_file_round_trip(folders, tmp_path):
    """The separate decoder vocabulary's model (its own decoder embedding); the tied one's: the dropout test below,
    the untied one's: test_untied_keras_file_round_trip."""
    folder = folders["separate decoder vocab"]
    model, batch = _shared(folder, "float64"), _batch(_config(folder)["pad_token_id"])
    model.save(tmp_path / "marian.keras")
    loaded = keras.saving.load_model(tmp_path / "marian.keras")
    assert np.array_equal(_numpy(loaded(batch)), _numpy(model(batch)))
    assert loaded.backbone.get_config() == model.backbone.get_config()
    assert marian.hf_config(loaded) == marian.hf_config(model)


BAD_STATES = {  # change -> words the one error must hold
    "missing": (lambda s: s.pop("model.encoder.layers.0.fc1.bias"), "missing: model.encoder.layers.0.fc1.bias"),
    "unexpected": (lambda s: s.update({"model.extra.weight": np.zeros(3)}), "unexpected: model.extra.weight"),
    "shape": (lambda s: s.update({"final_logits_bias": np.zeros((1, 7))}), "shape: final_logits_bias is (1, 7)"),
    "bad table": (lambda s: s.update({"model.encoder.embed_positions.weight": _interleaved(32, 16, "float32")}),
                  "model.encoder.embed_positions.weight is not Marian's sinusoidal table"),
}  # fmt: skip


@pytest.mark.parametrize("bad", list(BAD_STATES))
def test_bad_state_is_one_error(folder, bad):
    """Refused before any variable is set (load_hf_weights checks the whole state first): the shared model is kept."""
    state = {k: v.numpy() for k, v in _hf(folder, "float32").state_dict().items()}
    change, words = BAD_STATES[bad]
    change(state)
    with pytest.raises(ValueError, match="does not fit the model") as error:
        marian_weights.load_hf_weights(_shared(folder, "float64"), state)
    assert words in str(error.value)


def test_tied_keys_that_disagree_are_refused(folders):
    config = CONFIGS["tied"]
    model = _shared(folders["tied"], "float32")
    state = {k: v.numpy().copy() for k, v in transformers.MarianMTModel(transformers.MarianConfig(**config)).state_dict().items()}
    state["lm_head.weight"] += 1.0
    with pytest.raises(ValueError, match="tied keys disagree: model.shared.weight and lm_head.weight"):
        marian_weights.load_hf_weights(model, state)


BAD_CONFIGS = {  # field -> a value we cannot honour
    "activation_function": "mish",
    "attention_dropout": 1.0,
    "activation_dropout": "0.1",
    "encoder_attention_heads": 3,
    "d_model": "16",
    "model_type": "bart",
    "pad_token_id": 48,
}


@pytest.mark.parametrize("field", list(BAD_CONFIGS))
def test_bad_config_names_its_field(field):
    with pytest.raises(ValueError, match=f"config.json field '{field}'"):
        marian.from_hf_config({**CONFIGS["tied"], field: BAD_CONFIGS[field]})


def test_activations_follow_hf_by_name():
    """Each name we accept computes transformers' ACT2FN of that name (gelu exact, gelu_new tanh, swish = silu)."""
    x = np.linspace(-4, 4, 41)
    for name, ours in marian_layers.ACTIVATIONS.items():
        reference = transformers.activations.ACT2FN[name](torch.tensor(x)).numpy()
        assert np.abs(_numpy(ours(keras.ops.convert_to_tensor(x))) - reference).max() < 1e-14, name
    tanh_form, exact = (_numpy(marian_layers.ACTIVATIONS[name](keras.ops.convert_to_tensor(x))) for name in ("gelu_new", "gelu"))
    assert np.abs(tanh_form - exact).max() > 1e-4  # the two gelus differ: a name mapped to the other one is caught


UNTIED = {  # tie_word_embeddings false: HF 5.23 empties _tied_weights_keys, every matrix its own
    "untied shared": {**CONFIGS["tied"], "tie_word_embeddings": False},  # shared, encoder, decoder, lm_head: four
    "untied separate": {**CONFIGS["separate decoder vocab"], "tie_word_embeddings": False},  # encoder, decoder, lm_head
}
EMBEDDING_KEYS = {"model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                  "lm_head.weight"}  # fmt: skip


@pytest.fixture(scope="module")
def untied_folders(tmp_path_factory) -> dict:
    """{name: a user's folder of an untied MarianMTModel} (random weights, nonzero final_logits_bias)."""
    return {name: _save(config, tmp_path_factory.mktemp("marian_untied")) for name, config in UNTIED.items()}


@pytest.fixture(scope="module", params=list(UNTIED))
def untied(request, untied_folders):
    return untied_folders[request.param]


def test_untied_folder_holds_every_matrix_apart(untied):
    """The premise: HF writes each embedding matrix of an untied model, and no two are equal."""
    saved = load_file(untied / "model.safetensors")
    present = sorted(EMBEDDING_KEYS & set(saved))
    assert len(present) == (4 if _config(untied)["share_encoder_decoder_embeddings"] else 3), present
    pairs = [(a, b) for a in present for b in present if a < b and saved[a].shape == saved[b].shape]
    assert pairs and all(not np.array_equal(saved[a], saved[b]) for a, b in pairs), pairs


def test_ours_computes_hf_marian_untied(untied):
    _assert_computes_hf(untied, "float64")  # float32: test_ours_computes_hf_marian_in_float32


def test_untied_read_as_tied_is_refused(untied_folders):
    """Negative control: the tied mapping refuses the untied file (the untied shared one: every tied key disagrees)."""
    untied = untied_folders["untied shared"]
    tied = marian.MarianSeq2SeqLM.from_hf_config({**_config(untied), "tie_word_embeddings": True}, dtype="float64")
    with pytest.raises(ValueError, match="tied keys disagree"):
        marian_weights.load_hf_weights(tied, load_file(untied / "model.safetensors"))


def test_untied_read_as_tied_is_caught(untied):
    """Negative control: a model computing with the decoder's embedding as its lm_head (what reading the untied file
    as tied computes) misses HF's logits."""
    batch = _batch(_config(untied)["pad_token_id"])
    with _restored(_shared(untied, "float64")) as model:
        model.final_logits_bias.kernel.assign(model.backbone.decoder_embed_tokens.embeddings)
        errors = _errors(_our_outputs(model, batch), _reference(untied, "float64"))
    assert errors["logits"] > BOUNDS["float64"], errors


def test_untied_keras_file_round_trip(untied_folders, tmp_path):
    """Every HF matrix is a weight of ours (model.shared too, though no forward pass reads it) and survives `.keras`:
    the untied shared model, whose four matrices hold the untied separate one's three."""
    untied = untied_folders["untied shared"]
    model = _shared(untied, "float64")
    model.save(tmp_path / "marian.keras")
    loaded = keras.saving.load_model(tmp_path / "marian.keras")
    saved = load_file(untied / "model.safetensors")
    for names, variable, transpose in marian_weights.targets(loaded):
        assert np.array_equal(_numpy(variable), saved[names[0]].T if transpose else saved[names[0]]), names


RATES = {"dropout": 0.1, "attention_dropout": 0.2, "activation_dropout": 0.3}


@pytest.fixture(scope="module")
def dropping(tmp_path_factory):
    """A user's folder whose config has every dropout rate nonzero."""
    return _save({**CONFIGS["tied"], **RATES}, tmp_path_factory.mktemp("marian_dropout"))


def test_dropout_rates_build_save_load_and_inference_ignores_them(dropping, tmp_path):
    model, batch = _ours(dropping, "float64"), _batch(_config(dropping)["pad_token_id"])
    layer = model.backbone.decoder_layers[0]
    assert (layer.dropout.rate, layer.self_attn.dropout.rate, layer.encoder_attn.dropout.rate,
            layer.activation_dropout_layer.rate) == (0.1, 0.2, 0.2, 0.3)  # fmt: skip
    errors = _errors(_our_outputs(model, batch), _hf_outputs(_hf(dropping, "float64"), batch))
    assert max(errors.values()) < BOUNDS["float64"], errors
    model.save(tmp_path / "marian.keras")
    loaded = keras.saving.load_model(tmp_path / "marian.keras")
    assert {k: loaded.backbone.get_config()[k] for k in RATES} == RATES
    assert loaded.backbone.get_config() == model.backbone.get_config()  # the tied model's round trip
    assert marian.hf_config(loaded) == marian.hf_config(model)
    assert np.array_equal(_numpy(loaded(batch)), _numpy(model(batch)))


@pytest.mark.parametrize("rate", list(RATES))
def test_each_dropout_rate_is_applied_in_training(rate):
    """Negative control of the inference check: with only `rate` nonzero, training draws differ from inference."""
    model = marian.MarianSeq2SeqLM.from_hf_config({**CONFIGS["tied"], **dict.fromkeys(RATES, 0.0), rate: 0.5}, dtype="float32")
    batch = _batch(CONFIGS["tied"]["pad_token_id"])
    assert np.array_equal(_numpy(model(batch)), _numpy(model(batch)))
    assert not np.allclose(_numpy(model(batch, training=True)), _numpy(model(batch)))


def _loss_weights(shape, seed: int = 3) -> np.ndarray:
    """Fixed random weights R [B, T, V]: the loss sum(logits * R) sends a gradient through every logit, pads included."""
    return np.random.default_rng(seed).normal(size=shape)


def _hf_gradients(model, batch: dict) -> dict:
    """HF's torch autograd gradient of sum(logits * R) for every trainable parameter (tied ones once), float64."""
    model.zero_grad()
    logits = model(input_ids=torch.tensor(batch["encoder_token_ids"]), attention_mask=torch.tensor(batch["encoder_padding_mask"]),
                   decoder_input_ids=torch.tensor(batch["decoder_token_ids"]),
                   decoder_attention_mask=torch.tensor(batch["decoder_padding_mask"])).logits  # fmt: skip
    (logits * torch.tensor(_loss_weights(tuple(logits.shape)))).sum().backward()
    frozen = "embed_positions" if model.config.model_type == "marian" else None  # Marian's sinusoids: computed under no_grad
    return {name: p.grad.numpy() for name, p in model.named_parameters() if not (frozen and frozen in name)}


def _our_gradients(model, batch: dict) -> dict:
    """Our gradient of the same loss for every trainable variable, under the HF key that holds it (Keras on TensorFlow)."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        logits = model(batch)  # [B, T, V]
        loss = tf.reduce_sum(logits * tf.constant(_loss_weights(tuple(logits.shape))))
    found = [(names, variable, transpose) for names, variable, transpose in marian_weights.targets(model) if variable.trainable]
    grads = tape.gradient(loss, [variable.value for _, variable, _ in found])
    as_hf = {names: tf.convert_to_tensor(grad).numpy() for (names, _, _), grad in zip(found, grads, strict=True)}
    return {names: as_hf[names].T if transpose else as_hf[names] for names, _, transpose in found}


def gradient_errors(ours: dict, reference: dict) -> dict:
    """Each tensor's gradient error relative to HF's largest value in it (ours keyed by HF names); a gradient that is
    zero but for rounding (k_proj's bias: softmax ignores a shift of all scores) relative to 1e-6 of the largest of all."""
    floor = 1e-6 * max(np.abs(grad).max() for grad in reference.values())
    errors = {}
    for names, grad in ours.items():
        key = next(name for name in names if name in reference)
        errors[key] = float(np.abs(grad - reference[key]).max() / max(np.abs(reference[key]).max(), floor))
    assert len(errors) == len(reference), sorted(set(reference) - set(errors))
    return errors


def _pad_batch(pad: int) -> dict:
    """The ragged batch with every target starting with pad (Marian's decoder_start_token_id), pads after the ends too."""
    batch = _batch(pad)
    batch["decoder_token_ids"][:, 0] = pad
    return batch


def test_gradients_equal_hfs_with_the_pad_row_frozen_in_lookups(folder):
    """The pad id's looked-up vectors pass no gradient to the embedding (nn.Embedding(padding_idx)); the tied lm_head
    still gives the pad row one: every gradient equals HF's in float64."""
    batch = _pad_batch(_config(folder)["pad_token_id"])
    errors = gradient_errors(_our_gradients(_shared(folder, "float64"), batch), _hf_gradients(_hf(folder, "float64"), batch))
    print(f"{folder.name} gradients: max {max(errors.values()):.3g}")
    assert max(errors.values()) < BOUNDS["float64"], errors


def test_negative_control_a_lookup_without_the_pad_stop_misses_hfs_embedding_gradient(folders):
    """The same model told no pad id (a plain Keras Embedding lookup): its embedding gradient differs from HF's (the
    tied config: one pad_row_lookup serves every embedding of every config)."""
    folder = folders["tied"]
    batch, config = _pad_batch(_config(folder)["pad_token_id"]), _config(folder)
    naive = marian.MarianSeq2SeqLM(
        marian.MarianBackbone(**{**marian.from_hf_config(config), "pad_token_id": None}, dtype="float64")
    )
    marian_weights.load_hf_weights(naive, load_file(folder / "model.safetensors"))
    errors = gradient_errors(_our_gradients(naive, batch), _hf_gradients(_hf(folder, "float64"), batch))
    embedding = [key for key in errors if "embed_tokens" in key or "shared" in key]
    print(f"{folder.name} without the pad stop: {[errors[k] for k in embedding]}")
    assert max(errors[k] for k in embedding) > 1e-6, errors
