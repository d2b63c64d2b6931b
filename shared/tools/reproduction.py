"""Reproduction results: a trained run summarised as one JSON file (reports/training/*.json), and the
markdown table that sets every summary beside the figures its document reports.

A summary holds what was run (model, config, training spec, batch, epochs, steps, device, seconds),
what came out (the final metrics, validation per epoch, the loss curve averaged over windows), and
whether the run finished its epochs, so a budget run is never mistaken for the full configuration.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import numpy as np

from shared import catalogue, documents, stacks
from shared.io.atomic import replace_blocks, write_atomic
from shared.train import attention_samples, runner, runs

CURVE_POINTS = 200  # the loss curve of a summary: at most this many window means
OPTIONAL_BLOCKS = ("both_stacks",)  # filled where the page has them (a page written before they were is left without)


def command(args) -> int:
    """`rosetta reproduction`: summarise `args.runs`' trained stacks into `args.results`, then write the page (and the
    README's blocks: the table, the checkpoints evaluated in both stacks) from every summary there."""
    for run_dir in args.runs:
        for stack in stacks.STACKS:
            if (Path(run_dir) / stack / runs.LOSS_LOG).is_file():
                print("written: " + ", ".join(map(str, write_summary(run_dir, stack, args.results))))
    summaries = load_summaries(args.results)
    text = render(summaries)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.output, text.encode())
    if args.readme:
        blocks = {"reproduction": table(summaries), "both_stacks": both_stacks_table(summaries)}
        replace_blocks(Path(args.readme), {name: "\n".join(lines) for name, lines in blocks.items()}, OPTIONAL_BLOCKS)
    print(text)
    return 0


def summarize(run_dir, stack: str) -> dict:
    """One stack's run in `run_dir` as a summary (a run stopped early gives `complete: false`, no `final`)."""
    run_dir = Path(run_dir)
    run, out = runs.load_run(run_dir), run_dir / stack
    steps, evals = runs.read_json_lines(out / runs.LOSS_LOG), runs.read_json_lines(out / runs.EVAL_LOG)
    if not steps:
        raise ValueError(f"{out} has no {runs.LOSS_LOG}: this stack has not trained in {run_dir}")
    files = (out / runs.EVAL_FILE, out / runs.BOTH_STACKS_FILE)
    final, both = (runs.read_json(path) if path.is_file() else None for path in files)
    summary = {
        "run": run_dir.resolve().name,
        "model": run.model,
        "document": catalogue.get(run.model).document,
        "dataset": run.dataset,
        "stack": stack,
        "device": (final or {}).get("device", "unknown"),
        "backend": (final or {}).get("backend"),  # Keras's, for tf (None: recorded before backends were)
        "config": run.config,
        "spec": dataclasses.asdict(run.spec),
        "dtype": run.dtype,
        "batch_size": run.batch_size,
        "epochs": run.epochs,
        "epochs_finished": len(evals),
        "steps": len(steps),
        "median_step_seconds": statistics.median(record["seconds"] for record in steps),
        "complete": final is not None and run.max_steps is None,
        "final": final,
        "val_by_epoch": evals,
        "loss_curve": _curve(steps),
    }
    if both is not None:
        summary["both_stacks"] = both
    if all((run_dir / other / runs.LOSS_LOG).is_file() for other in runner.STACKS):
        summary["curve_vs_other_stack"] = curve_difference(run_dir)
    return summary


def _curve(steps: list[dict]) -> dict:
    """The per-step losses averaged over at most CURVE_POINTS equal windows: `step` (window end) and `loss`."""
    losses = np.array([record["loss"] for record in steps])
    edges = np.linspace(0, len(losses), min(CURVE_POINTS, len(losses)) + 1).astype(int)
    return {
        "step": [int(end) for end in edges[1:]],
        "loss": [float(losses[start:end].mean()) for start, end in zip(edges[:-1], edges[1:], strict=True)],
    }


