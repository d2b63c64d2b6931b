"""torch_impl/ and tf_impl/ mirror each other: same model files, classes, attributes and methods (ast only)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Protocol

import pytest

from shared import stacks

ROOT = Path(__file__).resolve().parents[2]
# Keras cells keeping torch's two biases, torch's Adam rule and clipping, the `.keras` config and the backends
# (keras_compat/), TensorFlow checkpoints and their object graph, Keras's `fit` on the models: torch needs no
# counterpart; tutorials/ holds each stack's own tutorials' classes (Trevett's notebook in torch, TensorFlow's NMT
# tutorial of 2020 and its 2022 rewrite in Keras), which mirror nothing, and references.py runs them on a file
# torch_impl/keras_layers.py: Keras's Attention and AdditiveAttention in PyTorch (Keras has them)
STACK_SPECIFIC = ("tf_impl/keras_compat/", "tf_impl/checkpoints.py", "tf_impl/object_graph.py", "tf_impl/fitting.py",
                  "torch_impl/references.py", "tf_impl/references.py", "tf_impl/tutorials/", "torch_impl/tutorials/",
                  "torch_impl/keras_layers.py",
                  # ranks under torchrun and DDP's engine; Keras's devices (keras_compat/distributed.py holds its engine):
                  # each stack's role module is checked against its Protocol in shared/stacks.py instead
                  "torch_impl/distributed.py", "tf_impl/distributed.py",
                  "torch_impl/cuda_graphs.py",  # torch's step replayed as a CUDA graph (XLA compiles Keras's)
                  "torch_impl/inductor_ops.py",  # Inductor's slow CPU tanh in another form (XLA's is fast)
                  # Hugging Face's models in Keras: their torch twin is transformers' own; each stack's hf/families.py
                  # (what a port calls) is checked against its Protocol in shared/stacks.py
                  "tf_impl/hf/", "torch_impl/hf/")  # fmt: skip
FRAMEWORK_METHODS = {"forward": "call"}  # the call method is the only name the frameworks decide
# torch's training step is its own loop (forward, clipping, Adam); Keras's is Keras's own (`fit`'s step), on the model
# compiled with TorchAdam: `keras_model`
ONE_STACK_MEMBERS = {
    # Keras's GRU multiplies each step's inputs inside its loop; ours's encoder projects them once (torch's nn.GRU does
    # natively), chosen in the model's `encode` (document 001's models choose in their shared base class, in both stacks)
    ("models/bahdanau_bigru.py", "Seq2Seq"): {"method encode"},
    # Keras on JAX jits greedy decoding's encoder and step (torch runs them eagerly)
    ("models/seq2seq.py", "Seq2SeqBase"): {"method inference_steps"},
    # Keras's hook naming the mask a layer's outputs carry (none: not the context's); torch has no implicit masks
    ("models/tf_tutorial_mha.py", "Decoder"): {"method compute_mask"},
    # torch's eager array namespace lifts python scalars to tensors itself; keras.ops takes them as they are
    ("generation.py", "Arrays"): {"method _tensor"},
    ("train.py", "Trainer"): {"method _forward_loss", "method _update_step", "self._forward", "self._update",
                              "self.keras_model", "self.naive_shards"},  # torchrun's ranks: torch's data parallelism
}  # fmt: skip
# the Keras walk over attribute paths; on the torch side state_dict() is that walk
ONE_STACK_FUNCTIONS = {
    # the ops of XLA's optimized program (Keras's XLA profiles; torch's profiler names them); torch's FLOP counter's rules
    # for the recurrent layers it cannot see (Keras's steps are counted by torch's count or XLA's)
    "bench.py": {"hlo_kinds", "recurrent_layer_flop", "recurrent_layer_backward_flop"},
    "weights.py": {"leaf", "leaves", "assign_through_rules", "attention_variables", "present"},
    "models/tf_tutorial.py": {"keras_initializers"},  # torch starts from Keras's default distributions; Keras has them
    "models/tf_tutorial_mha.py": {"keras_initializers"},
    # Keras's fit on TensorFlow traces unknown lengths (ops.scan): torch is eager; a GRU's inputs projected in one product
    # (torch's nn.GRU does it natively); packing's masked loop for torch.compile (Keras masks natively); torch's GRU cell
    # with a bias per row, which CUDA's fused cell refuses (Keras's cell is its own ops on every device)
    "models/seq2seq.py": {
        "over_time",
        "run_gru",
        "run_bidirectional_gru",
        "run_masked",
        "masked_layers",
        "masked_direction",
        "traces_recurrent_loops",
        "takes_row_bias",
        "gru_cell_row_bias",
    },
    # torch.compile with its recurrent-layer setting (Keras: jit_compile)
    "train.py": {"compiled", "traces_recurrent_layers"},
    # a Keras translator served as a SavedModel with its decode loop (torch's users keep the module)
    "generation.py": {"export"},
    # each stack's own formats (shared/stacks.py lists them per stack): a torch file read and written as arrays in the
    # file's own names, so `rosetta port` can rename them, and a user's state_dict; Keras's `.keras` files and their
    # archive's index, its weights files' helpers, a user's `.keras` file (Keras files are read by path)
    "files.py": {
        "read_arrays",
        "write_arrays",
        "load_own",
        "own_arrays",
        "save_keras",
        "load_keras",
        "archive_arrays",
        "h5_shapes",
        "write_shapes",
        "has_optimizer_state",
        "load_weights",
        "weights_owner",
        "load_own_keras",
        "save_own_keras",
    },
}


def _files(stack: str) -> set[str]:
    """The stack's files as paths inside its package (`models/luong.py`), but its stack-specific ones."""
    paths = {p.relative_to(ROOT / stack).as_posix() for p in (ROOT / stack).rglob("*.py")}
    return {path for path in paths if not f"{stack}/{path}".startswith(STACK_SPECIFIC)}


