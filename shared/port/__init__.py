"""`rosetta port`: the file-to-file port, the leaf-rule conversion of the user's own models, third-party layouts
(tutorial checkpoints), references (the user's model run on the file) and the component-by-component verification.

Its public API, one import deep (numpy and the standard library only: each stack is imported when a port needs it):

    from shared.port import port, render        # rosetta port: a catalogue model's file, verified; its report as text
    from shared.port import port_own            # rosetta port --torch-model/--keras-model: your own model's file
    from shared.port import convert, verify     # your own model in Python: weights across, outputs side by side
    from shared.port import read_weights        # a .pt or .safetensors file's canonical arrays
"""

from shared.port.conversion import convert, verify
from shared.port.own_models import port_own
from shared.port.porting import port, render
from shared.port.stages import read_weights

__all__ = ["port", "render", "port_own", "convert", "verify", "read_weights"]
