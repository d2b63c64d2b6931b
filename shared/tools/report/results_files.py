"""A tool's results file as the report reads it, and the plain markdown table its sections print (no pandas)."""

from __future__ import annotations

import json
from pathlib import Path


def load(path, missing: list[str], schemas: tuple, key: str) -> dict | None:
    """The results file, or None (absent: not measured; unreadable, of an unknown schema or without its `key`
    mapping: named in `missing`)."""
    if path is None or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as error:
        missing.append(f"{Path(path).name}: not readable JSON ({error})")
        return None
    if not isinstance(data, dict) or data.get("schema") not in schemas or not isinstance(data.get(key), dict):
        missing.append(f"{Path(path).name}: schema {data.get('schema') if isinstance(data, dict) else None!r} is not "
                       f"one this report reads ({', '.join(map(str, schemas))})")  # fmt: skip
        return None
    return data


def markdown(header: list[str], rows: list[list[str]]) -> list[str]:
    """A GitHub markdown table; `|` in a cell escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
