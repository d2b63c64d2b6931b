"""Framework-neutral part of the suite: catalogue, canonical weight rules, fixtures, validation.

Imports numpy and the standard library only; every framework is imported inside the function that
needs it (einops's habit), so `import shared` works with numpy alone.
"""

from shared.catalogue import CATALOGUE, ModelSpec, Tolerance, built, get

__all__ = ["CATALOGUE", "ModelSpec", "Tolerance", "built", "get"]
