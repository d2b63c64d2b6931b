"""torch_impl/ and tf_impl/ mirror each other: same model files, classes, attributes and methods (ast only)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Keras cells keeping torch's two biases, torch's Adam rule and clipping, the `.keras` config, TensorFlow checkpoints,
# Keras's `fit` on the models: torch needs no counterpart; references.py holds each stack's own tutorials (Trevett's
# notebook in torch, TensorFlow's NMT tutorial in Keras), the models users bring, which mirror nothing
STACK_SPECIFIC = {"tf_impl/layers.py", "tf_impl/optim.py", "tf_impl/serializable.py", "tf_impl/checkpoints.py",
                  "tf_impl/fitting.py", "tf_impl/backends.py", "torch_impl/references.py", "tf_impl/references.py"}  # fmt: skip
FRAMEWORK_METHODS = {"forward": "call"}  # the call method is the only name the frameworks decide
# torch's training step is its own loop (forward, clipping, Adam); Keras's is Keras's own (`fit`'s step), on the model
# compiled with TorchAdam: `keras_model`
ONE_STACK_MEMBERS = {
    ("train.py", "Trainer"): {"method _forward_loss", "method _update_step", "self._forward", "self._update",
                              "self.keras_model"},
}  # fmt: skip
# the Keras walk over attribute paths; on the torch side state_dict() is that walk
ONE_STACK_FUNCTIONS = {
    "weights.py": {"leaf", "leaves", "assign_through_rules"},
    "tf_tutorial.py": {"keras_initializers"},  # torch starts from Keras's default distributions; Keras has them
    "seq2seq.py": {"over_time"},  # Keras's fit on TensorFlow traces unknown lengths (ops.scan): torch is eager
    "train.py": {"save_keras", "load_keras", "read_arrays", "write_arrays"},  # Keras's `.keras` files; a torch file
    # read and written as arrays in the file's own names, so `rosetta port` can rename them (Keras files are read by path)
}


def _files(stack: str) -> set[str]:
    return {p.name for p in (ROOT / stack).glob("*.py") if f"{stack}/{p.name}" not in STACK_SPECIFIC}


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
    source = (ROOT / "tf_impl" / "reverse_task.py").read_text().replace("self.W_s =", "self.W_q =")
    (tmp_path / "reverse_task.py").write_text(source)
    torch_side, tf_side = _surface(ROOT / "torch_impl" / "reverse_task.py"), _surface(tmp_path / "reverse_task.py")
    assert torch_side["ReverseTaskV6"] ^ tf_side["ReverseTaskV6"] == {"self.W_s", "self.W_q"}
