"""Hugging Face's models in Keras 3 (keras-hub's shape), computing transformers' own: MarianMT (marian.py)."""
