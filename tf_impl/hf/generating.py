"""`generate` on our Keras models of the Hugging Face families (BartFamilySeq2SeqLM, T5Seq2SeqLM), as transformers'
`GenerationMixin.generate` gives it: the model's own `generation_config` (generation_config.json's dict, kept in its
get_config so a `.keras` file carries it; without one, config.json's token fields, as `from_model_config`) is the
default, each call overrides fields in HF's names, and tf_impl/generation.py's compiled loop runs it.

The dict is kept raw, as the folder held it: a field this generator refuses (sampling) still ports, and is named
when `generate` reads it (shared/generation/settings.py).
"""

from __future__ import annotations

import json

import keras
import numpy as np

from shared.generation import settings as generation_settings

_KEPT = "_rosetta_generation_config"  # in the instance's __dict__: past Keras's attribute tracking on every backend
# the two spellings of the source's inputs: transformers' and keras-hub's (ids, padding mask)
INPUT_NAMES = (("input_ids", "attention_mask"), ("encoder_token_ids", "encoder_padding_mask"))


def checked_generation_config(values) -> dict | None:
    """`values` as a plain JSON dict (None passes): what a generation_config.json holds, copied."""
    if values is None:
        return None
    if isinstance(values, generation_settings.GenerationSettings) or not isinstance(values, dict):
        raise TypeError(
            f"generation_config: expected a dict of generation_config.json's fields or None, got {type(values).__name__}"
        )
    try:
        return json.loads(json.dumps(dict(values)))
    except (TypeError, ValueError) as error:
        raise ValueError(f"generation_config: not storable as JSON ({error})") from None


class Generating:
    """The mixin of both Seq2SeqLM classes: `generation_config` (a dict, or None) and `generate`."""

    @property
    def generation_config(self) -> dict | None:
        """generation_config.json's dict this model generates with by default (None: config.json's token fields);
        change it in place or set a new dict."""
        return self.__dict__.get(_KEPT)

    @generation_config.setter
    def generation_config(self, values) -> None:
        self._keep_generation_config(values)

    def _keep_generation_config(self, values) -> None:
        self.__dict__[_KEPT] = checked_generation_config(values)

    def _generation_config_entry(self) -> dict:
        """What get_config adds: the generation config where the model has one."""
        return {} if self.generation_config is None else {"generation_config": self.generation_config}

    def generation_defaults(self) -> tuple[generation_settings.GenerationSettings, dict]:
        """(the settings HF's generate starts from on this model, config.json's dict for the length defaults): the
        config.json the model was built from (a model built from arguments alone names its tokens in its
        generation_config)."""
        config = dict(self.backbone.arguments.get("hf_config") or {})
        if self.generation_config is None:
            return generation_settings.from_model_config(config), config
        return generation_settings.from_dict(self.generation_config, "the model's generation_config"), config

    def generate(self, inputs, attention_mask=None, **overrides) -> np.ndarray:
        """Token ids `[B * R, L]` (numpy) for the sources `inputs`: ids `[B, S]` (numpy or a tensor) or a dict of
        {"input_ids", "attention_mask"} (keras-hub's {"encoder_token_ids", "encoder_padding_mask"} too); the
        model's generation_config updated by `overrides` in HF's field names (`num_beams=1`, ...)."""
        from tf_impl import generation

        input_ids, mask = source_inputs(inputs, attention_mask)
        defaults, config = self.generation_defaults()
        return generation.generate(self, input_ids, mask, defaults, config, **overrides)


def _array(value, name: str) -> np.ndarray:
    array = value if isinstance(value, np.ndarray | list | tuple) else keras.ops.convert_to_numpy(value)
    array = np.asarray(array)
    if array.ndim != 2 or not (np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_):
        raise ValueError(f"generate: {name} must be integers of shape [batch, length], got {array.dtype} {array.shape}")
    return array


def source_inputs(inputs, attention_mask=None) -> tuple[np.ndarray, np.ndarray]:
    """(ids `[B, S]`, padding mask `[B, S]`, 1 keeps) from `generate`'s arguments; one ValueError naming the problem."""
    if isinstance(inputs, dict):
        inputs = dict(inputs)
        spelling = [pair for pair in INPUT_NAMES if pair[0] in inputs]
        if len(spelling) != 1:
            raise ValueError(f"generate: a dict of inputs holds the ids as 'input_ids' or 'encoder_token_ids' (one of "
                             f"them), got keys {sorted(inputs)}")  # fmt: skip
        ids_name, mask_name = spelling[0]
        unknown = sorted(set(inputs) - {ids_name, mask_name})
        if unknown:
            raise ValueError(f"generate: unexpected input {unknown} beside {ids_name!r} and {mask_name!r}")
        if mask_name in inputs and attention_mask is not None:
            raise ValueError(f"generate: two masks given, {mask_name!r} in the dict and attention_mask")
        inputs, attention_mask = inputs[ids_name], inputs.get(mask_name, attention_mask)
    input_ids = _array(inputs, "input_ids")
    if attention_mask is None:
        return input_ids, np.ones_like(input_ids)
    mask = _array(attention_mask, "attention_mask")
    if mask.shape != input_ids.shape or not np.isin(mask, (0, 1)).all():
        raise ValueError(f"generate: attention_mask must be 0s and 1s of the ids' shape {input_ids.shape}, got {mask.shape}")
    return input_ids, mask.astype(np.int32)
