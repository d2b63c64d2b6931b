"""Writing files so that a reader never sees a partial one, and nothing is left behind.

Every file or folder the suite writes is staged beside its destination under a short name that says whose
it is, `.rosetta-tmp-<pid>-<random><suffix>` (the suffix kept for writers that read it, e.g. Keras's
`.weights.h5`), then renamed into place. A process killed mid-write leaves its staged entry behind; the next
write into that folder sweeps every staged entry whose process is gone (`sweep_stale`). Large writes check
the free space first (`check_free_space`): a full disk is one clear error, not a half-written file (or, for
h5py, a crash).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

STAGED_PREFIX = ".rosetta-tmp-"
_STAGED = re.compile(rf"^{re.escape(STAGED_PREFIX)}(\d+)-")
_SUFFIX_CHARS = 24  # a staged name stays short whatever the destination's name (NAME_MAX is 255)
SPACE_MARGIN = 1.1  # free space asked for beyond the estimate (file-format overhead)


def _suffix(path: Path) -> str:
    """The destination's suffixes as writers need them (`.weights.h5`, `.keras`), at most _SUFFIX_CHARS long."""
    suffix = "".join(path.suffixes)[-_SUFFIX_CHARS:]
    return suffix if re.fullmatch(r"(\.[A-Za-z0-9_]+)*", suffix) else ""


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep_stale(folder: str | os.PathLike) -> list[Path]:
    """Remove the staged files and folders in `folder` whose writing process no longer runs; the removed paths."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in Path(folder).iterdir():
            found = _STAGED.match(entry.name)
            if found and int(found.group(1)) != os.getpid() and not _process_alive(int(found.group(1))):
                _remove(entry)
                removed.append(entry)
    return removed


def staged_name(path: Path) -> Path:
    """A fresh staging path beside `path` (nothing created)."""
    return path.parent / f"{STAGED_PREFIX}{os.getpid()}-{secrets.token_hex(4)}{_suffix(path)}"


def _remove(staged: Path) -> None:
    if staged.is_dir() and not staged.is_symlink():
        shutil.rmtree(staged, ignore_errors=True)
    else:
        staged.unlink(missing_ok=True)


@contextlib.contextmanager
def staged(path: str | os.PathLike, folder: bool = False) -> Iterator[Path]:
    """A staging path beside `path` (a created empty folder when `folder`), after sweeping stale ones there;
    whatever is still at it on the way out (not placed, or an error) is removed."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"{path.parent} is not a folder: create it first")
    sweep_stale(path.parent)
    temporary = staged_name(path)
    if folder:
        temporary.mkdir()
    try:
        yield temporary
    finally:
        _remove(temporary)


def place(staged_path: Path, path: str | os.PathLike, replace: bool = True) -> None:
    """Rename a staged file or folder to `path`, world-readable. Without `replace`, an atomic claim: if `path`
    appeared meanwhile (another process wrote it), ValueError and `path` is untouched."""
    path = Path(path)
    os.chmod(staged_path, 0o755 if staged_path.is_dir() else 0o644)  # world-readable, whatever mode the writer left
    if path.is_dir() and not path.is_symlink():
        if not replace:
            raise ValueError(f"{path} exists: pass --force to replace it")
        shutil.rmtree(path)
    if replace:
        os.replace(staged_path, path)
        return
    try:
        os.link(staged_path, path) if staged_path.is_file() else os.rename(staged_path, path)
    except (FileExistsError, IsADirectoryError):
        raise _taken(path) from None
    except OSError as error:
        if error.errno == errno.ENOTEMPTY:  # a folder placed onto a non-empty one
            raise _taken(path) from None
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):
            raise
        if path.exists():  # a filesystem without hard links: claimed by a check, then a rename
            raise _taken(path) from None
        os.replace(staged_path, path)
    staged_path.unlink(missing_ok=True)


def _taken(path: Path) -> ValueError:
    return ValueError(f"{path} exists (written meanwhile by another process): pass --force to replace it")


def write_with(write: Callable[[Path], object], path: str | os.PathLike, replace: bool = True) -> None:
    """`write(temporary)` a file beside `path`, then place it (see `place`): never a partial file at `path`."""
    with staged(path) as temporary:
        write(temporary)
        place(temporary, path, replace)


def write_atomic(path: str | os.PathLike, blob: bytes, replace: bool = True) -> None:
    """Write `blob` to a staged file beside `path` and rename it over `path`: never a partial file."""
    write_with(lambda temporary: temporary.write_bytes(blob), path, replace)


def check_free_space(folder: str | os.PathLike, needed_bytes: float, what: str = "the file") -> None:
    """ValueError when `folder`'s filesystem has less free space than `needed_bytes` (with a margin)."""
    folder = Path(folder)
    free = shutil.disk_usage(folder).free
    if free < needed_bytes * SPACE_MARGIN:
        raise ValueError(
            f"not enough free space in {folder}: {what} needs about {needed_bytes / 2**20:.1f} MiB, {free / 2**20:.1f} MiB free"
        )


def replace_block(path, block: str, text: str) -> None:
    """Replace what stands between `<!-- <block>:start -->` and `<!-- <block>:end -->` in `path`."""
    start, end = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
    page = path.read_text()
    if start not in page or end not in page:
        raise ValueError(f"{path} has no {start} ... {end} block to fill")
    head, rest = page.split(start, 1)
    write_atomic(path, f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}".encode())
