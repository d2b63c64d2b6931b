"""One process at a time in a folder (a training run): an advisory lock on a file in it, naming its holder.

The lock is `fcntl.flock` on `FOLDER/.rosetta-lock`, which holds the holder's pid: the operating system
releases it when the holder exits, however it ends, so a lock file left by a killed process is simply taken
over. A process's own child processes (`rosetta train --stack both` runs each stack in one) enter the folders
it holds: it names them in ROSETTA_HELD_LOCKS, which children inherit. The lock file is opened without following
a symbolic link: a link (or anything but a plain file) there is refused, naming it, never written through nor
removed (what it leads to is the user's, and so is the link).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
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
    path, key = Path(folder) / LOCK_NAME, str(Path(folder).resolve() / LOCK_NAME)  # key: the folder's, never a link's target
    held = os.environ.get(HELD_VARIABLE, "")
    if fcntl is None or key in held.split(os.pathsep):
        yield
        return
    descriptor = _acquire(path, what)
    os.environ[HELD_VARIABLE] = os.pathsep.join(part for part in (held, key) if part)
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
        descriptor = _open_plain(path)
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


def _open_plain(path: Path) -> int:
    """`path` opened read-write (made if missing) where it is a plain file, never through a symbolic link."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)  # O_NONBLOCK: a FIFO does not hang
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        raise _not_a_lock_file(path) from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise _not_a_lock_file(path)
    return descriptor


def _not_a_lock_file(path: Path) -> ValueError:
    kind = "a symbolic link" if path.is_symlink() else "not a plain file"
    return ValueError(f"{path} is {kind}, not the lock file rosetta writes there (it is never written through): "
                      "remove it, then run again")  # fmt: skip


def _same_file(path: Path, descriptor: int) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except FileNotFoundError:
        return False
