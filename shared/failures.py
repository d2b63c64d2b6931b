"""How a command fails: one line that says what failed, the path and why (exit 2), the framework's trace only
under `--debug` (or ROSETTA_DEBUG=1, which child processes inherit). A value the user gave is echoed in an error
through `shown` (cut to a readable length), and no line is longer than LINE_LIMIT (the rest with --debug)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator, Sequence

EXIT_FAILED = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
DEBUG_VARIABLE = "ROSETTA_DEBUG"
ECHO_LIMIT = 80  # characters of a user's value an error repeats: enough to recognise it, never a whole huge one
LINE_LIMIT = 4000  # characters of one error line; a longer one (a huge value echoed by any code) is cut in the middle
MEMORY_FLAGS = {"--set": "--set size", "--batch-size": "--batch-size"}  # the flags that size a command's model, batches
_DEVICE_WORDS = ("cuda", "gpu", "tpu", "mps")  # an allocator's error about an accelerator's memory, not the host's
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


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` within `limit` characters: a longer one keeps its start and end and says how much was cut."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 2)
    return f"{text[: keep - keep // 4]}...[{len(text) - keep:,} characters cut]...{text[len(text) - keep // 4 :]}"


def shown(value, limit: int = ECHO_LIMIT) -> str:
    """A value the user gave (a flag's, a file's field), as an error repeats it: its repr on one line, clipped."""
    return clip(repr(value), limit)


def limit_from_environment(variable: str, default: int, rule: str) -> int:
    """A limit a user raises knowingly: `default`, or the positive whole number $`variable` holds; one line naming the
    variable where it holds anything else (`rule`: what the limit is, with an example)."""
    text = os.environ.get(variable)
    if text is None:
        return default
    if not (text.strip().isascii() and text.strip().isdigit() and int(text) > 0):
        raise ValueError(f"{variable}={shown(text)}: {rule}")
    return int(text)


def describe(error: BaseException, argv: Sequence[str] | None = None) -> str:
    """`error` as one line a user can act on, within LINE_LIMIT; `argv`: the command's arguments (default: this
    process's), which the out-of-memory hint names where they size the work."""
    return clip(_describe(error, sys.argv[1:] if argv is None else argv), LINE_LIMIT)


def _describe(error: BaseException, argv: Sequence[str]) -> str:
    if isinstance(error, ValueError):
        return _one_line(str(error)) or type(error).__name__
    if isinstance(error, OSError) and error.errno is not None:
        why = _ERRNO_WORDS.get(error.errno, error.strerror or _one_line(str(error)))
        where = error.filename if error.filename is not None else ""
        return f"{where}: {why}" if where else why
    first = _one_line(str(error))
    if isinstance(error, MemoryError) or any(word in first.lower() for word in _MEMORY_WORDS):
        return f"out of memory: {type(error).__name__} {first[:200]} ({_memory_hint(first, argv)})"
    return f"{type(error).__name__}: {first[:300]} (rerun with --debug for the trace)"


def _memory_hint(text: str, argv: Sequence[str]) -> str:
    """What fits: the host's free memory (an accelerator's error states its own), and the flags the command was given
    that size its work; none named that the user did not give (a port's sizes are its file's)."""
    free = None if any(word in text.lower() for word in _DEVICE_WORDS) else available_memory()
    room = [f"{free / 2**30:.1f} GiB of memory is free here"] if free is not None else []
    given = [flag for flag in MEMORY_FLAGS if any(arg == flag or arg.startswith(f"{flag}=") for arg in argv)]
    fits = f"a smaller {' or '.join(MEMORY_FLAGS[flag] for flag in given)}?" if given else "the sizes and batches asked need more"
    return "; ".join([*room, fits])


def available_memory() -> int | None:
    """The bytes of memory the host can still give a process (Linux's MemAvailable), None where it does not say."""
    try:
        with open("/proc/meminfo") as stream:
            fields = dict(line.split(":", 1) for line in stream if ":" in line)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


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


def guarded(command: Callable[[], int], prog: str, debug: bool = False, argv: Sequence[str] | None = None) -> int:
    """Run `command` (given `argv`, default this process's); an exception becomes one line on stderr and
    EXIT_FAILED, Ctrl-C one line and EXIT_INTERRUPTED (raised as they are when debugging)."""
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
        print(f"{prog}: {describe(error, argv)}", file=sys.stderr)
        return EXIT_FAILED
