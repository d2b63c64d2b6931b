"""Hugging Face's models against ours in Keras (the cross env: torch, TensorFlow and transformers in one process)."""