def _surface(path: Path) -> dict[str, set[str]]:
    """Public functions, and per class: `self.x` attributes and methods (framework hooks renamed alike)."""
    tree = ast.parse(path.read_text())
    surface = {"<functions>": {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}}
    for node in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = {FRAMEWORK_METHODS.get(f.name, f.name) for f in node.body if isinstance(f, ast.FunctionDef)}
        attributes = {
            target.attr
            for sub in ast.walk(node)
            if isinstance(sub, ast.Assign)
            for target in sub.targets
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
        }
        surface[node.name] = {f"method {m}" for m in methods - {"get_config", "build"}} | {f"self.{a}" for a in attributes}
    return surface


def test_both_stacks_have_the_same_files():
    assert _files("torch_impl") == _files("tf_impl")


@pytest.mark.parametrize("filename", sorted(_files("torch_impl")))
def test_classes_attributes_and_methods_mirror(filename):
    torch_side, tf_side = _surface(ROOT / "torch_impl" / filename), _surface(ROOT / "tf_impl" / filename)
    assert torch_side.keys() == tf_side.keys(), f"classes in one stack only: {torch_side.keys() ^ tf_side.keys()}"
    for name in torch_side:
        allowed = (
            ONE_STACK_FUNCTIONS.get(filename, set()) if name == "<functions>" else ONE_STACK_MEMBERS.get((filename, name), set())
        )
        only = (torch_side[name] ^ tf_side[name]) - allowed
        assert not only, f"{filename}:{name}: in one stack only: {sorted(only)}"


def test_parity_check_catches_a_missing_attribute(tmp_path):
    """Negative control: an attribute renamed in one stack is reported."""
    source = (ROOT / "tf_impl" / "models" / "reverse_task.py").read_text().replace("self.W_s =", "self.W_q =")
    (tmp_path / "reverse_task.py").write_text(source)
    torch_side, tf_side = _surface(ROOT / "torch_impl" / "models" / "reverse_task.py"), _surface(tmp_path / "reverse_task.py")
    assert torch_side["ReverseTaskV6"] ^ tf_side["ReverseTaskV6"] == {"self.W_s", "self.W_q"}


# ---- docstrings, `fix:` markers and the shape notation (HF's check_copies, for our twins) ----

