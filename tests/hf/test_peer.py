"""keras-hub measured as the peer (shared/hf/peer.py) on users' save_pretrained folders of tests/zoo's tiny models:
a record per family of what `keras_hub.models.BartBackbone.from_preset(<folder>)` does. Marian, mBART and T5 have no
keras-hub converter; BART's v5 config lacks `num_hidden_layers`. With the key added to the folder it loads, and its
outputs are measured against HF's; negative control: a config keras-hub ignores (scale_embedding) is caught by the
measurement. A path that is no folder is refused before keras-hub could take it for a handle to download."""

from __future__ import annotations

import json

import pytest

from shared.hf import peer
from tests.zoo import hf_models as zoo

FAMILIES = ("marian", "bart", "mbart", "t5", "t5_v1_1")
KEYS = {"family", "loader", "loads", "error", "max_error_float32", "max_error_float64"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{family: folder} of tiny random models, saved as a user saves them."""
    found = {}
    for family in FAMILIES:
        found[family] = tmp_path_factory.mktemp(family)
        zoo.model(family).save_pretrained(found[family])
    return found


def test_records_per_family(folders):
    records = peer.measure(folders)
    assert [record["family"] for record in records] == list(FAMILIES)
    for record in records:
        print(record)
        assert set(record) == KEYS and record["loads"] is False and record["max_error_float64"] is None
        assert len(record["error"]) <= peer.ERROR_CHARS and "\n" not in record["error"]
    by_family = {record["family"]: record for record in records}
    assert "converter" in by_family["marian"]["error"] and "marian" in by_family["marian"]["error"]
    assert "num_hidden_layers" in by_family["bart"]["error"]


def test_bart_with_num_hidden_layers_loads_and_is_measured(folders, tmp_path):
    probe = peer.with_num_hidden_layers(folders["bart"], tmp_path / "bart")
    (record,) = peer.measure({"bart+num_hidden_layers": probe})
    print(record)
    assert record["loads"] is True and record["error"] is None
    assert record["max_error_float32"] <= 1e-5 and record["max_error_float64"] <= 1e-5


def test_the_measurement_catches_what_keras_hub_ignores(folders, tmp_path):
    """Negative control: scale_embedding true in config.json: HF scales by sqrt(d_model), keras-hub loads it unscaled."""
    probe = peer.with_num_hidden_layers(folders["bart"], tmp_path / "bart")
    config = json.loads((probe / "config.json").read_text()) | {"scale_embedding": True}
    (probe / "config.json").write_text(json.dumps(config))
    (record,) = peer.measure({"bart scaled": probe})
    assert record["loads"] is True and record["max_error_float64"] > 1e-3


def test_no_folder_is_refused_before_keras_hub(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        peer.measure({"bart": tmp_path / "bart_base_en"})
