"""Generation settings with Hugging Face's `GenerationConfig` semantics (transformers 5.23,
generation/configuration_utils.py and `GenerationMixin._prepare_generated_length`), resolved once into the static
numbers a decoding loop needs.

A model folder's generation_config.json is the default; without one, the token fields of config.json (what
transformers 5's `GenerationConfig.from_model_config` keeps of a config). Every call may override a field. Fields
that would change what HF computes, but that this generator does not implement (sampling, suppressed tokens...), are
refused by name rather than ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

DEFAULT_MAX_NEW_TOKENS = 20  # HF's max_length default counts new tokens: 20 after the decoder's prompt
EARLY_STOPPING = (True, False, "never")
# token fields a transformers 5 config keeps and `from_model_config` hands to the generation config
CONFIG_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id",
                       "forced_bos_token_id", "forced_eos_token_id")  # fmt: skip
# fields HF applies that this generator does not: set to anything but their neutral value, they are refused
UNSUPPORTED = {"do_sample": (None, False), "num_beam_groups": (None, 1), "diversity_penalty": (None, 0.0),
               "constraints": (None,), "force_words_ids": (None,), "sequence_bias": (None,),
               "suppress_tokens": (None,), "begin_suppress_tokens": (None,), "encoder_repetition_penalty": (None, 1.0),
               "encoder_no_repeat_ngram_size": (None, 0), "exponential_decay_length_penalty": (None,),
               "guidance_scale": (None, 1.0), "remove_invalid_values": (None, False), "watermarking_config": (None,),
               "penalty_alpha": (None,), "prompt_lookup_num_tokens": (None,), "stop_strings": (None,),
               "max_time": (None,), "low_memory": (None, False), "token_healing": (None, False)}  # fmt: skip
# fields read and ignored as HF ignores them here (sampling warpers without sampling, output and cache switches)
IGNORED = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h",
           "use_cache", "cache_implementation", "cache_config", "output_attentions", "output_hidden_states",
           "output_scores", "output_logits", "return_dict_in_generate", "transformers_version", "_from_model_config",
           "compile_config", "is_assistant", "disable_compile", "output_past", "num_assistant_tokens",
           "num_assistant_tokens_schedule", "assistant_confidence_threshold", "assistant_lookbehind",
           "target_lookbehind", "max_matching_ngram_size", "dola_layers", "trust_remote_code",
           "streaming", "generation_kwargs", "forced_decoder_ids", "use_mtp", "max_cache_len",
           "continuous_batching_config", "prefill_chunk_size", "assistant_early_exit", "assistant_ensemble_weight",
           "speculation_type")  # fmt: skip


class GenerationError(ValueError):
    """A generation setting HF would read differently, or cannot hold: names its source and the field."""


@dataclass(frozen=True)
class GenerationSettings:
    """What one generation call does, in HF's field names, before the lengths are resolved (None: HF's default)."""

    num_beams: int | None = None
    length_penalty: float | None = None
    early_stopping: bool | str | None = None
    max_length: int | None = None
    max_new_tokens: int | None = None
    min_length: int | None = None
    min_new_tokens: int | None = None
    no_repeat_ngram_size: int | None = None
    repetition_penalty: float | None = None
    bad_words_ids: tuple | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | tuple | None = None
    num_return_sequences: int | None = None
    renormalize_logits: bool | None = None
    decoder_start_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | tuple | None = None
    pad_token_id: int | None = None

    def updated(self, source: str = "the call", **overrides) -> GenerationSettings:
        """These settings with `overrides` (HF's `generate(**kwargs)`); an unknown or unsupported name is refused."""
        known = {f.name for f in fields(self)}
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in overrides.items():
            _check_field(source, name, value, known)
            if name in known:
                values[name] = _frozen(value)
        return GenerationSettings(**values)

    def resolved(self, model_config: dict | None = None, source: str = "the settings") -> Plan:
        """The static plan for an encoder-decoder model whose decoder starts from one token."""
        return _resolve(self, model_config or {}, source)


@dataclass(frozen=True)
class Plan:
    """Resolved numbers: lengths count the decoder's start token, as HF's `max_length` does."""

    num_beams: int
    length_penalty: float
    early_stopping: bool | str
    max_length: int
    min_length: int
    min_new_tokens: int
    no_repeat_ngram_size: int
    repetition_penalty: float
    bad_words_ids: tuple
    forced_bos_token_id: int | None
    forced_eos_token_ids: tuple
    num_return_sequences: int
    renormalize_logits: bool
    decoder_start_token_id: int
    eos_token_ids: tuple
    pad_token_id: int
    prompt_length: int = 1

    @property
    def beam_search(self) -> bool:
        return self.num_beams > 1

    @property
    def fill_token_id(self) -> int:
        """What unfilled positions of the static sequences hold: HF's `pad_token_id or eos_token_id[0]`."""
        return self.pad_token_id or (self.eos_token_ids[0] if self.eos_token_ids else -1)


def planned(settings: GenerationSettings | None, model_config: dict | None = None, **overrides) -> Plan:
    """The plan of one call: `settings` (none: HF's defaults) updated by `overrides`, resolved for `model_config`."""
    return (settings or GenerationSettings()).updated(**overrides).resolved(model_config)


def read(folder: str | Path) -> GenerationSettings:
    """A model folder's generation settings: generation_config.json, else config.json's token fields."""
    folder = Path(folder)
    path = folder / "generation_config.json"
    if path.is_file():
        return from_dict(_read_json(path), str(path))
    config = folder / "config.json"
    if config.is_file():
        return from_model_config(_read_json(config))
    return GenerationSettings()


def from_model_config(config: dict) -> GenerationSettings:
    """The settings HF derives from a config.json alone (transformers 5 keeps its token fields only)."""
    return GenerationSettings().updated(
        "config.json", **{name: config[name] for name in CONFIG_TOKEN_FIELDS if config.get(name) is not None}
    )


def from_dict(values: dict, source: str = "generation_config.json") -> GenerationSettings:
    """Settings from a generation_config.json's dict: unsupported fields set are refused, HF's ignored ones skipped."""
    if not isinstance(values, dict):
        raise GenerationError(f"{source}: expected a JSON object, found {type(values).__name__}")
    kept = {name: value for name, value in values.items() if name not in IGNORED}
    return GenerationSettings().updated(source, **kept)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GenerationError(f"{path}: not readable as JSON ({error})") from None


def _frozen(value):
    """Lists become tuples, so settings stay hashable and a call cannot change them afterwards."""
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _check_field(source: str, name: str, value, known: set) -> None:
    if name in UNSUPPORTED:
        if value not in UNSUPPORTED[name] and not (isinstance(value, list | tuple) and not value):
            raise GenerationError(
                f"{source}: {name}={value!r} is not supported (HF would apply it; this generator "
                f"runs greedy and beam search only): remove it or set it to {UNSUPPORTED[name][-1]!r}"
            )
        return
    if name not in known and name not in IGNORED:
        raise GenerationError(f"{source}: unknown generation setting {name!r}")


# ---- resolution: HF's `_prepare_generation_config`, `_prepare_special_tokens`, `_prepare_generated_length` ----


def _int(source: str, name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GenerationError(f"{source}: {name} must be an integer >= {minimum}, found {value!r}")
    return value


def _float(source: str, name: str, value, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or (positive and value <= 0):
        raise GenerationError(f"{source}: {name} must be a {'positive ' if positive else ''}number, found {value!r}")
    return float(value)


def _token_ids(source: str, name: str, value) -> tuple:
    """An id or a list of ids as a tuple (HF's eos and forced eos may be either)."""
    if value is None:
        return ()
    ids = value if isinstance(value, tuple) else (value,)
    return tuple(_int(source, name, token, 0) for token in ids)


def _bad_words(source: str, value) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, tuple) or not value or not all(isinstance(word, tuple) and word for word in value):
        raise GenerationError(f"{source}: bad_words_ids must be a non-empty list of non-empty lists of ids, found {value!r}")
    return tuple(_token_ids(source, "bad_words_ids", word) for word in value)


def _lengths(settings: GenerationSettings, config: dict, source: str, prompt: int) -> tuple[int, int, int]:
    """max_length, min_length (both counting the prompt) and min_new_tokens, as `_prepare_generated_length`."""
    if settings.max_new_tokens is not None:
        max_length = _int(source, "max_new_tokens", settings.max_new_tokens, 1) + prompt
    elif settings.max_length is not None:
        max_length = _int(source, "max_length", settings.max_length, prompt + 1)
    else:
        max_length = DEFAULT_MAX_NEW_TOKENS + prompt
        positions = config.get("max_position_embeddings")
        max_length = min(max_length, positions) if isinstance(positions, int) else max_length
    min_new = 0 if settings.min_new_tokens is None else _int(source, "min_new_tokens", settings.min_new_tokens, 0)
    if settings.min_new_tokens is not None:
        min_length = min_new + prompt
    else:
        min_length = 0 if settings.min_length is None else _int(source, "min_length", settings.min_length, 0)
    return max_length, min_length, min_new


def _special_tokens(settings: GenerationSettings, source: str) -> tuple[tuple, int, int]:
    """eos ids, pad (eos's first when unset, as HF) and the decoder start (bos when unset)."""
    eos = _token_ids(source, "eos_token_id", settings.eos_token_id)
    pad = settings.pad_token_id
    if pad is None:
        pad = eos[0] if eos else None
    start = settings.decoder_start_token_id
    start = settings.bos_token_id if start is None else start
    if start is None:
        raise GenerationError(f"{source}: no decoder_start_token_id (nor bos_token_id): the decoder cannot start")
    if pad is None:
        raise GenerationError(f"{source}: no pad_token_id (nor eos_token_id) to fill finished sequences")
    return eos, _int(source, "pad_token_id", pad, 0), _int(source, "decoder_start_token_id", start, 0)


def _resolve(settings: GenerationSettings, config: dict, source: str) -> Plan:
    beams = 1 if settings.num_beams is None else _int(source, "num_beams", settings.num_beams, 1)
    returned = (
        1 if settings.num_return_sequences is None else _int(source, "num_return_sequences", settings.num_return_sequences, 1)
    )
    if returned > beams:
        raise GenerationError(f"{source}: num_return_sequences={returned} is more than num_beams={beams}")
    early = False if settings.early_stopping is None else settings.early_stopping
    if early not in EARLY_STOPPING or isinstance(early, int) and not isinstance(early, bool):
        raise GenerationError(f'{source}: early_stopping must be true, false or "never", found {early!r}')
    eos, pad, start = _special_tokens(settings, source)
    max_length, min_length, min_new = _lengths(settings, config, source, prompt=1)
    forced_bos = settings.forced_bos_token_id
    return Plan(
        num_beams=beams,
        length_penalty=1.0 if settings.length_penalty is None else _float(source, "length_penalty", settings.length_penalty),
        early_stopping=early,
        max_length=max_length,
        min_length=min_length,
        min_new_tokens=min_new,
        no_repeat_ngram_size=0
        if settings.no_repeat_ngram_size is None
        else _int(source, "no_repeat_ngram_size", settings.no_repeat_ngram_size, 0),
        repetition_penalty=1.0
        if settings.repetition_penalty is None
        else _float(source, "repetition_penalty", settings.repetition_penalty, positive=True),
        bad_words_ids=_bad_words(source, settings.bad_words_ids),
        forced_bos_token_id=None if forced_bos is None else _int(source, "forced_bos_token_id", forced_bos, 0),
        forced_eos_token_ids=_token_ids(source, "forced_eos_token_id", settings.forced_eos_token_id),
        num_return_sequences=returned,
        renormalize_logits=bool(settings.renormalize_logits),
        decoder_start_token_id=start,
        eos_token_ids=eos,
        pad_token_id=pad,
    )
