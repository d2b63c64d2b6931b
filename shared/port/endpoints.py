"""The two ends of a port: a path, its format (shared/port/formats.py) and its layout (a key map), a source
perhaps in parts; parsed from the command line and checked before anything is read. Then the end of a port:
its destination staged beside it, and placed only once verified (shared/io/atomic.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from pathlib import Path

from shared import catalogue
from shared.failures import shown
from shared.io import atomic
from shared.io.sources import source_parts
from shared.port import layouts
from shared.port.formats import ALL, FORMATS, PRETRAINED_ONLY, READ_ONLY, SAVED_MODEL, Format, detect, shown_by
from shared.port.layouts import KeyMap


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A source or destination: its path (for parts, `{part: path}` too), format and layout; `named`: the user
    named the layout (`--from FORMAT` for the catalogue's own, `--from PRESET`, `--key-map`)."""

    path: Path
    format: Format
    layout: KeyMap = layouts.IDENTITY
    parts: dict[str, Path] | None = None
    named: bool = False

    def describe(self) -> str:
        layout = f", layout {self.layout.name}" if self.layout.name else ""
        return f"{self.text} ({self.format.description}{layout})"

    @property
    def text(self) -> str:
        return ",".join(f"{part}={path}" for part, path in self.parts.items()) if self.parts else str(self.path)

    @property
    def files(self) -> dict[str, Path]:
        """{part: path}, or {"": path} for a plain path."""
        return self.parts or {"": self.path}


def endpoint(text, named: str | None = None, key_map: str | None = None, destination: bool = False) -> Endpoint:
    """The endpoint `text` names; `named` is --from/--to (a format or a preset), `key_map` a key-map file."""
    parts = source_parts(str(text)) if not destination else None
    path = Path(next(iter(parts.values()))) if parts else Path(text)
    layout, fmt = layouts.IDENTITY, None
    if named in ALL:
        fmt = ALL[named]
    elif named is not None:
        if named not in layouts.presets():
            known = ", ".join([*FORMATS, *READ_ONLY, *PRETRAINED_ONLY, *layouts.presets()])
            flag = "--to" if destination else "--from"
            raise ValueError(f"{flag} {shown(named)} is neither a format nor a preset; known: {known}")
        layout = layouts.preset(named)
    if key_map is not None:
        if layout.name:
            raise ValueError(f"pass a preset (--from {layout.name}) or --key-map, not both")
        layout = layouts.load(key_map)
    if layout.format is not None and layout.format not in FORMATS:
        raise ValueError(f'{layout.where}: "format" {shown(layout.format)} is not one of {", ".join(FORMATS)}')
    fmt = fmt or (FORMATS[layout.format] if layout.format else None) or detect(path, destination)
    if fmt.by_path and SAVED_MODEL.detect(path, destination):
        fmt = SAVED_MODEL  # a layout of Keras files reads the SavedModel of the same model: its variables, by path
    if destination and not fmt.writable:
        raise ValueError(_refuse_saved_model(path))
    if parts and not fmt.in_parts:
        raise ValueError(f"{text}: a source in parts is read from TensorFlow checkpoints or Keras .weights.h5 files")
    flag = "--to" if destination else "--from"
    _check_format_fits_name(parts or {"": path}, fmt, f"{flag} {named}" if named else f"--key-map {layout.where}", destination)
    if layout.renames and not fmt.keyed:
        raise ValueError(f"{layout.where}: renames act on the keys of torch and safetensors files; a {fmt.description} "
                         "is read by attribute path, in the catalogue's names already")  # fmt: skip
    return Endpoint(path, fmt, layout, parts, named=named is not None or key_map is not None)


def named_model(end: Endpoint) -> str | None:
    """The catalogue model a source file names itself, read without a framework: a `.keras` file's config
    (`config.json` in its zip), a canonical safetensors file's metadata; None for a file that names none (or is
    no such file: its reader says why). A name that is no catalogue model's raises, naming the file and field."""
    if end.parts or not end.path.is_file():
        return None
    found = end.format.named_model(end.path, end.layout.identity)
    if found is None:
        return None
    value, field = found
    if value is not None and not (isinstance(value, str) and value in catalogue.CATALOGUE):
        raise ValueError(f"{end.path}: {field} is {shown(value)}, no catalogue model's name (rosetta models lists them); "
                         "name the model with --model")  # fmt: skip
    return value