def write_summary(run_dir, stack: str, results_dir) -> list[Path]:
    """Write the summary as `<results_dir>/<run folder>-<stack>-<cpu|gpu>.json` and, for a model with decoder
    attention, its attention record under the same name in `<results_dir>/attention/`, both atomically; the paths
    written. The record: made afresh with every installed stack where the run still holds the stack's checkpoint,
    else the one the run wrote when it finished (this stack's attention only)."""
    summary = summarize(run_dir, stack)
    device = "gpu" if summary["device"].startswith(("cuda", "gpu")) else "cpu"
    name = f"{summary['run']}-{catalogue.stack_label(stack, summary['backend'])}-{device}.json"
    written = [Path(results_dir) / name]
    written[0].parent.mkdir(parents=True, exist_ok=True)
    write_atomic(written[0], (json.dumps(summary, indent=1) + "\n").encode())
    record, saved = Path(results_dir) / attention_samples.RECORDS_DIR / name, Path(run_dir) / stack / runs.ATTENTION_FILE
    if not attention_samples.has_decoder_attention(summary["model"]):
        return written
    if (Path(run_dir) / stack / runs.CHECKPOINT).is_file():
        written.append(attention_samples.write_record(run_dir, stack, record))
    elif saved.is_file():
        record.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(record, saved.read_bytes())
        written.append(record)
    return written


def load_summaries(results_dir) -> list[dict]:
    """Every summary in `results_dir`, sorted by document, model, stack."""
    summaries = []
    for path in sorted(Path(results_dir).glob("*.json")):
        try:
            summaries.append(json.loads(path.read_text()))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not a readable summary: {error}") from None
    return sorted(summaries, key=lambda s: (s["document"], s["model"], s.get("run", ""), s["stack"]))


