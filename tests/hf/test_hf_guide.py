"""docs/hf.md run as its reader runs it. The guide's blocks read the reader's own Hugging Face folders (opus-mt-en-de,
t5-small, bart-base) and keras-hub's bart_base_en preset, which no test may download, so the docs convention marks
them sketches (tests/*/test_docs.py check them, never run them). Here they run in order in one work folder
(tests/doc_blocks.py's), beside tiny stand-ins saved under those names by `save_pretrained` (random weights): every
python and bash block but the ones that download, each of which a stand-in replaces.
Negative controls: a command naming a folder the work folder lacks fails the page naming its block; the guide's own
comparison of transformers' logits with Keras's catches padding masks of the other polarity; a report line the port
no longer prints is caught by the check of the guide's printed report."""

from __future__ import annotations

import json
import re

import keras
import keras_hub
import numpy as np
import pytest
import torch
import transformers

from tests import doc_blocks
from tests.zoo import hf_models as zoo

GUIDE = doc_blocks.REPO / "docs" / "hf.md"
DOWNLOADS = re.compile(r"\bhf download\b|\bfrom_preset\(|\bsnapshot_download\(")  # the network: never run here
TOKENIZER_FILE = {"model_max_length": 32}  # a tokenizer file of the stand-in, which written folders carry


def _blocks(text: str | None = None) -> list[doc_blocks.Block]:
    return [block for block in doc_blocks.blocks(GUIDE, text) if block.language in doc_blocks.RUN_LANGUAGES]


def _stand_ins(folder) -> None:
    """What the reader has: opus-mt-en-de, t5-small and bart-base folders (bart-base's final_logits_bias is zero, as
    published), and keras-hub's bart_base_en saved as `.keras`, all tiny."""
    zoo.model("marian").save_pretrained(folder / "opus-mt-en-de")
    (folder / "opus-mt-en-de" / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_FILE))
    zoo.model("t5").save_pretrained(folder / "t5-small")
    torch.manual_seed(0)
    transformers.AutoModelForSeq2SeqLM.from_config(zoo.config("bart")).save_pretrained(folder / "bart-base")
    keras.utils.set_random_seed(3)
    backbone = keras_hub.models.BartBackbone(vocabulary_size=zoo.VOCAB, num_layers=2, num_heads=2, hidden_dim=16,
                                             intermediate_dim=24, max_sequence_length=zoo.POSITIONS)  # fmt: skip
    keras_hub.models.BartSeq2SeqLM(backbone=backbone).save(folder / "bart_base_en.keras")


@pytest.fixture(scope="module")
def guide(tmp_path_factory) -> dict:
    """The guide run once: its work folder and namespace, and what each block printed, by block."""
    space = doc_blocks.Workspace.make(tmp_path_factory.mktemp("hf_guide"))
    _stand_ins(space.folder)
    printed, skipped = {}, []
    for block in _blocks():
        if DOWNLOADS.search(block.code):
            skipped.append(block)
            continue
        printed[block.where] = doc_blocks.run_block(block, space, in_process=True)
    return {"space": space, "printed": printed, "skipped": skipped}


def test_every_block_but_the_downloads_runs_beside_the_stand_ins(guide):
    assert len(guide["printed"]) >= 9 and len(guide["skipped"]) == 1, (sorted(guide["printed"]), guide["skipped"])
    assert "bart_base_en.keras" in guide["skipped"][0].code  # the download the keras-hub stand-in replaces
    assert all(block.marker == "sketch" for block in _blocks()), "a block reading the reader's folders must be a sketch"


def test_the_tuned_folder_carries_the_tokenizer_and_the_tuned_weights(guide):
    """The last port of the fine-tuning section wrote a folder transformers loads, the source's tokenizer file
    carried, holding other weights than the folder it was tuned from (fit moved them)."""
    folder = guide["space"].folder
    assert json.loads((folder / "opus-mt-en-de-tuned" / "tokenizer_config.json").read_text()) == TOKENIZER_FILE
    tuned = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder / "opus-mt-en-de-tuned").state_dict()
    first = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder / "opus-mt-en-de").state_dict()
    assert max(float((tuned[key] - first[key]).abs().max()) for key in first) > 0


def _shape(line: str) -> str:
    """A report line without its numbers and paths: what the port prints of any model."""
    return re.sub(r"'[^']*'|\d[\d,.]*(e[+-]\d+)?", "#", line.strip().replace("opus-mt-en-de", "PATH"))


def _printed_report_missing(console: str, printed: str) -> list[str]:
    """The lines of the guide's console block whose shape the port's printed output lacks."""
    shapes = {_shape(line) for line in printed.splitlines()}
    return [line for line in console.splitlines()[1:] if _shape(line) not in shapes]


def _console_and_printed(guide) -> tuple[str, str]:
    console = next(b for b in doc_blocks.blocks(GUIDE) if b.language == "console" and "$ rosetta port" in b.code)
    command = console.code.splitlines()[0].removeprefix("$ ")
    block = next(b for b in _blocks() if command in b.code)
    return console.code, guide["printed"][block.where]


def test_the_printed_report_is_the_guides(guide):
    """Every line of the guide's report (at the published size) is a line the same command prints on the stand-in."""
    console, printed = _console_and_printed(guide)
    assert _printed_report_missing(console, printed) == []


def test_negative_control_a_report_line_the_port_does_not_print_is_caught(guide):
    console, printed = _console_and_printed(guide)
    assert _printed_report_missing(console.replace("the mapping:", "the map:"), printed) != []


def test_negative_control_a_command_reading_a_folder_the_reader_lacks_fails_naming_its_block(tmp_path):
    """The guide's first command in a work folder without the stand-ins: the block runs (a sketch is run here) and
    fails, naming the page and line."""
    first = next(block for block in _blocks() if block.language == "bash")
    space = doc_blocks.Workspace.make(tmp_path)
    with pytest.raises(AssertionError, match=rf"{first.where}: `rosetta port opus-mt-en-de .*` exits 2"):
        doc_blocks.run_block(first, space, in_process=True)


def test_negative_control_the_guides_comparison_catches_flipped_padding_masks(guide):
    """The guide's block that runs the written folder in transformers, given masks of the other polarity (1 for pad, as
    a torch key_padding_mask): its assertion fails."""
    space = guide["space"]
    block = next(b for b in _blocks() if "hf_logits" in b.code)
    inputs = space.namespace["inputs"]
    flipped = {name: 1 - value if name.endswith("mask") else value for name, value in inputs.items()}
    flipped["encoder_padding_mask"][:, 0] = 1  # every row keeps one key: the flipped mask is no fully masked row
    flipped["decoder_padding_mask"][:, 0] = 1
    space.namespace["inputs"] = flipped
    try:
        with pytest.raises(AssertionError, match="the python block raises AssertionError"):
            doc_blocks.run_block(block, space)
    finally:
        space.namespace["inputs"] = inputs
    assert isinstance(space.namespace["logits"], np.ndarray)
