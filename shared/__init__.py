"""Framework-neutral part of the suite: catalogue, canonical weight rules, fixtures, validation.

Imports numpy and the standard library only; every framework is imported inside the function that
needs it (einops's habit), so `import shared` works with numpy alone. Importing it also keeps the module paths
of the previous release working, each use warning where its name lives now (shared/core/moved.py).
"""

from shared.catalogue import CATALOGUE, ModelSpec, Tolerance, built, get
from shared.core import moved as _moved

_moved.install()

__all__ = ["CATALOGUE", "ModelSpec", "Tolerance", "built", "get"]
