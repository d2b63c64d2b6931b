"""Batched beam-search generation, engine beside engine (issue 62, item 5): tokens per second of beam-4 generation with a
fixed number of new tokens, on opus-mt-en-de's published config with random weights (shared/hf/real_sizes.py), by
transformers' `generate` (eager; static cache; static cache and torch.compile), CTranslate2 (float32, int8: its
converter reads the same folder) and ours in Keras on JAX and TensorFlow (tf_impl.generation, "pending" until written).

Every engine runs in its own Python process (one stack a process, threads fixed before the stack is imported) on the
same source batch (`source_batch`: token ids from a seed, mixed lengths, padded). Equal work: no engine may stop early
(HF: min_new_tokens = max_new_tokens; CTranslate2: min_decoding_length = max_decoding_length), and each row records the
lengths it produced. A second timing with one new token splits each engine's time into the encoder's share and a
decoding step's; a torch.profiler run of HF's eager generate says where its time goes. Results go to one JSON file
(SCHEMA), written after each engine; `section` and `speed_table` render them as the report's section and the README's.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from shared.io.atomic import write_atomic
from shared.tools import machine

SCHEMA = 1
ENGINES = ("hf-eager", "hf-static", "hf-compiled", "ct2-float32", "ct2-int8", "ct2-float32-mkl", "ct2-int8-mkl",
           "keras-jax", "keras-tf")  # fmt: skip
OURS = ("keras-jax", "keras-tf")
BASELINE = "hf-eager"  # the row every other row's speed and tokens are compared with
MODEL = "opus-mt-en-de"
BATCHES, NEW_TOKENS, NUM_BEAMS, REPEATS, THREADS, SEED = (1, 16), 32, 4, 3, 2, 0
SOURCE_LENGTHS = (8, 33)  # each source row's length (its </s> included) is drawn from [low, high)
STACKS = {"hf": "torch", "ct2": "ctranslate2", "keras-jax": "jax", "keras-tf": "tensorflow"}
VERSIONS = {"torch": ("torch", "transformers"), "ctranslate2": ("ctranslate2", "torch", "transformers"),
            "jax": ("jax", "jaxlib", "keras"), "tensorflow": ("tensorflow", "tensorflow-cpu", "keras")}  # fmt: skip
KERAS_BACKENDS = {"keras-jax": "jax", "keras-tf": "tensorflow"}
HF_ROUTES = {  # how the static and compiled rows reach transformers 5.23's generate (generation/utils.py)
    "hf-static": 'cache_implementation="static": an EncoderDecoderCache of two StaticCaches, the self-attention one '
    "as long as the new tokens, the cross-attention one the source's length, both B x beam rows, reordered each step",
    "hf-compiled": "the static cache and model.forward = torch.compile(model.forward): _beam_search calls the model "
    "itself, so GenerationConfig.compile_config (used by _sample and assisted decoding only, and on CPU only with "
    "CompileConfig._compile_all_devices) never compiles it",
}
# Rows without the one-new-token probe, and why (a new static cache length compiles the forward again)
UNPROBED = {"hf-compiled": "not probed: a cache of another length compiles the forward again"}
# The Python that runs each engine where the default one lacks its stack: this project's tox envs
PYTHONS = {"keras-jax": ".tox/keras/bin/python"}
TIMEOUT_S = 1800
ROOT = Path(__file__).resolve().parents[2]
EQUAL_WORK = (
    "transformers: min_new_tokens = max_new_tokens = N sets EOS's score to -inf while fewer than N tokens are new "
    "(MinNewTokensLengthLogitsProcessor) and MaxLengthCriteria stops at N; forced_eos_token_id is set to None, so "
    "the last token is chosen as CTranslate2 chooses it. CTranslate2: min_decoding_length = max_decoding_length = N "
    "disables EOS while step < N and registers every beam at step N - 1 (decoding.cc apply_min_length, is_last_step). "
    "Each row records the lengths of the hypotheses it returned."
)
CT2_DESIGN = (
    "CTranslate2's beam search is a C++ loop (decoding.cc BeamSearch::search): no Python between ops",
    "its first step runs on the B source rows before expanding to B x beam (expand_after_first_step on CPU)",
    "the cross-attention keys and values are projected once and kept at B rows, never repeated per beam nor reordered "
    "(TransformerDecoder::replicate_state), where transformers keeps them at B x beam and index_selects them each step",
    "log_softmax, adding the beam scores and top-k run as fused C++ kernels on the logits in place",
    "int8: the weights quantized per row, the products in 8-bit integer GEMMs (a quarter of float32's bytes to read)",
    "its GEMM backend is chosen by CPU vendor: Intel MKL on Intel, oneDNN (DNNL) elsewhere; CT2_USE_MKL=1 forces MKL "
    "(the -mkl rows), and each row keeps CTranslate2's own log of the backends it used",
)


# ---- the source batch, the same for every engine ----


def source_batch(rows: int, seed: int = SEED, lengths: tuple[int, int] = SOURCE_LENGTHS, vocabulary: int = 58100,
                 eos: int = 0, pad: int = 58100) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """`rows` source rows as a tokenizer gives them: ids drawn from a seed (never a special token), each row's length
    from `lengths`, </s> last, right-padded with `pad`. A run draws its largest batch once and gives each smaller
    batch its first rows (`rows_of`). Returns input_ids [B, S] int64 and attention_mask [B, S] int64."""
    if rows < 1 or not 2 <= lengths[0] < lengths[1]:
        raise ValueError(f"source_batch: rows must be >= 1 and lengths a range [low, high) with low >= 2, got {rows}, {lengths}")
    rng = np.random.default_rng(seed)
    sizes = rng.integers(lengths[0], lengths[1], size=rows)  # [B]
    ids = np.full((rows, int(sizes.max())), pad, dtype=np.int64)  # [B, S]
    for row, size in enumerate(sizes):
        ids[row, : size - 1] = rng.integers(2, vocabulary, size=size - 1)  # 0 </s>, 1 <unk>: never drawn
        ids[row, size - 1] = eos
    return ids, (ids != pad).astype(np.int64)


def rows_of(ids: np.ndarray, mask: np.ndarray, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `batch` rows, padding columns no row of them uses dropped: [b, S'] each."""
    width = int(mask[:batch].sum(axis=1).max())
    return ids[:batch, :width], mask[:batch, :width]


