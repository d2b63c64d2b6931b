"""The `rosetta` command line: it parses the flags, then calls the room that does the work (`rosetta train`:
shared.train.launch). Frameworks are imported only by the subcommand that needs them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from shared import catalogue, failures
from shared.io.atomic import replace_block, replace_blocks, write_atomic
from shared.stacks import STACKS, import_stack


def _number(kind, low, *, above: bool = False, high=None):
    """An argparse type: `kind` (int or float), at least `low` (above it when `above`), at most `high`."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value != value or value in (float("inf"), float("-inf")) or (value <= low if above else value < low):
            raise argparse.ArgumentTypeError(f"{text} is not {'above' if above else 'at least'} {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text} is above {high}")
        return value

    return parse


COUNT = _number(int, 1)  # steps, batches, sizes: 1 or more
SEED = _number(int, 0, high=2**32 - 1)  # numpy's and torch's seeds
POSITIVE = _number(float, 0.0, above=True)  # learning rate, epsilon
NON_NEGATIVE = _number(float, 0.0)  # clipping threshold (0: off)
RATIO = _number(float, 0.0, high=1.0)  # teacher forcing


def _models(args) -> int:
    rows = [("name", "doc", "document class", "module", "status")]
    rows += [(spec.name, spec.document, spec.doc_class, f"{spec.module}.py", "built" if spec.built else "not yet built")
             for spec in catalogue.CATALOGUE.values()]  # fmt: skip
    print("\n".join(_aligned(rows)))
    return 0


def _aligned(rows: list[tuple]) -> list[str]:
    """`rows` as lines of columns, each as wide as its widest cell (a long class name moves the columns after it)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(*rows, strict=True)]
    return [" ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _api(args) -> int:
    from shared.tools import api_reference

    text = api_reference.render()
    if args.readme:
        replace_block(Path(args.readme), "api", text)
        print(f"rosetta: the public API reference written to {args.readme}")
    else:
        print(text)
    return 0


def _fixtures(args) -> int:
    import torch  # noqa: F401  (imported before tensorflow, as everywhere in the suite)

    from shared.verify import fixtures

    torch.set_num_threads(1)  # one thread: float64 sums in one fixed order
    stack = import_stack("torch")
    names = args.models or catalogue.built()
    changed = fixtures.write_goldens(stack, names, check=args.check)
    verb = "differ from a fresh generation" if args.check else "rewritten"
    print(f"{len(names)} golden files checked; {len(changed)} {verb}: {', '.join(changed) or 'none'}")
    return 1 if args.check and changed else 0


def _equality(args) -> int:
    import torch  # noqa: F401  (torch before tensorflow in one process)

    from shared.verify import measurement

    measurement.use_backend(args.backend)
    measured = measurement.measure(args.models or catalogue.built(), with_training=args.training)
    text = measured.text()
    print(text, end="")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.output, text.encode())
    if args.readme and not measured.failures:
        replace_blocks(Path(args.readme), dict(measured.tables()))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.json, (json.dumps(measured.record(), indent=1, allow_nan=False) + "\n").encode())
    return 1 if measured.failures else 0


def _key_values(pairs: list[str], what: str) -> dict:
    """`KEY=VALUE` pairs; values parsed as JSON where they parse (numbers, true/false), else strings."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} takes KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _train(args) -> int:
    from shared.train import launch

    return launch.rosetta_train(args, _key_values)


def _evaluate(args) -> int:
    from shared.train import evaluation, runs

    if args.both_stacks:
        print(json.dumps(evaluation.in_both_stacks(args.run_dir, args.stack, args.split, args.batches, args.beams), indent=2))
        return 0
    stack, model, run, corpus = runs.load_trained(args.run_dir, args.stack)
    split = args.split or runs.final_split(corpus)
    result = evaluation.evaluate(stack, model, run, corpus, split, limit=args.batches, beams=args.beams)
    print(json.dumps({"stack": args.stack, **result}, indent=2))
    return 0


