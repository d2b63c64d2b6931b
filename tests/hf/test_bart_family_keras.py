"""Our Keras BART and mBART (tf_impl/hf/bart.py, mbart.py on tf_impl/hf/bart_family.py) against transformers 5.23's
BartForConditionalGeneration and MBartForConditionalGeneration (eager attention, eval), from a user's save_pretrained
folder of a tiny random model (tests/zoo/hf_models.py): logits and the encoder's and decoder's last hidden states
equal in float64 to 1e-12 of the largest value, float32 within 1e-5, on a ragged padding batch; gradients too.
Negative controls (each naive variant caught by the same comparison): positions read without BART's offset 2, mBART
computed post-norm, no layernorm_embedding, mBART without its final layer_norm, the mask's polarity flipped, gelu_new
computed as exact gelu. The contract, Marian's included: hf_state -> write_folder -> from_pretrained (no missing or
unexpected key, equal logits), load_hf_weights(hf_state) bit for bit, the `.keras` round trip keeping hf_config.
Each folder's model is built once per dtype and shared by the checks that read it (a check that alters it puts it
back); each check runs on one config per code path it guards (float32 and the naive variants: BART and mBART; the
activations' variants in float64 and their gradients)."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import torch
import transformers

from shared.hf import folders, structure
from tests.hf.test_marian_keras import BOUNDS, _errors, _hf_gradients, _numpy, _our_gradients, _our_outputs, gradient_errors
from tests.zoo import hf_models
from tf_impl.hf import bart, marian, mbart

FAMILIES = {"bart": bart, "mbart": mbart, "marian": marian}
FOLDERS = {  # name -> (zoo family, config overrides)
    "bart": ("bart", {}),
    "mbart": ("mbart", {}),
    "bart gelu_new": ("bart", {"activation_function": "gelu_new", "scale_embedding": True}),
    "mbart relu": ("mbart", {"activation_function": "relu"}),
}


def _save(family: str, path, **overrides):
    built = hf_models.model(family, **overrides)
    built.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """{name: a user's folder of a tiny random BART or mBART} (nonzero final_logits_bias), save_pretrained."""
    return {name: _save(family, tmp_path_factory.mktemp(name.replace(" ", "_")), **overrides)
            for name, (family, overrides) in FOLDERS.items()}  # fmt: skip


@pytest.fixture(scope="module", params=list(FOLDERS))
def folder(request, saved):
    return saved[request.param]


def _batch(pad: int, source_vocab: int = hf_models.VOCAB, target_vocab: int = hf_models.VOCAB) -> dict:
    """A ragged right-padded batch: source lengths 7, 5, 3, target lengths 4, 6, 2; tokens anywhere in the vocabulary
    but the pad id, which fills the padding (mask 0)."""
    rng = np.random.default_rng(1)
    source, target = rng.integers(0, source_vocab - 1, (3, 7)), rng.integers(0, target_vocab - 1, (3, 6))  # [B, S], [B, T]
    source, target = source + (source >= pad), target + (target >= pad)  # every id but pad
    source_mask = (np.arange(7)[None] < np.array([[7], [5], [3]])).astype("int32")  # [B, S]
    target_mask = (np.arange(6)[None] < np.array([[4], [6], [2]])).astype("int32")  # [B, T]
    return {
        "encoder_token_ids": np.where(source_mask == 1, source, pad).astype("int32"),
        "encoder_padding_mask": source_mask,
        "decoder_token_ids": np.where(target_mask == 1, target, pad).astype("int32"),
        "decoder_padding_mask": target_mask,
    }


def _hf(path, dtype: str):
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager", dtype=getattr(torch, dtype))
    return model.eval()


def _hf_outputs(model, batch: dict) -> dict:
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(batch["encoder_token_ids"]),
            attention_mask=torch.tensor(batch["encoder_padding_mask"]),
            decoder_input_ids=torch.tensor(batch["decoder_token_ids"]),
            decoder_attention_mask=torch.tensor(batch["decoder_padding_mask"]),
            output_hidden_states=True,
        )
    return {"logits": out.logits.numpy(), "encoder": out.encoder_last_hidden_state.numpy(),
            "decoder": out.decoder_hidden_states[-1].numpy()}  # fmt: skip


