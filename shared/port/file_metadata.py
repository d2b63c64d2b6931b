"""What a file says of itself, checked before it costs anything: the catalogue model and config a canonical
safetensors file's metadata or a `.keras` archive's config.json names, read without a framework, each checked
against the file's own array shapes (shared.core.validation.check_config_fits) before any model is built."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from shared import catalogue, stacks
from shared.core import validation
from shared.failures import clip, shown
from shared.io.sources import KERAS_WEIGHTS

METADATA_MODEL = 'its metadata\'s "model"'  # the fields a file names its model and config in, as errors name them
METADATA_CONFIG = 'its metadata\'s "config"'
KERAS_MODEL = 'its config.json\'s "rosetta_model"'
KERAS_CONFIG = 'its config.json\'s "rosetta_config"'
CONFIG_LIMIT = 2**20  # bytes of a `.keras` file's config.json read: a catalogue model's is a few KB (no zip bomb unpacked)


def keras_config(path: Path) -> dict | None:
    """The config of the model a `.keras` file holds (its config.json's "config"), read within CONFIG_LIMIT; None for
    a file that is no zip or holds no config.json (Keras's reader says why); one line where it is not JSON."""
    outer = _keras_archive_config(path)
    if outer is None:
        return None
    inner = outer.get("config")
    return inner if isinstance(inner, dict) else {}


def keras_registered_name(path: Path) -> str | None:
    """The name the model class of a `.keras` file is registered under ("package>Class"), None where it names none."""
    outer = _keras_archive_config(path)
    found = (outer or {}).get("registered_name") or (outer or {}).get("class_name")
    return found if isinstance(found, str) else None


def _keras_archive_config(path: Path) -> dict | None:
    try:
        with zipfile.ZipFile(path) as archive, archive.open("config.json") as stream:
            text = stream.read(CONFIG_LIMIT + 1)
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    if len(text) > CONFIG_LIMIT:
        raise ValueError(f"{path}: its config.json is over {CONFIG_LIMIT:,} bytes; a catalogue model's is a few KB")
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path}: its config.json is not JSON ({clip(str(error))})") from None
    return config if isinstance(config, dict) else {}


def saved_config(path: Path, saved: dict, name: str, config: dict, overrides: dict, shapes: dict) -> dict:
    """The config a safetensors file names (as a `.keras` file does), checked against its arrays' `shapes` before
    any model is built: the model must be `name`, the config `name`'s options at the arrays' sizes, every `--set`
    must agree with it. A file whose metadata names this model and no config must hold its arrays; one naming
    another model and no config holds another tool's metadata (--model decides)."""
    spec = catalogue.get(name)
    if "config" not in saved:
        if saved.get("model") == name:
            validation.check_config_fits(spec, {}, shapes, f"{path}: {METADATA_MODEL}")
        return config
    if saved.get("model") != name:
        raise ValueError(f"{path}: holds model {shown(saved.get('model'))}, not {name!r} ({METADATA_MODEL})")
    text = saved["config"]
    try:
        stored = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        stored = None
    if stored is None:
        raise ValueError(f"{path}: {METADATA_CONFIG} is not JSON text of {name}'s options, got {shown(text)}")
    where = f"{path}: {METADATA_CONFIG}"
    validation.check_config_fits(spec, _options(where, spec, stored), shapes, where)
    resolved = catalogue.resolve_config(spec, "float32", stored)
    differ = [f"{key}={shown(resolved[key])}" for key in overrides if resolved[key] != config[key]]
    if differ:
        raise ValueError(f"{path}: saved with {', '.join(differ)}; drop those --set")
    return {**config, **stored}


def _options(where: str, spec: catalogue.ModelSpec, options) -> dict:
    """`options`, a config a file names (`where`: the file and field): an object of `spec`'s options, each of its
    type; one line naming the file, the field and the option where not."""
    if not isinstance(options, dict):
        raise ValueError(f"{where} must be an object of {spec.name}'s options, got {shown(options)}")
    unknown = [shown(key) for key in options if key not in spec.config]
    if unknown:
        listed = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        raise ValueError(f"{where} names {listed}, which model {spec.name} does not take; it takes: {', '.join(spec.config)}")
    try:
        catalogue.resolve_config(spec, "float32", options)
    except ValueError as error:  # its type or range, the value echoed: clipped
        raise ValueError(f"{where}: {clip(str(error), 2 * len(spec.name) + 200)}") from None
    return options


def check_keras_config(stack, path: Path, name: str) -> None:
    """A catalogue model's `.keras` file (its config.json names "rosetta_model"): the model must be `name`, its dtype
    one of ours, its "rosetta_config" `name`'s options at the sizes of the arrays the archive holds. A file of no
    catalogue model is left to Keras's reader, which says what it holds."""
    held = keras_config(path)
    if held is None or "rosetta_model" not in held:
        return
    if held["rosetta_model"] != name:
        raise ValueError(f"{path}: holds model {shown(held['rosetta_model'])}, not {name!r} ({KERAS_MODEL})")
    if held.get("rosetta_dtype") not in catalogue.DTYPES:
        dtype = shown(held.get("rosetta_dtype"))
        raise ValueError(f'{path}: its config.json\'s "rosetta_dtype" is {dtype}, not one of {", ".join(catalogue.DTYPES)}')
    where, spec = f"{path}: {KERAS_CONFIG}", catalogue.get(name)
    options = _options(where, spec, held.get("rosetta_config"))
    validation.check_config_fits(spec, options, _keras_shapes(stack, path, spec, options, where), where)


def _keras_shapes(stack, path: Path, spec: catalogue.ModelSpec, options: dict, where: str) -> dict[str, tuple]:
    """The canonical shapes of the arrays a `.keras` archive holds, from its model.weights.h5's index (no array
    read), through a model of its structure (`options`) at fixture sizes (nothing allocated:
    tf_impl.checkpoints.structure_shapes). The archive must hold that structure's arrays, no fewer (another n_layers)
    and no more (Keras would skip those unread)."""
    try:
        held = stacks.import_module("tf", "files").archive_arrays(path)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path}: its {KERAS_WEIGHTS} is not a readable weights file ({clip(str(error))})") from None
    if options.get("n_layers", 0) > len(held):  # a layer holds arrays: bounded before a structure of it is built
        raise ValueError(f"{where}: n_layers is {options['n_layers']}, but the file holds {len(held)} arrays in all")
    sizes = {key: spec.fixture_config[key] for key in spec.weight_sizes}
    try:
        structure = stack.build(spec.name, "float32", **{**options, **sizes})
    except (ValueError, TypeError) as error:
        raise ValueError(f"{where}: {clip(str(error), 200)}") from None
    shapes, differ = stacks.import_module("tf", "checkpoints").structure_shapes(held, structure)
    if differ:
        built = ", ".join(f"{key}={shown(value)}" for key, value in options.items() if key not in sizes) or "its defaults"
        listed = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
        raise ValueError(f"{where}: the archive's arrays are not those of model {spec.name} built with {built} ({listed} "
                         "differ)")  # fmt: skip
    return shapes
