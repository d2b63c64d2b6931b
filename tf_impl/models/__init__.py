"""The catalogue's models in Keras, one file per source document (and seq2seq.py, what the real-data models
share); each mirrors its twin in torch_impl/models/."""
