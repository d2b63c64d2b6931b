"""The code blocks of README.md and docs/*.md, found and run so that an example in the docs can never rot
(tests/shared/test_docs.py: the blocks that need no framework; tests/cross/test_docs.py: those that need torch and
TensorFlow). The convention, as docs/contributing.md states it for writers:

- A fenced block is run when its language is `python` or `bash`; a `json` block is parsed; a `text` or `console`
  block (output as printed, a file tree) is shown only. A block of any other language, or none, is an error.
- The line right before the fence may be an HTML comment marking the block:
  `<!-- sketch -->`: never run (a GPU, several machines, hours of training, the network, files the reader has and
  we do not, tens of seconds for what another test already runs); its lines are still checked: `rosetta ...` by
  rosetta's own argument parser, `pip install` extras against pyproject.toml, `tox -e ENV` against tox.ini,
  `python -m MODULE` and `torchrun ... -m MODULE` by the module's existence;
  `<!-- needs-data -->`: run only where the data folder exists (`../shared/data` beside the checkout, or
  $ROSETTA_DATA_DIR), else checked as a sketch;
  `<!-- file: NAME -->`: not run but written to NAME in the work folder, for the blocks after it.
  Any other comment there is an error (a mistyped marker must not quietly change what runs).
- The blocks of one page run in order in one work folder: a temporary folder `work/` holding a copy of the
  repository's reports/, beside `shared/data` linked to the data folder (so `--data-dir ../shared/data` reads as it
  does from a checkout). bash runs there with `-e -o pipefail`, the repository on PYTHONPATH and this Python's
  scripts (`rosetta`) first on PATH; python blocks `exec` there in one namespace per page.
- Which test runs a block: one that needs no framework (python importing none of FRAMEWORKS; bash whose
  `rosetta` commands are FRAMEWORK_FREE_COMMANDS or `--help`, and whose python imports no framework) runs in
  tests/shared; every other block in tests/cross, which also runs the page's `file:` blocks and framework-free
  python blocks again before the blocks after them (later blocks may use their names and files).
- In tests/cross a bash block made only of `rosetta ...` lines runs each line in the test's process through
  `shared.cli.main`, the console script's entry point (torch and TensorFlow are imported once, not per line); any
  other bash block runs in bash.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python", "bash"}
SHOWN_LANGUAGES = {"text", "console", "json"}  # json: parsed, never run
FRAMEWORKS = {"torch", "tensorflow", "keras", "jax", "torch_impl", "tf_impl", "keras_hub"}
# shared.port is numpy at import, but these import a stack when called (read_weights of a .safetensors file does not)
FRAMEWORK_CALLS = {f"shared.port.{name}" for name in ("port", "port_own", "convert", "verify")}
FRAMEWORK_FREE_COMMANDS = {"models", "report", "reproduction", "api"}  # rosetta's subcommands that import no framework
BLOCK_SECONDS = 300

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<text>.*?)\s*-->\s*$")
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`*?\[\]{}]|^\s*\w+=")  # pipes, redirects, variables, globs, env prefixes


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (`page`, the fence's 1-based `line`), its language, code and marker."""

    page: Path
    line: int
    language: str
    code: str
    marker: str | None = None  # "sketch", "needs-data", "file" or None
    file_name: str | None = None  # for `file:` blocks

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def runs(self) -> bool:
        """Run (or, for a `file:` block, written) by a test, data permitting."""
        return (self.language in RUN_LANGUAGES or self.marker == "file") and self.marker != "sketch"

    @property
    def needs_frameworks(self) -> bool:
        return needs_frameworks(self)


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of `page` (its text read unless given), in order; ValueError for an unknown marker."""
    lines = (page.read_text() if text is None else text).splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        language = opening["info"].strip().split(" ")[0] if opening["info"].strip() else ""
        body, end = [], index + 1
        while end < len(lines) and not re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", lines[end]):
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        marker, file_name = _marker(page, index, lines[index - 1] if index else "")
        found.append(Block(page, index + 1, language, "\n".join(body) + "\n", marker, file_name))
        index = end + 1
    return found


def _marker(page: Path, index: int, before: str) -> tuple[str | None, str | None]:
    comment = _MARKER.match(before)
    if not comment:
        return None, None
    text = comment["text"]
    if text in ("sketch", "needs-data"):
        return text, None
    name, sep, file_name = text.partition(":")
    if name.strip() == "file" and sep and file_name.strip():
        return "file", file_name.strip()
    raise ValueError(f"{page.name}:{index + 1}: the comment before this block is no marker ({text!r}); "
                     f"known: <!-- sketch -->, <!-- needs-data -->, <!-- file: NAME -->")  # fmt: skip


def undeclared(found: Iterable[Block]) -> list[str]:
    """The blocks whose language is neither run nor shown (no language at all included)."""
    return [f"{b.where} ({b.language or 'no language'})" for b in found if b.language not in RUN_LANGUAGES | SHOWN_LANGUAGES]


# ---------------------------------------------------------------- which test runs a block


def logical_lines(code: str) -> list[str]:
    """A shell block's commands: continuation lines joined, blank lines and whole-line comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def _python_imports(code: str) -> set[str]:
    """The top-level packages `code` imports, and `shared.port.NAME` for the names it takes from shared.port."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
            if node.module == "shared.port":
                names |= {f"shared.port.{alias.name}" for alias in node.names}
    return names


def needs_frameworks(block: Block) -> bool:
    """True for a block only tests/cross can run (see the module docstring)."""
    if block.marker == "file":
        return False
    if block.language == "python":
        return bool(_python_imports(block.code) & (FRAMEWORKS | FRAMEWORK_CALLS))
    for line in logical_lines(block.code):
        words = _words(line)
        if "rosetta" in words:
            rest = words[words.index("rosetta") + 1 :]
            command = next((word for word in rest if not word.startswith("-")), None)
            if command not in FRAMEWORK_FREE_COMMANDS and "--help" not in rest and "-h" not in rest:
                return True
        python = words[:1] in (["python"], ["python3"]) and re.search(rf"\b({'|'.join(FRAMEWORKS)})\b", line)
        if python or words[:1] == ["torchrun"]:
            return True
    return False


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return line.split()


# ---------------------------------------------------------------- running a page


def data_dir() -> Path:
    """The data folder the docs' data blocks read (tests/data_files.py's rule)."""
    from tests.data_files import DATA_DIR

    return DATA_DIR


@dataclasses.dataclass
class Workspace:
    """One page's work folder, its python namespace and its shell environment."""

    folder: Path
    namespace: dict
    env: dict
    data: Path | None  # the data folder, None where it is absent

    @classmethod
    def make(cls, root: Path, data: Path | None = None) -> Workspace:
        folder = root / "work"
        folder.mkdir(parents=True)
        shutil.copytree(REPO / "reports", folder / "reports")  # what a checkout holds; the blocks may rewrite it
        data = data if data is not None else data_dir()
        data = data if data.is_dir() else None
        if data is not None:
            (root / "shared").mkdir()
            (root / "shared" / "data").symlink_to(data.resolve(), target_is_directory=True)
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        return cls(folder, {"__name__": "__docs__"}, env, data)


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """The current folder, and the first entry of sys.path (for a module a `file:` block wrote), for a while."""
    before = Path.cwd()
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        os.chdir(before)
        with contextlib.suppress(ValueError):
            sys.path.remove(str(folder))


