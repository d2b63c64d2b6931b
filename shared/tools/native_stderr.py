"""What the frameworks' native libraries write to stderr that no bench user acts on, and the filter that leaves it out
of a framework's short native calls (a profiler); their warnings and errors pass."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

# absl's notice that it logs before being set up and absl's INFO lines (TensorFlow's oneDNN notice at import, before
# TF_CPP_MIN_LOG_LEVEL applies), and the start and stop markers torch's profiler (kineto) writes whatever its log level
NATIVE_CHATTER = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
    r"|I\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\] "  # absl's INFO line: before absl is set up, its time is the epoch's
    r"|USDT:\S+ \S+ \d+:\d+ \w+\.cpp:\d+\] profiler_(start|stop)$"
)


def is_chatter(line: str) -> bool:
    """Whether `line` (a line of stderr) is NATIVE_CHATTER."""
    return NATIVE_CHATTER.match(line.rstrip("\r\n")) is not None


@contextlib.contextmanager
def native_stderr_filtered():
    """Within it, what this process writes to stderr's file descriptor (where native libraries write) is held in a
    temporary file, then passed on less NATIVE_CHATTER: for short calls into a framework's native code (a profiler)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()  # Python's own lines of the block, in order with the native ones
                os.dup2(saved, 2)
                held.seek(0)
                kept = [line for line in held.read().decode(errors="replace").splitlines(True) if not is_chatter(line)]
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
    finally:
        os.close(saved)
