"""The data folder the data tests read (../shared/data beside the checkout, or $ROSETTA_DATA_DIR), skipping a test
where it is absent: the data is never downloaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared import data

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get(data.ENV_VAR) or REPO.parent / "shared" / "data")


def need_data(*parts: str) -> Path:
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"no data at {path}: set {data.ENV_VAR} to the folder holding multi30k/ and spa-eng/")
    return path