def _translate(args) -> int:
    from shared.train import translation

    return translation.command(args)


def _reproduction(args) -> int:
    from shared.tools import reproduction

    return reproduction.command(args)


def _add_train(commands) -> None:
    from shared.train import translation

    train = commands.add_parser("train", help="train a catalogue model in one stack or both (same initial weights, same batches)")
    train.add_argument("model", help="catalogue name (rosetta models)")
    train.add_argument("--stack", choices=[*STACKS, "both"], default="both", help="both: torch, then tf, one process each")
    train.add_argument("--run-dir", help="the run folder (default runs/<model>)")
    train.add_argument("--data-dir", help="the folder holding multi30k/ and spa-eng/ (default $ROSETTA_DATA_DIR)")
    train.add_argument("--epochs", type=COUNT, help="default: the document's")
    train.add_argument("--max-steps", type=COUNT, help="stop after this many steps (a budget)")
    train.add_argument("--batch-size", type=COUNT, help="default: the document's")
    train.add_argument("--lr", type=POSITIVE)
    train.add_argument("--eps", type=POSITIVE, help="Adam's epsilon")
    train.add_argument("--clip", type=NON_NEGATIVE, help="global-norm clipping threshold; 0 turns clipping off")
    train.add_argument("--clipping", choices=["global", "per_variable", "keras_global"], help="tf only: Keras's own clipping")
    train.add_argument("--optimizer", choices=["torch_adam", "keras_adam"], help="tf only: keras_adam is stock Keras Adam")
    train.add_argument("--teacher-force", type=RATIO, help="teacher-forcing ratio (documents 002/003: 0.5)")
    train.add_argument("--dtype", choices=list(catalogue.DTYPES), default="float32")
    train.add_argument("--seed", type=SEED)
    train.add_argument("--eval-batches", type=COUNT, help="validation batches after each epoch (default: all)")
    train.add_argument("--test-batches", type=COUNT, help="batches of the final evaluation (default: all)")
    train.add_argument("--checkpoint-every", type=COUNT, help="steps between checkpoints (and after every epoch)")
    train.add_argument("--nproc-per-node", type=COUNT, help="torch: data-parallel over N processes (torchrun, DDP; gloo on "
                       "CPUs, NCCL on GPUs); each global batch is split by rows")  # fmt: skip
    train.add_argument("--devices", type=COUNT, help="tf: data-parallel over N devices in one process (Keras's fit: "
                       "keras.distribution.DataParallel on JAX, MirroredStrategy on TensorFlow; the GPUs, or the CPU "
                       "split in N)")  # fmt: skip
    train.add_argument("--oversubscribe", action="store_true", help="allow more ranks or CPU devices than the CPU cores "
                       "this process may use (each then shares a core; refused otherwise)")  # fmt: skip
    train.add_argument("--steps-per-epoch", type=COUNT, help="an epoch of N batches from the repeated data (Keras's "
                       "steps_per_epoch; default: the model's recipe, else one pass)")  # fmt: skip
    train.add_argument("--patience", type=COUNT, help="early stopping: epochs without a better validation loss "
                       "(default: the model's recipe, else none)")  # fmt: skip
    train.add_argument("--set", action="append", metavar="KEY=VALUE", help="model config override, e.g. hidden_dim=256")
    train.add_argument("--data-option", action="append", metavar="KEY=VALUE", help="corpus option, e.g. train_size=20000")
    _add_corpus_options(train)
    train.add_argument("--force", action="store_true", help="train again over an existing checkpoint of this stack")
    train.add_argument("--resume", action="store_true", help="continue an interrupted run from its last checkpoint "
                       "(its own settings; a finished stack is left as it is)")  # fmt: skip
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--skip-without-data", action="store_true", help="exit 0 with a note when no data folder is given")
    train.add_argument("--prepare", action="store_true", help="only write the run folder (run.json, corpus): train it elsewhere")
    train.set_defaults(func=_train)
    evaluate = commands.add_parser("evaluate", help="metrics of a run's checkpoint on a split")
    evaluate.add_argument("run_dir")
    evaluate.add_argument("--stack", choices=STACKS, required=True)
    evaluate.add_argument("--split", help="default: the run's final split (test; val where the corpus has no test)")
    evaluate.add_argument("--batches", type=COUNT, help="only the first N batches")
    evaluate.add_argument("--beams", type=COUNT, help="also bleu_beam: BLEU of beam search over N beams (HF's rules)")
    evaluate.add_argument("--both-stacks", action="store_true", help="run --stack's checkpoint in each stack, compare "
                          "their ids per sentence; written to RUN/STACK/both_stacks.json (the reproduction table's)")  # fmt: skip
    evaluate.set_defaults(func=_evaluate)
    translate = commands.add_parser("translate", help="translate a sentence or a file (greedy, or beam search with "
                                    "Hugging Face's options), with greedy decoding's attention heatmap")  # fmt: skip
    translate.add_argument("run_dir")
    translate.add_argument("sentence", nargs="?", help="the sentence (or --input FILE --output FILE)")
    translate.add_argument("--stack", choices=STACKS, required=True)
    translate.add_argument("--heatmap", help="write the attention heatmap to this PNG")
    translation.add_arguments(translate, _number)
    translate.set_defaults(func=_translate)
    reproduce = commands.add_parser("reproduction", help="summarise trained runs and tabulate them beside the documents' figures")
    reproduce.add_argument("runs", nargs="*", help="run folders to summarise (their trained stacks)")
    reproduce.add_argument("--results", default="reports/training", help="where the summaries live")
    reproduce.add_argument("--output", default="reports/reproduction.md")
    reproduce.add_argument("--readme", help="also fill the table into this README's reproduction block")
    reproduce.set_defaults(func=_reproduction)


