"""The tutorials' own PyTorch classes as their users have them (torch_impl/references.py runs them on a file)."""
