"""`rosetta train` between its flags and the runner: the flags checked against each other, the ranks and devices against
the batch and the machine, the run folder made or reopened (tied to its corpus), then each stack started: in this
process, in one of its own, or as torchrun's ranks. shared/cli.py parses the flags; the rules are here."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from shared import data, documents, stacks
from shared.data import parallel_options
from shared.specs import RunConfig, TrainSpec
from shared.train import runner, runs

KeyValues = Callable[[list[str] | None, str], dict]  # the command line's reader of KEY=VALUE flags (shared.cli)


def rosetta_train(args, key_values: KeyValues) -> int:
    """`rosetta train` with its parsed flags `args`: checked, the run folder made (or, with --resume, reopened) under
    its lock, then its stacks trained; the exit code. `key_values` reads `--set` and `--data-option`, called after the
    ranks are checked, where their errors have always come."""
    if args.skip_without_data and not args.corpus and _no_data(args):
        print(f"rosetta: {args.model} skipped: no data folder (--data-dir or {data.ENV_VAR})")
        return 0
    defaults = runs.document_defaults(args.model)
    spec, settings, run_dir = _spec(args, defaults["spec"]), _settings(args), Path(_run_dir(args))
    _check_flags(args, run_dir)
    batch_size = runs.load_run(run_dir).batch_size if args.resume else {**defaults, **settings}["batch_size"]
    _check_parallel(args, batch_size)  # the batch the run trains with: a resumed run's own
    sizes, options = key_values(args.set, "--set"), key_values(args.data_option, "--data-option")
    dataset, options = _corpus_request(args, options)  # --corpus: your own parallel text
    with runs.run_folder(run_dir):  # one rosetta train per folder: a second one is refused, naming the first
        if args.resume:  # the run as it was started: its own settings
            run = runs.load_run(run_dir)
            if run.model != args.model:
                raise ValueError(f"{run_dir} is a run of {run.model}, not {args.model}")
            _check_resumed_corpus(run_dir, run, dataset, options)
        else:
            run = runs.create_run(run_dir, args.model, args.data_dir, sizes, options, dataset, not args.quiet, spec=spec,
                                  dtype=args.dtype, **settings)  # fmt: skip
        return _train_stacks(args, run_dir, run)


def _run_dir(args) -> str:
    return args.run_dir or f"runs/{args.model}"


def _spec(args, spec: TrainSpec) -> TrainSpec:
    """The document's TrainSpec with the optimizer flags given (`--clip 0`: no clipping)."""
    changes = {"lr": args.lr, "eps": args.eps, "teacher_force_ratio": args.teacher_force, "optimizer": args.optimizer}
    spec = replace(spec, **{key: value for key, value in changes.items() if value is not None})
    if args.clip is not None:
        spec = replace(spec, clip_norm=args.clip or None)
    if args.clipping:
        spec = replace(spec, clipping=args.clipping)
    return spec


def _settings(args) -> dict:
    """The run settings given as flags (the others: the model's recipe)."""
    settings = {"batch_size": args.batch_size, "epochs": args.epochs, "max_steps": args.max_steps, "seed": args.seed,
                "eval_batches": args.eval_batches, "test_batches": args.test_batches,
                "checkpoint_every": args.checkpoint_every, "steps_per_epoch": args.steps_per_epoch,
                "patience": args.patience}  # fmt: skip
    return {key: value for key, value in settings.items() if value is not None}


def _check_flags(args, run_dir: Path) -> None:
    """Flags that contradict each other or the stack, and a --resume with nothing to resume."""
    if args.force and args.resume:
        raise ValueError("--force starts the run again, --resume continues it: pass one")
    if (args.nproc_per_node or 1) > 1 and args.stack == "tf":
        raise ValueError("--nproc-per-node starts torchrun's ranks: pass --stack torch (Keras: --devices)")
    if (args.devices or 1) > 1 and args.stack == "torch":
        raise ValueError("--devices is Keras's data-parallel fit: pass --stack tf (torch: --nproc-per-node)")
    if args.resume and not (run_dir / runs.RUN_FILE).is_file():
        raise ValueError(f"{run_dir}: nothing to resume (no {runs.RUN_FILE} there); start the run without --resume")


