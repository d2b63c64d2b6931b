"""The report's page, section by section: title and machines, headline, equality, Keras backends, loss, speed,
scaling, figures."""

from __future__ import annotations

from shared import catalogue
from shared.tools import reproduction
from shared.tools.machine import SAMPLE_S
from shared.tools.report.figures import ReportFigure
from shared.tools.report.printing import setting
from shared.tools.report.reading import is_number
from shared.tools.report.schema import (
    BACKENDS,
    NO_GPU,
    NO_RESULTS,
    RATIO_BAND,
    SPEEDUP_TARGET,
    SWEEP_SIZE,
    TASKS,
    Inputs,
)
from shared.tools.report.tables import Tables, outside_band


def render_readme(inputs: Inputs, tables: Tables, context: dict | None, figures: list[ReportFigure]) -> str:
    """The README page, section by section."""
    sections = [
        _title_section(inputs),
        _headline_section(inputs, tables, context),
        _equality_section(inputs, tables),
        _loss_section(inputs, tables),
        _speed_section(inputs, tables),
        _scaling_section(inputs, tables),
        _figures_section(figures),
        _missing_section(inputs.missing),
        [f"CSV files (one per table above): {', '.join(f'`csv/{name}.csv`' for name in tables.numeric)}."],
    ]
    return "\n".join(line for section in sections for line in section) + "\n"


def _title_section(inputs: Inputs) -> list[str]:
    """Title, what was measured, and the machines the result files come from."""
    rows = inputs.rows
    lines = [
        "# PyTorch and TensorFlow/Keras, model by model",
        "",
        f"What was measured: the time of one training step and of greedy decoding of the {len(catalogue.CATALOGUE)} "
        f"catalogue models in both stacks ({len(rows)} benchmark rows from {len(inputs.environments)} result files), "
        "the largest differences between the two stacks' outputs, gradients and training curves, and the "
        "reproduction runs beside the figures their documents report.",
        "",
    ]
    machines = sorted({env["machine"] for env in inputs.environments})
    lines += ["Machines:", ""] if machines else ["Machines: none (no benchmark results).", ""]
    lines += [_machine_line(name, [env for env in inputs.environments if env["machine"] == name]) for name in machines]
    return lines + ([""] if machines else [])


def _values(environments: list[dict], key: str, form: str = "{}") -> str:
    """The distinct values of `key` over `environments`, numbers (printed by `form`) in order then text,
    comma-separated ("-" if none)."""
    found = {env.get(key) for env in environments if isinstance(env.get(key), str) or is_number(env.get(key))}
    ordered = sorted(found, key=lambda value: (isinstance(value, str), 0 if isinstance(value, str) else value, str(value)))
    return ", ".join(value if isinstance(value, str) else form.format(value) for value in ordered) or "-"


def _machine_line(machine: str, environments: list[dict]) -> str:
    """One bullet: the machine's CPU, cores, GPU, stack versions, threads, commits and recording times."""
    versions = {f"{name} {value}" for env in environments for name, value in sorted((env.get("versions") or {}).items())}
    created = sorted({str(env["created"]) for env in environments if env.get("created")})
    recorded = " to ".join(dict.fromkeys([created[0], created[-1]])) if created else "-"
    return (
        f"- `{machine}`: {_values(environments, 'cpu')}, {_values(environments, 'cores')} cores, "
        f"GPU: {_values(environments, 'gpu') if any(env.get('gpu') for env in environments) else 'none'}; "
        f"stacks {_values(environments, 'stack')}; versions {', '.join(sorted(versions)) or '-'}; "
        f"threads {_values(environments, 'threads')}; commits {_values(environments, 'commit')}; "
        f"matmul peak {_values(environments, 'matmul_gflops', '{:.0f}')} GFLOP/s; recorded {recorded}."
    )