def _add_corpus_options(train) -> None:
    """`rosetta train`'s own-corpus options (shared.data.parallel); every default None: given or not."""
    own = train.add_argument_group(
        "your own parallel corpus",
        "train a model of real data (bahdanau_bigru, luong_*, tf_tutorial, tf_tutorial_mha) on your own sentence pairs; "
        "read once (streaming) into the run's corpus/, the vocabularies built from train.* with the model's special tokens",
    )
    own.add_argument(
        "--corpus",
        metavar="DIR",
        help="a folder of train.SRC and train.TGT, valid.* (or val.*, dev.*) and optionally test.* (else the final "
        "evaluation uses valid), each plain or .gz, UTF-8, one sentence a line, line i of both sides a pair; an empty "
        "line, unequal line counts or a bad byte is an error naming the file and line",
    )
    own.add_argument(
        "--langs",
        metavar="SRC,TGT",
        help="the languages, source first, as the files' suffixes: de,en trains German -> English on train.de, train.en",
    )
    own.add_argument(
        "--tokenizer",
        choices=["spacy", "whitespace"],
        help="spacy (default): spaCy's rule-based tokenizer of each language (spacy.blank, no download; the [data] "
        "extra); whitespace: text already tokenized",
    )
    own.add_argument("--min-freq", type=COUNT, metavar="N", help="vocabulary: tokens seen at least N times in train (default 2)")
    own.add_argument(
        "--max-vocab",
        type=_number(int, 5),
        metavar="N",
        help="vocabulary: at most N tokens per side, the 4 specials included, most frequent first (default: no cap; a "
        "WMT-sized corpus wants one, e.g. 32000)",
    )
    case = own.add_mutually_exclusive_group()
    case.add_argument("--lowercase", dest="lowercase", action="store_const", const=True, help="lowercase every token (default)")
    case.add_argument("--keep-case", dest="lowercase", action="store_const", const=False, help="keep the text's case")


