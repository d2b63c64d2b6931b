"""The catalogue's models in PyTorch, one file per source document (and seq2seq.py, what the real-data models
share); each mirrors its twin in tf_impl/models/."""