def _headline_section(inputs: Inputs, tables: Tables, context: dict | None) -> list[str]:
    """The headline table and the sentence saying which setting it shows."""
    if context is None:
        why = "no benchmark results" if inputs.rows.empty else "no successful train-step row at the documents' sizes"
        where = f"No train-step times: {why}."
    else:
        preferred = "a CPU at its highest thread count" if context["device"] == "cpu" else "a GPU (no CPU rows)"
        where = (
            f"Times are train-step medians (ms) at the documents' sizes, our implementation, best mode of each stack, "
            f"on {setting(context)}: "
            f"{preferred}. torch/TF = torch ms / TF ms (above 1: torch slower); TF mode names Keras's backend where it "
            "is not TensorFlow (`jax-xla`: Keras on JAX, jitted; Keras on JAX must run jitted: eagerly it is about 100x "
            "slower). ours/as-written = as-written ms / ours ms, torch eager and TF tf.function (how each stack's code "
            "usually runs; above 1: ours faster), and the lowest over every mode of both stacks, timed side by side "
            "and taken round by round (the median of each round's ratio); "
            "FLOP ceiling = as-written FLOPs / ours: the speed-up the arithmetic allows (1.00x: ours saves steps, not "
            "FLOPs); a mode's ceiling after the floor counts the step's fixed cost, which no hoisting shortens (the "
            f"speed section's last table). {_speedup_targets(tables, context)}"
        )
    return ["## Headline", "", where, "", *tables.markdown("headline"), *_gpu_headline(tables)]


def _gpu_headline(tables: Tables) -> list[str]:
    """Each GPU machine's best modes, for the models it timed (nothing without GPU rows)."""
    if "gpu_headline" not in tables.numeric:
        return []
    return [
        "### On a GPU",
        "",
        "The same on each GPU machine at its most threads, for the models its leases timed: each stack's best mode "
        "(torch's `cudagraph` replays the whole train step as one CUDA graph, for the models of fixed-shape batches; "
        "Keras on a GPU ran on JAX, jitted: the device image has no TensorFlow), ours/as-written in that mode, and the "
        "lowest over every mode. A lease is minutes long: a machine's rows may come from several leases and commits "
        "(its line under Machines names them), and a model without a stack's rows shows -.",
        "",
        *tables.markdown("gpu_headline"),
    ]


def _speedup_targets(tables: Tables, context: dict) -> str:
    """The sentence naming the models below SPEEDUP_TARGET over as written in the headline's setting although their
    ceiling after the floor allows it (ceilings.below_target_table)."""
    if "headline" not in tables.numeric:
        return ""
    below = tables.numeric.get("speedup_below_target")
    targets = [] if below is None else below[(below["verdict"] == "target") & (below["machine"] == context["machine"])]
    if not len(targets):
        return f"Every ratio below {SPEEDUP_TARGET}x is bounded by its ceilings (the speed section's table)."
    worst = targets.sort_values("ours/as-written").drop_duplicates("model")
    ratio = "{0[model]} ({0[ours/as-written]:.2f}x {0[stack]} {0[mode]}, ceiling after floor {0[ceiling after floor]:.2f}x)"
    items = [ratio.format(row) for _, row in worst.iterrows()]
    return f"Below {SPEEDUP_TARGET}x although every ceiling allows it (targets): {'; '.join(items)}."


def _equality_section(inputs: Inputs, tables: Tables) -> list[str]:
    """Max |torch - TF| per quantity and dtype, greedy verdicts, and training maxima."""
    lines = ["## Equality", ""]
    if inputs.equality is None:
        return [*lines, "Equality: not measured (no readable equality file).", ""]
    lines += [f"Max |torch - TF| per quantity on the golden fixtures, from `{inputs.equality_name}`.", ""]
    lines += tables.markdown("equality_outputs") or ["No output or greedy comparisons in the equality file.", ""]
    lines += ["### After training (both stacks from the same weights and batches)", ""]
    lines += tables.markdown("equality_training") or ["No training comparisons in the equality file.", ""]
    return lines + _backends_section(inputs, tables)