def _bench(args) -> int:
    from shared.tools import bench

    stacks = list(STACKS) if args.stack == "both" else [args.stack]
    threads = [int(n) for n in args.threads.split(",")] if args.threads else None
    if threads and min(threads) < 1:
        raise ValueError(f"--threads takes positive counts, got {args.threads!r}")
    modes = args.modes.split(",") if args.modes else None
    models = [name for text in args.models for name in text.split(",") if name] if args.models else None  # a b, or a,b
    if args.time_box is not None and args.time_box <= 0:
        raise ValueError(f"--time-box takes a positive number of seconds, got {args.time_box:g}")
    bench.run(args.profile, stacks, args.results, threads, models, modes, keras_backend=args.keras_backend, resume=args.resume,
              time_box_s=args.time_box)  # fmt: skip
    return 0


def _report(args) -> int:
    from shared.tools import report

    written = report.write_report(args.results, args.output, equality_path=args.equality, training_dir=args.training,
                                  backend_paths=args.backends, hf_ports_path=args.hf_ports,
                                  generation_speed_path="reports/generation_speed.json")  # fmt: skip
    print(f"rosetta: report written to {Path(args.output) / 'README.md'}")
    for note in written["missing"]:
        print(f"  missing: {note}")
    if args.readme:
        blocks = {"report": written["headline"], **{key: written[key] for key in ("models", "hf_ports", "generation_speed")}}
        replace_blocks(Path(args.readme), blocks)
    return 0


def _hf_ports(args) -> int:
    from shared.tools import hf_ports

    models = hf_ports.default_models([name for text in args.models for name in text.split(",") if name] if args.models else None)
    found = hf_ports.measure(models, args.output, args.work, threads=args.threads, notes=tuple(args.note or ()))
    for name, record in found["models"].items():
        print(f"rosetta hf-ports: {name}: {record['status']}{': ' + record['reason'] if record['reason'] else ''}")
    print(f"rosetta hf-ports: results written to {args.output}")
    return 0


def _add_hf_ports(commands) -> None:
    ports = commands.add_parser("hf-ports", help="Hugging Face models at their published sizes (random weights) ported "
                                "both ways, timed, peak memory, beside keras-hub's own loading")  # fmt: skip
    ports.add_argument("--models", nargs="*", help="published configs to measure (default: all; shared/hf/real_sizes.py)")
    ports.add_argument("--output", default="reports/hf_ports.json", help="the results file (a rerun keeps what it measured)")
    ports.add_argument("--work", default="runs/hf-ports", help="where each model's folders are built (removed after)")
    ports.add_argument("--threads", type=COUNT, help="each port process's threads (default: the machine's cores)")
    ports.add_argument("--note", action="append", help="a note kept in the results file (the machine's load, say)")
    ports.set_defaults(func=_hf_ports)


def _port(args) -> int:
    from shared.port import porting

    if args.torch_model or args.keras_model:
        return _port_own(args)
    report = porting.port(args.source, args.destination, args.model, to=args.to, force=args.force,
                          overrides=_key_values(args.set, "--set"), inputs=args.inputs, dtype=args.dtype,
                          with_optimizer=args.with_optimizer, source_format=args.source_format, key_map=args.key_map,
                          reference=args.reference, config=args.config, tokenizer=args.tokenizer)  # fmt: skip
    print(porting.render(report))
    return 0 if report.ok else 1


def _port_own(args) -> int:
    from shared.port import own_models

    ignored = [flag for flag, value in (("--model", args.model), ("--reference", args.reference), ("--set", args.set),
               ("--dtype", args.dtype), ("--with-optimizer", args.with_optimizer)) if value]  # fmt: skip
    if ignored:
        flags = ", ".join(ignored)
        raise ValueError(f"{flags} port catalogue models; with --torch-model / --keras-model your own classes decide")
    report = own_models.port_own(args.source, args.destination, args.torch_model, args.keras_model, args.inputs,
                                 args.key_map, args.force, args.to, args.source_format)  # fmt: skip
    print(report.render())
    return 0 if report.ok else 1