def run_block(block: Block, space: Workspace, in_process: bool = False) -> str:
    """Run one block in `space`; its output, or AssertionError naming the block with what it printed."""
    if block.marker == "file":
        target = space.folder / block.file_name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.code)
        if target.suffix == ".py":
            compile(block.code, str(target), "exec")
        elif target.suffix == ".json":
            json.loads(block.code)
        return ""
    if block.language == "python":
        return _run_python(block, space)
    if in_process and all(_simple_rosetta(line) for line in logical_lines(block.code)):
        return "".join(_run_rosetta(block, line, space) for line in logical_lines(block.code))
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=space.folder, env=space.env,
                          capture_output=True, text=True, timeout=BLOCK_SECONDS, stdin=subprocess.DEVNULL)  # fmt: skip
    output = done.stdout + done.stderr
    if done.returncode:
        raise AssertionError(f"{block.where}: the bash block exits {done.returncode}:\n{block.code}\n{output[-4000:]}")
    return output


def _run_python(block: Block, space: Workspace) -> str:
    printed = io.StringIO()
    try:
        with _inside(space.folder), contextlib.redirect_stdout(printed):
            exec(compile(block.code, block.where, "exec"), space.namespace)  # noqa: S102 (our own docs' code)
    except Exception as error:
        raise AssertionError(f"{block.where}: the python block raises {type(error).__name__}: {error}\n"
                             f"{printed.getvalue()[-4000:]}") from error  # fmt: skip
    return printed.getvalue()


