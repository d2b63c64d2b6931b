"""The README and the guides in docs/: every code block is declared, run or checked (the convention:
tests/doc_blocks.py), every relative link and anchor resolves, and every generated block sits where its writer
finds it. Here the blocks that need no framework run; tests/cross/test_docs.py runs the others.
Each check has a negative control: a temporary page with a broken block, link or marker is caught by the same code."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from shared.io.atomic import replace_block
from tests import doc_blocks
from tests.doc_blocks import PAGES, REPO

FRAMEWORK_FREE_PAGES = [page for page in PAGES if any(b.runs and not b.needs_frameworks for b in doc_blocks.blocks(page))]
ALL_BLOCKS = [block for page in PAGES for block in doc_blocks.blocks(page)]


def test_the_pages_are_the_readme_and_the_guides():
    names = {page.name for page in PAGES}
    assert {"README.md", "DESIGN.md", "porting-checkpoints.md", "porting-your-model.md", "keras.md", "training.md",
            "traps.md", "report-and-bench.md"} <= names  # fmt: skip


def test_every_block_names_what_it_is():
    """A block is run (python, bash), parsed (json) or shown (text, console): none escapes by having no language."""
    assert doc_blocks.undeclared(ALL_BLOCKS) == []


@pytest.mark.parametrize("page", FRAMEWORK_FREE_PAGES, ids=lambda page: page.name)
def test_the_pages_framework_free_blocks_run_as_written(page, tmp_path):
    assert doc_blocks.run_page(page, tmp_path, frameworks=False)


def test_every_sketch_is_checked():
    """A sketch is never run, but its rosetta lines parse, its extras and tox envs exist, its modules import."""
    sketches = [block for block in ALL_BLOCKS if block.marker in ("sketch", "needs-data") and block.language == "bash"]
    assert sketches, "no sketch found: the marker parsing is broken"
    checked = [line for block in sketches for line in doc_blocks.check_sketch(block)]
    assert any(line.startswith("rosetta ") for line in checked) and any(line.startswith("pip ") for line in checked)


def test_json_blocks_parse():
    import json

    for block in ALL_BLOCKS:
        if block.language == "json":
            json.loads(block.code)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_and_anchor_resolves(page):
    assert doc_blocks.broken_links(page) == []


# ---------------------------------------------------------------- the generated blocks


def _writers() -> list[tuple[str, str]]:
    """(rosetta subcommand, page) for every tox command that fills a page's blocks (`--readme PAGE`)."""
    found = re.findall(r"^\s*rosetta (\w+) .*--readme (\S+)", (REPO / "tox.ini").read_text(), re.M)
    assert found, "tox.ini names no --readme: the report no longer fills the README"
    return found


# what each writer fills (shared/cli.py: replace_block calls; rosetta equality: shared/verify/measurement.py's sections;
# rosetta reproduction: shared/tools/reproduction.py's command)
WRITES = {"report": ("report", "models", "hf_ports", "generation_speed"), "equality": ("equality", "training", "drift"),
          "reproduction": ("reproduction", "both_stacks"), "api": ("api",)}  # fmt: skip


def test_the_table_of_writers_matches_their_code():
    writers = ("shared/cli.py", "shared/verify/measurement.py", "shared/tools/reproduction.py")
    code = "".join((REPO / path).read_text() for path in writers)
    for command, blocks in WRITES.items():
        assert f"def _{command}(" in code
        for block in blocks:
            assert f'"{block}"' in code, f"rosetta {command} no longer writes a {block!r} block"


@pytest.mark.parametrize("command,page", _writers())
def test_every_writer_finds_its_blocks_once(command, page, tmp_path):
    """Each block a tox command fills stands once in the page it names: replace_block (the writer's own function)
    fills a copy, and only the block's inside changes."""
    source = REPO / page
    copy = tmp_path / source.name
    shutil.copy(source, copy)
    for block in WRITES[command]:
        assert source.read_text().count(f"<!-- {block}:start -->") == 1, f"{page}: {block} block not exactly once"
        replace_block(copy, block, "FILLED")
    text = copy.read_text()
    for block in WRITES[command]:
        assert f"<!-- {block}:start -->\nFILLED\n<!-- {block}:end -->" in text


