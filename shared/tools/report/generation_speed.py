"""The report's generation speed section and the README's table, from the generation speed bench's results file
(shared/tools/generation_speed.py): tokens per second of batched beam-4 generation, engine beside engine."""

from __future__ import annotations

from shared.tools.generation_speed import CT2_DESIGN, ENGINES, MODEL, OURS, SCHEMA
from shared.tools.report import results_files
from shared.tools.report.results_files import markdown


def load(path, missing: list[str]) -> dict | None:
    """The results file, or None (absent: not measured; unreadable or of another schema: named in `missing`)."""
    return results_files.load(path, missing, (SCHEMA,), "engines")


def _state(record: dict | None) -> str:
    """Why a row has no numbers: pending (ours, not written), not run, or failed with its error."""
    if record is None:
        return "not run"
    if record.get("status") == "pending":
        return "pending"
    return f"{record.get('status', 'failed')}: {record.get('reason') or record.get('error') or 'no reason recorded'}"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _lengths(found: dict, new_tokens) -> str:
    """The lengths a row generated, flagged where any differs from the settings' new tokens (it did other work)."""
    shown = ",".join(map(str, found["lengths"]))
    return shown if found["lengths"] == [new_tokens] else f"{shown} (not {new_tokens}: unequal work)"


def speed_rows(data: dict) -> list[list[str]]:
    """One row per engine x batch: tokens/s, median s (quartiles), first call, speed and tokens against hf-eager, the
    lengths generated, and any disturbance; an engine without numbers is one row saying why (ours: "pending" until
    tf_impl.generation is written; "not run" where the run left it out)."""
    rows, new_tokens = [], data.get("settings", {}).get("new_tokens")
    for engine in ENGINES:
        record = data["engines"].get(engine)
        if record is None and engine not in OURS:
            continue
        if not record or record.get("status") != "measured":
            rows.append([engine, "-", _state(record), *["-"] * 6])
            continue
        for batch, found in record["runs"].items():
            same = found.get("same_tokens_as_hf_eager")
            spread = f"{found['median_ms'] / 1e3:.2f} ({found['q25_ms'] / 1e3:.2f}-{found['q75_ms'] / 1e3:.2f})"
            rows.append([engine, batch, f"{found['tokens_per_s']:,.1f}", spread, f"{found['first_call_s']:.1f}",
                         _ratio(found.get("speed_vs_hf_eager")), "-" if same is None else f"{same:.0%}",
                         _lengths(found, new_tokens), found.get("disturbed") or "-"])  # fmt: skip
    return rows


SPEED_HEADER = ["engine", "batch", "tokens/s", "median s (q25-q75)", "first call s", "vs hf-eager",
                "tokens = hf-eager's", "new tokens", "disturbed"]  # fmt: skip


def speed_table(data: dict | None) -> str:
    """The README block: the speed table, or that nothing was measured."""
    if data is None:
        return "Not measured yet (`generation_speed.run`)."
    return "\n".join(markdown(SPEED_HEADER, speed_rows(data)))


def split_rows(data: dict) -> list[list[str]]:
    """Each measured engine's time at the probe batch split into the encoder with one step, and each further step."""
    rows = []
    for engine, record in data["engines"].items():
        split = record.get("step_split") if record.get("status") == "measured" else None
        if split and "one_token_ms" in split:
            rows.append([engine, str(split["batch"]), f"{split['one_token_ms']:.0f}", f"{split['per_step_ms']:.1f}"])
    return rows


def profile_lines(profile: dict | None) -> list[str]:
    """HF's eager generate, part by part (ms of the profiled call and share of its wall), then its loop's top ops."""
    if not profile or profile.get("status") == "failed" or "parts_ms" not in profile:
        return [f"Profile: {_state(profile) if profile else 'not run'}.", ""]
    wall = profile["profiled_wall_ms"]
    rows = [[name, f"{ms:.0f}", f"{ms / wall:.0%}"] for name, ms in sorted(profile["parts_ms"].items(), key=lambda i: -i[1])]
    flops = profile.get("flops_per_step") or {}
    lines = [f"Where HF's eager generate spends its time: torch.profiler over one warm call, batch {profile['batch']}, "
             f"{profile['new_tokens']} new tokens ({wall / 1e3:.1f} s profiled, the profiler's own cost included).", "",
             *markdown(["part", "ms", "share"], rows), ""]  # fmt: skip
    ops = ", ".join(f"{name} {ms:.0f} ms" for name, ms in profile.get("generate_ops_ms", {}).items())
    lines += [f"- generate's own ops, largest first: {ops or '-'}."]
    if flops:
        lines += [f"- One step at {flops['rows']} rows: output projection {flops['output_projection_gflop']:.2f} GFLOP, "
                  f"decoder layers {flops['decoder_layers_gflop']:.2f} GFLOP (from the config)."]  # fmt: skip
    return [*lines, ""]


def section(data: dict | None) -> list[str]:
    """The report's section: settings, machine, the speed table, the step split, HF's profile, CTranslate2's design."""
    lines = ["## Generation speed: batched beam search, engine beside engine", ""]
    if data is None:
        return [*lines, "Not measured (no `reports/generation_speed.json`).", ""]
    env, settings = data.get("environment", {}), data.get("settings", {})
    lines += [
        f"{settings.get('model', MODEL)}'s published config with random weights, beam {settings.get('num_beams')}, "
        f"{settings.get('new_tokens')} new tokens for every row (equal work: {data.get('equal_work', '-')}), batches "
        f"{', '.join(map(str, settings.get('batches', [])))}, source lengths from {settings.get('source_lengths')} "
        f"(seed {settings.get('seed')}), median of {settings.get('repeats')} calls after 2 warm-up calls; each engine in "
        f"its own process. tokens/s = batch x new tokens / median s.",
        "",
        f"Machine: `{env.get('machine', '?')}` ({env.get('cpu', '?')}), {env.get('cores', '?')} cores, "
        f"{env.get('threads', '?')} intra-op threads (torch: 1 inter-op thread; CTranslate2: inter_threads 1); load "
        f"average at the start {env.get('load_average')}; commit {env.get('commit', '-')}; recorded {env.get('created', '-')}.",
        "",
    ]
    lines += [f"- {note}" for note in data.get("notes") or []] + ([""] if data.get("notes") else [])
    lines += [*markdown(SPEED_HEADER, speed_rows(data)), ""]
    split = split_rows(data)
    if split:
        lines += ["Each engine's time split: one new token (the encoder and one step) and each further step.", "",
                  *markdown(["engine", "batch", "1 new token ms", "per further step ms"], split), ""]  # fmt: skip
    lines += profile_lines(data.get("profile"))
    lines += ["CTranslate2 offers no op profile in its wheels; its design, where the gap comes from:", ""]
    return [*lines, *(f"- {reason}." for reason in data.get("ct2_design") or CT2_DESIGN), ""]