def _check_parallel(args, batch_size: int) -> None:
    """Ranks or devices that the batch or this machine cannot serve, refused before anything is made or started
    (shared.train.runner.check_parallel). Keras's GPUs are counted in its own process, which starts its backend (JAX
    would hold most of a GPU's memory here): that process refuses more devices than GPUs before making any."""
    if (args.nproc_per_node or 1) > 1:
        gpus = stacks.import_module("torch", "distributed").accelerators()
        runner.check_parallel("--nproc-per-node", args.nproc_per_node, batch_size, gpus, args.oversubscribe)
    if (args.devices or 1) > 1:
        runner.check_parallel("--devices", args.devices, batch_size, None, args.oversubscribe)


def _corpus_request(args, data_options: dict) -> tuple[str | None, dict]:
    """(dataset, corpus options) of `rosetta train`: None and the --data-option values (the model's own data set), or
    with --corpus "corpus" and the own corpus's options (shared.data.parallel; the model's specials added later)."""
    flags = {"--langs": args.langs, "--tokenizer": args.tokenizer, "--min-freq": args.min_freq,
             "--max-vocab": args.max_vocab, "--lowercase/--keep-case": args.lowercase}  # fmt: skip
    if args.corpus is None:
        given = [flag for flag, value in flags.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} describe an own corpus: pass --corpus DIR too")
        return None, data_options
    if args.data_dir or data_options:
        raise ValueError("--data-dir and --data-option are for the documents' data sets, --corpus names your own: pass one")
    if args.langs is None:
        raise ValueError("--corpus needs --langs SRC,TGT: the suffixes of its files (e.g. de,en for train.de, train.en)")
    options = {"path": args.corpus, "langs": args.langs, "tokenizer": args.tokenizer, "min_freq": args.min_freq,
               "max_vocab": args.max_vocab, "lowercase": args.lowercase}  # fmt: skip
    return "corpus", {key: value for key, value in options.items() if value is not None}


def _check_resumed_corpus(run_dir: Path, run: RunConfig, dataset: str | None, options: dict) -> None:
    """--resume with --corpus: the run must have read that corpus with those options (it goes on with its saved copy)."""
    if dataset is None:
        return
    if run.dataset != dataset:
        raise ValueError(f"{run_dir} is a run on {run.dataset}, not on an own corpus: resume it without --corpus")
    layout = parallel_options.layout(run.model)
    parallel_options.check_options(run.corpus_options, parallel_options.normalize({**options, **layout}), run_dir)


def _no_data(args) -> bool:
    """True when `args.model` reads a data set and no data folder is given."""
    return documents.dataset_for_model(args.model) not in (None, "reverse") and not (
        args.data_dir or os.environ.get(data.ENV_VAR)
    )


def _train_stacks(args, run_dir: Path, run: RunConfig) -> int:
    """Each stack of `rosetta train` in its own process (one stack: in this one)."""
    stacks_trained = list(stacks.STACKS) if args.stack == "both" else [args.stack]
    if args.prepare:
        train_command = f"python -m shared.train.runner {run_dir} STACK"
        print(f"prepared {run_dir}: train it with `{train_command}` (no data folder or spaCy needed)")
        return 0
    print(f"run {run_dir}: {run.model} on {run.dataset}, {run.epochs} epochs of batch {run.batch_size}, stacks "
          f"{', '.join(stacks_trained)}")  # fmt: skip
    ranks, devices = args.nproc_per_node or 1, args.devices or 1
    if len(stacks_trained) > 1 or ranks > 1 or devices > 1:  # one stack a process (torch first: it writes the initial weights)
        for stack in stacks_trained:
            code = _start_stack(stack, ranks, _child_argv(args, stack))
            if code:
                return code
        return 0
    return runner.main(_child_argv(args, stacks_trained[0]))


def _start_stack(stack: str, ranks: int, argv: list[str]) -> int:
    """One stack's runner in a process of its own, or for torch with ranks torchrun's launcher run from here
    (torch_impl.distributed.launch: a failed rank ends in one line); its exit code."""
    if ranks > 1 and stack == "torch":
        return stacks.import_module("torch", "distributed").launch(ranks, argv)
    return subprocess.call([sys.executable, "-m", "shared.train.runner", *argv])


def _child_argv(args, stack: str) -> list[str]:
    """`python -m shared.train.runner RUN_DIR STACK`: run.json already holds every setting."""
    flags = {"--force": args.force, "--resume": args.resume, "--quiet": args.quiet, "--oversubscribe": args.oversubscribe}
    devices = [f"--devices={args.devices}"] if stack == "tf" and (args.devices or 1) > 1 else []
    return [str(_run_dir(args)), stack, *(flag for flag, given in flags.items() if given), *devices]
