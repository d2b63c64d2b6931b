"""Input checks shared by both stacks, so a bad batch gets the same clear ValueError from each.

The contract functions (`run`, `loss_and_grads`) call `check_batch` on the numpy batch before any tensor
is made: an out-of-range id would otherwise surface as an IndexError in torch and an
InvalidArgumentError deep inside TensorFlow (or, on a GPU, as silent zeros). `check_config_fits` holds a
config a file names against the file's arrays before a model of it is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from shared.catalogue import ModelSpec
from shared.failures import shown

ATTENTION_VECTORS = ("query", "values")
LAYER_KEY = re.compile(r"(?P<rnn>.+)\.weight_ih_l(?P<layer>\d+)(_reverse)?")  # torch's RNN layers: `n_layers` counts them


def check_config_fits(spec: ModelSpec, config: Mapping, shapes: Mapping[str, tuple], where: str) -> None:
    """A config a file names (`where`: the file and its field) against the canonical `shapes` of the file's arrays,
    before any model is built from it: every size `spec.weight_sizes` reads must be the arrays' own, its weight
    present (a size no array shows could be any, and a model of it is never built), and `n_layers` the number of
    layers the arrays stack. One ValueError names the field, its value and what the arrays show."""
    for key, (weight, axis) in spec.weight_sizes.items():
        shape = tuple(shapes.get(weight, ()))
        if len(shape) <= axis:
            held = f"has shape {shape}" if weight in shapes else "is not among them"
            raise ValueError(f"{where} is for model {spec.name}, but the arrays are another model's: {weight} (which "
                             f"shows its {key}) {held}")  # fmt: skip
        if key in config and config[key] != shape[axis]:
            raise ValueError(f"{where}: {key} is {shown(config[key])}, but the arrays show {key}={shape[axis]} "
                             f"({weight} has shape {shape})")  # fmt: skip
    layers = layer_counts(shapes)
    if "n_layers" in config and layers and set(layers.values()) != {config["n_layers"]}:
        stacked = ", ".join(f"{rnn} {count}" for rnn, count in sorted(layers.items()))
        raise ValueError(f"{where}: n_layers is {shown(config['n_layers'])}, but the arrays stack {stacked} layers")


def layer_counts(keys) -> dict[str, int]:
    """How many layers each of torch's RNNs stacks among the canonical `keys` (`encoder.lstm.weight_ih_l1`: 2)."""
    counts: dict[str, int] = {}
    for key in keys:
        match = LAYER_KEY.fullmatch(key)
        if match:
            counts[match["rnn"]] = max(counts.get(match["rnn"], 0), int(match["layer"]) + 1)
    return counts


def _as_array(batch: Mapping, key: str) -> np.ndarray:
    try:
        return np.asarray(batch[key])
    except KeyError:
        raise ValueError(f"batch is missing {key!r} (it holds: {', '.join(batch) or 'nothing'})") from None
    except ValueError:  # numpy's "inhomogeneous shape"
        raise ValueError(f"batch[{key!r}] is ragged: pad every row to one length") from None


def _check_rank(key: str, array: np.ndarray, rank: int, layout: str) -> None:
    if array.ndim != rank:
        raise ValueError(f"batch[{key!r}] must have rank {rank} {layout}, got shape {array.shape}")
    if 0 in array.shape:
        raise ValueError(f"batch[{key!r}] is empty (shape {array.shape}): batch size and lengths must be > 0")


def check_tokens(key: str, array: np.ndarray, vocab_size: int) -> None:
    """Token ids: integers, rank 2 `[B, L]`, non-empty, every id in `[0, vocab_size)`."""
    if array.dtype.kind not in "iu":
        raise ValueError(f"batch[{key!r}] must hold integer token ids, got dtype {array.dtype}")
    _check_rank(key, array, 2, "[batch, length]")
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"batch[{key!r}] holds token id {bad}, outside the vocabulary [0, {vocab_size})")


