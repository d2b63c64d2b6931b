"""The report's Hugging Face section (shared/tools/report/hf_ports.py) from a fixture results file: the ports table
(size, time, peak memory, errors, keras-hub beside ours), the README's models x directions x proofs block, and
`rosetta report --readme` filling it. Negative controls: a port whose mapping failed reads "NOT verified", never
"proved"; a file of an unknown schema is named as unread, not rendered as if measured."""

from __future__ import annotations

import json

from shared import cli
from shared.tools.report import hf_ports

CHECKS = [{"dtype": "float64", "max_abs": {"encoder": 1e-15, "decoder": 3e-15, "logits": 2e-15}},
          {"dtype": "float32", "max_abs": {"encoder": 4e-7, "decoder": 9e-7, "logits": 5e-7}}]  # fmt: skip
PORT = {"ok": True, "wall_s": 12.34, "rss_before_mb": 700.0, "peak_rss_mb": 2900.0, "output_bytes": 300 * 2**20,
        "error": None, "checks": CHECKS}  # fmt: skip
PEER_FAILS = [{"folder": "as written", "loads": False, "error": "ValueError: no converter for marian"}]
PEER_LOADS = [{"folder": "as written", "loads": False, "error": "KeyError: 'num_hidden_layers'"},
              {"folder": "num_hidden_layers as published", "loads": True, "max_error_float32": 2e-7,
               "max_error_float64": 9e-12}]  # fmt: skip
FIXTURE = {
    "schema": 1,
    "environment": {"machine": "cpu-test-2c", "cores": 2, "threads": 2, "memory_available_mb": 22000,
                    "versions": {"transformers": "5.23.0"}, "commit": "abc", "created": "2026-11-28"},  # fmt: skip
    "notes": ["a shared machine"],
    "models": {
        "opus-mt-en-de": {"model_type": "marian", "status": "measured", "reason": None,
                          "build": {"parameters": 74_410_000, "safetensors_bytes": 298 * 2**20},
                          "directions": {"to_keras": PORT, "to_hf": PORT}, "peer": PEER_FAILS},
        "bart-base": {"model_type": "bart", "status": "failed", "reason": "HF folder -> .keras: not verified",
                      "build": {"parameters": 139_420_000, "safetensors_bytes": 532 * 2**20},
                      "directions": {"to_keras": PORT | {"ok": False, "checks": [{"max_abs": {"logits": 0.5}}, {}]}},
                      "peer": PEER_LOADS},
        "mbart-large-50": {"model_type": "mbart", "status": "skipped", "reason": "its port would need about 63 GiB",
                           "directions": {}, "peer": [PEER_FAILS[0] | {"error": "ValueError: no converter for mbart"}]},
    },
}  # fmt: skip


def _fixture(tmp_path, data=FIXTURE):
    path = tmp_path / "hf_ports.json"
    path.write_text(json.dumps(data))
    return path


def _row(lines: list[str], *cells: str) -> str:
    (found,) = [line for line in lines if all(f"| {cell} |" in line for cell in cells)]
    return found


def test_the_ports_table_gives_size_time_memory_errors_and_keras_hub(tmp_path):
    missing: list = []
    lines = hf_ports.section(hf_ports.load(_fixture(tmp_path), missing))
    print("\n".join(lines))
    assert missing == [] and "- a shared machine" in lines
    row = _row(lines, "opus-mt-en-de", "HF folder -> .keras")
    for cell in ("74,410,000", "298", "proved", "12.3", "2,900", "2,200", "3.0e-15", "9.0e-07", "300"):
        assert f"| {cell} |" in row, cell
    assert "fails: ValueError: no converter for marian" in row
    assert "| proved |" in _row(lines, "opus-mt-en-de", ".keras -> HF folder")
    skipped = _row(lines, "mbart-large-50")
    assert "skipped: its port would need about 63 GiB" in skipped and "no converter for mbart" in skipped


def test_a_failed_mapping_is_not_verified_never_proved(tmp_path):
    """Negative control: the verdict comes from the record's ok, not from the presence of numbers."""
    lines = hf_ports.section(hf_ports.load(_fixture(tmp_path), []))
    row = _row(lines, "bart-base", "HF folder -> .keras")
    assert "| NOT verified |" in row and "| proved |" not in row and "| 5.0e-01 |" in row
    assert "num_hidden_layers as published: loads, max rel. diff 2.0e-07 · 9.0e-12" in row


def test_the_readme_block_is_models_by_directions_by_proofs(tmp_path):
    block = hf_ports.proofs_table(hf_ports.load(_fixture(tmp_path), []))
    print(block)
    lines = block.splitlines()
    assert lines[0] == ("| model | family | HF folder -> .keras (ours) | .keras -> HF folder (ours) | keras-hub from_preset |")
    proved = "proved: float64 3.0e-15 · float32 9.0e-07"
    assert f"| opus-mt-en-de | marian | {proved} | {proved} |" in block
    assert "| bart-base | bart | NOT verified: float64 5.0e-01 · float32 - | not run (an earlier step failed) |" in block
    assert "| mbart-large-50 | mbart | skipped (memory) | skipped (memory) |" in block
    assert hf_ports.proofs_table(None) == "Not measured yet (`rosetta hf-ports`)."


def test_an_unknown_schema_is_named_not_rendered(tmp_path):
    missing: list = []
    assert hf_ports.load(_fixture(tmp_path, FIXTURE | {"schema": 99}), missing) is None
    assert missing == ["hf_ports.json: schema 99 is not one this report reads (1)"]
    assert hf_ports.load(tmp_path / "absent.json", missing) is None and len(missing) == 1  # absent: not measured
    assert "Not measured" in "\n".join(hf_ports.section(None))


def test_rosetta_report_fills_the_readme_block_and_the_page(tmp_path):
    page = tmp_path / "README.md"
    page.write_text(
        "".join(f"<!-- {b}:start -->\nold\n<!-- {b}:end -->\n" for b in ("report", "models", "hf_ports", "generation_speed"))
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["report", "--results", str(empty), "--equality", str(tmp_path / "none.json"), "--training", str(empty),
            "--backends", "--output", str(tmp_path / "report"), "--hf-ports", str(_fixture(tmp_path)),
            "--readme", str(page)]  # fmt: skip
    assert cli.main(argv) == 0
    assert "| opus-mt-en-de | marian | proved:" in page.read_text()
    assert "## Hugging Face models at their published sizes" in (tmp_path / "report" / "README.md").read_text()
