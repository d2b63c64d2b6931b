"""The registry of the file formats a port reads and writes: one class per format, knowing its name, suffix, stack,
how to tell it on disk, how to read and write it (through its stack's files.py, shared/stacks.py), the line that
loads a written file, and how a user's own model goes in and out of it (`rosetta port --torch-model/--keras-model`).

Nothing outside this module asks a format which one it is: the port's code asks the format what it does
(`keyed`, `whole_model`, `in_parts`, `folder`, ...) or has it do it. Adding a format is one class here, its stack's
functions, and one entry in FORMATS (or READ_ONLY); docs/DESIGN.md "Add a format".
"""

from __future__ import annotations

import json
from pathlib import Path

from shared import catalogue, stacks
from shared.core import optimizer_state
from shared.failures import shown
from shared.io import safetensors_io
from shared.io.sources import is_saved_model
from shared.port import file_metadata


class Format:
    """A file format. Flags say what the port's stages do with it:
    keyed: its arrays come keyed by the file's own names (renamed by a key map), not read into a model;
    whole_model: it names its own model, config and weights (a `.keras` file: the user's model runs on it);
    by_path: read by attribute path through a model of the same structure (TensorFlow's checkpoint reader);
    in_parts: a source may come in parts (`encoder=PATH,decoder=PATH`); folder: written as a folder; writable: a
    port writes it (a SavedModel is read only); pretrained: it holds Hugging Face models only (a port of it is
    the pretrained pipeline's, shared/port/pretrained.py);
    own_stack: the stack a user's own model in it is loaded by (None: no own models in it)."""

    name: str
    suffix: str
    stack: str | None  # the stack that reads and writes it; None: either (canonical safetensors)
    description: str
    keyed = whole_model = by_path = in_parts = folder = pretrained = False
    writable = True
    own_stack: str | None = None

    def __repr__(self) -> str:
        return f"<format {self.name}>"

    def shows(self, path: Path) -> bool:
        """Whether `path`'s name shows this format."""
        return path.name.endswith(self.suffix)

    def detect(self, path: Path, destination: bool) -> bool:
        """Whether `path` is a file of this format, by its name (or what lies there)."""
        return self.shows(path)

    def reads_as(self, shown: Format) -> bool:
        """Whether a source whose name shows `shown` is read by this format's reader."""
        return shown is self

    def named_model(self, path: Path, identity: bool) -> tuple[object, str] | None:
        """(the model the file names, the field naming it), read without a framework; None: it names none."""
        return None

    def read_keyed(self, path: Path, with_optimizer: bool) -> tuple[dict, dict | None, dict | None]:
        """A keyed file's arrays and Adam state in its own names, and the model and config its metadata names."""
        raise NotImplementedError(self.name)

    def read_model(self, stack, path, name: str, config: dict, dtype: str, with_optimizer: bool):
        """A model of `stack` at `config` holding the file's weights (strict), and Adam's state (canonical) or None."""
        weights, state, _ = self.read_keyed(Path(path), with_optimizer)
        model = stack.build(name, dtype, **config)
        stack.set_weights(model, weights)
        return model, state

    def write(self, path: Path, stack, name: str, config: dict, dtype: str, weights: dict, state, identity: bool) -> None:
        """The file's-layout `weights` (and Adam's `state`) to `path`."""
        model = stack.build(name, dtype, **config)
        stack.set_weights(model, weights)
        self.write_model(model, path, state)

    def write_model(self, model, path: Path, state) -> None:
        raise NotImplementedError(self.name)

    def load_line(self, path: str, name: str, build: str, with_state: bool) -> str:
        """The Python line that loads the written file (`path`, quoted) into the model `build` makes."""
        raise NotImplementedError(self.name)

    # ---- a user's own model (shared/port/own_models.py) ----

    def read_own(self, model, path: Path):
        """The user's `model` holding the file's weights (a whole-model format returns its own model)."""
        raise NotImplementedError(self.name)

    def write_own(self, model, path: Path) -> None:
        raise NotImplementedError(self.name)

    def own_load_line(self, path: str, module: str, make: str, built: bool, inputs) -> str:
        raise NotImplementedError(self.name)


def _files(stack: str):
    return stacks.import_module(stack, "files")


