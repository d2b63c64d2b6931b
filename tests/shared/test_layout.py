"""The house rules of the layout (docs/DESIGN.md "Layout"), read from the source without importing it: no import
cycle among the suite's modules, hidden or not (imports inside functions and under TYPE_CHECKING count, and so do
`importlib.import_module` calls naming a module by a string or an f-string, each contract's import of every catalogue
module, and shared/stacks.py's door to every stack module its Protocols list); a stack module named in shared/
nowhere but that door; and shared/'s rooms in layers: a room imports only the rooms below it."""

from __future__ import annotations

import ast
from pathlib import Path

from shared import catalogue, stacks

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "torch_impl", "tf_impl")


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the suite's modules it imports anywhere in its file (`from pkg import sub` names `pkg.sub`)."""
    modules = _modules(root)
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [target for target in submodules if target in modules] or [node.module]
            else:
                targets = named_imports(node)
            graph[name] |= {target for target in targets if target in modules and target != name}
    if "shared.stacks" in graph:
        graph["shared.stacks"] |= door_modules() & set(graph)
    for package in ("torch_impl", "tf_impl"):  # contract.build imports each catalogue module by name
        contract = f"{package}.contract"
        if contract in graph:
            graph[contract] |= {f"{package}.models.{spec.module}" for spec in catalogue.CATALOGUE.values()} & set(graph)
    return graph


IMPORTERS = {"import_module", "__import__"}  # importlib.import_module(name), __import__(name)