def _simple_rosetta(line: str) -> bool:
    words = _words(line)
    return bool(words) and words[0] == "rosetta" and not _SHELL_SYNTAX.search(line.split(" #")[0])


def _run_rosetta(block: Block, line: str, space: Workspace) -> str:
    from shared import cli

    printed = io.StringIO()
    with _inside(space.folder), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        try:
            code = cli.main(_words(line)[1:])
        except SystemExit as exit_:  # argparse: a bad flag
            code = exit_.code
    if code:
        raise AssertionError(f"{block.where}: `{line}` exits {code}:\n{printed.getvalue()[-4000:]}")
    return printed.getvalue()


def run_page(page: Path, root: Path, frameworks: bool, data: Path | None = None, text: str | None = None) -> list[str]:
    """Run `page`'s blocks for one test: frameworks=False runs the framework-free blocks (tests/shared), True the
    others with the file and framework-free python blocks before them (tests/cross). What ran, as `where`s."""
    space = Workspace.make(root, data)
    ran = []
    try:
        for block in blocks(page, text):
            if not block.runs:
                continue
            if block.marker == "needs-data" and space.data is None:
                check_sketch(block)
                continue
            if frameworks:  # tests/cross: the framework blocks, and the file and python blocks they may build on
                wanted = block.needs_frameworks or block.marker == "file" or block.language == "python"
            else:
                wanted = not block.needs_frameworks
            if wanted:
                run_block(block, space, in_process=frameworks)
                ran.append(block.where)
    finally:  # a module a `file:` block wrote is this page's: another page's namesake must not find it imported
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(space.folder)):
                del sys.modules[name]
    return ran


# ---------------------------------------------------------------- what a sketch is checked for


def pyproject_extras() -> set[str]:
    """The extras pyproject.toml declares (read without tomllib: Python 3.10 has none)."""
    section = (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+)\s*=", section, re.M))


def tox_envs() -> set[str]:
    text = (REPO / "tox.ini").read_text()
    listed = re.search(r"^env_list\s*=\s*(.*)$", text, re.M)
    return {*re.findall(r"^\[testenv:([\w.-]+)\]", text, re.M), *(listed[1].replace(" ", "").split(",") if listed else [])}


