"""A corpus file read as lines of text (shared.data.parallel), streaming: plain or `.gz`, UTF-8, its lines ending as
most of its first chunk's do (LF, CRLF, or an old Mac's CR), each stripped. A line longer than MAX_LINE_BYTES (raised
by $ROSETTA_MAX_LINE_BYTES), bytes that are not UTF-8 (a UTF-16 or UTF-32 file named as such), a NUL byte and a
corrupt or truncated `.gz` are errors naming the file and line. The raw bytes read are hashed and counted as they
pass (a file's fingerprint: name, size, sha256; the progress over every file's bytes)."""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import itertools
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

from shared.failures import limit_from_environment

_CHUNK = 1 << 20  # bytes read at a time
# A line holds one sentence, which a model trains as one sequence: the limit is far above any sentence (some ten
# thousand words), so a longer line is a file that is not one sentence a line (a document a line, a binary file),
# refused before its tokens cost memory; a user who means such lines raises it ($ROSETTA_MAX_LINE_BYTES).
MAX_LINE_BYTES, MAX_LINE_VARIABLE = 1 << 16, "ROSETTA_MAX_LINE_BYTES"
_BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
                     (codecs.BOM_UTF16_BE, "utf-16"))  # fmt: skip
_SAMPLE = 4096  # the first bytes of a file looked at for UTF-16/32 without a byte-order mark


