"""Transcriptions of the tutorials' own classes that `rosetta port`'s presets run on a file (tf_impl.references)."""