def test_no_page_holds_a_block_no_writer_fills():
    """A generated table copied into a guide would go stale: only the pages tox's writers name hold blocks."""
    filled: dict[Path, set] = {}
    for command, page in _writers():
        filled.setdefault((REPO / page).resolve(), set()).update(WRITES[command])
    for page in PAGES:
        names = set(re.findall(r"<!-- (\w+):start -->", doc_blocks.prose(page.read_text())))  # not in code
        assert names <= filled.get(page.resolve(), set()), f"{page.name} holds blocks no writer fills: {names}"


def test_negative_control_a_missing_marker_is_caught(tmp_path):
    copy = tmp_path / "results.md"
    copy.write_text((REPO / "docs" / "results.md").read_text().replace("<!-- drift:start -->", ""))
    with pytest.raises(ValueError, match="no <!-- drift:start -->"):
        replace_block(copy, "drift", "FILLED")


# ---------------------------------------------------------------- negative controls of the block runner


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_negative_control_a_python_block_that_raises_is_caught(tmp_path):
    page = _page(tmp_path, "# p\n\n```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is not 2'\n```\n")
    with pytest.raises(AssertionError, match="page.md:7: the python block raises AssertionError: x is not 2"):
        doc_blocks.run_page(page, tmp_path / "run", frameworks=False)


def test_negative_control_a_bash_command_that_fails_is_caught(tmp_path):
    """The console script itself, in bash: an unknown subcommand exits 2, and `-e` stops the block there."""
    page = _page(tmp_path, "# p\n\n```bash\nrosetta models\nrosetta models --no-such-flag\necho never\n```\n")
    with pytest.raises(AssertionError, match=r"(?s)page.md:3: the bash block exits 2.*unrecognized arguments"):
        doc_blocks.run_page(page, tmp_path / "run", frameworks=False)


def test_blocks_run_in_a_work_folder_beside_the_data_with_the_console_script(tmp_path):
    data = tmp_path / "data"
    (data / "multi30k").mkdir(parents=True)
    text = ("# p\n\n```bash\nrosetta models > models.txt\ntest -d ../shared/data/multi30k\ntest -f reports/README.md\n"
            "```\n\n```python\nassert 'luong_general' in open('models.txt').read()\n```\n")  # fmt: skip
    page = _page(tmp_path, text)
    assert doc_blocks.run_page(page, tmp_path / "run", frameworks=False, data=data) == ["page.md:3", "page.md:9"]


def test_marked_blocks_run_only_as_marked(tmp_path):
    """A sketch never runs; a data block runs only with the data; a file block is written, not run."""
    text = ("# p\n\n<!-- sketch -->\n```bash\nfalse\n```\n\n<!-- needs-data -->\n```bash\ntouch ran-with-data\n```\n\n"
            "<!-- file: mod.py -->\n```python\nraise SystemExit('a file block is not run')\n```\n\n"
            "```bash\ntest -f mod.py\n```\n")  # fmt: skip
    page = _page(tmp_path, text)
    without = doc_blocks.run_page(page, tmp_path / "without", frameworks=False, data=tmp_path / "absent")
    assert without == ["page.md:14", "page.md:18"]
    (tmp_path / "data").mkdir()
    assert doc_blocks.run_page(page, tmp_path / "with", frameworks=False, data=tmp_path / "data") == [
        "page.md:9", "page.md:14", "page.md:18"]  # fmt: skip
    assert (tmp_path / "with" / "work" / "ran-with-data").is_file()


def test_negative_control_a_mistyped_marker_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no marker"):
        doc_blocks.blocks(_page(tmp_path, "# p\n\n<!-- skecth -->\n```bash\nfalse\n```\n"))


def test_negative_control_a_block_without_a_language_is_caught(tmp_path):
    found = doc_blocks.blocks(_page(tmp_path, "# p\n\n```\nrosetta port a b\n```\n\n```sh\nls\n```\n"))
    assert doc_blocks.undeclared(found) == ["page.md:3 (no language)", "page.md:7 (sh)"]


