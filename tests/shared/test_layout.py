"""The house rules of the layout (docs/DESIGN.md "Layout"), read from the source without importing it: no import
cycle among the suite's modules, hidden or not (imports inside functions and under TYPE_CHECKING count, and each
contract's `importlib` import of every catalogue module), and shared/'s rooms in layers: a room imports only the
rooms below it."""

from __future__ import annotations

import ast
from pathlib import Path

from shared import catalogue

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
                continue
            graph[name] |= {target for target in targets if target in modules and target != name}
    for package in ("torch_impl", "tf_impl"):  # contract.build imports each catalogue module by name
        contract = f"{package}.contract"
        if contract in graph:
            graph[contract] |= {f"{package}.models.{spec.module}" for spec in catalogue.CATALOGUE.values()} & set(graph)
    return graph


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
    "verify",
    "train",
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