def _number(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(summaries: list[dict]) -> list[str]:
    """Markdown: one row per summary, our figures (and the document's protocol) beside the document's own."""
    lines = [
        "| model | doc | stack | device | ran, final split (sentences) | loss | ppl | as the document measured: loss / ppl "
        "| BLEU | beam BLEU | masked acc. | seq. acc. | document reports |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in summaries:
        final = s["final"] or {}
        ran = f"{s['epochs_finished']}/{s['epochs']} epochs, {s['steps']} steps"
        ran += f", {final['split']} ({final['sentences']})" if final else ""
        ran += "".join(f"; {key}={value}" for key, value in _changed_config(s).items())
        document = documents.get(s["document"]).reported
        reported = document_figures(s["model"], s["document"], s["dataset"])
        as_document = f"{_number(final.get('document_loss'))} / {_number(final.get('document_perplexity'))}"
        bleu = _number(final.get("bleu"), 1)
        name = _name(s)
        stack = catalogue.stack_label(s["stack"], s.get("backend"))
        cells = [name, s["document"], stack, s["device"], ran, _number(final.get("loss"), 3)]
        cells += [_number(final.get("perplexity")), as_document if document else "-", bleu, _beam_bleu(final)]
        cells += [_percent(final.get("token_accuracy")), _percent(final.get("sequence_accuracy")), reported]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _name(summary: dict) -> str:
    """A summary's model as a table cell, its run folder beside it where the folder has another name."""
    run = summary.get("run", summary["model"])
    return summary["model"] if run == summary["model"] else f"{summary['model']} ({run})"


def _beam_bleu(final: dict) -> str:
    """Beam search's BLEU and its beams as a table cell: `35.2 (4 beams)`; `-` where the summary has none."""
    return "-" if final.get("bleu_beam") is None else f"{_number(final['bleu_beam'], 1)} ({final['beams']} beams)"


def _percent(value) -> str:
    """A fraction as a table cell: `69.1%`; `-` where not measured."""
    return "-" if value is None else _number(100 * value, 1) + "%"


def document_figures(model: str, document: str, dataset: str) -> str:
    """The figures `model`'s document reports (shared.documents), as a table cell."""
    if dataset == "reverse":
        return "no figure (target: sequence accuracy >= 99%)"
    if dataset == "corpus":  # an own corpus (rosetta train --corpus): the document measured other data
        return "- (own corpus)"
    reported = documents.get(document).reported
    if reported is None:
        return "-"
    if reported.model != model:
        return f"(for {reported.model})"
    return ", ".join(f"{key} {value}" for key, value in reported.figures.items())


def _changed_config(summary: dict) -> dict:
    """The config entries a run changed from its document's (vocabulary sizes come from the data)."""
    spec = catalogue.get(summary["model"])
    return {key: value for key, value in summary["config"].items() if key not in spec.vocab_keys and spec.config[key] != value}


def _changed_spec(summary: dict) -> dict:
    """The training-spec entries a run changed from its document's setup (teacher forcing, lr, ...)."""
    document = dataclasses.asdict(documents.training_for_model(summary["model"]).spec)
    return {key: value for key, value in summary["spec"].items() if document[key] != value and key != "betas"}


def both_stacks_table(summaries: list[dict]) -> list[str]:
    """Markdown: a checkpoint evaluated in each stack (`rosetta evaluate --both-stacks`), BLEU of greedy decoding and
    beam search in each, and the sentences whose ids both stacks decoded alike."""
    lines = ["| model (run) | trained in | split (sentences) | BLEU torch / tf | beam BLEU torch / tf | same greedy ids "
             "| same beam ids |", "|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for s in (s for s in summaries if "both_stacks" in s):
        both, found = s["both_stacks"], s["both_stacks"]["stacks"]
        greedy, beam = (" / ".join(_number(found[stack].get(key), 1) for stack in stacks.STACKS) for key in ("bleu", "bleu_beam"))
        beam += f" ({both['beams']} beams)" if both.get("beams") else ""
        cells = [_name(s), catalogue.stack_label(s["stack"], s.get("backend"))]
        cells += [f"{both['split']} ({both['sentences']})", greedy, beam]
        same = (both["same_ids"]["greedy"], both["same_ids"].get("beam"))
        cells += ["-" if count is None else f"{count}/{both['sentences']}" for count in same]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def curve_table(summaries: list[dict]) -> list[str]:
    """Markdown: max |torch - tf| of the loss curves of runs trained in both stacks (float32, real batches)."""
    rows = {(s.get("run", s["model"]), s["dtype"]): s for s in summaries if "curve_vs_other_stack" in s}
    lines = ["| run | dtype | config changed | max \\|torch - tf\\| of the loss | over |", "|---|---|---|---:|---|"]
    for (run, dtype), s in rows.items():
        changed = ", ".join(f"{key}={value}" for key, value in {**_changed_config(s), **_changed_spec(s)}.items()) or "-"
        lines += [f"| {run} | {dtype} | {changed} | {value:.2e} | {over} |" for over, value in s["curve_vs_other_stack"].items()]
    return lines


def render(summaries: list[dict]) -> str:
    """The reproduction page: results beside the documents' figures, then the cross-stack curve differences."""
    notes = [f"- document {d.number} ({d.reported.model}): {d.reported.how}." for d in documents.with_reports()]
    return "\n".join([
        "# Reproduction runs",
        "",
        "Generated by `rosetta reproduction` from `reports/training/*.json` (one summary per run and stack; stack tf is",
        "Keras on TensorFlow, tf-jax and tf-torch Keras on that Keras 3 backend).",
        "Loss and perplexity on the final split (test; spa-eng has none: val): teacher-forced, dropout off, mean",
        "over non-pad targets. BLEU: greedy decoding's; beam BLEU: beam search's (Hugging Face's rules), where the run's",
        "final evaluation computed it. The column after perplexity computes loss and perplexity as the document did for",
        "the figure it reports:",
        "",
        *notes,
        "",
        *table(summaries),
        "",
        "## One checkpoint, both stacks",
        "",
        "A run's checkpoint loaded into each stack and decoded greedily and with beam search (Hugging Face's rules):",
        "equal ids give equal BLEU. In the run's dtype.",
        "",
        *both_stacks_table(summaries),
        "",
        "## Loss curves of runs trained in both stacks",
        "",
        "Same initial weights, same batches and coin flips; float32 rounding grows over thousands of steps.",
        "",
        *curve_table(summaries),
        "",
    ])  # fmt: skip


def curve_difference(run_dir, first: int = 200) -> dict[str, float]:
    """Max |torch - tf| of a run trained in both stacks: over its first `first` steps, and over all steps."""
    curves = []
    for stack in runner.STACKS:
        steps = runs.read_json_lines(Path(run_dir) / stack / runs.LOSS_LOG)
        curves.append(np.array([record["loss"] for record in steps]))
    length = min(map(len, curves))
    if not length:
        raise ValueError(f"{run_dir} has not been trained in both stacks")
    difference = np.abs(curves[0][:length] - curves[1][:length])
    return {f"first {min(first, length)} steps": float(difference[:first].max()), f"all {length} steps": float(difference.max())}
