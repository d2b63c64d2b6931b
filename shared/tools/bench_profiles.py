"""What `rosetta bench` times: the modes of each stack, the profiles (which models, thread counts, sizes, repeats) and
the cases a profile makes for one stack process, grouped to be timed side by side.

A case is one (model, task, impl, mode, sizes): task `train_step` (forward, backward, global-norm clip, Adam: the
stack's `Trainer`) or `greedy` (greedy decoding of `tgt_len` steps, the compiled unit being one decoder step); impl
`ours` or `as_written` (the document's own per-step computation, built with `as_written=True`). Numpy and the
catalogue only: each stack's `bench.py` imports its modes and BENCH_SPEC from here.
"""

from __future__ import annotations

import dataclasses
import hashlib

from shared import catalogue, documents
from shared.specs import Sizes, TrainSpec
from shared.tools.machine import IDLE_WINDOW_S, SAMPLE_S

# Keras's modes on each Keras 3 backend: JAX's compiled step is XLA itself (jit); Keras's torch backend runs eagerly
KERAS_MODES = {"tensorflow": ("eager", "function", "xla"), "jax": ("eager", "xla"), "torch": ("eager",)}
# Keras's greedy decoding's modes on each backend: TensorFlow's compiles its step as a tf.function where asked; on JAX
# the contract jits the encoder and the step itself (Seq2SeqBase.inference_steps), so it runs as XLA whatever the mode
GREEDY_MODES = {**KERAS_MODES, "jax": ("xla",)}
ALL_MODES = ("eager", "compile", "cudagraph", "function", "xla")  # what --modes takes


def keras_mode(backend: str, mode: str) -> str:
    """A Keras row's mode, naming its backend unless TensorFlow: "xla", "jax-xla", "torch-eager"."""
    return mode if backend == "tensorflow" else f"{backend}-{mode}"


STACK_MODES = {
    "torch": ("eager", "compile", "cudagraph"),
    "tf": tuple(keras_mode(backend, mode) for backend, modes in KERAS_MODES.items() for mode in modes),
}
COMPILED_MODES = {"compile", "xla"}  # slow to build: the default profile runs them at one thread count
# torch's train step replayed as one CUDA graph (torch_impl.cuda_graphs): on a GPU, for the models of fixed-shape batches
GPU_MODES = {"cudagraph"}
BENCH_SPEC = TrainSpec(lr=1e-3, clip_norm=1.0)  # every train step: Adam and global-norm clipping, teacher forcing on
REVERSE_MODELS = tuple(name for name in catalogue.built() if catalogue.get(name).document == "001")


def document_sizes(name: str) -> Sizes:
    """The batch shape model `name` trains at in its document (shared.documents)."""
    return documents.get(catalogue.get(name).document).sizes


@dataclasses.dataclass(frozen=True)
class Profile:
    """What a bench run measures.

    Attributes:
        models: the catalogue models at their document sizes.
        threads: CPU thread counts, one process each.
        compiled_threads: the thread counts at which compiled modes (torch.compile, XLA) run.
        sweep_models: models also timed over `seq_lens` (at the document batch) and `batches`.
        as_written_modes: the modes in which the as-written baseline runs (per stack, the mode names).
        greedy: also time greedy decoding of the models that have it (those of variable-length data).
    """

    name: str
    models: tuple[str, ...]
    threads: tuple[int, ...]
    compiled_threads: tuple[int, ...]
    sweep_models: tuple[str, ...]
    seq_lens: tuple[int, ...] = (5, 10, 20, 40)
    batches: tuple[int, ...] = (8, 32, 128)
    as_written_modes: tuple[str, ...] = ALL_MODES  # the listing as the baseline of every mode
    modes: tuple[str, ...] | None = None  # only these modes (None: every mode of the stack)
    floor: bool = True  # also each model's train step at floor_sizes in every mode: its fixed cost
    greedy: bool = True
    tag: str = ""  # appended to the result file's name, for a run restricted to part of a profile
    warmup: int = 3
    repeats: int = 10
    big_repeats: int = 5  # for cases whose warm call takes over a second
    sample_s: float = SAMPLE_S  # each timed sample holds as many calls as last this long (machine.time_side_by_side)
    load_window_s: float = IDLE_WINDOW_S  # how long the load probes before and after each case watch


