"""docs/api.md: the public API reference `rosetta api` writes from the sources, never out of date."""

from __future__ import annotations

import shutil

import pytest

from shared.cli import main as rosetta
from shared.tools import api_reference
from tests.doc_blocks import REPO


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
            "from shared.port.port_files import read_weights", "from shared.port.port_files import read_weights, vanished"
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
