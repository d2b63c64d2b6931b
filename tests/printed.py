"""What `rosetta port` prints, used as a user uses it: the last line's Python, run as printed."""

from __future__ import annotations

LOAD_PREFIX = "load it: "


def load_line(printed: str) -> str:
    """The Python of the report's last line (`load it: ...`)."""
    last = printed.splitlines()[-1]
    assert last.startswith(LOAD_PREFIX), f"the report does not end with the line that loads the file: {last!r}"
    return last.removeprefix(LOAD_PREFIX)


def load_as_printed(printed: str):
    """The model the report's last line loads, run as printed (its imports included)."""
    namespace: dict = {}
    exec(load_line(printed), namespace)  # noqa: S102 (our own report's line: the test of what a user pastes)
    return namespace["model"]