def _refuse_saved_model(path: Path) -> str:
    return (f"{path}: rosetta port reads a TensorFlow SavedModel but does not write one (it holds the traced functions "
            "of the code that saved it, which no weights carry); write a Keras .weights.h5 file (`--to tf-nmt-2022` for "
            "TensorFlow's 2022 NMT tutorial), which the model's `load_weights` loads, then tf.saved_model.save that "
            "model as the tutorial's export does")  # fmt: skip


def _check_format_fits_name(paths: dict, fmt: Format, named: str, destination: bool) -> None:
    """A file whose name shows another format than the one named (`--from tf-nmt-2020` on `model.pt`): one
    error saying both, not a reader's confusion about what it did not find."""
    for path in paths.values():
        shown_format = shown_by(path)
        if shown_format is None or shown_format is fmt or not (destination or path.is_file()):
            continue
        if not destination and fmt.reads_as(shown_format):
            continue  # one reader takes both (a tutorial's parts saved as .weights.h5: --from tf-nmt-2020)
        verb = "writes" if destination else "reads"
        raise ValueError(f"{path}: its name says {shown_format.description} ({shown_format.suffix}), but {named} {verb} "
                         f"{fmt.description} files; name the format the file has")  # fmt: skip


def check_exists(end: Endpoint) -> None:
    for path in end.files.values():
        if not (path.exists() or Path(f"{path}.index").is_file()):
            raise ValueError(f"{path}: no such file")


def check_destination(src: Endpoint, dst: Endpoint, force: bool) -> None:
    if not dst.path.parent.is_dir():
        raise ValueError(f"{dst.path.parent} is not a folder: create it first")
    if dst.path.is_dir() and not dst.format.folder:
        raise ValueError(f"{dst.path} is a folder: a {dst.format.description} is a file; name one (--force replaces files only)")
    if dst.path.is_file() and dst.format.folder:
        raise ValueError(f"{dst.path} is a file: a {dst.format.description} is a folder; name a new one (--force never turns "
                         "a file into a folder)")  # fmt: skip
    if dst.path.exists() and not force:
        raise ValueError(f"{dst.path} exists: pass --force to replace it")
    if dst.path.is_dir() and not dst.path.is_symlink():
        _check_replaceable_folder(dst.path)
    if any(dst.path.resolve() == path.resolve() for path in src.files.values()):
        raise ValueError(f"{dst.path} is the source file")


# ---- the destination: staged, then placed ----


@contextlib.contextmanager
def staged_beside(path: Path):
    """A path of `path`'s name in a hidden temporary folder beside it, removed on the way out (whatever
    was not moved into place with `move_into_place` goes with it). An error that names the hidden path is
    raised naming `path`, the file the user asked for."""
    with atomic.staged(path, folder=True) as staging:
        try:
            yield staging / path.name
        except (ValueError, OSError) as error:
            text = str(error)
            if str(staging) not in text:
                raise
            raise ValueError(text.replace(str(staging / path.name), str(path)).replace(str(staging), str(path.parent))) from None


def move_into_place(staged: Path, path: Path, force: bool = True) -> None:
    """A verified file (or checkpoint folder) renamed over `path` (a folder there, holding one TF checkpoint
    and nothing else, removed first); without `force`, only if `path` is still free (of two racing ports one
    fails cleanly)."""
    if path.is_dir() and not path.is_symlink():
        _check_replaceable_folder(path)  # again: a file may have been put there since the port began
    atomic.place(staged, path, replace=force)


CHECKPOINT_FILE = re.compile(r"(?P<prefix>.+)\.(index|data-\d+-of-\d+)")


def _check_replaceable_folder(path: Path) -> None:
    """`--force` replaces a folder only where it holds one TF checkpoint (`checkpoint`, one prefix's `.index`
    and `.data-*` files) and nothing else: never the user's other files, nor their other checkpoints."""
    entries = sorted(path.iterdir())
    files = {
        entry.name: CHECKPOINT_FILE.fullmatch(entry.name) for entry in entries if entry.is_file() and entry.name != "checkpoint"
    }
    foreign = [entry.name for entry in entries if not entry.is_file()] + [name for name, match in files.items() if not match]
    prefixes = sorted({match["prefix"] for match in files.values() if match})
    if foreign or len(prefixes) > 1:
        held = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "") if foreign else f"{len(prefixes)} checkpoints"
        raise ValueError(f"{path} is a folder holding {held}: --force replaces a file, or a folder holding one TF "
                         "checkpoint and nothing else, never other files; name a new folder")  # fmt: skip
