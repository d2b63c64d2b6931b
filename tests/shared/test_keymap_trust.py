"""Key maps a careless or hostile user hands `rosetta port`, numpy only: a short regex that the `regex` module would
compile into gigabytes is sized and refused before it is compiled, a binary file is one line naming it, and a preset
that does not fit a file says the file is not that layout. Each with its negative control. (A `--reference` that
prints: tests/stack/test_keymap_trust.py; a preset on a tutorial's other file: tests/cross/test_keymap_trust.py.)"""

from __future__ import annotations

import dataclasses
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import regex

from shared.port import ambiguity, endpoints, formats, layouts, pairing, regex_limits, stages

# ---- a regex is sized before it is compiled ----

REPORTED = r"^encoder\.((?:[a-z_]{999}){999}){9}(.*)$"  # 40 characters; written out, 9 million


@pytest.fixture(autouse=True)
def default_limit(monkeypatch):
    """The limit as shipped, whatever the environment running the tests raised it to."""
    monkeypatch.delenv(regex_limits.MAX_REGEX_VARIABLE, raising=False)


def _key_map(tmp_path: Path, data, name: str = "map.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _refused(path: Path) -> str:
    """The one-line error `rosetta port --key-map PATH` fails with, naming the file."""
    with pytest.raises(ValueError) as error:
        endpoints.endpoint("m.pt", key_map=str(path))
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    return message


class Compiling(Exception):
    """Raised where a pattern would have been compiled."""


@pytest.fixture
def compiles(monkeypatch) -> list[str]:
    """The patterns a key map has compiled, recorded and stopped there (Compiling) instead."""
    seen: list[str] = []

    def record(pattern: str):
        seen.append(pattern)
        raise Compiling(pattern)

    monkeypatch.setattr(regex_limits, "compiled", record)
    return seen


def test_the_reported_regex_is_refused_naming_the_file_entry_and_limit_without_compiling_it(tmp_path, compiles):
    assert len(REPORTED) == 40 and regex_limits.written_out_size(REPORTED) > 8_000_000
    path = _key_map(tmp_path, {"renames": [{"prefix": "a.", "to": "b."}, {"regex": REPORTED, "to": "enc.\\2"}]})
    message = _refused(path)
    assert "renames[1]: the regex" in message and "is 8,982,020 characters with each repetition written out" in message
    assert f"past the limit of {regex_limits.MAX_REGEX_SIZE:,}" in message and regex_limits.MAX_REGEX_VARIABLE in message
    assert compiles == []


def test_negative_control_without_the_size_the_old_parse_compiles_it(tmp_path, compiles, monkeypatch):
    """The guard taken away (the limit as large as the pattern), the parse hands the pattern to the compiler."""
    monkeypatch.setattr(regex_limits, "max_regex_size", lambda: 10**12)
    with pytest.raises(Compiling):
        layouts.load(_key_map(tmp_path, {"renames": [{"regex": REPORTED, "to": "enc.\\2"}]}))
    assert compiles == [REPORTED]


def _compiled_bytes(pattern: str) -> int:
    """The memory the `regex` module takes compiling `pattern` (its peak, uncached)."""
    tracemalloc.start()
    try:
        regex.compile(pattern, regex.VERSION0, cache_pattern=False)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_negative_control_the_compilers_memory_follows_the_written_out_size_not_the_length():
    """What the old code would have allocated, measured small: two patterns of one length whose written-out sizes
    differ 4x take about 4x the memory; at that rate the reported 40 characters take gigabytes."""
    small, large = r"(?:a{20}){20}", r"(?:a{40}){40}"
    assert len(small) == len(large) and regex_limits.written_out_size(large) == 4 * regex_limits.written_out_size(small)
    assert _compiled_bytes(large) > 3 * _compiled_bytes(small)
    per_character = _compiled_bytes(large) / regex_limits.written_out_size(large)
    assert per_character * regex_limits.written_out_size(REPORTED) > 2**30


def test_a_key_maps_regexes_share_one_limit_the_variable_raises_it(tmp_path, monkeypatch):
    rules = [{"regex": f"^x{index}\\.(a{{5000}})$", "to": "y.\\1"} for index in range(5)]  # 5,005 each
    path = _key_map(tmp_path, {"renames": rules})
    message = _refused(path)
    assert "renames[3]: the regex" in message and "with the key map's regexes before it, 20,020" in message
    assert "renames[4]" in message and "renames[2]" not in message  # each past the limit named, none before it
    monkeypatch.setenv(regex_limits.MAX_REGEX_VARIABLE, "30000")
    assert len(layouts.load(path).renames) == 5
    monkeypatch.setenv(regex_limits.MAX_REGEX_VARIABLE, "lots")
    assert f"{regex_limits.MAX_REGEX_VARIABLE}='lots': the size a key map's regexes may come to is a number" in _refused(path)


def test_a_regex_longer_than_the_limit_is_refused_unparsed_and_quoted_in_part(tmp_path, monkeypatch):
    """Parsing a huge pattern takes memory of its own: its length alone refuses it, its text cut in the error."""
    monkeypatch.setattr(regex_limits, "written_out_size", lambda pattern: pytest.fail("parsed"))
    message = _refused(_key_map(tmp_path, {"renames": [{"regex": "w" * 30_000, "to": "x"}]}))
    assert "renames[0]: the regex 'www" in message and "is 30,000 characters long, past the limit of 20,000" in message
    assert len(message) < 1_000


def test_the_guides_regex_still_renames_and_a_regex_outside_res_syntax_is_named():
    """Negative control beside the limit: a key map's ordinary regex (docs/porting-your-model.md's) is sized small,
    compiled once and renames."""
    rule = {"regex": r"^(encoder|decoder)\.rnn\.(.*)$", "to": "\\1.gru.\\2"}
    key_map = layouts.parse({"renames": [rule]}, "map.json")
    assert regex_limits.written_out_size(rule["regex"]) < 100 and key_map.renames[0].compiled is not None
    assert set(key_map.to_catalogue({"decoder.rnn.weight_ih_l0": np.zeros(1)})) == {"decoder.gru.weight_ih_l0"}
    with pytest.raises(ValueError, match=r"map.json: renames\[0\]: bad regex '\\\\p\{L\}\+' \(a key map's regex is Python's re"):
        layouts.parse({"renames": [{"regex": r"\p{L}+", "to": "x"}]}, "map.json")


# ---- a file that is no UTF-8 JSON ----


def _binary(tmp_path: Path) -> Path:
    path = tmp_path / "weights.json"  # a checkpoint saved under a key map's name
    path.write_bytes(b"\xff\xfe\x00PK\x03\x04" + bytes(range(256)))
    return path


def test_a_binary_key_map_is_one_line_naming_the_file_in_both_kinds_of_port(tmp_path):
    path = _binary(tmp_path)
    expected = f"{path}: not a UTF-8 JSON key map: not a UTF-8 text file (byte 0xff at byte 1)"
    assert _refused(path) == expected  # rosetta port --key-map
    with pytest.raises(ValueError) as error:  # rosetta port --torch-model/--keras-model --key-map, convert(key_map=)
        pairing.named_pairs(str(path))
    assert str(error.value) == expected


def test_negative_control_the_old_reading_named_no_file(tmp_path):
    """convert's key map was read with `json.loads(path.read_text())`: the codec's own words, no file."""
    path = _binary(tmp_path)
    with pytest.raises(ValueError) as error:
        json.loads(path.read_text())
    assert "'utf-8' codec can't decode byte 0xff" in str(error.value) and str(path) not in str(error.value)


# ---- a preset on a file of another layout ----

CANONICAL = ["encoder.embed.weight", "encoder.gru.weight_ih_l0", "encoder.fc.weight", "decoder.attention.fc1.weight",
             "decoder.embedding.weight", "decoder.gru.weight_ih_l0", "decoder.fc.weight"]  # fmt: skip
TREVETT = ["encoder.embedding.weight", "encoder.rnn.weight_ih_l0", "encoder.fc.weight", "decoder.attention.attn_fc.weight",
           "decoder.attention.v_fc.weight", "decoder.embedding.weight", "decoder.rnn.weight_ih_l0",
           "decoder.fc_out.weight"]  # fmt: skip


def _arrays(keys: list[str]) -> dict[str, np.ndarray]:
    return {key: np.zeros((2, 4)) for key in keys}


def test_a_preset_on_a_file_of_another_layout_says_the_file_is_not_that_layout():
    preset = layouts.preset("trevett-nmt3")
    with pytest.raises(ValueError) as error:
        preset.to_catalogue(_arrays(CANONICAL), "model.pt")
    message = str(error.value)
    assert message.startswith("model.pt is not the trevett-nmt3 layout (Ben Trevett's"), message
    lacking = "encoder.embedding.*, encoder.rnn.*, decoder.rnn.*, ... (6 in all)"
    assert f"that layout's files hold keys {lacking}, which model.pt lacks" in message
    assert "model.pt holds encoder.embed.weight, encoder.gru.weight_ih_l0, encoder.fc.weight, ..." in message
    assert "renames[" not in message and "\n" not in message
    assert preset.to_catalogue(_arrays(TREVETT), "tut3-model.pt")  # the preset reads its own layout's file


def test_negative_control_as_a_key_map_of_the_users_own_it_lists_the_renames():
    """The same renames as the user's own key map (not a preset): the entries to fix, as before."""
    own = dataclasses.replace(layouts.preset("trevett-nmt3"), preset=False)
    with pytest.raises(ValueError) as error:
        own.to_catalogue(_arrays(CANONICAL), "model.pt")
    assert "renames[0] (prefix 'encoder.embedding.' -> 'encoder.embed.')" in str(error.value)
    assert "is not the trevett-nmt3 layout" not in str(error.value)


@dataclasses.dataclass
class _Stack:
    """A stack whose model holds `keys` (what check_preset_fits asks of one)."""

    keys: list[str]

    def build(self, name, dtype, **config):
        return self.keys

    def get_weights(self, model):
        return _arrays(model)


def test_a_preset_whose_renames_apply_but_whose_keys_do_not_fit_the_model_says_so_in_the_files_names(tmp_path):
    """A file of the layout but one key (`decoder.embedding` saved as `decoder.emb`): not that layout, named in the
    file's own names, where the strict read proposed renames for a key map (tests/cross/test_keymap_trust.py)."""
    preset = layouts.preset("trevett-nmt3")
    file_keys = [key.replace("decoder.embedding.", "decoder.emb.") for key in TREVETT]
    src = endpoints.Endpoint(tmp_path / "emb.pt", formats.FORMATS["torch"], preset)
    read = stages.Read(preset.to_catalogue(_arrays(file_keys), "emb.pt"), None, {}, {}, "float32")
    model = _Stack([key.replace("decoder.emb.", "decoder.embedding.") for key in read.weights])
    with pytest.raises(ValueError) as error:
        ambiguity.check_preset_fits(src, model, "bahdanau_bigru", read)
    assert str(error.value) == (
        f"{src.text} is not the trevett-nmt3 layout ({preset.description}): that layout's files hold keys "
        f"decoder.embedding.weight, which {src.text} lacks; {src.text} holds decoder.emb.weight, which that layout's "
        "files do not"
    )
    ambiguity.check_preset_fits(dataclasses.replace(src, layout=layouts.IDENTITY), model, "bahdanau_bigru", read)  # no preset
    good = stages.Read(preset.to_catalogue(_arrays(TREVETT)), None, {}, {}, "float32")
    ambiguity.check_preset_fits(src, _Stack(list(good.weights)), "bahdanau_bigru", good)  # its own file fits


def test_file_key_names_a_catalogue_key_as_the_layouts_files_do():
    preset = layouts.preset("trevett-nmt3")
    assert preset.file_key("decoder.attention.fc1.weight") == "decoder.attention.attn_fc.weight"
    assert preset.file_key("encoder.fc.weight") == "encoder.fc.weight"  # kept by the layout
    assert preset.renames[0].file_side == "encoder.embedding.*"
