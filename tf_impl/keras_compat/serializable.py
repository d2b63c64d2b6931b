"""What makes a catalogue model a full Keras `.keras` file: its config is the catalogue entry (name, dtype,
constructor config), and loading rebuilds it through `tf_impl.build`, so no model needs its own
`get_config`. Stack-specific: torch has no counterpart of `.keras`.
"""

from __future__ import annotations

import keras


class CatalogueModel:
    """Mixin of the top-level Keras class of every catalogue model (document 000's layer, document 001's
    `ReverseTaskBase`, `Seq2SeqBase`). Each subclass registers itself with Keras as `rosetta.<module>>Class`,
    so `keras.saving.load_model` finds it once its module is imported (`tf_impl.files.load_keras` imports
    them all)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        keras.saving.register_keras_serializable(package=f"rosetta.{cls.__module__.rsplit('.', 1)[-1]}")(cls)

    def get_config(self) -> dict:
        if not hasattr(self, "rosetta_name"):
            raise ValueError(f"{type(self).__name__} was not built by tf_impl.build(name): its catalogue entry is unknown")
        return {
            "name": self.name,
            "rosetta_model": self.rosetta_name,
            "rosetta_dtype": self.dtype_policy.name,
            "rosetta_config": dict(self.rosetta_config),
        }

    @classmethod
    def from_config(cls, config: dict):
        return _BUILD[0](config["rosetta_model"], config["rosetta_dtype"], **config["rosetta_config"])


_BUILD: list = []  # tf_impl.contract.build, registered by the contract (which imports the models: no import back)


def register_builder(build) -> None:
    """Called once by tf_impl.contract: how `from_config` rebuilds a catalogue model."""
    _BUILD[:] = [build]
