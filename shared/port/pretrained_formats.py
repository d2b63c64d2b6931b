"""How each file format holds a Hugging Face seq2seq model (MarianMT, BART, mBART, T5), for `rosetta port`'s
pretrained pipeline (shared/port/pretrained.py): one class per format, keyed by the registry's format name
(shared/port/formats.py), each reading a file into HF's state_dict and config, writing them, and opening the file
as its user loads it.

The HF state_dict (numpy, keyed as `model.state_dict()`, tied entries repeated) and config.json's dict are the
canonical form, as canonical arrays are for the catalogue's models. A Keras file is read through a Keras model of
the family (tf_impl/hf/families.py); a folder, `.pt` and `.safetensors` are read without a framework model.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from shared import stacks
from shared.hf import folders
from shared.io import safetensors_io


@dataclasses.dataclass
class Pretrained:
    """A file's model: config.json's dict, the whole state_dict (ties resolved), and generation_config.json's dict
    where the file carries one (a folder, a `.keras` file of ours; None: HF derives it from config.json)."""

    config: dict
    arrays: dict[str, np.ndarray]
    generation: dict | None = None

    @property
    def dtype(self) -> str:
        return "float64" if any(np.asarray(a).dtype == np.float64 for a in self.arrays.values()) else "float32"


def families(stack: str):
    return stacks.import_module(stack, "hf.families")


class PretrainedIO:
    """One format's way with HF models. `needs_config`: the file names no architecture (a config.json is passed)."""

    stack = "torch"
    needs_config = False
    suffix = ""

    def read(self, path: Path, config: dict | None) -> Pretrained:
        raise NotImplementedError

    def write(self, path: Path, found: Pretrained, dtype: str, source: Path | None) -> None:
        raise NotImplementedError

    def open(self, path: Path, config: dict | None):
        """The model as its user loads the file (the line `load_line` prints)."""
        found = self.read(path, config)
        model = families(self.stack).build(found.config, found.dtype)
        families(self.stack).load_hf_weights(model, found.arrays)
        return model

    def read_and_open(self, path: Path, config: dict | None) -> tuple[Pretrained, object]:
        """What `read` gives and the model `open` gives: the file checked by its reader before a framework loads it."""
        return self.read(path, config), self.open(path, config)

    def load_line(self, path: str, config_path: str) -> str:
        raise NotImplementedError


def _cast(arrays: dict, dtype: str) -> dict:
    return {key: np.asarray(value, dtype) if np.asarray(value).dtype.kind == "f" else value for key, value in arrays.items()}


def read_generation_config(folder: Path) -> dict | None:
    """A folder's generation_config.json as a dict (None: the folder has none); one that is no JSON object is one
    ValueError naming it."""
    path = Path(folder) / "generation_config.json"
    if not path.is_file():
        return None
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not JSON, or not readable ({error})") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: not a JSON object")
    return values


class HfFolderIO(PretrainedIO):
    def read(self, path, config):
        folder = folders.read_folder(path)
        return Pretrained(folder.config, folder.arrays, read_generation_config(path))

    def write(self, path, found, dtype, source):
        config = {**found.config, "dtype": dtype}  # what save_pretrained writes of the weights' precision
        config.pop("torch_dtype", None)
        folders.write_folder(path, config, _cast(found.arrays, dtype), source=source, generation=found.generation)

    def open(self, path, config):
        return families("torch").from_folder(path)

    def load_line(self, path, config_path):
        return f"import transformers; model = transformers.AutoModelForSeq2SeqLM.from_pretrained({path})"


class _StateDictIO(PretrainedIO):
    """A file holding HF's state_dict alone (keys as `model.state_dict()`; tied matrices once or repeated when read,
    repeated when written, so `load_state_dict` takes it strictly)."""

    needs_config = True

    def read(self, path, config):
        return Pretrained(*folders.state_dict(self.stored(path), config, str(path)))

    def load_line(self, path, config_path):
        return (f"import transformers; config = transformers.AutoConfig.from_pretrained({config_path}); model = "
                f"transformers.AutoModelForSeq2SeqLM.from_config(config); "
                f"model.load_state_dict({self.tensors(path)}); model.eval()")  # fmt: skip


class TorchStateDictIO(_StateDictIO):
    def stored(self, path):
        return stacks.import_module("torch", "files").read_arrays(path)[0]

    def write(self, path, found, dtype, source):
        stacks.import_module("torch", "files").write_arrays(path, _cast(found.arrays, dtype))

    def tensors(self, path):
        return f"__import__('torch').load({path})"


class SafetensorsIO(_StateDictIO):
    def stored(self, path):
        return safetensors_io.load(path)[0]

    def write(self, path, found, dtype, source):
        safetensors_io.save(path, _cast(found.arrays, dtype), {"format": "pt"})  # every key: a strict load takes it

    def tensors(self, path):
        return f"__import__('safetensors.torch').torch.load_file({path})"


class KerasIO(PretrainedIO):
    """A whole Keras model of a family (ours, or keras-hub's BartSeq2SeqLM): it names its own config."""

    stack = "tf"

    def read(self, path, config):
        return self.read_and_open(path, config)[0]

    def read_and_open(self, path, config):
        model = self.open(path, config)  # a Keras file is read through its model: opened once
        generation = getattr(model, "generation_config", None)  # ours carry one; keras-hub's have no place for it
        found = Pretrained(families("tf").hf_config(model), families("tf").hf_state(model), generation)
        return found, model

    def open(self, path, config):
        return families("tf").load_keras(path)

    def write(self, path, found, dtype, source):
        model = families("tf").build(found.config, dtype, generation_config=found.generation)
        families("tf").load_hf_weights(model, _cast(found.arrays, dtype))
        families("tf").save_keras(model, path)

    def load_line(self, path, config_path):
        return f"import tf_impl.hf.families as hf; model = hf.load_keras({path})"


class KerasWeightsIO(PretrainedIO):
    """A Keras `.weights.h5` file of a family's model: the model is built from a config.json."""

    stack, needs_config = "tf", True

    def read(self, path, config):
        return self.read_and_open(path, config)[0]

    def read_and_open(self, path, config):
        model = self.open(path, config)
        return Pretrained(config, families("tf").hf_state(model)), model

    def open(self, path, config):
        dtype = "float32"  # a weights file is loaded into the model built in its precision; Keras casts on load
        return families("tf").load_weights(config, path, dtype)

    def write(self, path, found, dtype, source):
        model = families("tf").build(found.config, dtype)
        families("tf").load_hf_weights(model, _cast(found.arrays, dtype))
        families("tf").save_weights(model, path)

    def load_line(self, path, config_path):
        return (f"import json, tf_impl.hf.families as hf; model = hf.load_weights(json.load(open({config_path})), "
                f"{path})")  # fmt: skip


PRETRAINED: dict[str, PretrainedIO] = {"hf": HfFolderIO(), "torch": TorchStateDictIO(), "safetensors": SafetensorsIO(),
                                       "keras": KerasIO(), "keras_weights": KerasWeightsIO()}  # fmt: skip
