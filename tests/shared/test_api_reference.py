"""docs/api.md: the public API reference `rosetta api` writes from the sources, never out of date; and a user's
page that `--readme` fills (every command that fills one) keeps its mode and its link, and a read-only or malformed
page is one line naming it."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from shared import failures
from shared.cli import main as rosetta
from shared.io import atomic
from shared.tools import api_reference
from tests.doc_blocks import REPO
from tests.shared.test_docs import WRITES


def _block(text: str) -> str:
    return text.split("<!-- api:start -->\n", 1)[1].split("\n<!-- api:end -->", 1)[0]


def test_docs_api_is_what_rosetta_api_writes():
    """A public name added, renamed or re-documented without `rosetta api --readme docs/api.md` fails here."""
    assert _block((REPO / "docs" / "api.md").read_text()) == api_reference.render(), (
        "docs/api.md is out of date: run `rosetta api --readme docs/api.md`"
    )


def test_every_public_name_has_its_section_in_order():
    """Each package's __all__, in order, one heading each, each with its signature and source file."""
    import shared.port

    text = api_reference.render()
    positions = [text.index(f"### `shared.port.{name}`") for name in shared.port.__all__]
    assert positions == sorted(positions)
    assert "`convert(source, target, key_map=None, rules=None, inputs=None)` · [shared/port/conversion.py]" in text
    assert "### `tf_impl.backends`\n\n`module` · [tf_impl/keras_compat/backends.py]" in text  # a module by name
    assert "`class Tolerance(f64_outputs: float=1e-12," in text  # a dataclass: its fields