SHAPE_TOKEN = r"(?:\d*[A-Z][A-Za-z]?\d*|\d+)"  # B, S, 2He, Hd, 1
SHAPE_EXPRESSION = rf"{SHAPE_TOKEN}(?:\s*[-+*]\s*{SHAPE_TOKEN})*"  # Hd + 2He + Ed, T - 1
TUPLE_SHAPE = re.compile(rf"\(\s*{SHAPE_EXPRESSION}(?:\s*,\s*{SHAPE_EXPRESSION})*\s*,?\s*\)")  # `(B, S)`, `(B,)`
LIST_SHAPE = re.compile(
    rf"\[(?:\.\.\.,\s*)?{SHAPE_EXPRESSION}(?:\s*,\s*(?:{SHAPE_EXPRESSION}|\*|\.\.\.))*\]"
)  # [B, S, 2He], [..., V]


def _scopes(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of the module, each class, function and method; `forward` named `call`."""
    scopes = [(1, len(tree.body) and tree.body[-1].end_lineno or 1, "<module>")]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            scopes.append((node.lineno, node.end_lineno, node.name))
        if isinstance(node, ast.ClassDef):
            methods = [f for f in node.body if isinstance(f, ast.FunctionDef)]
            scopes += [(f.lineno, f.end_lineno, f"{node.name}.{FRAMEWORK_METHODS.get(f.name, f.name)}") for f in methods]
    return scopes


def _documented(path: Path) -> dict[str, dict]:
    """Per scope: its docstring (None: none), the shapes its docstring quotes, and its `fix:` markers' texts."""
    source = path.read_text()
    tree = ast.parse(source)
    nodes = {"<module>": tree}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            nodes[node.name] = node
        if isinstance(node, ast.ClassDef):
            nodes |= {
                f"{node.name}.{FRAMEWORK_METHODS.get(f.name, f.name)}": f for f in node.body if isinstance(f, ast.FunctionDef)
            }
    found = {}
    for name, node in nodes.items():
        doc = ast.get_docstring(node)
        found[name] = {
            "doc": doc,
            "shapes": sorted(s for s in LIST_SHAPE.findall(doc or "") if re.search("[A-Z]", s)),
            "fixes": [],
        }
    scopes = _scopes(tree)
    for line_number, line in enumerate(source.splitlines(), start=1):
        marker = re.search(r"#.*\bfix:\s*(.*)", line)
        if marker:
            inner = min((s for s in scopes if s[0] <= line_number <= s[1]), key=lambda s: s[1] - s[0])
            found[inner[2]]["fixes"].append(marker.group(1).strip())
    return found


# shapes one twin's docstring quotes and the other's has no reason to: Keras's `fit` feeds a schedule per row
ONE_STACK_SHAPES = {("models/seq2seq.py", "Seq2SeqBase.decode"): {"[B, T - 1]"}}


def _twin_differences(torch_path: Path, tf_path: Path) -> list[str]:
    """What the twins document differently; module docstrings are compared for presence only (each names its
    framework's own layouts: a Keras state `[B, H]` where torch's is `[1, B, H]`)."""
    torch_side, tf_side = _documented(torch_path), _documented(tf_path)
    problems = []
    for name in sorted(torch_side.keys() & tf_side.keys()):
        ours, theirs = torch_side[name], tf_side[name]
        allowed = ONE_STACK_SHAPES.get(("/".join(tf_path.parts[-2:]), name), set())
        if (ours["doc"] is None) != (theirs["doc"] is None):
            problems.append(f"{name}: a docstring in {'tf_impl' if ours['doc'] is None else 'torch_impl'} only")
        elif name != "<module>" and [s for s in ours["shapes"] if s not in allowed] != [
            s for s in theirs["shapes"] if s not in allowed
        ]:
            problems.append(f"{name}: docstring shapes differ: torch {ours['shapes']}, tf {theirs['shapes']}")
        if ours["fixes"] != theirs["fixes"]:
            problems.append(f"{name}: fix: markers differ: torch {ours['fixes']}, tf {theirs['fixes']}")
    return problems


@pytest.mark.parametrize("filename", sorted(_files("torch_impl")))
def test_docstrings_and_fix_markers_mirror(filename):
    """Each twin documents what the other does: a docstring on both sides or neither, the same shapes quoted, the same
    `fix:` markers (a listing's defect fixed in one stack is fixed and marked in the other)."""
    assert _twin_differences(ROOT / "torch_impl" / filename, ROOT / "tf_impl" / filename) == []


def test_negative_control_a_missing_docstring_or_fix_marker_is_found(tmp_path):
    source = (ROOT / "tf_impl" / "models" / "bahdanau_bigru.py").read_text()
    dropped = source.replace("  # fix: the listing's `droppout`", "", 1)
    undocumented = re.sub(r'"""`x \[B, S\]` -> outputs .*?"""', "pass", source, count=1, flags=re.DOTALL)
    reshaped = source.replace("weighted `[B, 2He]`", "weighted `[B, He]`", 1)
    for text, expected in ((dropped, "Decoder.__init__: fix: markers differ"), (undocumented, "Encoder.call: a docstring"),
                           (reshaped, "Attention.call: docstring shapes differ")):  # fmt: skip
        (tmp_path / "bahdanau_bigru.py").write_text(text)
        problems = _twin_differences(ROOT / "torch_impl" / "models" / "bahdanau_bigru.py", tmp_path / "bahdanau_bigru.py")
        assert any(problem.startswith(expected) for problem in problems), (expected, problems)


def _tuple_shapes(path: Path) -> list[str]:
    """`(B, S)`-style shapes in the comments and docstrings of `path` (one notation everywhere: `[B, S]`)."""
    found, strings = [], set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node):
            strings.add(ast.get_docstring(node))
    comments = [line.partition("#")[2] for line in path.read_text().splitlines() if "#" in line]
    for text in [*strings, *comments]:
        found += [match.group(0) for match in TUPLE_SHAPE.finditer(text) if re.search(r"[A-Z]", match.group(0))]
    return found


