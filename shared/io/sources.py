"""How a port's source names its files, read without a framework (the stacks' TensorFlow readers use it too): a
source in parts (`encoder=PATH,decoder=PATH`) and a SavedModel folder, told by what it holds."""

from __future__ import annotations

from pathlib import Path

KERAS_WEIGHTS = "model.weights.h5"  # the arrays in a `.keras` archive (a zip)


def source_parts(text: str) -> dict[str, Path] | None:
    """`encoder=PATH,decoder=PATH` as {part: path}; None for a plain path."""
    if "=" not in text:
        return None
    pairs = [item.partition("=") for item in text.split(",")]
    if not all(sep and part and path for part, sep, path in pairs):
        raise ValueError(f"{text}: a source in parts reads PART=PATH,PART=PATH (e.g. encoder=enc,decoder=dec)")
    return {part: Path(path) for part, _, path in pairs}


def is_saved_model(path) -> bool:
    """Whether `path` is a SavedModel folder (`tf.saved_model.save`): `saved_model.pb` and a `variables/` folder."""
    path = Path(path)
    return (path / "saved_model.pb").is_file() and (path / "variables").is_dir()