@pytest.mark.parametrize(
    "line,problem",
    [
        ("rosetta train reverse_rnn --no-such-flag", "does not parse"),
        ("rosetta train reverse_rnn --batch-size 0", "does not parse"),
        ("KERAS_BACKEND=jax rosetta bench --keras-backend nope", "does not parse"),
        ('pip install -e ".[torch,nope]"', "extras pyproject.toml lacks: ['nope']"),
        ("tox -e report,nope", "tox envs tox.ini lacks: ['nope']"),
        ("python -m shared.train.no_such_runner runs/x torch", "no module shared.train.no_such_runner"),
    ],
)
def test_negative_control_a_sketch_that_rotted_is_caught(tmp_path, line, problem):
    block = doc_blocks.blocks(_page(tmp_path, f"# p\n\n<!-- sketch -->\n```bash\n{line}\n```\n"))[0]
    with pytest.raises(AssertionError, match=re.escape(problem)):
        doc_blocks.check_sketch(block)


def test_a_sketch_as_written_passes_its_check(tmp_path):
    text = ("# p\n\n<!-- sketch -->\n```bash\nrosetta train luong_general --nproc-per-node 8 \\\n    --data-dir DATA\n"
            'pip install -e ".[torch,tf]"\ntox -e report\n'
            "torchrun --nnodes 2 -m shared.train.runner runs/x torch\n```\n")  # fmt: skip
    assert len(doc_blocks.check_sketch(doc_blocks.blocks(_page(tmp_path, text))[0])) == 4


@pytest.mark.parametrize(
    "code,language,frameworks",
    [
        ("import numpy as np\n", "python", False),
        ("from shared.port import convert\nimport torch\n", "python", True),
        ("import keras, numpy\n", "python", True),
        ("from tf_impl import TorchAdam\n", "python", True),
        ("from shared.port import port, render\n", "python", True),
        ("from shared.port import read_weights\n", "python", False),
        ("rosetta models\nrosetta port --help\nrosetta report --output x\n", "bash", False),
        ("rosetta port a.pt b.keras --model reverse_rnn\n", "bash", True),
        ("rosetta --debug train reverse_rnn\n", "bash", True),
        ('python -c "import numpy as np, torch"\n', "bash", True),
        ("torchrun --nproc-per-node 2 -m shared.train.runner runs/x torch\n", "bash", True),
    ],
)
def test_which_test_runs_a_block(code, language, frameworks):
    assert doc_blocks.Block(Path("p.md"), 1, language, code).needs_frameworks is frameworks


def test_negative_control_broken_links_and_anchors_are_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## The `fit` API\n\n## Twice\n\n## Twice\n")
    text = ("# Page\n\n[ok](other.md#the-fit-api) [ok](other.md#twice-1) [ok](#page) [web](https://example.org/x)\n"
            "[missing file](nope.md) [missing heading](other.md#fit) ![missing image](img.png) [self](#nowhere)\n"
            "`[in code](nope.md)`\n\n```text\n[in a block](nope.md)\n```\n")  # fmt: skip
    broken = doc_blocks.broken_links(_page(tmp_path, text))
    assert broken == ["page.md: nope.md (no file nope.md)", "page.md: other.md#fit (no heading #fit in other.md)",
                      "page.md: img.png (no file img.png)", "page.md: #nowhere (no heading #nowhere in page.md)"]  # fmt: skip


def test_negative_control_a_name_that_moved_or_never_was_is_caught():
    """The prose-name check (tests/cross/test_docs.py) fails on a moved place (its DeprecationWarning is an error), a
    missing attribute and a missing module; a path to a file is not a name."""
    assert doc_blocks.resolve("shared.port.render") is not None
    with pytest.raises(DeprecationWarning, match="shared.port"):
        doc_blocks.resolve("shared.porting.convert")
    with pytest.raises(AssertionError, match="has no no_such_name"):
        doc_blocks.resolve("shared.port.no_such_name")
    with pytest.raises(AssertionError, match="no such module"):
        doc_blocks.resolve("shared_nowhere.x")
    text = "See `shared/port/layouts.py`, `shared.port.convert(torch_model, keras_model)` and shared.cli.main."
    assert doc_blocks.dotted_names(text) == {"shared.port.convert", "shared.cli.main"}