def test_negative_control_a_stale_page_and_a_name_nowhere_are_caught(tmp_path):
    """A page edited by hand no longer matches; a name in __all__ that no module defines is an error naming it."""
    stale = (REPO / "docs" / "api.md").read_text().replace("### `shared.port.verify`", "### `shared.port.check`")
    assert _block(stale) != api_reference.render()
    for package in ("shared", "shared/port"):
        shutil.copytree(REPO / package, tmp_path / package, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    init = tmp_path / "shared" / "port" / "__init__.py"
    init.write_text(init.read_text().replace('"read_weights"]', '"read_weights", "vanished"]'))
    init.write_text(
        init.read_text().replace(
            "from shared.port.stages import read_weights", "from shared.port.stages import read_weights, vanished"
        )
    )
    with pytest.raises(ValueError, match="defines no vanished"):
        api_reference.render(tmp_path, ("shared.port",))


def test_rosetta_api_fills_the_block_and_prints_without_a_page(tmp_path, capsys):
    page = tmp_path / "api.md"
    page.write_text("# x\n\n<!-- api:start -->\nold\n<!-- api:end -->\n")
    assert rosetta(["api", "--readme", str(page)]) == 0
    assert _block(page.read_text()) == api_reference.render()
    assert rosetta(["api"]) == 0 and "## `tf_impl`" in capsys.readouterr().out


# ---- a user's page: its mode and its link kept, a read-only one refused, a malformed one named ----

PAGE = "# x\n\n<!-- api:start -->\nold\n<!-- api:end -->\n"


def _page_problems(write, folder: Path) -> list[str]:
    """What `write(path, blob)` does wrong to a user's pages: a private page opened to all, a link replaced by a
    plain file (the page it led to left stale), a read-only page replaced."""
    folder.mkdir()
    private, target, link, read_only = (folder / name for name in ("private.md", "target.md", "link.md", "read-only.md"))
    for page in (private, target, read_only):
        page.write_text(PAGE)
    private.chmod(0o600)
    read_only.chmod(0o444)
    link.symlink_to(target)
    problems = []
    write(private, b"new")
    if stat.S_IMODE(private.stat().st_mode) != 0o600:
        problems.append("a private page made readable")
    write(link, b"new")
    if not link.is_symlink() or target.read_bytes() != b"new":
        problems.append("a link replaced by a file")
    with contextlib.suppress(ValueError):
        write(read_only, b"new")
    if read_only.read_text() != PAGE:
        problems.append("a read-only page replaced")
    return problems


def _naive_write(path: Path, blob: bytes) -> None:
    """The staged write as it was: a staged file made world-readable, renamed over `path`, a link included."""
    staged = atomic.staged_name(path)
    staged.write_bytes(blob)
    staged.chmod(0o644)
    os.replace(staged, path)


def test_a_staged_write_keeps_the_pages_mode_and_link_and_refuses_a_read_only_page(tmp_path):
    """Negative control: the write as it was does all three."""
    assert _page_problems(atomic.write_atomic, tmp_path / "ours") == []
    naive = ["a private page made readable", "a link replaced by a file", "a read-only page replaced"]
    assert _page_problems(_naive_write, tmp_path / "naive") == naive


def _page_argv(command: str, page: Path, folder: Path) -> list[str]:
    """`rosetta COMMAND --readme PAGE`, its other inputs empty folders under `folder`."""
    empty = folder / "empty"
    empty.mkdir(exist_ok=True)
    others = {"api": [], "reproduction": ["--results", str(empty), "--output", str(folder / "reproduction.md")],
              "report": ["--results", str(empty), "--equality", str(folder / "none.json"), "--training", str(empty),
                         "--backends", "--output", str(folder / "report")]}  # fmt: skip
    return [command, *others[command], "--readme", str(page)]


FILLED = ("api", "reproduction", "report")  # every command that fills a page but `equality` (both stacks: tests/cross)


def test_every_command_that_fills_a_page_is_tried_here():
    assert set(FILLED) == set(WRITES) - {"equality"}


@pytest.mark.parametrize("command", FILLED)
def test_each_command_keeps_a_private_page_private_and_writes_through_a_link(command, tmp_path, capsys):
    target, link = tmp_path / "page.md", tmp_path / "link.md"
    target.write_text("".join(f"<!-- {block}:start -->\nold\n<!-- {block}:end -->\n" for block in WRITES[command]))
    target.chmod(0o600)
    link.symlink_to(target)
    assert rosetta(_page_argv(command, link, tmp_path)) == 0
    assert link.is_symlink() and "\nold\n" not in target.read_text() and stat.S_IMODE(target.stat().st_mode) == 0o600
    capsys.readouterr()


def _one_line_error(capsys, argv: list[str]) -> str:
    assert rosetta(argv) == failures.EXIT_FAILED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", FILLED)
def test_each_command_refuses_a_read_only_page_in_one_line_and_leaves_it(command, tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("".join(f"<!-- {block}:start -->\nold\n<!-- {block}:end -->\n" for block in WRITES[command]))
    before = page.read_text()
    page.chmod(0o444)
    assert f"{page} is read-only: not replaced" in _one_line_error(capsys, _page_argv(command, page, tmp_path))
    assert page.read_text() == before and not [path for path in tmp_path.iterdir() if path.name.startswith(atomic.STAGED_PREFIX)]


MALFORMED = {
    "end before start": (b"<!-- api:end -->\n<!-- api:start -->\n", "its <!-- api:end --> marker comes before its"),
    "utf-16": (PAGE.encode("utf-16"), "not a UTF-8 text file (byte 0 is not UTF-8: UTF-16 or another encoding?)"),
}


def _naive_replace_block(path: Path, block: str, text: str) -> None:
    """The block filled as it was: read in the locale's encoding, split at the markers wherever they stand."""
    start, end = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
    page = path.read_text()
    if start not in page or end not in page:
        raise ValueError(f"{path} has no {start} ... {end} block to fill")
    head, rest = page.split(start, 1)
    atomic.write_atomic(path, f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}".encode())


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_page_is_one_line_naming_it(case, tmp_path, capsys):
    """Negative control: filled as it was, the line the user saw names no page (an IndexError, a codec's error)."""
    content, message = MALFORMED[case]
    page = tmp_path / "page.md"
    page.write_bytes(content)
    err = _one_line_error(capsys, ["api", "--readme", str(page)])
    assert err.startswith(f"rosetta api: {page}: ") and message in err and page.read_bytes() == content
    with pytest.raises(Exception) as naive:
        _naive_replace_block(page, "api", "new")
    assert str(page) not in failures.describe(naive.value)


def test_a_page_lacking_one_of_the_reports_blocks_is_left_as_it_was(tmp_path, capsys):
    """`rosetta report --readme` fills two blocks in one write. Negative control: block by block, as it was, the
    first block is written before the second one's absence is found."""
    page = tmp_path / "page.md"
    page.write_text("<!-- report:start -->\nold\n<!-- report:end -->\n")  # no models block
    before = page.read_text()
    err = _one_line_error(capsys, _page_argv("report", page, tmp_path))
    assert "has no <!-- models:start -->" in err and page.read_text() == before
    with pytest.raises(ValueError):
        for block in ("report", "models"):
            atomic.replace_block(page, block, "new")
    assert page.read_text() != before