PROFILES = {
    "default": Profile(
        name="default",
        models=("additive_attention", *REVERSE_MODELS),
        threads=(1, 2),
        compiled_threads=(2,),
        sweep_models=("reverse_bahdanau", "reverse_luong_general"),
    ),
    "full": Profile(
        name="full",
        models=tuple(catalogue.built()),
        threads=(1, 2),
        compiled_threads=(2,),
        sweep_models=("reverse_bahdanau", "reverse_luong_general", "luong_general"),
    ),
    # what the report's headline reads, every model in one sitting: hours on 2 cores (docs/measurements.md)
    "headline": Profile(
        name="headline",
        models=tuple(catalogue.built()),
        threads=(2,),
        compiled_threads=(2,),
        sweep_models=(),
        greedy=False,
    ),
    # the first look (tox -e report-quick): one model of document 001 beside its listing in every mode at 2 threads, its
    # train step at the document's sizes alone, repeated less
    "quick": Profile(
        name="quick",
        models=("reverse_bahdanau",),
        threads=(2,),
        compiled_threads=(2,),
        sweep_models=(),
        floor=False,
        greedy=False,
        warmup=2,
        repeats=5,
        big_repeats=3,
    ),
    "smoke": Profile(  # tests: seconds, not minutes
        name="smoke",
        models=("reverse_bahdanau", "luong_dot"),
        threads=(1,),
        compiled_threads=(),
        sweep_models=(),  # a sweep is the same call at other sizes; each Keras case traces a tf.function (seconds)
        warmup=1,
        repeats=2,
        big_repeats=2,
        sample_s=0.0,  # one call a sample
        load_window_s=0.01,
        floor=False,
    ),
}


def floor_sizes(document: Sizes) -> Sizes:
    """The floor: the document's train step at batch 1. Its ops are the document step's, one for one (every decoder
    step's dispatch, the optimizer's per-variable work, Keras's train_on_batch plumbing), its arithmetic 1/B of it: its
    time is the step's fixed cost and little more. (Schema-1 result files may hold floors of ours alone at 2 source and
    2 target steps, which leave out most of a 10-step loop's dispatch: the report prefers floors at the document's
    lengths, by their sizes.)"""
    return dataclasses.replace(document, batch=1)


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    task: str  # train_step | greedy
    impl: str  # ours | as_written
    mode: str
    sweep: str  # document | seq_len | batch | floor
    sizes: Sizes


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown bench profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]


def small_sizes(sizes: Sizes) -> Sizes:
    """Sizes for the smoke profile: the document's shape shrunk so a case takes milliseconds."""
    return Sizes(min(sizes.batch, 4), min(sizes.src_len, 6), min(sizes.tgt_len, 5))


def _tasks(name: str) -> tuple[str, ...]:
    return ("train_step", "greedy") if catalogue.get(name).variable_length else ("train_step",)


def _impls(name: str, stack: str, backend: str) -> tuple[str, ...]:
    """What is timed of model `name`: ours, and the listing as written where ours differs from it (not where ours is the
    listing on this Keras backend: `ModelSpec.listing_on`)."""
    spec = catalogue.get(name)
    is_listing = not spec.hoists or (stack == "tf" and backend in spec.listing_on)
    return ("ours",) if is_listing else ("ours", "as_written")


def _sweep_sizes(profile: Profile, name: str) -> list[tuple[str, Sizes]]:
    base = document_sizes(name)
    by_length = [("seq_len", Sizes(base.batch, n, n)) for n in profile.seq_lens if n != base.src_len]
    by_batch = [("batch", dataclasses.replace(base, batch=b)) for b in profile.batches if b != base.batch]
    return by_length + by_batch


def _runs(name: str, task: str, stack: str, backend: str, mode: str) -> bool:
    """Whether `mode` runs `task` of model `name`: Keras's greedy decoding in its backend's GREEDY_MODES; the CUDA
    graph mode trains the models of fixed-shape batches (a graph replays one shape, and packing reads lengths on
    the host)."""
    if task == "greedy" and stack == "tf":
        return mode in GREEDY_MODES[backend]
    if mode in GPU_MODES:
        return task == "train_step" and not catalogue.get(name).variable_length
    return True


