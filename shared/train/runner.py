"""`rosetta train` for one stack at a time: the training loop over a run folder (shared/train/runs.py).

Every file is written atomically, so an interrupted run leaves the last complete checkpoint loadable
and no partial file. A NaN or infinite loss stops the run with the step number and keeps the last good
checkpoint. The stack is passed in as its contract module (`torch_impl` or `tf_impl`), whose `train`
submodule holds the `Trainer`; this module imports no framework.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared import catalogue, failures, stacks
from shared.core import optimizer_state
from shared.core import teacher_forcing as schedules
from shared.data import corpora
from shared.io import atomic, safetensors_io
from shared.io.atomic import write_atomic
from shared.specs import RunConfig
from shared.train import attention_samples, runs
from shared.train.evaluation import evaluate, final_beams

STACKS = stacks.STACKS  # import order: torch first


def train(run_dir, stack_name: str, force: bool = False, progress: bool = True, resume: bool = False,
          devices: int = 1) -> dict:  # fmt: skip
    """Train the run's model in one stack; returns the final test metrics (also written to eval.json).

    `resume`: continue from the stack's last checkpoint (weights, Adam's state, the dropout generators, the
    step in its epoch: the curve goes on as if never stopped); a finished stack returns its metrics, one
    without a checkpoint starts from the beginning.
    Under torchrun (torch_impl.distributed) every rank runs this; rank 0 alone writes files and evaluates at the
    end, the others return `{"rank": r}`. `devices` (Keras): data-parallel over that many devices in this process
    (tf_impl.distributed.on_devices: Keras's `fit` under keras.distribution or MirroredStrategy).
    """
    with stacks.import_module(stack_name, "distributed").on_devices(devices):  # the model, its Trainer and every step
        return _train(Path(run_dir), stack_name, force, progress, resume, devices)


def _train(run_dir: Path, stack_name: str, force: bool, progress: bool, resume: bool, devices: int) -> dict:
    run, stack, corpus = runs.load_run(run_dir), stacks.import_stack(stack_name), runs.load_corpus(run_dir)
    train_module, ranks_module = stacks.import_module(stack_name, "train"), stacks.import_module(stack_name, "distributed")
    rank, ranks = ranks_module.ranks()
    out, writes = run_dir / stack_name, rank == 0
    runs.check_corpus(run_dir, run, corpus, note=writes)  # the corpus run.json was built from, before anything is written
    if resume and not (out / runs.CHECKPOINT).is_file() and writes:
        print(f"{out}: no checkpoint to resume from yet; {stack_name} trains from step 0", file=sys.stderr)
    resume = resume and (out / runs.CHECKPOINT).is_file()
    if resume:  # a checkpoint of this run, whose every field reads, before anything is written
        path = out / runs.CHECKPOINT
        metadata = safetensors_io.read_metadata(path) or safetensors_io.load(path)[1]
        runs.check_checkpoint(path, metadata, run, corpus, run_dir)
        _resume_point(path, metadata)
    if resume and (out / runs.EVAL_FILE).is_file():
        return runs.read_json(out / runs.EVAL_FILE)
    if (out / runs.CHECKPOINT).exists() and not (force or resume):
        raise runs.RunError(
            f"{out} already holds a checkpoint; pass --resume to continue it, --force to train again from the start"
        )
    if writes:
        out.mkdir(parents=True, exist_ok=True)
        atomic.sweep_stale(out)
    train_module.set_seed(run.seed)  # a run is repeatable: initial weights (first stack) and dropout masks
    model = stack.build(run.model, run.dtype, **run.config)
    _start_from_initial_weights(run_dir, stack, model, run, writes)
    ranks_module.wait_for_ranks()  # rank 0 has written initial.safetensors where it was missing
    if not writes:
        _start_from_initial_weights(run_dir, stack, model, run, writes)
        train_module.set_seed(int(np.random.default_rng([run.seed, rank]).integers(2**31)))  # each rank its own dropout
    model, device = ranks_module.place(model)
    trainer = train_module.Trainer(model, run.model, run.spec)
    start = _resume(stack, train_module, trainer, out, rank, writes) if resume else _Start()
    if not resume and writes:
        for stale in (runs.LOSS_LOG, runs.EVAL_LOG, runs.EVAL_FILE, runs.ATTENTION_FILE, runs.BOTH_STACKS_FILE):
            (out / stale).unlink(missing_ok=True)
    ranks_module.wait_for_ranks()  # the logs as rank 0 left them: every rank reads the validation records so far
    steps = _loop(run, stack, model, trainer, corpus, out, progress and writes, start, writes)
    if not writes:
        return {"rank": rank}
    split = runs.final_split(corpus)
    result = evaluate(stack, model, run, corpus, split, limit=run.test_batches, beams=final_beams(run, corpus, split))
    # every step in the loss log: a resumed run's earlier segments count, a step redone after a kill once
    seconds = sum(record["seconds"] for record in runs.read_json_lines(out / runs.LOSS_LOG, LOSS_FIELDS))
    result.update(stack=stack_name, backend=train_module.backend(), device=device, steps=steps, train_seconds=seconds)
    if ranks > 1:
        result["ranks"] = ranks
    if devices > 1:
        result["devices"] = devices
    if attention_samples.has_decoder_attention(run.model):  # before eval.json, which marks the stack finished
        attention_samples.write_record(run_dir, stack_name, out / runs.ATTENTION_FILE, with_stacks=[stack_name])
    write_atomic(out / runs.EVAL_FILE, (json.dumps(result, indent=2) + "\n").encode())
    return result


@dataclass(frozen=True)
class _Start:
    """Where a run's loop begins: the step already taken and its epoch (a fresh run: 0, 0)."""

    step: int = 0
    epoch: int = 0


def _resume(stack, train_module, trainer, out: Path, rank: int = 0, writes: bool = True) -> _Start:
    """Load the stack's last checkpoint into `trainer` (weights, Adam's state, the dropout generators: this rank's,
    where the checkpoint has one for it) and cut the logs back to it (a run killed while checkpointing may have
    logged further); where to start."""
    tensors, metadata = safetensors_io.load(out / runs.CHECKPOINT)
    start, generators = _resume_point(out / runs.CHECKPOINT, metadata)
    stack.set_weights(trainer.model, optimizer_state.weights_without_optimizer(tensors))
    trainer.load_optimizer_state(optimizer_state.optimizer_from_tensors(tensors, metadata, str(out / runs.CHECKPOINT)))
    if rank < len(generators):  # a rank the earlier run did not have keeps its fresh seed
        train_module.load_rng_state(trainer.model, generators[rank])
    if writes:
        _keep_json_lines(out / runs.LOSS_LOG, lambda record: record["step"] <= start.step, LOSS_FIELDS)
        _keep_json_lines(out / runs.EVAL_LOG, lambda record: record["epoch"] < start.epoch, EVAL_FIELDS)
    return start


def _resume_point(path: Path, metadata: dict) -> tuple[_Start, list]:
    """Where a checkpoint resumes (its step and epoch) and its dropout generators (one per rank), every metadata field
    a resume reads checked first (Adam's too): one ValueError naming the file and the field that does not read."""
    if "optimizer_step" not in metadata or "rng" not in metadata:
        raise ValueError(f"{path} holds no optimizer or generator state to resume from; train with --force")
    optimizer_state.optimizer_from_tensors({}, metadata, str(path))  # its fields alone: no moments needed to check them
    step, epoch = (runs.checkpoint_field(path, metadata, key, "count") for key in ("step", "epoch"))
    generators = runs.checkpoint_field(path, metadata, "rng", "json")
    return _Start(step, epoch), generators if isinstance(generators, list) else [generators]  # one per rank (or one)


LOSS_FIELDS, EVAL_FIELDS = ("step", "seconds"), ("epoch", "loss")  # the numbers the runner reads of each log's records


def _keep_json_lines(path: Path, keep, numbers: tuple[str, ...]) -> None:
    if path.is_file():
        records = runs.read_json_lines(path, numbers)
        write_atomic(path, "".join(json.dumps(record) + "\n" for record in records if keep(record)).encode())


def _start_from_initial_weights(run_dir: Path, stack, model, run: RunConfig, writes: bool = True) -> None:
    """Both stacks start from `initial.safetensors`; the first stack to train writes it from its own init (its rank
    0; the other ranks load it after)."""
    path = run_dir / runs.INITIAL_FILE
    if path.is_file():
        weights, _ = safetensors_io.load(path)
        stack.set_weights(model, weights)
    elif writes:
        safetensors_io.save(path, stack.get_weights(model), {"model": run.model, "written_by": stack.__name__})


class _Progress:
    """tqdm when installed (the `train` extra), else a line every few hundred steps."""

    def __init__(self, total: int | None, enabled: bool, label: str):
        self.bar, self.enabled, self.label = None, enabled, label
        if enabled:
            try:
                from tqdm import tqdm

                interval = 0.1 if sys.stderr.isatty() else 30  # a log file gets a line every 30 s
                self.bar = tqdm(total=total, desc=label, unit="step", dynamic_ncols=True, mininterval=interval)
            except ImportError:
                pass

    def advance(self, steps: int) -> None:
        """Count steps taken before this process (a resumed run)."""
        if self.bar is not None and steps:
            self.bar.update(steps)

    def update(self, step: int, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        elif self.enabled and step % 200 == 0:
            print(f"{self.label}: step {step} loss {loss:.4f}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _loop(run: RunConfig, stack, model, trainer, corpus: corpora.Corpus, out: Path, progress: bool, start: _Start,
          writes: bool = True) -> int:  # fmt: skip
    """Epochs of shuffled, bucketed batches, each handed to the stack's `Trainer.train_epoch` (Keras's: `fit`);
    checkpoints every `checkpoint_every` steps and after each epoch. Begins at `start` (the batches of its epoch
    before its step skipped). Returns the number of steps taken."""
    steps_per_epoch = run.steps_per_epoch or _batches_per_pass(run, corpus)
    total = steps_per_epoch * run.epochs if run.max_steps is None else min(run.max_steps, steps_per_epoch * run.epochs)
    bar = _Progress(total, progress, f"{run.model} [{stack.__name__}]")
    steps = _Steps(run, stack, trainer, corpus, out, total, bar, writes)
    evals = [record for record in runs.read_json_lines(out / runs.EVAL_LOG, EVAL_FIELDS) if record["epoch"] < start.epoch]
    steps.step = steps.saved = start.step
    steps.bar.advance(start.step)
    try:
        for epoch in range(start.epoch, run.epochs):
            steps.start_epoch(epoch)
            batches = _epoch_batches(run, corpus, epoch)
            done_in_epoch = steps.step - epoch * steps_per_epoch  # > 0 only in a resumed run's first epoch
            if done_in_epoch < steps_per_epoch and steps.step < total:
                remaining = itertools.islice(batches, done_in_epoch, done_in_epoch + total - steps.step)
                trainer.train_epoch(steps.inputs(remaining), steps.after_step)
                steps.saved = _checkpoint(stack, trainer, run, corpus, out, steps.step, epoch, steps.log, writes)
            # every rank evaluates (the same weights): each decides the early stop alike, rank 0 writes it down
            metrics_of_epoch = evaluate(stack, model, run, corpus, "val", limit=run.eval_batches, sampled=True)
            evals.append({"epoch": epoch, "step": steps.step, **metrics_of_epoch})
            if writes:
                _append_json_lines(out / runs.EVAL_LOG, evals[-1:])
            if steps.step == total or stops_early(evals, run.patience):
                break
    finally:
        steps.bar.close()
    return steps.step


def _batches_per_pass(run: RunConfig, corpus: corpora.Corpus) -> int:
    return math.ceil(len(corpus.splits["train"][0]) / run.batch_size)  # batches keep the last, short one


def _epoch_batches(run: RunConfig, corpus: corpora.Corpus, epoch: int) -> list[dict]:
    """The batches of `epoch`: one shuffled, bucketed pass over the data (pass `epoch`); with `steps_per_epoch`, the
    epoch's slice of the passes one after the other (Keras's `fit(train_ds.repeat(), steps_per_epoch=...)`)."""
    if run.steps_per_epoch is None:
        return corpus.batches("train", run.batch_size, rng=np.random.default_rng([run.seed, epoch]))
    per_pass, start = _batches_per_pass(run, corpus), epoch * run.steps_per_epoch
    batches, data_pass = [], start // per_pass
    while len(batches) < run.steps_per_epoch:
        whole = corpus.batches("train", run.batch_size, rng=np.random.default_rng([run.seed, data_pass]))
        batches += whole[start - data_pass * per_pass if not batches else 0 :]
        data_pass += 1
    return batches[: run.steps_per_epoch]


def stops_early(records: list[dict], patience: int | None) -> bool:
    """Keras's `EarlyStopping(monitor="val_loss", patience=patience)` on the validation records so far: True once
    `patience` epochs have passed without a loss below the best before them."""
    if patience is None or not records:
        return False
    losses = [record["loss"] for record in records]
    best = losses.index(min(losses))  # the first epoch to reach the minimum: a tie is no improvement
    return len(losses) - 1 - best >= patience


class _Steps:
    """The run's steps as a Trainer takes them: each batch padded, with its teacher-forcing schedule; after each
    update, the log record, the divergence check, the progress bar and every `checkpoint_every` a checkpoint."""

    def __init__(self, run: RunConfig, stack, trainer, corpus: corpora.Corpus, out: Path, total: int, bar: _Progress,
                 writes: bool = True):  # fmt: skip
        self.run, self.stack, self.trainer, self.corpus, self.out = run, stack, trainer, corpus, out
        self.total, self.bar, self.writes = total, bar, writes
        self.step, self.saved, self.epoch, self.log, self.clock = 0, 0, 0, [], time.perf_counter()

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.clock = epoch, time.perf_counter()

    def inputs(self, batches) -> Iterator[tuple[dict, np.ndarray | None]]:
        """(padded batch, schedule) pairs; the schedule drawn from (seed, the batch's own step)."""
        for i, batch in enumerate(batches, start=self.step + 1):
            yield pad_to_multiple(batch, self.run.length_multiple, self.corpus.pad_id), _schedule(self.run, batch, i)

    def after_step(self, loss: float) -> bool:
        """Record the update just taken (a non-finite loss or norm stops the run: runs.RunError); False after the last."""
        self.step += 1
        norm, now = self.trainer.grad_norms[-1], time.perf_counter()
        if not (math.isfinite(loss) and math.isfinite(norm)):
            raise runs.RunError(_diverged_message(loss, norm, self.step, self.saved, self.out))
        self.log.append({"step": self.step, "epoch": self.epoch, "loss": loss, "grad_norm": norm, "seconds": now - self.clock})
        self.bar.update(self.step, loss)
        if self.step % self.run.checkpoint_every == 0:
            self.saved = _checkpoint(self.stack, self.trainer, self.run, self.corpus, self.out, self.step, self.epoch, self.log,
                                     self.writes)  # fmt: skip
        self.clock = time.perf_counter()
        return self.step < self.total


def _diverged_message(loss: float, norm: float, step: int, saved: int, out: Path) -> str:
    kept = f"the last good checkpoint (step {saved}) is {out / runs.CHECKPOINT}" if saved else "no checkpoint was written yet"
    return f"training diverged: loss {loss}, gradient norm {norm} at step {step}; stopped, {kept}"


def _schedule(run: RunConfig, batch: dict, step: int) -> np.ndarray | None:
    """The teacher-forcing coin flips of one step, drawn from (seed, step) so both stacks draw the same."""
    if not catalogue.get(run.model).variable_length or run.spec.teacher_force_ratio == 1.0:
        return None
    steps = _padded_length(batch["tgt_in"].shape[1], run.length_multiple) - 1
    return schedules.draw(run.spec.teacher_force_ratio, steps, np.random.default_rng([run.spec.seed, 2, step]))


def _padded_length(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def pad_to_multiple(batch: dict, multiple: int, pad_id: int) -> dict:
    """Pad `src`, `tgt_in`, `tgt_out` with `pad_id` up to a multiple of `multiple` steps (pads are masked
    by `src_len` and ignored by the loss), so a stack that compiles per shape sees few shapes."""
    if multiple <= 1:
        return batch
    padded = dict(batch)
    for key in ("src", "tgt_in", "tgt_out"):
        extra = _padded_length(batch[key].shape[1], multiple) - batch[key].shape[1]
        padded[key] = np.pad(batch[key], ((0, 0), (0, extra)), constant_values=pad_id)
    if "src_len" not in batch:  # the reverse task has fixed lengths and no mask: never pad its source
        padded["src"] = batch["src"]
    return padded


def _append_json_lines(path: Path, records: list[dict]) -> None:
    """Rewrite `path` with `records` added as JSON lines, atomically (a reader never sees half a line)."""
    before = path.read_bytes() if path.is_file() else b""
    write_atomic(path, before + "".join(json.dumps(record) + "\n" for record in records).encode())


def _checkpoint(stack, trainer, run: RunConfig, corpus: corpora.Corpus, out: Path, step: int, epoch: int, log: list,
                writes: bool = True) -> int:  # fmt: skip
    """Write the loss log, then the stack's own file, then the canonical checkpoint (each atomically); both
    checkpoints hold Adam's state (`rosetta port --with-optimizer` reads it) and every rank's dropout generators
    (gathered from all ranks; rank 0 alone writes)."""
    train_module = stacks.import_module(stack.stack_name, "train")
    generators = stacks.import_module(stack.stack_name, "distributed").gather_ranks(train_module.rng_state(trainer.model))
    if not writes:
        log.clear()
        return step
    if log:
        _append_json_lines(out / runs.LOSS_LOG, log)
        log.clear()
    state = trainer.optimizer_state()  # once for both files
    weights = stack.get_weights(trainer.model)
    needed = 2 * 3 * sum(array.nbytes for array in weights.values())  # two files, each the weights and two moments
    atomic.check_free_space(out, needed, "the checkpoint")
    trainer.save_checkpoint(out / f"checkpoint{stacks.import_module(stack.stack_name, 'files').NATIVE_SUFFIX}", state)
    moments, optimizer_metadata = optimizer_state.optimizer_tensors(state)
    metadata = {
        "model": run.model,
        "stack": stack.__name__,
        "step": str(step),
        "epoch": str(epoch),
        "src_vocab": corpus.src_vocab.fingerprint,
        "tgt_vocab": corpus.tgt_vocab.fingerprint,
        "config": json.dumps(run.config, sort_keys=True),
        # the dropout generators (one process: its own; ranks: a list by rank): a resumed run goes on alike
        "rng": json.dumps(generators[0] if len(generators) == 1 else generators),
    }
    safetensors_io.save(out / runs.CHECKPOINT, {**weights, **moments}, {**metadata, **optimizer_metadata})
    return step


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


def check_parallel(flag: str, count: int, batch_size: int, gpus: int | None, oversubscribe: bool = False,
                   here: int | None = None, examples: int | None = None) -> None:  # fmt: skip
    """Refuse `count` ranks or devices (`flag`; `here` of them on this machine) that the batch or the machine cannot
    serve, before any starts: each takes at least one example of a batch (with `examples`, the training split's size,
    of its short last batch too: torch's ranks; Keras pads it), and a GPU of `gpus` (one each: NCCL, Keras's
    replicas), or on a CPU (`gpus` 0) a core, which `oversubscribe` lets them share. `gpus` None: not asked here."""
    here, kind = count if here is None else here, "devices" if flag == "--devices" else "ranks"
    if count > batch_size:
        raise ValueError(f"{flag} {here}: a batch holds {batch_size} example(s), fewer than the {count} {kind}, and each "
                         f"needs one; use at most {batch_size}, or --batch-size {count} or more")  # fmt: skip
    last = examples % batch_size if examples else 0
    if 0 < last < count:
        raise ValueError(f"{flag} {here}: the last batch of each pass over the {examples} training examples holds {last}, "
                         f"fewer than the {count} {kind}, and each needs one; use at most {last}, or a --batch-size "
                         f"that leaves a last batch of none or at least {count}")  # fmt: skip
    if gpus and here > gpus:
        raise ValueError(f"{flag} {here}: {gpus} GPU(s) visible, one for each; use at most {gpus}")
    cores = usable_cores()
    if gpus == 0 and here > cores and not oversubscribe:
        raise ValueError(f"{flag} {here}: this process may use {cores} CPU core(s), one for each; use at most {cores}, or "
                         "pass --oversubscribe to share them knowingly (each step then waits for the slowest)")  # fmt: skip


def _check_own_parallel(args) -> None:
    """The runner's ranks (torchrun's environment) or devices, checked as `rosetta train` checks them, before the stack
    makes any device: a runner started by hand or by one's own torchrun line."""
    ranked = args.stack == "torch"
    count = int(os.environ.get("WORLD_SIZE", 1)) if ranked else args.devices
    if count == 1:
        return
    here = int(os.environ.get("LOCAL_WORLD_SIZE", count)) if ranked else count
    gpus = stacks.import_module(args.stack, "distributed").accelerators()
    batch_size = runs.load_run(args.run_dir).batch_size
    examples = len(runs.load_corpus(Path(args.run_dir)).splits["train"][0]) if ranked else None  # Keras pads a short batch
    try:
        check_parallel("--nproc-per-node" if ranked else "--devices", count, batch_size, gpus, args.oversubscribe, here, examples)
    except ValueError:
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            raise
        raise SystemExit(failures.EXIT_FAILED) from None  # every rank here refuses alike: its first rank says it once


def main(argv: list[str] | None = None) -> int:
    """`python -m shared.train.runner RUN_DIR STACK [--force | --resume] [--quiet] [--devices N]`: one stack of
    `rosetta train`, in its own process; under torchrun, one rank of it (`torchrun --nproc-per-node N -m
    shared.train.runner RUN_DIR torch`); `--devices N`: Keras's data-parallel fit over N devices."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shared.train.runner", description=main.__doc__)
    parser.add_argument("run_dir")
    parser.add_argument("stack", choices=list(STACKS))
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--devices", type=int, default=1, help="tf: data-parallel over N devices (Keras's fit)")
    parser.add_argument("--oversubscribe", action="store_true", help="more ranks or CPU devices than CPU cores, knowingly")
    args = parser.parse_args(argv)
    if args.force and args.resume:
        parser.error("--force starts again, --resume continues: pass one")
    if args.devices < 1:
        parser.error(f"--devices counts devices: at least 1, got {args.devices}")
    if args.devices > 1 and args.stack == "tf" and "jax" not in sys.modules:
        os.environ.update(stacks.host_devices_environment(args.devices))  # used if Keras runs on JAX, on a CPU

    def command() -> int:
        _check_own_parallel(args)
        # entered freely by the child of a `rosetta train` holding it; under torchrun rank 0 holds it for all ranks
        held = runs.run_folder(args.run_dir) if int(os.environ.get("RANK", 0)) == 0 else contextlib.nullcontext()
        with held:
            result = train(args.run_dir, args.stack, args.force, not args.quiet, args.resume, args.devices)
        stacks.import_module(args.stack, "distributed").leave_ranks()
        if "rank" not in result:
            print(json.dumps(result))
        return 0

    return failures.guarded(command, f"rosetta train ({args.stack})")


if __name__ == "__main__":
    raise SystemExit(main())