class TorchFile(Format):
    name, suffix, stack, description, keyed, own_stack = "torch", ".pt", "torch", "PyTorch state_dict", True, "torch"

    def read_keyed(self, path, with_optimizer):
        return (*_files("torch").read_arrays(path, with_optimizer), None)

    def write(self, path, stack, name, config, dtype, weights, state, identity):
        _files("torch").write_arrays(path, weights, state)

    def load_line(self, path, name, build, with_state):
        entry = '["model"]' if with_state else ""
        return f"import torch, torch_impl; model = {build}; model.load_state_dict(torch.load({path}){entry})"

    def read_own(self, model, path):
        return _files("torch").load_own(model, _files("torch").read_arrays(path)[0])

    def write_own(self, model, path):
        _files("torch").write_arrays(path, _files("torch").own_arrays(model))

    def own_load_line(self, path, module, make, built, inputs):
        return f"import torch; {make}; model.load_state_dict(torch.load({path}))"


class SafetensorsFile(Format):
    name, suffix, stack, description = "safetensors", ".safetensors", None, "canonical safetensors"
    keyed, own_stack = True, "torch"

    def named_model(self, path, identity):
        if not identity:
            return None
        return safetensors_io.read_metadata(path).get("model"), file_metadata.METADATA_MODEL

    def read_keyed(self, path, with_optimizer):
        tensors, metadata = safetensors_io.load(path)
        weights = optimizer_state.weights_without_optimizer(tensors)
        saved = {key: metadata[key] for key in ("model", "config") if key in metadata} or None
        if not with_optimizer:
            return weights, None, saved
        state = optimizer_state.optimizer_from_tensors(tensors, metadata, str(path))
        if state is None:
            raise ValueError(f"{path}: holds no optimizer state (exp_avg/<key>, exp_avg_sq/<key>, optimizer_step)")
        return weights, state, saved

    def write(self, path, stack, name, config, dtype, weights, state, identity):
        metadata = {"model": name, "document": catalogue.get(name).document, "written_by": "rosetta port"}
        if identity:  # the catalogue model's file names its config, as a .keras file does
            metadata["config"] = json.dumps(config, sort_keys=True)
        if state is not None:
            moments, optimizer_metadata = optimizer_state.optimizer_tensors(state)
            weights, metadata = {**weights, **moments}, {**metadata, **optimizer_metadata}
        safetensors_io.save(path, weights, metadata)

    def load_line(self, path, name, build, with_state):
        return f"import torch_impl; from shared.port import read_weights; model = {build}; torch_impl.set_weights(model, read_weights({path}))"  # noqa: E501

    def read_own(self, model, path):
        return _files("torch").load_own(model, safetensors_io.load(path)[0])

    def write_own(self, model, path):
        safetensors_io.save(path, _files("torch").own_arrays(model))

    def own_load_line(self, path, module, make, built, inputs):
        tensors = f"{{key: torch.as_tensor(value) for key, value in read_weights({path}).items()}}"
        return f"import torch; from shared.port import read_weights; {make}; model.load_state_dict({tensors})"


class _ReadByPath(Format):
    """Keras weights files, TensorFlow checkpoints and SavedModels: one reader (tf_impl/checkpoints.py) takes them all,
    by attribute path, through a model of the same structure; a source may come in parts."""

    stack, by_path, in_parts = "tf", True, True

    def reads_as(self, shown):
        either = (FORMATS["keras_weights"], FORMATS["tf_checkpoint"])  # a tutorial's parts saved as .weights.h5
        return shown is self or (self in either and shown in either)

    def read_model(self, stack, path, name, config, dtype, with_optimizer):
        model = stack.build(name, dtype, **config)  # checked path by path, a part file named as such
        return model, stacks.import_module("tf", "checkpoints").read(path, model, with_optimizer)


class KerasWeightsFile(_ReadByPath):
    name, suffix, description, own_stack = "keras_weights", ".weights.h5", "Keras weights", "tf"

    def write_model(self, model, path, state):
        _files("tf").save_native(model, path, state)

    def load_line(self, path, name, build, with_state):
        if catalogue.get(name).interface == "attention":  # a bare layer: only Keras Models load weights files
            return f"import tf_impl, tf_impl.files; model = {build}; tf_impl.files.load_native(model, {path})"
        return f"import tf_impl; model = {build}; model.load_weights({path})"

    def read_own(self, model, path):
        _files("tf").load_native(model, path)
        return model

    def write_own(self, model, path):
        _files("tf").save_native(model, path)

    def own_load_line(self, path, module, make, built, inputs):
        if built:
            return f"{make}; model.load_weights({path})"
        build = f"tf_impl.conversion.run(model, load_batch({str(inputs)!r}))"  # a subclassed model builds when called
        return f"import tf_impl.conversion; from shared.port.own_models import load_batch; {make}; {build}; model.load_weights({path})"  # noqa: E501


