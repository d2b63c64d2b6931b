"""Writing files so that a reader never sees a partial one, and nothing is left behind.

Every file or folder the suite writes is staged beside its destination under a short name that says whose
it is, `.rosetta-tmp-<pid>-<random><suffix>` (the suffix kept for writers that read it, e.g. Keras's
`.weights.h5`), then renamed into place. A process killed mid-write leaves its staged entry behind; the next
write into that folder sweeps every staged entry whose process is gone (`sweep_stale`). Large writes check
the free space first (`check_free_space`): a full disk is one clear error, not a half-written file (or, for
h5py, a crash).

A replaced file keeps its mode (a private page stays private), a symbolic link is written through (its target
replaced, the link kept: a page the user links to stays current), and a file the user made read-only is refused.
A folder (a TF checkpoint) is replaced whole, so never through a link: that would remove a folder elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import tempfile
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
    """Rename a staged file or folder to `path`: a file written through a link and keeping the mode of the file it
    replaces (a new one world-readable), a read-only file refused (see the module's docstring). Without `replace`,
    an atomic claim: if `path` appeared meanwhile (another process wrote it), ValueError and `path` is untouched."""
    path = Path(path)
    if staged_path.is_dir() and not staged_path.is_symlink():
        _place_folder(staged_path, path, replace)
    elif replace and path.is_symlink():
        _place_through_link(staged_path, path)
    else:
        _place_file(staged_path, path, replace)


def _place_file(staged_path: Path, path: Path, replace: bool) -> None:
    """A staged file renamed over `path` (with `replace`) or claimed as `path`, with the mode of the file there."""
    existing = _status(path)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise ValueError(f"{path} is a folder: a file does not replace it; name a file")
    if replace:
        _refuse_read_only(path, str(path))
    os.chmod(staged_path, stat.S_IMODE(existing.st_mode) & 0o777 if existing is not None else 0o644)
    if replace:
        os.replace(staged_path, path)
        return
    try:
        os.link(staged_path, path)
    except (FileExistsError, IsADirectoryError):
        raise _taken(path) from None
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):
            raise
        if path.exists():  # a filesystem without hard links: claimed by a check, then a rename
            raise _taken(path) from None
        os.replace(staged_path, path)
    staged_path.unlink(missing_ok=True)


def _place_through_link(staged_path: Path, link: Path) -> None:
    """The link's target replaced by the staged file (staged again beside the target where it is elsewhere: a
    rename stays in one folder), the link kept."""
    target = _written_through(link)
    if target.parent == staged_path.parent:
        _place_file(staged_path, target, replace=True)
    else:
        write_with(lambda temporary: shutil.copyfile(staged_path, temporary), target)


def _written_through(link: Path) -> Path:
    """Where the symbolic link `link` finally leads (a missing target included: it is then written), a read-only
    target refused naming both."""
    target = Path(os.path.realpath(link))
    if target.is_symlink():
        raise ValueError(f"{link} is a symbolic link that leads to itself (a loop): name a file")
    _refuse_read_only(target, f"{link} (a link to {target})")
    return target


def _refuse_read_only(path: Path, shown: str) -> None:
    """ValueError where `path` is a file the user made read-only (no write permission bit, or none for us)."""
    existing = _status(path)
    if existing is not None and stat.S_ISREG(existing.st_mode) and (not existing.st_mode & 0o222 or not os.access(path, os.W_OK)):
        raise ValueError(f"{shown} is read-only: not replaced (make it writable, e.g. chmod u+w, to let rosetta rewrite it)")


def _place_folder(staged_path: Path, path: Path, replace: bool) -> None:
    """A staged folder renamed to `path`, replacing (with `replace`) a folder there; a folder written meanwhile by
    another process is never merged with nor removed half-way: this one is then not placed."""
    if path.is_symlink():
        raise ValueError(f"{path} is a symbolic link: a folder is written there whole, replacing what is there, "
                         "which through a link would remove a folder elsewhere; name the folder itself")  # fmt: skip
    existing = _status(path)
    if existing is not None and not stat.S_ISDIR(existing.st_mode):
        raise ValueError(f"{path} is a file: a folder does not replace it; name a new folder")
    os.chmod(staged_path, stat.S_IMODE(existing.st_mode) & 0o777 if existing is not None else 0o755)
    if existing is not None:
        if not replace:
            raise ValueError(f"{path} exists: pass --force to replace it")
        _remove_folder(path)
    try:
        os.rename(staged_path, path)  # onto nothing, or an empty folder: a folder placed meanwhile is not empty
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise _taken(path, replace) from None
        raise


def _remove_folder(path: Path) -> None:
    """`path` removed; another process removing it at the same time is no error, one placing a new folder
    there before this removal ended is (`_taken`)."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno != errno.ENOTEMPTY:
            raise
        raise _taken(path, replace=True) from None


def _status(path: Path) -> os.stat_result | None:
    """`path`'s status through links; None where nothing is there."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _taken(path: Path, replace: bool = False) -> ValueError:
    if replace:
        return ValueError(f"{path} was written meanwhile by another process (two writes to one destination at once): "
                          "this one was not placed; run it again to replace that one")  # fmt: skip
    return ValueError(f"{path} exists (written meanwhile by another process): pass --force to replace it")


def write_with(write: Callable[[Path], object], path: str | os.PathLike, replace: bool = True) -> None:
    """`write(temporary)` a file beside `path` (beside a link's target: the link is written through), then place it
    (see `place`): never a partial file at `path`."""
    path = Path(path)
    if replace:
        path = _written_through(path) if path.is_symlink() else path
        _refuse_read_only(path, str(path))  # before the work of writing
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
    """Replace what stands between `<!-- <block>:start -->` and `<!-- <block>:end -->` in the UTF-8 page `path`,
    written as `write_atomic` writes (through a link, its mode kept, a read-only page refused)."""
    replace_blocks(path, {block: text})


def replace_blocks(path, texts: dict[str, str], optional: tuple[str, ...] = ()) -> None:
    """Each block of `texts` (name -> text) filled in the page `path` in one write: every block's markers are checked
    before it is written, so a page lacking one block is left as it was. A block named in `optional` is filled only
    where the page has its start marker (a page written before the block existed)."""
    path = Path(path)
    page = read_page(path)
    for block, text in texts.items():
        if block not in optional or f"<!-- {block}:start -->" in page:
            page = _filled(path, page, block, text)
    write_atomic(path, page.encode())


def _filled(path: Path, page: str, block: str, text: str) -> str:
    """`page` with `text` between the block's markers; ValueError naming `path` where they are missing or reversed."""
    start, end = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
    head, found, rest = page.partition(start)
    if not found or end not in page:
        raise ValueError(f"{path} has no {start} ... {end} block to fill")
    if end not in rest:
        raise ValueError(f"{path}: its {end} marker comes before its {start} marker: put the start marker first")
    return f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}"


def read_page(path: Path) -> str:
    """The UTF-8 text of `path`, its line endings as they are; another encoding (UTF-16) is one error naming it."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a UTF-8 text file (byte {error.start} is not UTF-8: UTF-16 or another encoding?); "
                         "save it as UTF-8") from None  # fmt: skip


@contextlib.contextmanager
def contained_temporaries() -> Iterator[Path]:
    """A fresh folder that Python's `tempfile` makes its temporary files in for the block, removed on the way out
    with whatever a library left there (Keras leaves an empty folder when it refuses a `.keras` archive)."""
    folder = tempfile.mkdtemp(prefix="rosetta-")
    previous, tempfile.tempdir = tempfile.tempdir, folder
    try:
        yield Path(folder)
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(folder, ignore_errors=True)