def _add_port(commands) -> None:
    from shared.port.formats import FORMATS, PRETRAINED_ONLY, READ_ONLY
    from shared.port.layouts import describe_presets

    formats = ", ".join(FORMATS) + f" (read only: {', '.join(READ_ONLY)}; Hugging Face models: {', '.join(PRETRAINED_ONLY)})"
    port = commands.add_parser(
        "port",
        help="port trained weights between torch and Keras files, verified component by component",
        description="Port a checkpoint between PyTorch and Keras/TensorFlow, verified in float64 component by component "
        "(and against your own model where it can run). Nothing is written unless it verifies.",
        epilog=f"formats: {formats}\npresets (--from/--to; each names its model):\n{describe_presets()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    port.add_argument(
        "source",
        help="a .pt, .safetensors, .weights.h5, .keras file, a TF checkpoint, a SavedModel folder (read only), a "
        "Hugging Face model folder (MarianMT, BART, mBART, T5: config.json); or parts PART=PATH,PART=PATH",
    )
    port.add_argument("destination", help="the file to write (its name gives the format, else --to)")
    port.add_argument("--model", help="catalogue name (rosetta models); a preset names its own")
    port.add_argument("--from", dest="source_format", metavar="FORMAT|PRESET", help="the source's format or layout preset")
    port.add_argument("--to", metavar="FORMAT|PRESET", help="the destination's format or layout preset, whatever its name")
    port.add_argument("--key-map", help="a JSON key map for the source's own layout (see shared/port/layouts.py)")
    port.add_argument("--reference", metavar="MODULE:CALLABLE", help="your model: CALLABLE(path) returns it loaded, "
                      "or a function batch -> logits; the port is verified against it")  # fmt: skip
    port.add_argument("--torch-model", metavar="MODULE:FACTORY", help="your own torch model: FACTORY() returns it "
                      "(with --keras-model: port between your own classes, verified on --inputs)")  # fmt: skip
    port.add_argument("--keras-model", metavar="MODULE:FACTORY", help="your own Keras model: FACTORY() returns it")
    port.add_argument("--set", action="append", metavar="KEY=VALUE", help="config where it differs from the document")
    port.add_argument("--inputs", help="also verify on this .npz batch (src, src_len, tgt_in); for your own models, "
                      "the arrays they are called on")  # fmt: skip
    port.add_argument("--dtype", choices=list(catalogue.DTYPES), help="the precision of the written file (default: the source's)")
    port.add_argument("--force", action="store_true", help="replace an existing destination")
    port.add_argument("--config", metavar="CONFIG.json", help="a Hugging Face model's config.json (or its folder) for a "
                      ".pt, .safetensors or .weights.h5 file of that model, which names no architecture")  # fmt: skip
    port.add_argument("--tokenizer", metavar="FOLDER", help="a Hugging Face folder whose tokenizer files (and "
                      "generation_config.json, where the model carries none) a written folder (--to hf) carries "
                      "(default: the source folder)")  # fmt: skip
    port.add_argument("--with-optimizer", action="store_true", help="port Adam's moments and step counter too")
    port.set_defaults(func=_port)


