"""The tutorials' own Keras classes as their users have them (tf_impl/references.py runs them on a file)."""
