"""A Hugging Face seq2seq folder (MarianMT, BART, mBART, T5) read into the model's whole state_dict and written back
as `save_pretrained` writes it: config.json, generation_config.json, the tokenizer files, each tied matrix once.

Follows transformers 5.23's modeling_utils.py (`get_expanded_tied_weights_keys`, `tie_weights`: a tie holds only
with `tie_word_embeddings`, and is symmetric on load) and each family's `_tied_weights_keys`; numpy and the
standard library only (torch inside `_read_bin`, for pytorch_model.bin).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shared import stacks
from shared.hf.structure import marian_sinusoid, resolve_ties, state_dict_shapes, tied_keys
from shared.io import atomic, safetensors_io

MODEL_TYPES = ("marian", "bart", "mbart", "t5", "mt5")
SAFETENSORS, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
BIN, BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "vocab.txt", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
                   "source.spm", "target.spm")  # fmt: skip
TOKENIZER_PATTERNS = ("*.spm", "vocab*.json", "vocab*.txt")
# keys a family's model ignores in a checkpoint (`_keys_to_ignore_on_load_unexpected`), and never saves
IGNORED_ON_LOAD = {"bart": (".encoder.version", ".decoder.version"), "mbart": (".encoder.version", ".decoder.version"),
                   "t5": ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",),
                   "mt5": ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)}  # fmt: skip
MARIAN_POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")  # not saved
# what GenerationConfig.from_model_config carries over from a config (generation/configuration_utils.py)
GENERATION_KEYS = ("bos_token_id", "decoder_start_token_id", "eos_token_id", "pad_token_id", "forced_bos_token_id",
                   "forced_eos_token_id", "max_length", "min_length", "num_beams", "bad_words_ids", "length_penalty",
                   "no_repeat_ngram_size", "early_stopping", "do_sample", "temperature", "top_k", "top_p",
                   "repetition_penalty", "num_return_sequences", "use_cache")  # fmt: skip


@dataclass
class HfFolder:
    """What a folder holds: its config, family, every state_dict array of the model (ties resolved, Marian's sinusoid
    computed where the file lacks it), and the files read."""

    config: dict
    model_type: str
    arrays: dict[str, np.ndarray]
    files: list[str] = field(default_factory=list)


# ---- reading ----


def read_config(folder: Path) -> tuple[dict, str]:
    """config.json's dict and its model_type; a missing, non-JSON or unknown-family config is one ValueError."""
    path = folder / "config.json"
    if not path.is_file():
        raise ValueError(f"{path}: no config.json in the folder (a Hugging Face model folder has one)")
    return read_config_file(path)


def read_config_file(path: Path) -> tuple[dict, str]:
    """A config.json file's dict and its model_type (any file name: `rosetta port --config`)."""
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not JSON, or not readable ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a JSON object")
    return config, _model_type(config, str(path))


def _model_type(config: dict, shown: str) -> str:
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{shown}: field model_type is {model_type!r}; known types: {', '.join(MODEL_TYPES)}")
    return model_type


def _read_bin(path: Path) -> dict[str, np.ndarray]:
    """pytorch_model.bin's tensors as numpy, read by the torch stack's reader (`weights_only`: no code in it runs)."""
    return stacks.import_module("torch", "files").read_arrays(path)[0]


def _read_one(path: Path) -> dict[str, np.ndarray]:
    return _read_bin(path) if path.suffix == ".bin" else safetensors_io.load(path)[0]