# ---- the parent: the folder, then each engine in its own process ----


def run(out_path, work, *, engines=ENGINES, batches=BATCHES, new_tokens: int = NEW_TOKENS, num_beams: int = NUM_BEAMS,
        repeats: int = REPEATS, threads: int = THREADS, profile: bool = True, notes: tuple[str, ...] = (),
        runner=None) -> dict:  # fmt: skip
    """Measure `engines` into the results file `out_path` (written after each engine), the HF folder built under
    `work` (kept: a rerun reuses it). Where the file was measured with the same settings, its engines are kept and an
    engine measured again keeps its faster run of each batch (`best_of`: a shared machine only ever slows a run, so
    the faster is the tighter upper bound). `runner(step, request) -> dict` runs one step (default `run_child`: a
    fresh process). Returns the results as written."""
    unknown = [engine for engine in engines if engine not in ENGINES]
    if unknown or not (engines or profile):
        raise ValueError(f"engines: unknown {unknown or 'none given'}; known: {', '.join(ENGINES)}")
    if new_tokens < 2 or num_beams < 1 or repeats < 1 or threads < 1 or not batches or min(batches) < 1:
        raise ValueError(f"new_tokens must be >= 2 (one step is the encoder's probe) and batches, num_beams, repeats, "
                         f"threads >= 1; got {new_tokens}, {batches}, {num_beams}, {repeats}, {threads}")  # fmt: skip
    runner = runner or (lambda step, request: run_child(step, request, threads))
    out_path, work = Path(out_path).resolve(), Path(work).resolve()  # the children run in the package's root
    folder = work / "hf"
    settings = {"model": MODEL, "batches": sorted(set(batches)), "new_tokens": new_tokens, "num_beams": num_beams,
                "repeats": repeats, "warmup_calls": 2, "threads": threads, "seed": SEED, "source_lengths": list(SOURCE_LENGTHS),
                "probe_batch": max(batches), "profile_batch": max(batches)}  # fmt: skip
    results = {"schema": SCHEMA, "environment": environment(threads), "settings": settings, "equal_work": EQUAL_WORK,
               "notes": list(notes), "build": None, "engines": {}, "profile": None, "ct2_design": list(CT2_DESIGN)}  # fmt: skip
    results |= _kept(out_path, settings, list(notes))
    results["build"] = _folder(folder, runner)
    request = {"folder": str(folder), "work": str(work), **settings}
    for engine in engines:
        results["engines"][engine] = best_of(results["engines"].get(engine), runner(engine, request | {"engine": engine}))
        write_results(out_path, compare(results))
    if profile and not (results["build"] or {}).get("error"):
        results["profile"] = runner("profile", request | {"engine": BASELINE})
    return write_results(out_path, compare(results))