def named_imports(node: ast.AST) -> list[str]:
    """The modules an `import_module("pkg.mod")` or `import_module(f"{stack}.train")` call names: a string as
    written; an f-string with each of its fields read as each stack's package (`{stack.__name__}.train` is
    torch_impl.train and tf_impl.train)."""
    if not (isinstance(node, ast.Call) and node.args):
        return []
    function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    if function not in IMPORTERS:
        return []
    argument = node.args[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return [argument.value]
    if not isinstance(argument, ast.JoinedStr):
        return []
    names = [""]
    for part in argument.values:
        if isinstance(part, ast.Constant):
            names = [name + str(part.value) for name in names]
        else:
            names = [name + package for name in names for package in stacks.PACKAGES.values()]
    return names


def door_modules() -> set[str]:
    """The stack modules shared/stacks.py imports: every module its Protocols list, in each stack."""
    surface = stacks.SURFACE
    return {".".join(filter(None, (stacks.PACKAGES[stack], module))) for stack in stacks.STACKS for module in surface[stack]}


def stack_modules_named_outside_the_door(root: Path) -> list[str]:
    """`module: target` for each `import_module` call in shared/ (but the door) naming a stack module."""
    found = []
    for name, path in sorted(_modules(root).items()):
        if not name.startswith("shared") or name == "shared.stacks":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = [target for target in named_imports(node) if target.split(".")[0] in stacks.PACKAGES.values()]
            found += [f"{name}: {target}" for target in named]
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_suite_has_no_import_cycle_hidden_or_not():
    assert cycles(import_graph(REPO)) == []


def test_shared_names_a_stack_module_only_through_its_door():
    assert stack_modules_named_outside_the_door(REPO) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_negative_control_a_cycle_through_importlib_strings_and_a_module_named_past_the_door_are_found(tmp_path):
    """The port's file code as it was: stack modules named in `importlib` strings, one in an f-string, and a TF
    module importing a name back from it (a cycle an `import`-only reading does not see)."""
    root = _tree(tmp_path, {
        "shared/port/__init__.py": "",
        "shared/port/port_files.py": "import importlib\n"
                                     "def read():\n    return importlib.import_module('tf_impl.checkpoints')\n"
                                     "def write(stack):\n    return importlib.import_module(f'{stack.__name__}.train')\n",
        "tf_impl/checkpoints.py": "from tf_impl import object_graph\n",
        "tf_impl/object_graph.py": "from shared.port.port_files import is_saved_model\n",
        "tf_impl/train.py": "", "torch_impl/train.py": "",
    })  # fmt: skip
    assert ["shared.port.port_files", "tf_impl.checkpoints", "tf_impl.object_graph"] in cycles(import_graph(root))
    assert stack_modules_named_outside_the_door(root) == [
        "shared.port.port_files: tf_impl.checkpoints",
        "shared.port.port_files: torch_impl.train",
        "shared.port.port_files: tf_impl.train",
    ]
    assert cycles(_import_statements_only(root)) == []  # what reading `import` statements alone found


def _import_statements_only(root: Path) -> dict[str, set[str]]:
    """The graph as an `import`-only reading saw it (the naive version): no importlib strings, no door."""
    graph = import_graph(root)
    for name, path in _modules(root).items():
        graph[name] -= {target for node in ast.walk(ast.parse(path.read_text())) for target in named_imports(node)}
    return graph


def test_negative_control_a_lazy_or_type_checking_cycle_is_found(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "shared" / "a.py").write_text("from shared import b\n")
    (tmp_path / "shared" / "b.py").write_text("def f():\n    from shared.a import x\n")  # lazy, inside a function
    (tmp_path / "shared" / "c.py").write_text("from shared import d\n")
    (tmp_path / "shared" / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import shared.c\n")
    assert cycles(import_graph(tmp_path)) == [["shared.a", "shared.b"], ["shared.c", "shared.d"]]


# shared/'s rooms, lowest first: the plain records and tables, what both stacks run, files, corpora, the proof
# harness, training runs, porting, the tools, the command line. A room imports only rooms before it in this list.
LAYERS = (
    "specs",
    "stacks",
    "catalogue",
    "documents",
    "failures",
    "core",
    "io",
    "data",
    "generation",  # Hugging Face's generation rules over an array namespace each stack provides
    "verify",
    "train",
    "hf",  # Hugging Face model folders: read whole and written back exactly
    "port",
    "tools",
    "cli",
)


def _room(module: str) -> str | None:
    """The room of one of shared/'s modules (`shared.core.canonical` -> `core`), None for the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "shared" and len(parts) > 1 else None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """`a -> b` for each import of a room at or above the importer's own (the same room excepted)."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            room, target_room = _room(module), _room(target)
            if None in (room, target_room) or room == target_room:
                continue
            if room not in LAYERS or target_room not in LAYERS:
                found.append(f"{module} -> {target}: a room LAYERS does not place")
            elif LAYERS.index(target_room) > LAYERS.index(room):
                found.append(f"{module} -> {target}")
    return found


def test_every_room_of_shared_imports_only_the_rooms_below_it():
    graph = import_graph(REPO)
    assert {_room(module) for module in graph} - {None} == set(LAYERS)
    assert layer_violations(graph) == []


def test_negative_control_an_import_upwards_is_found():
    graph = {"shared.core.canonical": {"shared.tools.bench", "shared.specs"}, "shared.tools.bench": {"shared.core.canonical"}}
    graph["shared.lounge.sofa"] = {"shared.core.canonical"}
    assert layer_violations(graph) == [
        "shared.core.canonical -> shared.tools.bench",
        "shared.lounge.sofa -> shared.core.canonical: a room LAYERS does not place",
    ]


# ---- one job a module: at most MAX_LINES lines; a file format asked what it does, never which it is ----

MAX_LINES = 450
REGISTRY = "shared.port.formats"  # the one module that knows each format by name


def oversized(root: Path) -> list[str]:
    """`module: N lines` for each module of the suite over MAX_LINES."""
    found = [(name, len(path.read_text().splitlines())) for name, path in sorted(_modules(root).items())]
    return [f"{name}: {count} lines" for name, count in found if count > MAX_LINES]


def test_no_module_is_over_450_lines():
    assert oversized(REPO) == []


def test_negative_control_a_long_module_is_found(tmp_path):
    root = _tree(tmp_path, {"shared/long.py": "x = 1\n" * (MAX_LINES + 1), "shared/short.py": "x = 1\n" * MAX_LINES})
    assert oversized(root) == [f"shared.long: {MAX_LINES + 1} lines"]


def _names_a_format(node: ast.AST) -> bool:
    """`x.format.name`, `fmt.name`, a variable `fmt`, or `x.format`: an operand that is a format's name."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        value = node.value
        return (isinstance(value, ast.Attribute) and value.attr == "format") or getattr(value, "id", None) in ("fmt", "format")
    return (isinstance(node, ast.Name) and node.id == "fmt") or (isinstance(node, ast.Attribute) and node.attr == "format")


def format_name_comparisons(root: Path) -> list[str]:
    """`module:line` for each comparison of a format's name outside the registry (`end.format.name == "keras"`,
    `fmt == "torch"`, `layout.format == src.format.name`)."""
    found = []
    for name, path in sorted(_modules(root).items()):
        if name == REGISTRY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                texts = [o for o in operands if isinstance(o, ast.Constant) and isinstance(o.value, str)]
                formats = [o for o in operands if _names_a_format(o)]
                if formats and (texts or len(formats) > 1):
                    found.append(f"{name}:{node.lineno}")
    return found


def test_a_format_is_compared_by_name_only_in_the_registry():
    assert format_name_comparisons(REPO) == []


def test_negative_control_the_ports_old_branches_on_format_names_are_found(tmp_path):
    root = _tree(tmp_path, {
        "shared/a.py": "def f(end):\n    if end.format.name == 'keras':\n        return 1\n",
        "shared/b.py": "def f(dst):\n    fmt = dst.format.name\n    return fmt == 'torch'\n",
        "shared/c.py": "def f(p, src):\n    return p.format == src.format.name\n",
        "shared/d.py": "def f(end):\n    return end.format.keyed and end.format.description != ''\n",
    })  # fmt: skip
    assert format_name_comparisons(root) == ["shared.a:2", "shared.b:3", "shared.c:2"]