def _read_index(folder: Path, index_name: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """A sharded checkpoint: every shard its index names read, every key the index lists present in its shard, no
    key in a shard that the index does not place there."""
    index_path = folder / index_name
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise ValueError(f"{index_path}: not an index (a JSON object with a weight_map: {error})") from None
    arrays, files = {}, [index_name]
    for shard in sorted(set(weight_map.values())):
        if not (folder / shard).is_file():
            raise ValueError(f"{folder / shard}: shard missing (named by {index_name})")
        stored = _read_one(folder / shard)
        listed = {key for key, name in weight_map.items() if name == shard}
        if set(stored) != listed:
            missing, extra = sorted(listed - set(stored)), sorted(set(stored) - listed)
            raise ValueError(
                f"{folder / shard}: does not match {index_name}: keys missing {missing}, keys not in the index {extra}"
            )
        arrays |= stored
        files.append(shard)
    return arrays, files


def read_weights(folder: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    """The arrays stored in the folder (safetensors first, as from_pretrained prefers) and the files read."""
    for name, index in ((SAFETENSORS, SAFE_INDEX), (BIN, BIN_INDEX)):
        if (folder / name).is_file():
            return _read_one(folder / name), [name]
        if (folder / index).is_file():
            return _read_index(folder, index)
    raise ValueError(f"{folder}: no weights file (looked for {SAFETENSORS}, {SAFE_INDEX}, {BIN}, {BIN_INDEX})")


def check_arrays(arrays: dict[str, np.ndarray], config: dict, model_type: str, shown: str) -> None:
    """One ValueError naming `shown` listing the keys missing, unexpected, mis-shaped or of the wrong dtype for the
    config (its `dtype`/`torch_dtype` where it names one, else any floating dtype)."""
    expected = state_dict_shapes(config, model_type)
    wanted = config.get("dtype") or config.get("torch_dtype")
    problems = [f"missing {sorted(set(expected) - set(arrays))}"] if set(expected) - set(arrays) else []
    problems += [f"unexpected {sorted(set(arrays) - set(expected))}"] if set(arrays) - set(expected) else []
    for key in sorted(set(expected) & set(arrays)):
        array = arrays[key]
        if tuple(array.shape) != expected[key]:
            problems.append(f"{key} has shape {tuple(array.shape)}, the config gives {expected[key]}")
        elif not np.issubdtype(array.dtype, np.floating) or (isinstance(wanted, str) and array.dtype.name != wanted):
            problems.append(f"{key} has dtype {array.dtype}, the config gives {wanted or 'a floating dtype'}")
    if problems:
        raise ValueError(f"{shown}: not the {model_type} model its config.json describes: {'; '.join(problems)}")


def _loaded(stored: dict[str, np.ndarray], config: dict, model_type: str) -> dict[str, np.ndarray]:
    """The stored arrays as the model's state_dict: ignored keys dropped, ties resolved, Marian's sinusoid computed
    where the checkpoint lacks it (it is a frozen weight HF rebuilds, not saved)."""
    ignored = IGNORED_ON_LOAD.get(model_type, ())
    arrays = resolve_ties(
        {key: value for key, value in stored.items() if not key.endswith(ignored)}, tied_keys(config, model_type)
    )
    if model_type == "marian":
        dtype = np.dtype(config.get("dtype") or config.get("torch_dtype") or "float32")
        table = marian_sinusoid(int(config["max_position_embeddings"]), int(config["d_model"]), dtype)  # [P, D]
        arrays = {key: table for key in MARIAN_POSITIONS} | arrays
    return arrays


def untied_config(stored: dict[str, np.ndarray], config: dict, model_type: str) -> dict:
    """`config` as the checkpoint's ties leave it. A tie whose two keys are both written with different values is not
    tied by `from_pretrained` (modeling_utils.py `tie_weights`: "both are present in the checkpoints with different
    values"), as in a Flan-T5 that transformers 5 saved: tie_word_embeddings becomes false, and T5's output scale stays
    what T5Config derived from the config as given."""
    broken = [target for target, source in tied_keys(config, model_type).items()
              if target in stored and source in stored and not np.array_equal(stored[target], stored[source])]  # fmt: skip
    if not broken or config.get("tie_word_embeddings") is False:
        return config
    untied = {**config, "tie_word_embeddings": False}
    if model_type == "t5" and "scale_decoder_outputs" not in config:
        untied["scale_decoder_outputs"] = config.get("tie_word_embeddings") is not False  # T5Config.__post_init__
    return untied


def state_dict(stored: dict[str, np.ndarray], config: dict, shown: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Arrays as a file holds them (HF's keys: a folder's weights, a `.pt` or `.safetensors` state_dict) as the
    model's config (`untied_config`) and whole state_dict, checked against it; one ValueError naming `shown`."""
    model_type = _model_type(config, shown)
    config = untied_config(stored, config, model_type)
    arrays = _loaded(stored, config, model_type)
    check_arrays(arrays, config, model_type, shown)
    return config, arrays


def read_folder(path) -> HfFolder:
    """A Hugging Face seq2seq folder's config and its model's every state_dict array; a bad folder is one ValueError
    naming the file and the problem."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder (a Hugging Face model folder holds config.json and the weights)")
    config, model_type = read_config(folder)
    stored, files = read_weights(folder)
    config, arrays = state_dict(stored, config, str(folder / files[0]))
    return HfFolder(config=config, model_type=model_type, arrays=arrays, files=["config.json", *files])


# ---- writing ----


def generation_config(config: dict) -> dict:
    """generation_config.json as `GenerationConfig.from_model_config` derives it from a config without one."""
    derived = {key: config[key] for key in GENERATION_KEYS if config.get(key) is not None}
    derived |= {"output_attentions": False, "output_hidden_states": False, "_from_model_config": True}
    return derived | ({"transformers_version": config["transformers_version"]} if "transformers_version" in config else {})


def saved_arrays(arrays: dict[str, np.ndarray], config: dict, model_type: str) -> dict[str, np.ndarray]:
    """What `save_pretrained` writes: each tied matrix once (its source kept; a target equal to it bit for bit
    dropped), Marian's sinusoids left out (`_keys_to_ignore_on_save`)."""
    kept = {key: value for key, value in arrays.items() if not (model_type == "marian" and key in MARIAN_POSITIONS)}
    for target, source in tied_keys(config, model_type).items():
        if target in kept and source in kept and _same(kept[target], kept[source]):
            del kept[target]
    return kept


def _same(first: np.ndarray, second: np.ndarray) -> bool:
    return first.dtype == second.dtype and first.shape == second.shape and np.array_equal(first, second)


def tokenizer_files(folder: Path) -> list[Path]:
    """The tokenizer's files in a folder: the known names, *.spm and vocab files."""
    found = {folder / name for name in TOKENIZER_FILES if (folder / name).is_file()}
    found |= {path for pattern in TOKENIZER_PATTERNS for path in folder.glob(pattern) if path.is_file()}
    return sorted(found)


def write_folder(path, config: dict, arrays: dict[str, np.ndarray], source=None, generation: dict | None = None) -> Path:
    """A folder `from_pretrained` loads: config.json as given, generation_config.json (`generation`, the model's own,
    else the source folder's, else derived), the source's tokenizer files, model.safetensors with each tied matrix
    once; staged beside `path`, placed whole."""
    model_type = _model_type(config, "config (given to write_folder)")
    check_arrays(arrays, config, model_type, "arrays given to write_folder")
    source = Path(source) if source is not None else None
    destination = Path(path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    with atomic.staged(destination, folder=True) as staging:
        (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if generation is not None:
            (staging / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")
        elif source is not None and (source / "generation_config.json").is_file():
            shutil.copyfile(source / "generation_config.json", staging / "generation_config.json")
        else:
            (staging / "generation_config.json").write_text(
                json.dumps(generation_config(config), indent=2, sort_keys=True) + "\n"
            )
        for file in tokenizer_files(source) if source is not None else []:
            shutil.copyfile(file, staging / file.name)
        blob = safetensors_io.dumps(saved_arrays(arrays, config, model_type), {"format": "pt"})
        (staging / SAFETENSORS).write_bytes(blob)
        atomic.place(staging, destination)
    return destination