def check_sketch(block: Block) -> list[str]:
    """Check a block that is not run (see the module docstring); what was checked, AssertionError for a problem."""
    checked = []
    for line in logical_lines(block.code) if block.language == "bash" else []:
        words = _words(line)
        while words and re.match(r"^\w+=", words[0]):  # KERAS_BACKEND=jax rosetta ...
            words = words[1:]
        if not words:
            continue
        if words[0] == "rosetta":
            _parse_rosetta(block, line, words[1:])
        elif words[:2] == ["pip", "install"] or words[1:3] == ["-m", "pip"]:
            for spec in words:
                extras = re.search(r"\[([\w,-]+)\]", spec)
                unknown = set(extras[1].split(",")) - pyproject_extras() if extras else set()
                assert not unknown, f"{block.where}: `{line}` names extras pyproject.toml lacks: {sorted(unknown)}"
        elif words[0] == "tox" and "-e" in words:
            unknown = set(words[words.index("-e") + 1].split(",")) - tox_envs()
            assert not unknown, f"{block.where}: `{line}` names tox envs tox.ini lacks: {sorted(unknown)}"
        elif "-m" in words and words[0] in ("python", "python3", "torchrun"):
            module = words[words.index("-m") + 1]
            assert importlib.util.find_spec(module) is not None, f"{block.where}: `{line}`: no module {module}"
        else:
            continue
        checked.append(line)
    return checked


def _parse_rosetta(block: Block, line: str, argv: list[str]) -> None:
    """`rosetta ARGS` through rosetta's own parser, without running the command."""
    from shared import cli

    printed = io.StringIO()
    with mock.patch.object(cli.failures, "guarded", lambda *args, **kwargs: 0), contextlib.redirect_stdout(printed):
        with contextlib.redirect_stderr(printed):
            try:
                code = cli.main(argv)
            except SystemExit as exit_:
                code = exit_.code
    assert not code, f"{block.where}: `{line}` does not parse:\n{printed.getvalue()[-2000:]}"


# ---------------------------------------------------------------- names in the prose

_DOTTED = re.compile(r"(?<![\w./-])(?:shared|torch_impl|tf_impl)(?:\.[A-Za-z_]\w*)+")


def dotted_names(text: str) -> set[str]:
    """The dotted names of our packages the prose and its inline code mention (`tf_impl.files.load_keras`,
    `shared.port.convert`): a file path (`shared/port/layouts.py`) is not one."""
    return {name for name in _DOTTED.findall(prose(text, inline_code=True)) if not name.endswith((".py", ".md"))}


def resolve(name: str):
    """The object `name` names: its longest importable module, then attributes, with every warning an error (the docs
    must name the new places, never a moved one). AssertionError naming what does not resolve."""
    import warnings

    parts = name.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cut in range(len(parts), 0, -1):
            module_name = ".".join(parts[:cut])
            try:
                found = importlib.import_module(module_name)
            except ModuleNotFoundError as error:
                if error.name and (module_name + ".").startswith(error.name + "."):
                    continue  # this prefix (or its parent) is no module: a shorter one, then attributes
                raise  # the module exists but an import inside it fails
            for attribute in parts[cut:]:
                assert hasattr(found, attribute), f"{name}: {module_name} has no {'.'.join(parts[cut:])}"
                found = getattr(found, attribute)
            return found
    raise AssertionError(f"{name}: no such module")


# ---------------------------------------------------------------- links


_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str, inline_code: bool = False) -> str:
    """`text` without its fenced blocks, and without its inline code unless `inline_code` (a link in code is code)."""
    kept, fence = [], None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening["fence"]
        elif fence is not None and re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", line):
            fence = None
        elif fence is None:
            kept.append(line if inline_code else re.sub(r"(`+)(?:(?!\1).)+\1", "", line))
    return "\n".join(kept)


def anchors(text: str) -> set[str]:
    """The `#anchors` GitHub gives the headings of a markdown text (a repeated heading's: -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(text, inline_code=True).splitlines():
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading[1])  # a link in a heading: its text
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """The relative links of `page` whose file or heading does not exist."""
    text = page.read_text() if text is None else text
    broken = []
    for target in _LINK.findall(prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.name}: {target} (no file {path})")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text() if file != page else text):
            broken.append(f"{page.name}: {target} (no heading #{anchor} in {file.name})")
    return broken
