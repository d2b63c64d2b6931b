"""The report's Hugging Face section, from `rosetta hf-ports`'s results file (shared/tools/hf_ports.py): each published
size ported both ways with its size, time, peak memory and largest differences, keras-hub's own loading beside it,
and the README's table of models x directions x proofs (ours, keras-hub). Plain text: no framework, no pandas."""

from __future__ import annotations

from shared.tools.report import results_files
from shared.tools.report.results_files import markdown

SCHEMAS = (1,)  # the results file versions this page reads (shared/tools/hf_ports.SCHEMA)
DIRECTIONS = {"to_keras": "HF folder -> .keras", "to_hf": ".keras -> HF folder"}
MAPPING, USERS = 0, 1  # the port's two checks: the float64 mapping, the models as their users load them


def load(path, missing: list[str]) -> dict | None:
    """The results file, or None (absent: not measured; unreadable or of an unknown schema: named in `missing`)."""
    return results_files.load(path, missing, SCHEMAS, "models")


def _e(value) -> str:
    return "-" if value is None else f"{value:.1e}"


def _largest(check: dict | None) -> float | None:
    values = [v for v in (check or {}).get("max_abs", {}).values() if v is not None]
    return max(values) if values else None


def _checks(direction: dict) -> list[dict | None]:
    checks = direction.get("checks") or []
    return [checks[i] if i < len(checks) else None for i in (MAPPING, USERS)]


def peer_cell(records: list[dict]) -> str:
    """keras-hub on the model's folders: per folder, its error's first line, or that it loads and its largest
    relative differences from HF's eager model (float32 · float64)."""
    cells = []
    for record in records:
        if record.get("loads"):
            found = f"loads, max rel. diff {_e(record.get('max_error_float32'))} · {_e(record.get('max_error_float64'))}"
        else:
            found = f"fails: {record.get('error') or 'no reason recorded'}"
        cells.append(found if len(records) == 1 else f"{record.get('folder', '?')}: {found}")
    return "; ".join(cells) or "-"


def ours_cell(record: dict, step: str) -> str:
    """Our port in one direction: proved (float64 mapping · float32 as loaded, largest |diff|), or why not."""
    if record.get("status") == "skipped":
        return "skipped (memory)"
    direction = record.get("directions", {}).get(step)
    if direction is None:
        return "not run" if record.get("status") != "failed" else "not run (an earlier step failed)"
    if direction.get("error"):
        return f"failed: {direction['error']}"
    mapping, users = _checks(direction)
    verdict = "proved" if direction.get("ok") else "NOT verified"
    return f"{verdict}: float64 {_e(_largest(mapping))} · float32 {_e(_largest(users))}"


def proofs_table(data: dict | None) -> str:
    """The README block: each model x each direction's proof (ours), and keras-hub's own loading of the folder."""
    if data is None:
        return "Not measured yet (`rosetta hf-ports`)."
    header = ["model", "family", *(f"{name} (ours)" for name in DIRECTIONS.values()), "keras-hub from_preset"]
    rows = [[name, record.get("model_type", "?"), *(ours_cell(record, step) for step in DIRECTIONS),
             peer_cell(record.get("peer") or [])] for name, record in data["models"].items()]  # fmt: skip
    return "\n".join(markdown(header, rows))


def _mb(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def port_rows(name: str, record: dict) -> list[list[str]]:
    """One row per direction (one row saying why where the model was skipped or failed before porting)."""
    build = record.get("build") or {}
    size = [name, record.get("model_type", "?"), f"{build['parameters']:,}" if "parameters" in build else "-",
            _mb(build["safetensors_bytes"] / 2**20) if "safetensors_bytes" in build else "-"]  # fmt: skip
    if not record.get("directions"):
        why = record.get("reason") or record.get("status", "?")
        return [[*size, "-", f"{record.get('status')}: {why}", "-", "-", "-", "-", "-", "-", peer_cell(record.get("peer") or [])]]
    rows = []
    for step, label in DIRECTIONS.items():
        found = record["directions"].get(step)
        if found is None:
            continue
        mapping, users = _checks(found)
        peak, before = found.get("peak_rss_mb"), found.get("rss_before_mb")
        above = None if peak is None or before is None else peak - before
        verdict = f"failed: {found['error']}" if found.get("error") else ("proved" if found.get("ok") else "NOT verified")
        timing = "-" if found.get("wall_s") is None else f"{found['wall_s']:.1f}"
        rows.append([*size, label, verdict, timing, _mb(found.get("peak_rss_mb")), _mb(above), _e(_largest(mapping)),
                     _e(_largest(users)), _mb(None if found.get("output_bytes") is None else found["output_bytes"] / 2**20),
                     peer_cell(record.get("peer") or []) if step == "to_keras" else ""])  # fmt: skip
    return rows


HEADER = ["model", "family", "parameters", "safetensors MiB", "direction", "verdict", "port s", "peak RSS MiB",
          "above imports MiB", "float64 max |diff|", "float32 max |diff|", "written MiB", "keras-hub from_preset"]  # fmt: skip


def section(data: dict | None) -> list[str]:
    """The report page's section: what was measured, where, the notes, and the table."""
    lines = ["## Hugging Face models at their published sizes", ""]
    if data is None:
        return [*lines, "Not measured (no `reports/hf_ports.json`: `rosetta hf-ports`).", ""]
    env = data.get("environment", {})
    versions = ", ".join(f"{k} {v}" for k, v in sorted((env.get("versions") or {}).items()))
    lines += [
        "Each model built from its published config.json with random weights (transformers, `save_pretrained`: "
        "nothing downloaded), then ported by `rosetta port` folder -> .keras and .keras -> folder, each direction in a "
        "fresh process: port s, the `porting.port()` call alone (frameworks imported before it); peak RSS, the "
        "process's high-water mark; above imports, that less its RSS before the call. float64: the mapping check's "
        "largest |diff| over encoder, decoder and logits (bound 1e-12 x the output's largest |value|); float32: the "
        "models as their users load them. keras-hub: `BartBackbone.from_preset` on the same folder, its error or its "
        "largest difference from transformers' eager model relative to HF's largest value (float32 · float64).",
        "",
        f"Machine: `{env.get('machine', '?')}`, {env.get('cores', '?')} cores, threads {env.get('threads', '?')}, "
        f"{_mb(env.get('memory_available_mb'))} MiB available; {versions or '-'}; commit {env.get('commit', '-')}; "
        f"recorded {env.get('created', '-')}.",
        "",
    ]
    lines += [f"- {note}" for note in data.get("notes") or []] + ([""] if data.get("notes") else [])
    rows = [row for name, record in data["models"].items() for row in port_rows(name, record)]
    return [*lines, *markdown(HEADER, rows), ""]