def _ours(path, dtype: str, **changes):
    """Our model of the folder (the family from config.json), built with `changes` to its arguments, weights loaded."""
    read = folders.read_folder(path)
    family = FAMILIES[read.model_type]
    model_class = family.MODELS[0]
    model = model_class(model_class.BACKBONE(**{**family.from_hf_config(read.config), **changes}, hf_config=read.config,
                                             dtype=dtype))  # fmt: skip
    family.load_hf_weights(model, read.arrays)
    return model


def _pad(path) -> int:
    return folders.read_folder(path).config["pad_token_id"]


@functools.cache
def _shared(path, dtype: str):
    """Our model of the folder in `dtype`, built once for the checks that read it (one that alters it restores it)."""
    return _ours(path, dtype)


@functools.cache
def _reference(path, dtype: str) -> dict:
    """HF's outputs of the folder on its ragged batch, once."""
    return _hf_outputs(_hf(path, dtype), _batch(_pad(path)))


def _compare(path, model, batch=None, dtype: str = "float64") -> dict:
    batch = batch or _batch(_pad(path))
    return _errors(_our_outputs(model, batch), _reference(path, dtype))


def _assert_computes_hf(folder, dtype: str) -> None:
    errors = _compare(folder, _shared(folder, dtype), dtype=dtype)
    print(f"{folder.name} {dtype}: {errors}")
    assert max(errors.values()) < BOUNDS[dtype], errors


def test_ours_computes_hf(folder):
    _assert_computes_hf(folder, "float64")


@pytest.mark.parametrize("name", ["bart", "mbart"])
def test_ours_computes_hf_in_float32(saved, name):
    """Post-norm and pre-norm in float32; the activations' variants compute the same float32 code (float64 above)."""
    _assert_computes_hf(saved[name], "float32")


def test_gradients_equal_hfs(folder):
    """Every trainable variable's gradient (learned positions and norms included) equals HF's, pad ids in the batch."""
    batch = _batch(_pad(folder))
    batch["decoder_token_ids"][:, 0] = _pad(folder)
    errors = gradient_errors(_our_gradients(_shared(folder, "float64"), batch), _hf_gradients(_hf(folder, "float64"), batch))
    print(f"{folder.name} gradients: max {max(errors.values()):.3g}")
    assert max(errors.values()) < BOUNDS["float64"], errors


def _no_offset(model) -> None:
    for positions in (model.backbone.encoder_embed_positions, model.backbone.decoder_embed_positions):
        positions.offset = 0


def _without(words: str):
    """A naive model lacking the norms whose HF keys hold `words`: the folder's other weights loaded into it."""

    def load(path, changes: dict):
        read = folders.read_folder(path)
        family = FAMILIES[read.model_type]
        model = family.MODELS[0](family.MODELS[0].BACKBONE(**{**family.from_hf_config(read.config), **changes},
                                                           dtype="float64"))  # fmt: skip
        family.load_hf_weights(model, {k: v for k, v in read.arrays.items() if words not in k})
        return model

    return load


def _offset_restored(model) -> None:
    for positions in (model.backbone.encoder_embed_positions, model.backbone.decoder_embed_positions):
        positions.offset = 2


NAIVE = {  # name -> (the folders it is checked on: one per code path, argument changes, loader or None, alteration)
    "positions without the offset 2": (("bart", "mbart"), {}, None, _no_offset),
    "no layernorm_embedding": (("bart",), {"layernorm_embedding": False}, _without("layernorm_embedding"), None),
    "mbart computed post-norm": (("mbart",), {"normalize_before": False}, None, None),
    "mbart without its final layer_norm": (("mbart",), {"final_layer_norm": False}, _without(".layer_norm."), None),
    "gelu_new computed as exact gelu": (("bart gelu_new",), {"activation": "gelu"}, None, None),
}


@pytest.mark.parametrize(("name", "naive"), [(name, naive) for naive, (names, *_) in NAIVE.items() for name in names])
def test_naive_variants_are_caught(saved, name, naive):
    folder, (_, changes, loader, alter) = saved[name], NAIVE[naive]
    model = loader(folder, changes) if loader else _ours(folder, "float64", **changes) if changes else _shared(folder, "float64")
    try:
        if alter:
            alter(model)
        errors = _compare(folder, model)
    finally:
        if alter:
            _offset_restored(model)
    print(f"{folder.name} {naive}: {errors}")
    assert errors["logits"] > BOUNDS["float64"], errors