def best_of(previous: dict | None, found: dict) -> dict:
    """`found`, an engine's new record, with each batch's run replaced by `previous`'s where that was faster (its
    step split with the probe batch's run), and `attempts` counted; a new record that is not measured is shown as it
    is, never hidden behind an older one."""
    if not previous or previous.get("status") != "measured" or found.get("status") != "measured":
        return found
    merged = found | {"runs": dict(found["runs"]), "attempts": previous.get("attempts", 1) + 1}
    for batch, run in (previous.get("runs") or {}).items():
        if batch in merged["runs"] and run["median_ms"] < merged["runs"][batch]["median_ms"]:
            merged["runs"][batch] = run
            if str(found.get("step_split", {}).get("batch")) == batch:
                merged["step_split"] = previous.get("step_split")
    return merged


def _kept(path: Path, settings: dict, notes: list[str]) -> dict:
    """What a previous results file of this SCHEMA and these settings holds: its engines (their ids gone: compared
    again only through their digests), profile and notes, this run's notes after them."""
    previous = json.loads(path.read_text()) if path.is_file() else {}
    if previous.get("schema") != SCHEMA or previous.get("settings") != settings:
        return {}
    return {"engines": previous.get("engines") or {}, "profile": previous.get("profile"),
            "notes": list(dict.fromkeys([*previous.get("notes", []), *notes]))}  # fmt: skip


def _folder(folder: Path, runner) -> dict:
    """opus-mt-en-de's folder as `rosetta hf-ports` builds it (transformers, random weights, save_pretrained), built in
    its own process unless already there."""
    from shared.hf import real_sizes

    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return {"reused": str(folder)}
    return runner("build", {"config": real_sizes.REAL_SIZES[MODEL][1], "folder": str(folder)})


def compare(results: dict) -> dict:
    """Each measured row's speed over hf-eager's and the share of its tokens equal to hf-eager's, per batch (the ids a
    child returned kept for this as `ids_for_comparison`, which the file leaves out; their digest stays)."""
    runs = [found for record in results["engines"].values() for found in (record.get("runs") or {}).values()]
    for found in runs:
        if "ids" in found:
            found["ids_for_comparison"] = found.pop("ids")
            found["ids_sha"] = hashlib.sha256(json.dumps(found["ids_for_comparison"]).encode()).hexdigest()[:16]
    base = (results["engines"].get(BASELINE) or {}).get("runs") or {}
    for engine, record in results["engines"].items():
        for batch, found in (record.get("runs") or {}).items():
            reference = base.get(batch) or {}
            if engine != BASELINE and reference.get("ids_for_comparison") and found.get("ids_for_comparison"):
                found["same_tokens_as_hf_eager"] = same_share(found["ids_for_comparison"], reference["ids_for_comparison"])
            elif engine != BASELINE and reference.get("ids_sha") and reference.get("ids_sha") == found.get("ids_sha"):
                found["same_tokens_as_hf_eager"] = 1.0  # a kept row: its digest equal to hf-eager's
            if engine != BASELINE and reference.get("tokens_per_s"):
                found["speed_vs_hf_eager"] = found["tokens_per_s"] / reference["tokens_per_s"]
    return results