class KerasFile(Format):
    name, suffix, stack, description, own_stack = "keras", ".keras", "tf", "Keras model", "tf"
    whole_model = True

    def named_model(self, path, identity):
        return (file_metadata.keras_config(path) or {}).get("rosetta_model"), file_metadata.KERAS_MODEL

    def read_model(self, stack, path, name, config, dtype, with_optimizer):
        """A `.keras` file names its model and config: the model must be the one asked for; its config is the
        file's, checked against its arrays before Keras builds the model from it."""
        path = Path(path)
        file_metadata.check_keras_config(stack, path, name)
        model, state = _files("tf").load_keras(path, with_optimizer)
        if model.rosetta_name != name:
            raise ValueError(f"{path}: holds model {shown(model.rosetta_name)}, not {name!r}")
        return model, state

    def write_model(self, model, path, state):
        _files("tf").save_keras(model, path, state)

    def load_line(self, path, name, build, with_state):
        return f"import tf_impl.files; model, _ = tf_impl.files.load_keras({path})"

    def read_own(self, model, path):
        return _files("tf").load_own_keras(path)

    def write_own(self, model, path):
        _files("tf").save_own_keras(model, path)

    def own_load_line(self, path, module, make, built, inputs):
        return f"import keras, {module}; model = keras.saving.load_model({path})"


class TfCheckpoint(_ReadByPath):
    name, suffix, description, folder = "tf_checkpoint", ".index", "TensorFlow checkpoint", True

    def detect(self, path, destination):
        if self.shows(path):
            return True
        return not destination and ((path / "checkpoint").is_file() or Path(f"{path}.index").is_file())

    def write_model(self, model, path, state):
        stacks.import_module("tf", "checkpoints").write(model, path, state)

    def load_line(self, path, name, build, with_state):
        return f"import tf_impl, tf_impl.checkpoints; model = {build}; tf_impl.checkpoints.read({path}, model)"


class SavedModel(_ReadByPath):
    """Read, never written: a folder `tf.saved_model.save` leaves (`saved_model.pb`, `variables/`), told by what it
    holds; its weights are the checkpoint `variables/variables`, read as a TF checkpoint is (tf_impl/checkpoints.py)."""

    name, suffix, description, in_parts, writable = "saved_model", "/", "TensorFlow SavedModel", False, False

    def shows(self, path):
        return False

    def detect(self, path, destination):
        return is_saved_model(path)


class HfFolder(Format):
    """A Hugging Face model folder (config.json, model.safetensors or its shards, the tokenizer's files), read and
    written by shared/hf/folders.py; its models are ported by the pretrained pipeline (shared/port/pretrained.py),
    never as a catalogue model. Told by its config.json as a source; named `--to hf` as a destination."""

    name, suffix, stack, description = "hf", "a folder (--to hf)", "torch", "Hugging Face model folder"
    folder = whole_model = pretrained = True

    def shows(self, path):
        return False

    def detect(self, path, destination):
        return not destination and (path / "config.json").is_file()


# the formats of the catalogue's models (written and read); read only; Hugging Face's models only
FORMATS: dict[str, Format] = {
    fmt.name: fmt for fmt in (TorchFile(), SafetensorsFile(), KerasWeightsFile(), KerasFile(), TfCheckpoint())
}
READ_ONLY: dict[str, Format] = {"saved_model": SavedModel()}
PRETRAINED_ONLY: dict[str, Format] = {"hf": HfFolder()}
SAVED_MODEL = READ_ONLY["saved_model"]
ALL = {**FORMATS, **READ_ONLY, **PRETRAINED_ONLY}


def detect(path: Path, destination: bool) -> Format:
    """The format `path`'s name (or, for a TF checkpoint or SavedModel folder, what lies there) shows."""
    for fmt in (SAVED_MODEL, *FORMATS.values(), *PRETRAINED_ONLY.values()):
        if fmt.detect(path, destination):
            return fmt  # a SavedModel named as a destination is refused by the endpoint, saying why
    known = ", ".join(f"{fmt.suffix} ({fmt.description})" for fmt in (*FORMATS.values(), *PRETRAINED_ONLY.values()))
    known += "" if destination else ", or pass a SavedModel folder (saved_model.pb, variables/)"
    flag = "--to" if destination else "--from"
    raise ValueError(f"{path}: cannot tell the format from the file name; name it {known}, or pass {flag}")


def shown_by(path: Path) -> Format | None:
    """The written format `path`'s name shows, if any."""
    return next((fmt for fmt in FORMATS.values() if fmt.shows(path)), None)
