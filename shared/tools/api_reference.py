"""`rosetta api`: the public API reference (docs/api.md), read from the sources with `ast`, so no framework is imported
and the page is the same on every machine: each package's `__all__`, in order, each name with its signature, where it
is defined and its docstring. tests/shared/test_api_reference.py fails when docs/api.md is not what this writes.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# the packages whose `__all__` is the public API, one import deep (docs/DESIGN.md, "The public API")
PACKAGES = ("shared", "shared.port", "torch_impl", "tf_impl")


def render(root: Path = REPO, packages=PACKAGES) -> str:
    """The reference as markdown: a section per package, a heading per public name."""
    return "\n\n".join(_package(root, package) for package in packages)


def _package(root: Path, package: str) -> str:
    init = _source(root, package, is_package=True)
    tree = ast.parse(init.read_text())
    names, origins = _public_names(tree, init), _imported_from(tree)
    summary = _first_paragraph(ast.get_docstring(tree) or "")
    lines = [f"## `{package}`", "", summary, ""]
    for name in names:
        lines += _entry(root, package, name, origins.get(name, package))
    return "\n".join(lines).rstrip()


def _public_names(tree: ast.Module, path: Path) -> list[str]:
    """`__all__` of a package's `__init__.py` (a literal list or tuple of strings)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "__all__" for target in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{path}: no __all__")


def _imported_from(tree: ast.Module) -> dict[str, str]:
    """{name: the module it is imported from} for the `from X import name` lines of a package's `__init__.py`."""
    return {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
            for alias in node.names}  # fmt: skip


def _entry(root: Path, package: str, name: str, module: str) -> list[str]:
    """One public name: its heading, signature (or kind), the file it lives in, its docstring."""
    path = _module_path(root, f"{module}.{name}")
    if path is not None:  # a module exported by name (tf_impl.backends)
        return _section(f"{package}.{name}", "module", path, ast.get_docstring(ast.parse(path.read_text())), root)
    path, node = _defined(root, module, name)
    if isinstance(node, ast.ClassDef):
        signature = f"class {name}({_class_arguments(node)})"
        return _section(f"{package}.{name}", signature, path, ast.get_docstring(node), root)
    if isinstance(node, ast.FunctionDef):
        return _section(f"{package}.{name}", f"{name}({_arguments(node)})", path, ast.get_docstring(node), root)
    return _section(f"{package}.{name}", f"{name} = ...", path, _comment_above(path, node), root)


def _section(title: str, signature: str, path: Path, doc: str | None, root: Path) -> list[str]:
    where = path.relative_to(root).as_posix()
    lines = [f"### `{title}`", "", f"`{signature}` · [{where}](../{where})", ""]
    return lines + (["```text", inspect.cleandoc(doc), "```", ""] if doc else [])


def _defined(root: Path, module: str, name: str) -> tuple[Path, ast.AST]:
    """The file and the top-level def, class or assignment of `name`, following `from X import name` re-exports."""
    path = _source(root, module)
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return path, node
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(target, "id", None) == name for target in targets):
                return path, node
    origin = _imported_from(tree).get(name)
    if origin is not None:
        return _defined(root, origin, name)
    raise ValueError(f"{path}: defines no {name}")


def _class_arguments(node: ast.ClassDef) -> str:
    """A class's constructor parameters: its `__init__`'s, else (a dataclass) its annotated fields."""
    init = next((item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"), None)
    if init is not None:
        return _arguments(init, drop_self=True)
    fields = [item for item in node.body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
    return ", ".join(ast.unparse(field).replace(" = ", "=") for field in fields)


def _arguments(function: ast.FunctionDef, drop_self: bool = False) -> str:
    """A def's parameters as written, without `self`."""
    arguments = function.args
    if drop_self and arguments.args:
        arguments = ast.arguments(**{**arguments.__dict__, "args": arguments.args[1:]})
    return ast.unparse(arguments)


def _comment_above(path: Path, node: ast.AST) -> str | None:
    """The `#` comments on the lines right above an assignment (or at its end), as its doc."""
    lines = path.read_text().splitlines()
    above, index = [], node.lineno - 2
    while index >= 0 and lines[index].lstrip().startswith("#"):
        above.insert(0, lines[index].lstrip("# ").rstrip())
        index -= 1
    trailing = lines[node.lineno - 1].partition("  # ")[2]
    return " ".join(above) or trailing or None


def _first_paragraph(text: str) -> str:
    return inspect.cleandoc(text).split("\n\n", 1)[0].replace("\n", " ")


def _module_path(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _source(root: Path, module: str, is_package: bool = False) -> Path:
    path = root.joinpath(*module.split("."), "__init__.py") if is_package else _module_path(root, module)
    if path is None or not path.is_file():
        raise ValueError(f"no source for {module} under {root}")
    return path