class ReadProgress:
    """Bytes read of every file: tqdm when installed (the `train` extra), else a line every 10%; nothing when off."""

    def __init__(self, total: int, enabled: bool, label: str):
        self.total, self.enabled, self.label, self.done, self.shown, self.bar = max(total, 1), enabled, label, 0, 0, None
        if enabled:
            try:
                from tqdm import tqdm

                interval = 0.1 if sys.stderr.isatty() else 30
                self.bar = tqdm(total=total, desc=label, unit="B", unit_scale=True, dynamic_ncols=True, mininterval=interval)
            except ImportError:
                pass

    def add(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        elif self.enabled and self.done * 10 // self.total > self.shown:
            self.shown = self.done * 10 // self.total
            print(f"{self.label}: {10 * self.shown}% of {self.total / 1e6:.1f} MB", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class CountedFile(io.RawIOBase):
    """A file's raw bytes as they are read: hashed (sha256) and counted into the progress."""

    def __init__(self, path: Path, progress: ReadProgress | None):
        self.file, self.progress, self.digest, self.size = open(path, "rb", buffering=0), progress, hashlib.sha256(), 0  # noqa: SIM115

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.file.readinto(buffer)
        if count:
            self.digest.update(memoryview(buffer)[:count])
            self.size += count
            if self.progress is not None:
                self.progress.add(count)
        return count

    def drain(self) -> None:
        """Read to the end (bytes after a gzip stream's end count in the fingerprint too)."""
        buffer = bytearray(_CHUNK)
        while self.readinto(buffer):
            pass

    def close(self) -> None:
        self.file.close()
        super().close()


def max_line_bytes() -> int:
    """The longest line a corpus file may hold, in bytes: MAX_LINE_BYTES, or $ROSETTA_MAX_LINE_BYTES where set."""
    rule = "the longest line of a corpus file is a number of bytes, e.g. 1000000"
    return limit_from_environment(MAX_LINE_VARIABLE, MAX_LINE_BYTES, rule)


def read_lines(path: Path, counted: CountedFile) -> Iterator[str]:
    """The stripped lines of `path` (`.gz`: decompressed), decoded as UTF-8, split at the file's own line ends (LF,
    CRLF or an old Mac's CR: `_separator`); reading holds one chunk and one line at most. A line longer than
    `max_line_bytes()`, a UTF-16/32 or compressed file, a byte that is not UTF-8, a NUL byte or a corrupt gzip stream
    raises ValueError naming the file (and the line)."""
    gz, limit, number = path.name.endswith(".gz"), max_line_bytes(), 0
    try:
        stream = io.BufferedReader(counted, _CHUNK)
        if gz:
            stream = gzip.GzipFile(fileobj=stream, mode="rb")
        chunks = iter(lambda: stream.read(_CHUNK), b"")
        separator, head = _separator(chunks, limit)
        if head:
            _check_head(path, head[0], gz)
        for number, raw in enumerate(_split(itertools.chain(head, chunks), separator, limit, path), start=1):  # noqa: B007
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(_not_utf8(path, number, raw, error)) from None
            if "\x00" in text:
                raise ValueError(
                    f"{path}, line {number}: a NUL byte (0x00) at byte {raw.index(0) + 1} of the line: not text; a corpus "
                    "file is UTF-8 text, one sentence a line"
                )
            yield (text[1:] if number == 1 and text.startswith("\ufeff") else text).strip()  # a byte-order mark
        counted.drain()
    except (OSError, EOFError, zlib.error) as error:
        if not gz:
            raise ValueError(f"{path}, line {number + 1}: cannot be read: {error}") from None
        raise ValueError(f"{path}, line {number + 1}: not a readable gzip file (corrupt or truncated): {error}") from None
    finally:
        counted.close()


def _separator(chunks: Iterator[bytes], limit: int) -> tuple[bytes, list[bytes]]:
    """The line end of a file, the one most line ends of its first chunk are: LF (LF and CRLF files: a CR left at a
    line's end goes with the spaces) or a lone CR (an old Mac's file), so a stray CR inside a line of an LF file stays
    there (as `wc -l` counts), and a stray LF in a CR file; and the chunks read to decide (those of its first `limit`
    bytes at most), to be split first."""
    seen, size = [], 0
    for chunk in chunks:
        seen.append(chunk)
        lf, lone_cr = chunk.count(b"\n"), chunk.count(b"\r") - chunk.count(b"\r\n")
        if lf or lone_cr:
            return (b"\r" if lone_cr > lf else b"\n"), seen
        size += len(chunk)
        if size > limit:  # no line end yet: the first line is too long (`_split` says so)
            break
    return b"\n", seen


def _split(chunks: Iterator[bytes], separator: bytes, limit: int, path: Path) -> Iterator[bytes]:
    """The lines of a stream of chunks, without their `separator`; a line longer than `limit` bytes raises ValueError
    naming `path` and the line as soon as it is seen, so reading holds no more than a chunk and `limit` bytes."""
    pending, size, number = [], 0, 0
    for chunk in chunks:
        pieces = chunk.split(separator)
        for piece in pieces[:-1]:
            number += 1
            if size + len(piece) > limit:
                raise ValueError(_too_long(path, number, limit))
            yield b"".join((*pending, piece)) if pending else piece
            pending, size = [], 0
        pending.append(pieces[-1])
        size += len(pieces[-1])
        if size > limit:
            raise ValueError(_too_long(path, number + 1, limit))
    if size:
        yield b"".join(pending)


def _too_long(path: Path, number: int, limit: int) -> str:
    return (
        f"{path}, line {number}: longer than {limit:,} bytes, the longest line a corpus file may hold (a line holds "
        "one sentence: is this file one sentence a line?); where such lines are meant, raise the limit with "
        f"{MAX_LINE_VARIABLE}=BYTES"
    )


def _check_head(path: Path, head: bytes, gz: bool) -> None:
    """Refuse a file whose first bytes are no UTF-8 text: gzip data under a plain name, UTF-16 or UTF-32."""
    if not gz and head.startswith(b"\x1f\x8b"):
        raise ValueError(f"{path}, line 1: not UTF-8 text (the file looks gzip-compressed: name it .gz)")
    wide = _wide_encoding(head)
    if wide is not None:
        encoding, why = wide
        raise ValueError(
            f"{path}: {encoding.upper()} text ({why}), not UTF-8; convert the file to UTF-8, e.g. iconv -f {encoding} -t utf-8"
        )


def _wide_encoding(head: bytes) -> tuple[str, str] | None:
    """(iconv's name, why) of the UTF-16 or UTF-32 encoding a file's first bytes `head` are in: by its byte-order mark,
    else by its NUL bytes, the high bytes of ASCII characters (all on one side of each character, and at least one
    for each LF); None for anything else."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if head.startswith(mark):
            return encoding, "it starts with a byte-order mark"
    sample = head[: _SAMPLE - _SAMPLE % 4]
    if len(sample) < 4 or b"\x00" not in sample:
        return None
    zeros = [sample[offset::4].count(0) for offset in range(4)]  # NUL bytes at each position mod 4
    quarter = len(sample) // 4
    for encoding, wide in (("utf-32le", (2, 3)), ("utf-32be", (0, 1))):
        if all(zeros[offset] == quarter for offset in wide):
            return encoding, "NUL bytes in two of every four"
    odd, even = zeros[1] + zeros[3], zeros[0] + zeros[2]
    for encoding, ones, others in (("utf-16le", odd, even), ("utf-16be", even, odd)):
        if not others and ones >= max(1, sample.count(b"\n")):
            return encoding, "NUL bytes in one of every two"
    return None


def _not_utf8(path: Path, number: int, raw: bytes, error: UnicodeDecodeError) -> str:
    return (
        f"{path}, line {number}: not UTF-8 text (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line); "
        "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
    )


def file_fingerprint(path: Path) -> dict:
    """What shared.data.parallel.read_corpus records of a file (CountedFile's count and hash): its name, size and sha256."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"file": path.name, "bytes": size, "sha256": digest.hexdigest()}
