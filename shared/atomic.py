"""Writing files so that a reader never sees a partial one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, blob: bytes) -> None:
    """Write a temporary file in the same folder and rename it over `path`: never a partial file."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(blob)
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; a data file is world-readable
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
