"""The catalogue's options and size table without a framework: the renamed `embed_dim` refused by name, boolean
options validated by type, every size of every config in the size table, absent weights skipped when sizes are read."""

from __future__ import annotations

import pytest

from shared import catalogue

MODELS = catalogue.built()


def test_the_old_embed_dim_key_is_refused_by_name():
    with pytest.raises(ValueError, match="has no config embed_dim; it takes: .*encoder_embed_dim, decoder_embed_dim"):
        catalogue.resolve_config(catalogue.get("bahdanau_bigru"), "float32", {"embed_dim": 256})


@pytest.mark.parametrize(("name", "key"), [("bahdanau_bigru", "attention_bias"), ("tf_tutorial", "w1_on_query")])
def test_boolean_options_validate_by_type(name, key):
    from shared.cli import _key_values

    spec = catalogue.get(name)
    assert type(spec.config[key]) is bool
    for text, value in (("false", False), ("true", True)):
        overrides = _key_values([f"{key}={text}"], "--set")  # how `--set KEY=VALUE` arrives
        assert overrides == {key: value} and catalogue.resolve_config(spec, "float32", overrides)[key] is value
    for bad in (0, 1, "false", None):
        with pytest.raises(ValueError, match=f"config {key} must be of type bool"):
            catalogue.resolve_config(spec, "float32", {key: bad})
    size_key = next(iter(spec.weight_sizes))
    with pytest.raises(ValueError, match=f"config {size_key} must be of type int"):
        catalogue.resolve_config(spec, "float32", {size_key: True})  # a bool is no size


@pytest.mark.parametrize("name", MODELS)
def test_the_size_table_covers_every_size_of_the_config(name):
    spec = catalogue.get(name)
    int_keys = {key for key, value in spec.config.items() if type(value) is int}
    assert spec.weight_sizes.keys() == int_keys - catalogue.NOT_WEIGHT_SIZES.keys()
    assert spec.interface != "seq2seq" or set(spec.vocab_keys) <= spec.weight_sizes.keys()


def test_sizes_from_weights_skips_absent_weights():
    spec = catalogue.get("bahdanau_bigru")
    shapes = {"encoder.embed.weight": (23, 7), "decoder.gru.weight_hh_l0": [33, 11], "unrelated": (1,)}
    sizes = catalogue.sizes_from_weights(spec, shapes)
    assert sizes == {"src_vocab_size": 23, "encoder_embed_dim": 7, "decoder_hidden_size": 11}
    assert all(type(value) is int for value in sizes.values())
