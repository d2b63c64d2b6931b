"""keras-hub measured as the peer: what its own `keras_hub.models.BartBackbone.from_preset(<folder>)` does with a user's
`save_pretrained` folder of each family, and, where it loads, how far its outputs are from transformers' eager model.

keras-hub 0.32's utils/transformers/preset_loader.py picks a converter by config.json's model_type (BART only of these
families) and convert_bart.py reads `num_hidden_layers`, which transformers 5 no longer writes. Nothing is patched and
nothing downloaded: only a local folder is passed. torch, transformers and keras_hub are imported inside functions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

LOADER = "keras_hub.models.BartBackbone.from_preset"
DTYPES = ("float32", "float64")
ERROR_CHARS = 160


def _first_line(error: BaseException) -> str:
    """`Type: first line of the message`, shortened to ERROR_CHARS."""
    text = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


def _batch(config: dict) -> dict[str, np.ndarray]:
    """A fixed padded batch [B, S], [B, T] of ids below every vocabulary the config names (1 marks a real token)."""
    vocab = min(int(config.get(name) or 1 << 30) for name in ("vocab_size", "decoder_vocab_size"))
    rng = np.random.default_rng(1)
    source, target = rng.integers(3, vocab - 2, (2, 7)), rng.integers(3, vocab - 2, (2, 5))  # [B, S], [B, T]
    source_mask = np.ones_like(source)  # [B, S]
    source_mask[1, 5:] = 0
    return {"encoder_token_ids": source.astype("int32"), "encoder_padding_mask": source_mask.astype("int32"),
            "decoder_token_ids": target.astype("int32"), "decoder_padding_mask": np.ones_like(target, "int32")}  # fmt: skip


def _hf_outputs(folder: Path, batch: dict, dtype: str) -> dict[str, np.ndarray]:
    """transformers' eager model of the folder: the encoder's and the decoder's last hidden states [B, L, E]."""
    import torch
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager",
                                                               dtype=getattr(torch, dtype)).eval()  # fmt: skip
    with torch.no_grad():
        out = model(input_ids=torch.tensor(batch["encoder_token_ids"]),
                    attention_mask=torch.tensor(batch["encoder_padding_mask"]),
                    decoder_input_ids=torch.tensor(batch["decoder_token_ids"]), output_hidden_states=True)  # fmt: skip
    return {"encoder_sequence_output": out.encoder_last_hidden_state.numpy(),
            "decoder_sequence_output": out.decoder_hidden_states[-1].numpy()}  # fmt: skip


def _keras_hub_backbone(folder: Path, dtype: str):
    import keras_hub

    return keras_hub.models.BartBackbone.from_preset(str(folder), dtype=dtype)


def _max_error(backbone, folder: Path, dtype: str) -> float:
    """The largest difference of either output, relative to the largest value HF gives."""
    import keras

    config = json.loads((folder / "config.json").read_text())
    batch = _batch(config)
    reference = _hf_outputs(folder, batch, dtype)
    outputs = backbone(batch)
    errors = []
    for name, expected in reference.items():
        got = keras.ops.convert_to_numpy(outputs[name]).astype("float64")
        errors.append(float(np.abs(got - expected).max() / np.abs(expected).max()))
    return max(errors)


def record(family: str, folder) -> dict:
    """{family, loader, loads, error (its first line, shortened), max_error_float32, max_error_float64}: keras-hub's
    own failure is the measurement, so any exception it raises is recorded, not raised."""
    path = Path(folder)
    if not (path / "config.json").is_file():  # from_preset reads anything else as a handle to download
        raise ValueError(f"{path}: not a Hugging Face model folder (no config.json); keras-hub is given local folders only")
    found = {"family": family, "loader": LOADER, "loads": False, "error": None}
    found |= {f"max_error_{dtype}": None for dtype in DTYPES}
    for dtype in DTYPES:
        try:
            backbone = _keras_hub_backbone(path, dtype)
        except Exception as error:  # noqa: BLE001  (whatever keras-hub raises is what it does)
            return found | {"error": _first_line(error)}
        found["loads"] = True
        found[f"max_error_{dtype}"] = _max_error(backbone, path, dtype)
    return found


def measure(folder_by_family: dict) -> list[dict]:
    """One record per family, in the order given: what keras-hub's own loading does with each local folder."""
    return [record(family, folder) for family, folder in folder_by_family.items()]


def with_num_hidden_layers(folder, destination) -> Path:
    """A copy of a BART folder whose config.json also names `num_hidden_layers` (encoder_layers), as transformers 4
    wrote it: what keras-hub computes once its converter finds the key (the folder changed, keras-hub not)."""
    source, target = Path(folder), Path(destination)
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config["num_hidden_layers"] = config["encoder_layers"]
    (target / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return target
