"""Minimal safetensors reader and writer in numpy (the format: 8-byte header size, JSON header, raw data).

Written here rather than imported so that `shared` needs numpy alone, and so that the bytes we write are
fully ours to keep deterministic: keys sorted, little-endian, no padding surprises, metadata sorted.
Files written here load with the `safetensors` package and vice versa (tests/shared/test_shared.py checks both).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from shared.io.atomic import write_atomic

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("bool"),
}
_CODES = {dtype: code for code, dtype in _DTYPES.items()}


def _code(array: np.ndarray, key: str) -> str:
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    if dtype not in _CODES:
        raise ValueError(f"safetensors: tensor {key!r} has unsupported dtype {array.dtype}")
    return _CODES[dtype]


def dumps(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    """Serialise `tensors` (keys sorted) and string `metadata` into safetensors bytes."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    chunks, offset = [], 0
    for key in sorted(tensors):
        array = np.asarray(tensors[key])
        code = _code(array, key)
        data = np.ascontiguousarray(array, dtype=_DTYPES[code]).tobytes()
        header[key] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # align the data section to 8 bytes, as the reference writer does
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def loads(blob: bytes, source: str = "<bytes>") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Parse safetensors bytes into (tensors, metadata); a malformed blob raises ValueError naming `source`."""
    try:
        (size,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8 : 8 + size])
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{source}: not a safetensors file ({error})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{source}: not a safetensors file (its header is a JSON {type(header).__name__}, not an object)")
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(blob)[8 + size :]
    tensors = {key: _tensor(source, key, info, data) for key, info in header.items()}
    return tensors, dict(metadata) if isinstance(metadata, dict) else {}


def _tensor(source: str, key: str, info, data: memoryview) -> np.ndarray:
    """One header entry's array; an entry that is not `{dtype, shape, data_offsets}` fitting the data raises."""
    if not isinstance(info, dict) or info.get("dtype") not in _DTYPES:
        dtype = info.get("dtype") if isinstance(info, dict) else info
        raise ValueError(f"{source}: tensor {key!r} has unsupported dtype {dtype!r}")
    try:
        start, end = (int(offset) for offset in info["data_offsets"])
        shape = tuple(int(size) for size in info["shape"])
        if not 0 <= start <= end <= len(data):
            raise ValueError("its data_offsets point outside the file")
        return np.frombuffer(data[start:end], dtype=_DTYPES[info["dtype"]]).reshape(shape).copy()
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{source}: tensor {key!r} is malformed ({error})") from None


def save(path: str | os.PathLike, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` and `metadata` to `path` atomically."""
    write_atomic(path, dumps(tensors, metadata))


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """A safetensors file's metadata, reading its header only ({} for a file that is not one: its reader says why)."""
    try:
        with open(path, "rb") as stream:
            (size,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(min(size, 100_000_000)))
    except (OSError, struct.error, ValueError, UnicodeDecodeError):
        return {}
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    return dict(metadata) if isinstance(metadata, dict) else {}


def load(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a safetensors file into (tensors, metadata)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such weights file")
    return loads(path.read_bytes(), source=str(path))
