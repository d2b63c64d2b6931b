"""`rosetta port`: the file-to-file port, the leaf-rule conversion of the user's own models, third-party layouts
(tutorial checkpoints), references (the user's model run on the file) and the component-by-component verification."""

from shared.port.port_files import read_weights

__all__ = ["read_weights"]