def test_one_shape_notation_everywhere():
    paths = [p for package in ("torch_impl", "tf_impl", "shared") for p in sorted((ROOT / package).rglob("*.py"))]
    found = {str(p.relative_to(ROOT)): shapes for p in paths if (shapes := _tuple_shapes(p))}
    assert found == {}


def test_negative_control_a_tuple_shape_is_found(tmp_path):
    (tmp_path / "m.py").write_text('def f(x):\n    """`x (B, S)`."""\n    return x  # (B,)\n')
    assert sorted(_tuple_shapes(tmp_path / "m.py")) == ["(B, S)", "(B,)"]


# ---- the door: every name shared/stacks.py's Protocols list, defined by each stack ----


def defined_names(path: Path) -> set[str]:
    """The names a module defines or imports at its top level (functions, classes, assignments, imports)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return found


def surface_misses(root: Path, surface: dict[str, dict[str, type]]) -> list[str]:
    """`package.module: name` for each name a Protocol lists that the stack's module does not define."""
    missing = []
    for stack, modules in surface.items():
        package = stacks.PACKAGES[stack]
        for module, protocol in modules.items():
            path = root / package / (f"{module.replace('.', '/')}.py" if module else "__init__.py")
            names = defined_names(path) if path.is_file() else set()
            missing += [f"{package}.{module or ''}: {name}".replace(".:", ":") for name in sorted(stacks.names(protocol) - names)]
    return missing


def test_both_stacks_define_every_name_of_the_stack_surface():
    assert surface_misses(ROOT, stacks.SURFACE) == []


def test_negative_control_a_name_the_surface_lists_but_a_stack_lacks_is_found():
    class Wider(stacks.Files, Protocol):
        def save_everything(self) -> None: ...

    surface = {"torch": {"files": Wider}, "tf": {"files": stacks.TfFiles, "nowhere": stacks.Bench}}
    missing = surface_misses(ROOT, surface)
    assert "torch_impl.files: save_everything" in missing and "tf_impl.nowhere: configure" in missing
    assert not [line for line in missing if line.startswith("tf_impl.files")]


def test_the_door_shows_only_the_names_its_protocol_lists():
    """A stack module through the door: its Protocol's names, live; any other name refused (no second surface)."""
    import types

    module = types.ModuleType("torch_impl.files")
    module.save_native, module.private_helper = (lambda *a: "saved"), (lambda: None)
    door = stacks.Door(module, stacks.Files, "torch")
    assert door.save_native() == "saved" and door.stack_name == "torch"
    module.save_native = lambda *a: "patched"  # a test's monkeypatch of the module shows through
    assert door.save_native() == "patched"
    with pytest.raises(AttributeError, match="private_helper is not on the stack surface"):
        door.private_helper  # noqa: B018
    with pytest.raises(ValueError, match="torch_impl.bench_everything is not on the stack surface"):
        stacks.import_module("torch", "bench_everything")
