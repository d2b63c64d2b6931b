"""`rosetta port`: the file-to-file port, the leaf-rule conversion of the user's own models, third-party layouts
(tutorial checkpoints), references (the user's model run on the file) and the component-by-component verification."""