def same_share(ids: list[list[int]], reference: list[list[int]]) -> float:
    """The share of positions where two engines' best hypotheses hold the same token (rows of unequal length count
    their missing positions as different)."""
    total = sum(max(len(a), len(b)) for a, b in zip(ids, reference, strict=True))
    same = sum(x == y for a, b in zip(ids, reference, strict=True) for x, y in zip(a, b, strict=False))
    return same / total if total else 1.0


def write_results(path: Path, results: dict) -> dict:
    """The results as written: the ids kept for comparison left out of the file."""
    shown = json.loads(json.dumps(results))
    for record in shown["engines"].values():
        for found in (record.get("runs") or {}).values():
            found.pop("ids_for_comparison", None)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(shown, indent=1, allow_nan=False) + "\n").encode())
    return shown


def environment(threads: int) -> dict:
    """The machine (CPU, cores), the threads each engine gets, the load average at the start, commit and time."""
    cpu, cores = machine.cpu_model(), os.cpu_count() or 1
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {"machine": machine.machine_slug(cpu, cores, None), "cpu": cpu, "cores": cores, "threads": threads,
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "commit": machine.git_commit(), "created": created}  # fmt: skip


def python_for(engine: str) -> str:
    """The interpreter that runs `engine`: PYTHONS's tox env where it exists, else this one."""
    found = ROOT / PYTHONS[engine] if engine in PYTHONS else None
    return str(found) if found is not None and found.is_file() else sys.executable


def run_child(step: str, request: dict, threads: int, timeout_s: float = TIMEOUT_S) -> dict:
    """`step` in a fresh Python process, its threads fixed before any framework is imported (a Keras row on its
    backend): its result, or {"status": "failed", "error": its last line} where it failed or ran past `timeout_s`."""
    if step == "build":
        from shared.tools import hf_ports

        return hf_ports.run_child("build", request, threads, timeout_s)
    work = Path(request["work"])
    work.mkdir(parents=True, exist_ok=True)
    name = step if step == request["engine"] else f"{step}-{request['engine']}"
    paths = [work / f".{name}-request.json", work / f".{name}-result.json"]
    paths[0].write_text(json.dumps(request))
    paths[1].unlink(missing_ok=True)
    env = {**os.environ, **machine.thread_environment(threads), "TF_CPP_MIN_LOG_LEVEL": "2", "CT2_VERBOSE": "1"}
    env |= {"KERAS_BACKEND": KERAS_BACKENDS[request["engine"]]} if request["engine"] in KERAS_BACKENDS else {}
    env |= {"CT2_USE_MKL": "1"} if request["engine"].endswith("-mkl") else {}
    command = [python_for(request["engine"]), "-m", "shared.tools.generation_engines", step, *map(str, paths)]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"ran past {timeout_s:.0f} s"}
    if done.returncode != 0 or not paths[1].is_file():
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:] or [f"exit {done.returncode}"]
        return {"status": "failed", "error": f"exit {done.returncode}: {tail[0][:300]}"}
    log = _ct2_log(done.stderr)
    return json.loads(paths[1].read_text()) | ({"backend_log": log} if log else {})


def _ct2_log(stderr: str) -> list[str]:
    """CTranslate2's own lines on its CPU, ISA and GEMM backends (CT2_VERBOSE), where it printed them."""
    return [line.rsplit("] ", 1)[-1] for line in stderr.splitlines() if "[ctranslate2]" in line][:12]


# ---- the child: one engine ----


def main() -> int:
    """`python -m shared.tools.generation_speed`: every engine into reports/generation_speed.json (the report's job)."""
    run(ROOT / "reports" / "generation_speed.json", ROOT / "runs" / "generation-speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