def process_modes(stack: str, backend: str) -> tuple[str, ...]:
    """The modes one bench process runs: torch's, or Keras's on its backend (plain names: eager, xla...)."""
    return KERAS_MODES[backend] if stack == "tf" else STACK_MODES[stack]


def cases(profile: Profile, stack: str, threads: int, device: str = "cpu", backend: str = "tensorflow") -> list[Case]:
    """Every case of `profile` for one stack process (compiled modes only at `compiled_threads` on CPU); `backend`:
    Keras's, for the tf stack."""
    compiled_here = device != "cpu" or threads in profile.compiled_threads
    modes = [m for m in process_modes(stack, backend) if compiled_here or m not in COMPILED_MODES]
    modes = [m for m in modes if (profile.modes is None or m in profile.modes) and (device != "cpu" or m not in GPU_MODES)]
    found = []
    for name in profile.models:
        document = document_sizes(name) if profile.name != "smoke" else small_sizes(document_sizes(name))
        for task in _tasks(name) if profile.greedy else ("train_step",):
            for mode in modes:
                if not _runs(name, task, stack, backend, mode):
                    continue
                timed = _impls(name, stack, backend) if mode in profile.as_written_modes and task == "train_step" else ("ours",)
                found += [Case(name, task, impl, mode, "document", document) for impl in timed]
                if profile.floor and task == "train_step":  # each impl's, side by side as at the document's sizes
                    found += [Case(name, task, impl, mode, "floor", floor_sizes(document)) for impl in timed]
        if name in profile.sweep_models:
            for mode in [m for m in modes if m in ("eager", "function")][-1:]:  # the best uncompiled mode
                for sweep, sizes in _sweep_sizes(profile, name):
                    found += [Case(name, "train_step", impl, mode, sweep, sizes) for impl in _impls(name, stack, backend)]
    return found


def side_by_side(found: list[Case]) -> list[list[Case]]:
    """`found` in groups timed together: each `ours` case with its `as_written` twin (same model, task, mode and
    sizes), so their ratio is measured side by side (machine.time_side_by_side); every other case alone."""
    twins = {_twin_key(case): case for case in found if case.impl == "as_written"}
    ours = {_twin_key(case) for case in found if case.impl == "ours"}
    groups = []
    for case in found:
        if case.impl == "ours":
            groups.append([case, twins[_twin_key(case)]] if _twin_key(case) in twins else [case])
        elif _twin_key(case) not in ours:
            groups.append([case])
    return groups


def _twin_key(case: Case) -> tuple:
    return case.model, case.task, case.mode, case.sweep, case.sizes


def restrict(profile: Profile, models=None, modes=None) -> Profile:
    """`profile` over `models` and `modes` only (unknown names raise ValueError); the result file's name says so."""
    if models:
        unknown = sorted(set(models) - set(catalogue.built()))
        if unknown:
            raise ValueError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(catalogue.built())}")
        sweep = tuple(m for m in profile.sweep_models if m in models)
        profile = dataclasses.replace(profile, models=tuple(models), sweep_models=sweep, tag=profile.tag + _models_tag(models))
    if modes:
        unknown = sorted(set(modes) - set(ALL_MODES))
        if unknown:
            raise ValueError(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(ALL_MODES)}")
        profile = dataclasses.replace(profile, modes=tuple(modes), tag=profile.tag + "-" + "-".join(modes))
    return profile


MODELS_TAG_CHARS = 120  # a result file's name lists its models up to this long (a file name holds 255 bytes)


def _models_tag(models) -> str:
    """The part of a result file's name that says which models it holds: their names, or where they would make the
    name too long for a file system (every model named: 200 characters), their count and a digest of their names."""
    joined = "-".join(models)
    if len(joined) <= MODELS_TAG_CHARS:
        return "-" + joined
    return f"-{len(models)}-models-{hashlib.sha1(joined.encode()).hexdigest()[:8]}"