def _backends_section(inputs: Inputs, tables: Tables) -> list[str]:
    """The same comparisons with the Keras models on each Keras 3 backend, a column each, and their failures."""
    lines = ["### On each Keras 3 backend", ""]
    if "equality_backends" not in tables.numeric:
        return [*lines, "No backend measured.", ""]
    lines += [
        "The same tf_impl models with Keras on each backend (`rosetta equality --backend`): the largest |torch - "
        "Keras| over outputs, attention, loss, gradients, greedy attention and the 200-step training, per model.",
        "",
        *tables.markdown("equality_backends"),
    ]
    failed = [f"{BACKENDS[b]}: {failure}" for b, equality in inputs.backends.items() for failure in equality["failures"]]
    return lines + ([f"Failed: {'; '.join(failed)}.", ""] if failed else [])


def _loss_section(inputs: Inputs, tables: Tables) -> list[str]:
    """The reproduction runs' final metrics beside the documents' figures."""
    lines = ["## Loss", ""]
    if "loss" not in tables.numeric:
        return [*lines, "No training summaries.", ""]
    return [
        *lines,
        "Final metrics of each training run (teacher-forced loss and perplexity on the final split, greedy "
        "accuracies and BLEU, beam search's BLEU where the run's final evaluation computed it); doc-protocol: the loss "
        "as the document computed the figure it reports.",
        "",
        *tables.markdown("loss"),
        "",
        "A run's checkpoint decoded in both stacks (`rosetta evaluate --both-stacks`): each stack's BLEU and the "
        "sentences whose ids both stacks decoded alike.",
        "",
        *reproduction.both_stacks_table(inputs.summaries or []),
        "",
    ]


def _speed_section(inputs: Inputs, tables: Tables) -> list[str]:
    """Times per model/stack/mode/device/threads/impl, train step and greedy separately."""
    lines = ["## Speed", ""]
    if inputs.rows.empty:
        return [*lines, NO_RESULTS, ""]
    lines += [
        f"Medians over repeats (each sample as many calls as last {SAMPLE_S * 1e3:.0f} ms) at the documents' sizes "
        "(batch x source x target length in `sizes`). torch/TF: the "
        "best mode of each stack, same machine, device and threads; ours/as-written: as-written ms / ours ms, "
        "same stack and mode, timed side by side in rounds (ours, as written; as written, ours; ...) and taken round "
        "by round: the median of each round's ratio, whose two samples ran within a tenth of a second of each other, "
        "so a slow phase of the machine slows both (result files before 2026-11-27: the ratio of the two medians); "
        "mode/eager: eager ms / this mode's ms (same backend); % matmul peak: the step's GFLOP "
        "per second over the machine's measured matmul GFLOP/s. A TF row whose mode starts with jax- or torch- ran "
        "Keras on that Keras 3 backend (`rosetta bench --keras-backend`); the other TF rows, on TensorFlow. flag: "
        "ok, or why the row's time cannot be trusted (other processes kept the CPU busy before, during or after it, "
        "its repeats spread too far, or it ran in one of the machine's slow phases: a small matmul timed just before "
        "and after it ran below 85% of the run's best pace); - where the result file predates load measurement. The "
        "CSV's `ran` "
        "column says which path executed (compiler, graph breaks, cuDNN, CUDA graphs).",
        "",
    ]
    if not (inputs.rows["device"] == "gpu").any():
        lines += [NO_GPU, ""]
    for task in TASKS:
        name = f"speed_{task}"
        lines += [f"### {task}", ""]
        if name not in tables.numeric:
            lines += [f"No {task} rows at the documents' sizes.", ""]
            continue
        lines += [*tables.markdown(name), *_outside_band(tables.numeric[name], tables, task)]
        lines += _failures(tables.numeric[name])
    return lines + _below_target(tables)


