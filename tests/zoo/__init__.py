"""User-like models for `shared.port.conversion` (tests/cross/test_convert.py), each written in its own framework's
idiom as its users write it, not mirrored by us: torch_models.py and keras_models.py."""