def _add_bench_and_report(commands) -> None:
    from shared.tools.bench_profiles import PROFILES

    bench = commands.add_parser("bench", help="time every model's train step and greedy decoding in each stack and mode")
    profiles = (
        "default: reverse task; full: all; headline: every model's train step at 2 threads, no sweeps; quick: "
        "reverse_bahdanau's train step in every mode at 2 threads (a first look)"
    )
    bench.add_argument("--profile", choices=list(PROFILES), default="default", help=profiles)
    bench.add_argument("--stack", choices=[*STACKS, "both"], default="both", help="one process per stack and thread count")
    bench.add_argument("--threads", help="comma-separated CPU thread counts (default: the profile's, 1,2)")
    bench.add_argument("--models", nargs="*", help="only these catalogue models (space- or comma-separated)")
    bench.add_argument("--modes", help="only these modes, comma-separated (eager, compile, cudagraph, function, xla)")
    bench.add_argument("--resume", action="store_true", help="continue the run a killed bench left in <result>.json.partial "
                       "(same commit and settings): the cases it timed are kept, the others timed")  # fmt: skip
    bench.add_argument("--time-box", type=float, metavar="SECONDS", help="each bench process starts no group of cases "
                       "after SECONDS: its result file holds what it timed, and --resume continues it (a lease, a "
                       "session)")  # fmt: skip
    bench.add_argument("--results", default="reports/results", help="results go to <results>/<machine>/*.json")
    bench.add_argument("--keras-backend", choices=list(catalogue.KERAS_BACKENDS), help="the tf stack's Keras 3 backend "
                       "(default: KERAS_BACKEND, else tensorflow; JAX's modes: eager, xla)")  # fmt: skip
    bench.set_defaults(func=_bench)
    report = commands.add_parser("report", help="tables, CSVs and figures of every result into reports/README.md")
    report.add_argument("--results", default="reports/results")
    report.add_argument("--equality", default="reports/equality.json")
    report.add_argument("--training", default="reports/training")
    report.add_argument(
        "--backends",
        nargs="*",
        default=["reports/equality-jax.json", "reports/equality-torch.json"],
        help="equality files of Keras's other backends (rosetta equality --backend)",
    )
    report.add_argument("--hf-ports", default="reports/hf_ports.json", help="rosetta hf-ports's results (Hugging Face models)")
    report.add_argument("--output", default="reports")
    report.add_argument("--readme", help="also fill the headline table, the model table and the Hugging Face table into this "
                        "README's blocks")  # fmt: skip
    report.set_defaults(func=_report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rosetta", description="Attention seq2seq models proved equal in PyTorch and Keras.")
    parser.add_argument("--debug", action="store_true", help="on failure, the framework's whole trace (default: one line)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("models", help="list the catalogue").set_defaults(func=_models)
    api = commands.add_parser("api", help="the public API reference (each package's __all__), read from the sources")
    api.add_argument("--readme", help="fill it into this page's api block (docs/api.md) instead of printing it")
    api.set_defaults(func=_api)
    fixtures = commands.add_parser("fixtures", help="regenerate the golden files with the torch stack (float64)")
    fixtures.add_argument("models", nargs="*", help="catalogue names (default: every built model)")
    fixtures.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    fixtures.set_defaults(func=_fixtures)
    equality = commands.add_parser("equality", help="measure max |torch - tf| of every built model (needs both stacks)")
    equality.add_argument("models", nargs="*", help="catalogue names (default: every built model)")
    equality.add_argument("--output", help="also write the markdown table to this file")
    equality.add_argument("--readme", help="also fill the table into this README's results block")
    equality.add_argument("--training", action="store_true", help="also train both stacks 200 steps per model and compare")
    equality.add_argument("--json", help="also write the maxima, training curves and fixture attention here (for rosetta report)")
    equality.add_argument(
        "--backend", choices=catalogue.KERAS_BACKENDS, help="Keras's backend (default: $KERAS_BACKEND, else tensorflow)"
    )
    equality.set_defaults(func=_equality)
    _add_bench_and_report(commands)
    _add_port(commands)
    _add_hf_ports(commands)
    _add_train(commands)
    args = parser.parse_args(argv)
    with failures.debug_environment(args.debug):  # child processes (rosetta train's stacks, bench) trace too
        return failures.guarded(lambda: args.func(args), f"rosetta {args.command}", args.debug, argv)


if __name__ == "__main__":
    sys.exit(main())