def test_flipped_padding_mask_is_caught(folder):
    batch = _batch(_pad(folder))
    flipped = {**batch, **{k: 1 - batch[k] for k in ("encoder_padding_mask", "decoder_padding_mask")}}
    errors = _compare(folder, _shared(folder, "float64"), flipped)
    assert errors["logits"] > BOUNDS["float64"], errors


# ---- the contract, each family (Marian's too) ----

CONTRACT = {"bart": {}, "mbart": {}, "marian": {}, "marian_separate": {}, "bart untied": {"tie_word_embeddings": False}}


@pytest.fixture(scope="module", params=list(CONTRACT))
def built(request):
    """A family's model built from a zoo config dict (random weights, a nonzero final_logits_bias), float64."""
    zoo = request.param.split()[0]
    config = hf_models.config(zoo, **CONTRACT[request.param]).to_dict()
    family = FAMILIES[config["model_type"]]
    model = family.build(config, dtype="float64")
    rng = np.random.default_rng(5)
    for variable in (model.final_logits_bias.bias, model.final_logits_bias.kernel):  # untied: the lm_head's own matrix
        if variable is not None:
            variable.assign(rng.normal(size=variable.shape))
    return family, model


def test_hf_state_is_hfs_state_dict_and_loads_back_bit_for_bit(built):
    family, model = built
    state = family.hf_state(model)
    config = family.hf_config(model)
    expected = structure.state_dict_shapes(config, config["model_type"])  # HF's keys, checked against HF in test_hf_folders
    assert {k: v.shape for k, v in state.items()} == expected, set(state) ^ set(expected)
    assert all(value.dtype == np.float64 for value in state.values())
    again = family.build(family.hf_config(model), dtype="float64")
    family.load_hf_weights(again, state)
    assert all(np.array_equal(_numpy(a), _numpy(b)) for a, b in zip(model.weights, again.weights, strict=True))


def test_written_folder_loads_in_transformers_with_equal_logits(built, tmp_path):
    family, model = built
    path = folders.write_folder(tmp_path / "out", family.hf_config(model), family.hf_state(model))
    loaded, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float64,
                                                                        output_loading_info=True)  # fmt: skip
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    batch = _model_batch(model)
    errors = _errors(_our_outputs(model, batch), _hf_outputs(loaded.eval(), batch))
    print(f"{type(model).__name__} written and read by transformers: {errors}")
    assert max(errors.values()) < BOUNDS["float64"], errors


def _model_batch(model) -> dict:
    args = model.backbone.arguments
    return _batch(args["pad_token_id"], args["vocabulary_size"], args["decoder_vocabulary_size"])


@pytest.mark.parametrize("name", ["bart", "mbart"])
def test_keras_file_keeps_weights_and_hf_config(saved, name, tmp_path):
    """BART's and mBART's `.keras` round trip (Marian's, tied, separate and untied: tests/hf/test_marian_keras.py's,
    whose untied head is bart untied's FinalLogitsBias kernel)."""
    family, model = FAMILIES[name], _shared(saved[name], "float64")
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded) is type(model) and family.hf_config(loaded) == family.hf_config(model)
    batch = _model_batch(model)
    assert np.array_equal(_numpy(loaded(batch)), _numpy(model(batch)))


def test_a_model_built_by_hand_gets_a_derived_config():
    model = bart.BartSeq2SeqLM(bart.BartBackbone(**bart.from_hf_config(hf_models.config("bart").to_dict()), dtype="float32"))
    config = bart.hf_config(model)
    assert config["model_type"] == "bart" and config["vocab_size"] == hf_models.VOCAB and config["dtype"] == "float32"
    assert set(bart.hf_state(model)) == set(
        transformers.BartForConditionalGeneration(transformers.BartConfig(**config)).state_dict()
    )


BAD_CONFIGS = {  # field -> a value the model cannot honour
    "activation_function": "mish",
    "encoder_layerdrop": 0.1,
    "decoder_attention_heads": 3,
    "model_type": "marian",
    "pad_token_id": 48,
    "dropout": 1.5,
}


@pytest.mark.parametrize("family", ["bart", "mbart"])
@pytest.mark.parametrize("field", list(BAD_CONFIGS))
def test_bad_config_names_its_field(family, field):
    config = hf_models.config(family).to_dict()
    with pytest.raises(ValueError, match=f"config.json field '{field}'"):
        FAMILIES[family].build({**config, field: BAD_CONFIGS[field]})
