"""One process at a time in a folder (a training run): an advisory lock on a file in it, naming its holder.

The lock is `fcntl.flock` on `FOLDER/.rosetta-lock`, which holds the holder's pid: the operating system
releases it when the holder exits, however it ends, so a lock file left by a killed process is simply taken
over. A process's own child processes (`rosetta train --stack both` runs each stack in one) enter the folders
it holds: it names them in ROSETTA_HELD_LOCKS, which children inherit.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here; a folder is then not guarded
    fcntl = None

LOCK_NAME = ".rosetta-lock"
HELD_VARIABLE = "ROSETTA_HELD_LOCKS"


@contextlib.contextmanager
def folder_lock(folder, what: str) -> Iterator[None]:
    """Hold `folder`'s lock for the block; ValueError naming the holder's pid where another process holds it.
    `what` says what the holder is doing (`training`), for that message."""
    path = Path(folder) / LOCK_NAME
    held = os.environ.get(HELD_VARIABLE, "")
    if fcntl is None or str(path.resolve()) in held.split(os.pathsep):
        yield
        return
    descriptor = _acquire(path, what)
    os.environ[HELD_VARIABLE] = os.pathsep.join(part for part in (held, str(path.resolve())) if part)
    try:
        yield
    finally:
        os.environ[HELD_VARIABLE] = held
        if not held:
            del os.environ[HELD_VARIABLE]
        path.unlink(missing_ok=True)  # still ours: no one else locks it before we close
        os.close(descriptor)


def _acquire(path: Path, what: str) -> int:
    """An open, locked descriptor of `path` holding this pid (the file made if missing)."""
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise ValueError(f"{path.parent} is in use: {what} in process {holder} (it holds {path}); wait for it to "
                             "end or stop it, then run again") from None  # fmt: skip
        if _same_file(path, descriptor):  # not a file its last holder unlinked while we opened it
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
            return descriptor
        os.close(descriptor)


def _same_file(path: Path, descriptor: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except FileNotFoundError:
        return False