def _below_target(tables: Tables) -> list[str]:
    """The modes where ours is below SPEEDUP_TARGET over as written, each with its ceiling after the floor."""
    if "speedup_below_target" not in tables.numeric:
        return []
    return [
        f"### Below {SPEEDUP_TARGET}x over as written",
        "",
        f"Every mode where ours is below {SPEEDUP_TARGET}x over the listing although the FLOP ceiling is "
        f"{SPEEDUP_TARGET}x or more (below it, the headline's FLOP ceiling bounds the ratio), in the headline's setting, "
        "then on each other CPU machine at its most threads. measured at: the commit and day of ours's row (another "
        "machine's rows may predate the headline's commit: a mode below the target there may have been met since, "
        "untimed there). ratio q25-q75: the quartiles of the round-by-round ratio (- for runs before 2026-11-27). "
        "The FLOP ceiling is as-written FLOPs / ours: torch's count "
        "of the products, or where the compiler reports its own cost (counted by: XLA, compiled; Keras on JAX, jitted) "
        "the compiled train steps', every op after XLA's rewrites (a product the listing repeats, merged; counted by: XLA, "
        "compiled products: TensorFlow's XLA, the products of its optimized program alone); bytes ratio: "
        "the compiled steps' bytes read and written, as written / ours (the FLOPs ours saves do not shorten a step "
        "whose time follows its bytes). A FLOP ceiling assumes the whole step scales with its arithmetic; a step "
        "also has a fixed cost, its floor (the same step at batch 1 and the document's lengths, same stack and mode, "
        "ours and as written side by side: every op of every decoder step dispatched, the optimizer's per-variable work, "
        "Keras's train_on_batch, and 1/batch of the arithmetic; floor sizes says which: runs before 2026-11-27 timed "
        "2 source and 2 target steps, which leave out most of a 10-step loop's dispatch, so a ceiling after such a "
        "floor is an upper bound), which no hoisting shortens. ceiling after floor = "
        "as-written / (floor + (as-written - as-written floor) / FLOP ceiling): what ours could reach if the time the "
        "listing spends above its floor fell with the FLOPs (exact where time is floor plus arithmetic that scales with "
        "the batch); within spread: the same at the quartiles least favourable to it (as written's q25 and its floor's, "
        "ours's floor's q75). sibling ceiling = "
        "as-written / ours of the catalogue model whose step is this one's without the work ours hoists, same mode "
        "(a dot score is the general score without its W: no form of this step can be faster). ceiling with other ops: "
        "the ceiling after the floor where, of the time above the listing's floor, only its products' share (its "
        "profiled products ms over products plus other ops) falls by the FLOP ceiling, which counts products alone, "
        "and the rest falls as far as ours's other ops fell below the listing's (not at all where ours's take longer): "
        "what ours reaches with its products at the FLOP ceiling and its other ops as they are (where ours's products "
        "already fell by the FLOP ceiling or more, the ratio itself: no hoisting has anything left); - where a side was "
        "not profiled. verdict: "
        f"target where every ceiling allows {SPEEDUP_TARGET}x; bounded where the ceiling after the floor does not (no "
        "floor measured: the FLOP ceiling), bounded within the spread where only its medians do, bounded by the "
        "sibling where the sibling ceiling does not, bounded by other ops where the ceiling with other ops does not "
        f"(only fewer or faster non-product ops could reach {SPEEDUP_TARGET}x); {SPEEDUP_TARGET}x within the spread "
        "where the ratio's q75 "
        f"reaches {SPEEDUP_TARGET}x (the repeats cannot tell it from the target, whatever the ceilings). products ms, "
        "other ops ms: the step as the stack's profiler saw it, as written / ours, in ms a step of self time (torch's "
        "profiler, torch eager; TensorFlow's, tf.function and XLA; JAX's, Keras on JAX jitted; under XLA each op of "
        "its optimized program as its CPU runtime ran it, a product being a dot or a fusion around one; - in the other "
        "modes and runs before 2026-11-27 (TensorFlow's XLA: before 2026-11-28); summed over the threads that ran "
        "them, so the ops of a tf.function or a compiled step that ran side by side add up to more than the step): the "
        "matrix products, which the FLOP ceiling counts, and every "
        "other op. Where ours's other ops take longer than the listing's, its layout gave back what the products saved.",
        "",
        *tables.markdown("speedup_below_target"),
    ]


