"""Hugging Face seq2seq model folders (MarianMT, BART, mBART, T5) read into whole state_dicts and written back exactly
(shared/hf/folders.py); numpy and the standard library at import time."""

from shared.hf.folders import HfFolder, read_folder, write_folder

__all__ = ["HfFolder", "read_folder", "write_folder"]