def check_vectors(key: str, array: np.ndarray, width: int) -> None:
    """Float vectors `[B, L, width]`, non-empty, finite."""
    if array.dtype.kind != "f":
        raise ValueError(f"batch[{key!r}] must hold floating-point vectors, got dtype {array.dtype}")
    _check_rank(key, array, 3, f"[batch, length, {width}]")
    if array.shape[-1] != width:
        raise ValueError(f"batch[{key!r}] must have {width} features, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"batch[{key!r}] holds NaN or infinite values")


def check_lengths(spec: ModelSpec, lengths: np.ndarray, src: np.ndarray) -> None:
    """`src_len`: integers `[B]`, each in `[1, S]`; only for models that mask padded sources."""
    if not spec.variable_length:
        raise ValueError(f"model {spec.name!r} takes no 'src_len' (document {spec.document} has no padded sources)")
    if lengths.dtype.kind not in "iu":
        raise ValueError(f"batch['src_len'] must hold integer lengths, got dtype {lengths.dtype}")
    if lengths.shape != src.shape[:1]:
        raise ValueError(f"batch['src_len'] must have shape ({src.shape[0]},), one length per row, got {lengths.shape}")
    if lengths.min() < 1 or lengths.max() > src.shape[1]:
        raise ValueError(f"batch['src_len'] must lie in [1, {src.shape[1]}], got {lengths.min()}..{lengths.max()}")


def check_batch(spec: ModelSpec, config: Mapping, batch: Mapping, with_targets: bool = False, with_tgt_in: bool = True) -> dict:
    """Validate `batch` for a model built from `spec` with `config`; return its arrays by key.

    Args:
        with_targets: require `tgt_out` too (the loss needs it).
        with_tgt_in: require `tgt_in` (greedy decoding needs only the source).
    """
    if not isinstance(batch, Mapping):
        raise ValueError(f"batch must be a mapping of arrays, got {type(batch).__name__}")
    if spec.interface == "attention":
        arrays = {key: _as_array(batch, key) for key in ATTENTION_VECTORS}
        check_vectors("query", arrays["query"], config["decoder_dim"])
        check_vectors("values", arrays["values"], config["encoder_dim"])
    else:
        keys = ("src", "tgt_in", "tgt_out")[: 3 if with_targets else 2 if with_tgt_in else 1]
        arrays = {key: _as_array(batch, key) for key in keys}
        src_vocab, tgt_vocab = (config[key] for key in spec.vocab_keys)
        for key, array in arrays.items():
            check_tokens(key, array, src_vocab if key == "src" else tgt_vocab)
        if "src_len" in batch:
            arrays["src_len"] = _as_array(batch, "src_len")
            check_lengths(spec, arrays["src_len"], arrays["src"])
        if with_targets and arrays["tgt_out"].shape != arrays["tgt_in"].shape:
            raise ValueError(
                f"batch['tgt_out'] shape {arrays['tgt_out'].shape} differs from batch['tgt_in'] shape {arrays['tgt_in'].shape}"
            )
    sizes = {key: array.shape[0] for key, array in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"batch arrays disagree on the batch size: {sizes}")
    return arrays


def check_max_len(max_len) -> int:
    """Greedy decoding's length limit: a positive integer."""
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
        raise ValueError(f"max_len must be a positive integer, got {shown(max_len)}")
    return int(max_len)


def prepare(name: str, config: Mapping, batch: Mapping, teacher_forcing=None, with_targets=False, with_tgt_in=True):
    """What every contract entry point does first: (spec, checked arrays, checked schedule or None)."""
    from shared import catalogue
    from shared.core import teacher_forcing as schedules

    spec = catalogue.get(name)
    arrays = check_batch(spec, config, batch, with_targets=with_targets, with_tgt_in=with_tgt_in)
    length = arrays["tgt_in"].shape[1] if "tgt_in" in arrays else 0
    return spec, arrays, schedules.check(spec, teacher_forcing, length)
