"""Deterministic fixtures: weights in canonical layout, input batches, and golden reference outputs.

Weights and batches are drawn with numpy from seeds derived from the model name, so any stack (or none)
regenerates them byte for byte. Golden files (`shared/verify/golden/<model>.safetensors`) add the float64
outputs, loss and gradients computed by the torch stack as the documents' listings compute (built with
`as_written=True`: the faithful reference our hoisted computation is held to); they let the `torch` and `tf` tox envs each
check numerics without the other stack installed. `rosetta fixtures` rewrites those a fresh generation changes
beyond float64 rounding (`golden_differences`), `--check` verifies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.catalogue import ModelSpec, get
from shared.io import safetensors_io
from shared.io.atomic import write_atomic
from shared.specs import Sizes

GOLDEN_DIR = Path(__file__).with_name("golden")
WEIGHT_SCALE = 0.5  # U(-0.5, 0.5): large enough that tanh and softmax are far from linear and uniform


def seed(name: str, what: str) -> int:
    """A seed from the model name (not Python's salted hash), stable across runs and machines."""
    return int.from_bytes(hashlib.sha256(f"{name}/{what}".encode()).digest()[:8], "little")


def make_weights(name: str, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Canonical float64 weights for `shapes`, drawn in sorted key order."""
    rng = np.random.default_rng(seed(name, "weights"))
    return {key: rng.uniform(-WEIGHT_SCALE, WEIGHT_SCALE, shapes[key]) for key in sorted(shapes)}


def make_batch(spec: ModelSpec, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """The fixture batch of `spec`: token ids with padded targets (rows of different lengths), or vectors.

    Targets: row b holds T - b real tokens, the rest `<pad>`; `tgt_in` is `<sos>` + `tgt_out` shifted
    right. A source token is repeated across rows on purpose (embedding gradients must sum repeats).
    `rng` defaults to the fixture's own seeded generator.
    """
    rng = rng or np.random.default_rng(seed(spec.name, "batch"))
    B, S, T = (spec.fixture_batch[k] for k in "BST")
    config = spec.fixture_config
    if spec.interface == "attention":
        return {
            "query": rng.normal(size=(B, T, config["decoder_dim"])),
            "values": rng.normal(size=(B, S, config["encoder_dim"])),
        }
    first = max(spec.pad_id, spec.sos_id, spec.eos_id) + 1  # ids below are specials
    src = rng.integers(first, spec.src_vocab_size, (B, S))
    src[-1, 0] = src[0, 0]
    tgt_out = rng.integers(first, spec.vocab_size, (B, T))
    for row in range(B):
        tgt_out[row, T - row - 1] = spec.eos_id
        tgt_out[row, T - row :] = spec.pad_id
    tgt_in = np.concatenate([np.full((B, 1), spec.sos_id), tgt_out[:, :-1]], axis=1)
    batch = {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}
    if spec.variable_length:  # sources of lengths S, S - 1, ...: all different, padded at the end
        batch["src_len"] = np.arange(S, S - B, -1)
        src[np.arange(S) >= batch["src_len"][:, None]] = spec.pad_id
    return batch


def make_schedule(spec: ModelSpec) -> np.ndarray | None:
    """The fixture's teacher-forcing schedule: alternating, so both the true-token and argmax paths run."""
    if not spec.variable_length:
        return None
    return np.arange(spec.fixture_batch["T"] - 1) % 2 == 0


@dataclass(frozen=True)
class Golden:
    """One golden file: the weights and batch fed to the model, and float64 reference results."""

    weights: dict[str, np.ndarray]
    batch: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    greedy: dict[str, np.ndarray]
    loss: float
    metadata: dict[str, str]
    schedule: np.ndarray | None = None


_SECTIONS = ("weights", "batch", "outputs", "grads", "greedy")
GREEDY_EXTRA_STEPS = 2  # greedy fixtures may run past the target length


def _greedy_max_len(batch: dict) -> int:
    return batch["tgt_in"].shape[1] + GREEDY_EXTRA_STEPS


def greedy_max_len(golden: Golden) -> int:
    """The length limit the golden greedy decoding ran with."""
    return _greedy_max_len(golden.batch)


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.safetensors"


def load_golden(name: str) -> Golden:
    tensors, metadata = safetensors_io.load(golden_path(name))
    sections = {section: {} for section in _SECTIONS}
    for key, array in tensors.items():
        section, _, rest = key.partition("/")
        if section in sections:
            sections[section][rest] = array
    schedule = tensors.get("schedule")
    return Golden(
        **sections, loss=float(tensors["loss"]), metadata=metadata, schedule=None if schedule is None else schedule.astype(bool)
    )


def golden_model(stack, name: str, dtype: str = "float64", **set_weights_options):
    """`stack`'s model `name` at its fixture sizes holding the golden weights (`set_weights_options`: passed on)."""
    model = stack.build(name, dtype, **get(name).fixture_config)
    stack.set_weights(model, load_golden(name).weights, **set_weights_options)
    return model


def golden_bytes(name: str, stack) -> bytes:
    """The golden file of `name` computed with `stack` (a module with the contract) as written, in float64."""
    spec = get(name)
    model = stack.build(name, "float64", as_written=True, **spec.fixture_config)
    shapes = {key: array.shape for key, array in stack.get_weights(model).items()}
    weights, batch, schedule = make_weights(name, shapes), make_batch(spec), make_schedule(spec)
    stack.set_weights(model, weights)
    outputs = stack.run(model, name, batch, teacher_forcing=schedule)
    loss, grads = stack.loss_and_grads(model, name, batch, teacher_forcing=schedule)
    greedy = stack.greedy(model, name, batch, max_len=_greedy_max_len(batch)) if spec.variable_length else {}
    tensors = {"loss": np.array(loss), **({} if schedule is None else {"schedule": schedule})}
    for section, arrays in zip(_SECTIONS, (weights, batch, outputs, grads, greedy), strict=True):
        tensors.update({f"{section}/{key}": array for key, array in arrays.items()})
    metadata = {"model": name, "document": spec.document, "dtype": "float64", "generated_by": stack.__name__}
    return safetensors_io.dumps(tensors, metadata)


# How far a fresh generation's computed floats may sit from a golden file's, relative to each array's largest |value|
# (at least 1): float64 rounding. One thread sums in one order, but the order inside a BLAS kernel is the CPU's: the
# goldens, regenerated on an AVX2-only EPYC, moved by at most 3.1e-16; a change of the code moves them by 1e-6 and more
GOLDEN_ROUNDING = 1e-14
# the sections a stack computes (their floats: greedy token ids are integers, compared byte for byte as the weights,
# batch and schedule that numpy draws)
_COMPUTED = ("outputs", "grads", "greedy", "loss")


def golden_differences(blob: bytes, path: Path) -> list[str]:
    """What the fresh generation `blob` changes in golden file `path`, one line each; [] where it agrees: the same
    metadata, keys, dtypes and shapes, the drawn inputs and greedy token ids byte for byte, the computed floats
    (outputs, loss, gradients, greedy attention) within GOLDEN_ROUNDING of each array's scale."""
    if not path.is_file():
        return [f"{path}: no golden file"]
    (fresh, fresh_metadata), (golden, golden_metadata) = safetensors_io.loads(blob), safetensors_io.load(path)
    differences = [f"{path}: metadata {golden_metadata} -> {fresh_metadata}"] if fresh_metadata != golden_metadata else []
    differences += [f"{path}: {key} {'added' if key in fresh else 'gone'}" for key in sorted(set(fresh) ^ set(golden))]
    for key in sorted(set(fresh) & set(golden)):
        new, old = fresh[key], golden[key]
        if (new.dtype, new.shape) != (old.dtype, old.shape):
            differences.append(f"{path}: {key} {old.dtype}{list(old.shape)} -> {new.dtype}{list(new.shape)}")
        elif key.split("/")[0] in _COMPUTED and new.dtype.kind == "f":
            scale = max(1.0, float(np.abs(old).max(initial=0.0)))
            moved = float(np.abs(new - old).max(initial=0.0))
            if not moved <= GOLDEN_ROUNDING * scale:
                differences.append(f"{path}: {key} moved by {moved:.1e} (beyond float64 rounding: {GOLDEN_ROUNDING * scale:.0e})")
        elif not np.array_equal(new, old):
            differences.append(f"{path}: {key} differs (drawn or integer values: compared byte for byte)")
    return differences


def write_goldens(stack, names: list[str], check: bool = False) -> list[str]:
    """Regenerate the golden files of `names`; return those a fresh generation changes beyond float64 rounding
    (`golden_differences`), written unless `check`. A file that agrees to rounding is kept as it is: byte for byte the
    same where it was made, and not rewritten by a CPU whose kernels round otherwise."""
    changed = []
    for name in names:
        blob, path = golden_bytes(name, stack), golden_path(name)
        if golden_differences(blob, path):
            changed.append(name)
            if not check:
                write_atomic(path, blob)
    return changed


def synthetic_batch(name: str, sizes: Sizes, seed: int = 0, config: dict | None = None) -> dict[str, np.ndarray]:
    """Random inputs of `sizes` for model `name` at `config` (default: the document's vocabularies and
    widths); real tokens, no padding."""
    spec, rng = get(name), np.random.default_rng(seed)
    config = config or spec.config
    if spec.interface == "attention":
        return {
            "query": rng.standard_normal((sizes.batch, sizes.tgt_len, config["decoder_dim"])),
            "values": rng.standard_normal((sizes.batch, sizes.src_len, config["encoder_dim"])),
        }
    src_vocab, tgt_vocab = (config[key] for key in spec.vocab_keys)
    first = max(spec.pad_id, spec.sos_id, spec.eos_id, -1) + 1  # ids below are special tokens
    batch = {
        "src": rng.integers(first, src_vocab, (sizes.batch, sizes.src_len)),
        "tgt_in": rng.integers(first, tgt_vocab, (sizes.batch, sizes.tgt_len)),
        "tgt_out": rng.integers(first, tgt_vocab, (sizes.batch, sizes.tgt_len)),
    }
    if spec.variable_length:
        batch["src_len"] = np.full(sizes.batch, sizes.src_len)
        batch["tgt_in"][:, 0] = spec.sos_id
    return batch
