"""How a command fails: one line that says what failed, the path and why (exit 2), the framework's trace only
under `--debug` (or ROSETTA_DEBUG=1, which child processes inherit)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator

EXIT_FAILED = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
DEBUG_VARIABLE = "ROSETTA_DEBUG"
_MEMORY_WORDS = ("out of memory", "can't allocate", "cannot allocate", "failed to allocate", "oom when allocating")
_ERRNO_WORDS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENOENT: "no such file or folder",
    errno.ENAMETOOLONG: "file name too long",
}


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def describe(error: BaseException) -> str:
    """`error` as one line a user can act on."""
    if isinstance(error, ValueError):
        return _one_line(str(error)) or type(error).__name__
    if isinstance(error, OSError) and error.errno is not None:
        why = _ERRNO_WORDS.get(error.errno, error.strerror or _one_line(str(error)))
        where = error.filename if error.filename is not None else ""
        return f"{where}: {why}" if where else why
    first = _one_line(str(error))
    if isinstance(error, MemoryError) or any(word in first.lower() for word in _MEMORY_WORDS):
        return f"out of memory: {type(error).__name__} {first[:200]} (a smaller --set size or --batch-size?)"
    return f"{type(error).__name__}: {first[:300]} (rerun with --debug for the trace)"


@contextlib.contextmanager
def debug_environment(debug: bool) -> Iterator[None]:
    """With `debug`, DEBUG_VARIABLE set for the block (child processes inherit it), then as it was."""
    previous = os.environ.get(DEBUG_VARIABLE)
    if debug:
        os.environ[DEBUG_VARIABLE] = "1"
    try:
        yield
    finally:
        if debug and previous is None:
            os.environ.pop(DEBUG_VARIABLE, None)
        elif debug:
            os.environ[DEBUG_VARIABLE] = previous


def guarded(command: Callable[[], int], prog: str, debug: bool = False) -> int:
    """Run `command`; an exception becomes one line on stderr and EXIT_FAILED, Ctrl-C one line and
    EXIT_INTERRUPTED (raised as they are when debugging)."""
    try:
        return command()
    except KeyboardInterrupt:
        if debug or os.environ.get(DEBUG_VARIABLE) == "1":
            raise
        print(f"{prog}: interrupted (what was finished before stays; nothing partial is left)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:
        if debug or os.environ.get(DEBUG_VARIABLE) == "1":
            raise
        print(f"{prog}: {describe(error)}", file=sys.stderr)
        return EXIT_FAILED