def _outside_band(table, tables: Tables, task: str) -> list[str]:
    """The settings whose torch/TF best-mode ratio is beyond RATIO_BAND either way, then for ours' train steps where the
    time goes (tables.overhead_table: each stack's floor, the ops an eager step dispatches, what one op costs)."""
    ratios = table.dropna(subset=["torch/TF"])
    if ratios.empty:
        return ["torch/TF: no setting was measured in both stacks.", ""]
    outside = outside_band(ratios)
    if outside.empty:
        return [f"torch/TF: every best-mode ratio is within {RATIO_BAND}x.", ""]
    where = "{0[model]} ({0[impl]}, {0[machine]} {0[device]}, threads {0[threads]}, {0[dtype]})"
    items = [f"{where.format(row)} {row['torch/TF']:.2f}x" for _, row in outside.iterrows()]
    lines = [f"outside {RATIO_BAND}x: {'; '.join(items)}.", ""]
    if task != "train_step" or "speed_overhead" not in tables.numeric:
        return lines
    return lines + [
        "Where the time goes in ours outside the band. The floor is the same train step at batch 1 and the document's "
        "lengths, best mode: what the step costs with almost no arithmetic (dispatching every op of every decoder step, "
        "the optimizer's per-variable work, Keras's train_on_batch plumbing); where the slower stack's floor alone is beyond "
        f"{RATIO_BAND}x the faster stack's whole step, no kernel work can bring the two within {RATIO_BAND}x at these "
        "sizes. The floors' share of the gap: their difference over the two steps' difference (100% or more: the whole "
        "gap is the framework's fixed cost per step; near 0: it is in the work). ops: the framework ops one eager step "
        "dispatches at the document's sizes (forward, backward, clipping, Adam: torch's aten operators, TensorFlow's "
        "eager ops, counted on TensorFlow; a compiled mode fuses them); µs/op: the eager floor's time over its "
        "ops, what the framework costs per op. GEMM GFLOP/s: a 1024x1024 float32 product in the process of each "
        "stack's best step (Keras's backend's own): where the gap is in the work, how fast each framework multiplies "
        "on this machine.",
        "",
        *tables.markdown("speed_overhead"),
    ]


def _failures(table) -> list[str]:
    """The failed rows of a speed table with their errors (nothing if none failed)."""
    failed = table[table["status"] == "failed"]
    where = "{0[model]} {0[stack]} {0[mode]} {0[impl]} ({0[machine]} {0[device]}, threads {0[threads]})"
    items = [f"{where.format(row)}: {row['error'] or 'no reason given'}" for _, row in failed.iterrows()]
    return [f"Failed: {'; '.join(items)}.", ""] if items else []


def _scaling_section(inputs: Inputs, tables: Tables) -> list[str]:
    """ms per step against the size each sweep varies."""
    lines = ["## Scaling", ""]
    if inputs.rows.empty:
        return [*lines, NO_RESULTS, ""]
    for sweep, size in SWEEP_SIZE.items():
        lines += [f"### {sweep} sweep: median ms per step against {size}", ""]
        lines += tables.markdown(f"scaling_{sweep}") or [f"No {sweep} sweep recorded.", ""]
    return lines


def _figures_section(figures: list[ReportFigure]) -> list[str]:
    """Each figure embedded by relative link, or the reason it was skipped."""
    lines = ["## Figures", ""]
    for figure in figures:
        lines += [f"### {figure.title}", ""]
        lines += [figure.note, ""] if figure.note else []
        lines += [f"![{figure.title}](figures/{name})" for name in figure.files] or [f"Skipped: {figure.skipped}."]
        lines.append("")
    return lines


def _missing_section(missing: list[str]) -> list[str]:
    """What could not be read or used, if anything."""
    if not missing:
        return []
    return ["## Missing or unreadable results", "", *(f"- {note}" for note in missing), ""]
