"""Hugging Face's seq2seq models in PyTorch are transformers' own: families.py builds, loads and runs them for a port."""
