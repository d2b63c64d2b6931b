"""The plain records other modules share and nothing else: the stacks' names (the one registry of them: their
packages and labels; the stack modules themselves are reached through shared/stacks.py), what a training run does
(TrainSpec), a run folder's settings (RunConfig, its run.json) and a batch's shape (Sizes). No imports of the suite:
every module may depend on this one, the stacks' included."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

STACKS = ("torch", "tf")  # import order: torch before TensorFlow (one process may hold both)
PACKAGES = {"torch": "torch_impl", "tf": "tf_impl"}
FRAMEWORKS = {"torch": "torch", "tf": "tensorflow"}  # the framework each stack's files need installed
LABELS = {"torch": "torch", "tf": "TF"}  # as tables and figures print them
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"  # XLA: split the host CPU into N devices


def check_stack(stack: str) -> str:
    """`stack` if it is one; ValueError naming the known ones otherwise."""
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; known: {', '.join(STACKS)}")
    return stack


def host_devices_environment(devices: int) -> dict[str, str]:
    """Environment variables that give a new process `devices` CPU devices on Keras's JAX backend (XLA's host device
    count, read once, when JAX is imported; any XLA_FLAGS already set are kept). TensorFlow splits its CPU in the
    process (tf_impl.keras_compat.distributed.split_cpu); torch has no such thing (ranks are processes)."""
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if not flag.startswith(HOST_DEVICES_FLAG)]
    return {"XLA_FLAGS": " ".join([*flags, f"{HOST_DEVICES_FLAG}={int(devices)}"])}


RUN_FORMAT = "rosetta-run/1"


@dataclass(frozen=True)
class Sizes:
    """A batch's shape: batch size, source length, decoder steps."""

    batch: int
    src_len: int
    tgt_len: int


OPTIMIZERS = ("torch_adam", "keras_adam")
CLIPPINGS = ("global", "per_variable", "keras_global")


@dataclass(frozen=True)
class TrainSpec:
    """One training run's optimiser, clipping and teacher forcing.

    Args:
        optimizer: "torch_adam" (PyTorch's rule, both stacks) or "keras_adam" (stock Keras Adam, tf only).
        clip_norm: clipping threshold; None for no clipping.
        clipping: "global" (torch's clip_grad_norm_, both stacks), or, tf only and to show their drift,
            "per_variable" (Keras's `clipnorm`) or "keras_global" (Keras's `global_clipnorm`: no 1e-6).
        teacher_force_ratio: probability of feeding the true token at each decoder step (documents
            002/003); the flips are drawn per step from `seed`.
    """

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip_norm: float | None = 1.0
    clipping: str = "global"
    optimizer: str = "torch_adam"
    teacher_force_ratio: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.clipping not in CLIPPINGS:
            raise ValueError(f"clipping must be one of {', '.join(CLIPPINGS)}, got {self.clipping!r}")
        if not self.lr > 0 or not self.eps > 0 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"need lr > 0, eps > 0 and betas in [0, 1): got {self.lr}, {self.eps}, {self.betas}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive or None, got {self.clip_norm!r}")


@dataclass(frozen=True)
class RunConfig:
    """What a run trains, on what, and how; saved as `run.json`.

    Args:
        config: the model's constructor config (vocabulary sizes from the corpus, then overrides).
        max_steps: stop after this many steps even if epochs remain (None: every epoch).
        eval_batches: batches of the validation after each epoch, a seeded random draw (None: the whole split).
        test_batches: batches of the final evaluation (None: the whole split; a check run that only
            compares loss curves sets 1).
        length_multiple: pad every batch's S and T up to a multiple (pads are masked and ignored by the
            loss): fewer distinct shapes, so tf.function traces less often.
        steps_per_epoch: an epoch of this many batches from the repeated, reshuffled data (None: one pass).
        patience: stop once the validation loss has not improved for this many epochs (None: never).
        fingerprints: what the run was built from, by sha256: its corpus (`corpus`: every split's token ids) and both
            vocabularies (`src_vocab`, `tgt_vocab`); a run trains and loads only on a `corpus/` that matches them
            (shared.train.runs.check_corpus). Empty in a run.json of an older version; not compared by `==`.
    """

    model: str
    dataset: str
    config: dict
    spec: TrainSpec
    dtype: str = "float32"
    batch_size: int = 32
    epochs: int = 10
    max_steps: int | None = None
    seed: int = 0
    checkpoint_every: int = 200
    eval_batches: int | None = None
    test_batches: int | None = None
    max_len: int = 50
    length_multiple: int = 8
    corpus_options: dict = field(default_factory=dict)
    steps_per_epoch: int | None = None
    patience: int | None = None
    fingerprints: dict = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        return {"format": RUN_FORMAT, **dataclasses.asdict(self), "spec": dataclasses.asdict(self.spec)}

    @classmethod
    def from_json(cls, record: dict, source: str) -> RunConfig:
        """The run of a `run.json` record; one ValueError naming `source` and every field that is missing, unknown
        or of the wrong type (a hand-edited `"epochs": "three"`)."""
        if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
            raise ValueError(f"{source} is not a {RUN_FORMAT} file")
        fields = {key: value for key, value in record.items() if key != "format"}
        spec = fields.get("spec")
        problems = field_problems(cls, fields) + (field_problems(TrainSpec, spec, "spec.") if isinstance(spec, dict) else [])
        if problems:
            raise ValueError(f"{source}: {'; '.join(problems)}")
        try:
            return cls(**{**fields, "spec": TrainSpec(**{**spec, "betas": tuple(spec["betas"])})})
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None


# a run.json field's annotation -> whether a JSON value fits it (bool is no number)
_JSON_TYPES = {
    "int": lambda value: type(value) is int,
    "float": lambda value: type(value) in (int, float),
    "str": lambda value: isinstance(value, str),
    "dict": lambda value: isinstance(value, dict),
    "None": lambda value: value is None,
    "TrainSpec": lambda value: isinstance(value, dict),
    "tuple[float, float]": lambda value: (
        isinstance(value, list) and len(value) == 2 and all(type(v) in (int, float) for v in value)
    ),
}
NOT_COUNTS = ("seed",)  # an int field that may be zero or negative


def field_problems(cls, fields, prefix: str = "") -> list[str]:
    """Each field of `fields` (a JSON object) that dataclass `cls` does not have, lacks, or types otherwise."""
    if not isinstance(fields, dict):
        return [f"{prefix.rstrip('.') or 'the record'} is not an object"]
    known = {f.name: f for f in dataclasses.fields(cls)}
    required = [
        name for name, f in known.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    problems = [f"{prefix}{name} is missing" for name in required if name not in fields]
    problems += [f"{prefix}{name} is not a field" for name in fields if name not in known]
    for name, value in fields.items():
        annotation = known[name].type if name in known else None
        if annotation is None:
            continue
        if not any(_JSON_TYPES[part](value) for part in annotation.split(" | ")):
            problems.append(f"{prefix}{name} must be {annotation.replace(' | ', ' or ')}, got {value!r}")
        elif type(value) is int and annotation.startswith("int") and name not in NOT_COUNTS and value <= 0:
            problems.append(f"{prefix}{name} must be a positive count, got {value!r}")
    return problems
