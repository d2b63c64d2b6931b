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
import time
from importlib import metadata
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
    `work` (kept: a rerun reuses it). The file's other engines are kept where it was measured with the same settings
    (a disturbed row measured again alone). `runner(step, request) -> dict` runs one step (default `run_child`: a
    fresh process). Returns the results as written."""
    unknown = [engine for engine in engines if engine not in ENGINES]
    if unknown or not (engines or profile):
        raise ValueError(f"engines: unknown {unknown or 'none given'}; known: {', '.join(ENGINES)}")
    if new_tokens < 2 or num_beams < 1 or repeats < 1 or threads < 1 or not batches or min(batches) < 1:
        raise ValueError(f"new_tokens must be >= 2 (one step is the encoder's probe) and batches, num_beams, repeats, "
                         f"threads >= 1; got {new_tokens}, {batches}, {num_beams}, {repeats}, {threads}")  # fmt: skip
    runner = runner or (lambda step, request: run_child(step, request, threads))
    out_path, work = Path(out_path), Path(work)
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
        results["engines"][engine] = runner(engine, request | {"engine": engine})
        write_results(out_path, compare(results))
    if profile and not (results["build"] or {}).get("error"):
        results["profile"] = runner("profile", request | {"engine": BASELINE})
    return write_results(out_path, compare(results))


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
    command = [python_for(request["engine"]), "-m", "shared.tools.generation_speed", step, *map(str, paths)]
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


def timed(generate, request: dict) -> dict:
    """Each batch timed (2 warm-up calls, then `repeats` samples: median and quartiles), the load of other processes
    during it, the lengths generated; then the probe batch with one new token (the encoder and the first step)."""
    ids, mask = source_batch(max(request["batches"]), request["seed"], tuple(request["source_lengths"]))
    n, runs = request["new_tokens"], {}
    for batch in request["batches"]:
        rows, rows_mask = rows_of(ids, mask, batch)
        runs[str(batch)] = _timing(lambda rows=rows, rows_mask=rows_mask: generate(rows, rows_mask, n), request)
        runs[str(batch)] |= {"tokens_per_s": batch * n / (runs[str(batch)]["median_ms"] / 1e3), "source_shape": list(rows.shape)}
    return {"status": "measured", "reason": None, "runs": runs, "step_split": _probe(generate, request, runs, ids, mask)}


def _probe(generate, request: dict, runs: dict, ids: np.ndarray, mask: np.ndarray) -> dict:
    """The probe batch with one new token (the encoder and one step): the rest of the N-token time, per step."""
    probe, n = request["probe_batch"], request["new_tokens"]
    if request["engine"] in UNPROBED:
        return {"batch": probe, "skipped": UNPROBED[request["engine"]]}
    rows, rows_mask = rows_of(ids, mask, probe)
    one = _timing(lambda: generate(rows, rows_mask, 1), request)
    many = runs[str(probe)]["median_ms"]
    return {"batch": probe, "one_token_ms": one["median_ms"], "per_step_ms": (many - one["median_ms"]) / (n - 1),
            "one_token_lengths": one["lengths"], "disturbed": one["disturbed"]}  # fmt: skip


def _timing(call, request: dict) -> dict:
    """`call` timed (machine.time_calls), the cores other processes kept busy before and during it, and what its last
    call returned: the best hypothesis of each row (start token left out) and their lengths."""
    last: dict = {}

    def kept():
        last["ids"] = call()

    before = machine.others_busy()
    meter = machine.OthersMeter.start()
    timing = machine.time_calls(kept, warmup=2, repeats=request["repeats"], big_repeats=request["repeats"])
    load = {"before": before, "during": meter.stop()}
    ids = [list(map(int, row)) for row in last["ids"]]
    return {**timing, "first_call_s": timing["compile_s"] + timing["median_ms"] / 1e3, "lengths": sorted({len(r) for r in ids}),
            "others_busy": load, "disturbed": machine.disturbance(timing, load), "ids": ids}  # fmt: skip


def _torch_threads(threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)  # generate runs no ops side by side: one inter-op thread
    except RuntimeError:  # already started (a process that ran torch before): kept and recorded as it is
        pass
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


def hf_model(request: dict):
    """transformers' MarianMTModel from the folder, float32, eager attention, and the options `generate` gets: beam
    size, forced_eos_token_id None, and for hf-static and hf-compiled cache_implementation="static"; hf-compiled also
    torch.compile on the model's forward (transformers 5.23's beam search calls the model directly: its compile_config
    reaches only sampling and greedy search, and on CPU only with a private flag)."""
    import torch
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(request["folder"], attn_implementation="eager").eval()
    options = {"num_beams": request["num_beams"], "forced_eos_token_id": None}
    if request["engine"] in ("hf-static", "hf-compiled"):
        options["cache_implementation"] = "static"
    if request["engine"] == "hf-compiled":
        model.forward = torch.compile(model.forward, mode="default")
    return model, options


def hf_generate(model, options: dict):
    """`generate(ids, mask, n)` -> each row's best hypothesis, as a user calls it (torch.inference_mode)."""
    import torch

    pad = model.config.pad_token_id

    def generate(ids: np.ndarray, mask: np.ndarray, n: int) -> list[list[int]]:
        with torch.inference_mode():
            out = model.generate(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                min_new_tokens=n,
                max_new_tokens=n,
                **options,
            )  # [B, 1 + n] fmt: skip
        return [[token for token in row[1:] if token != pad] for row in out.tolist()]  # pad: after a finished beam

    return generate


def hf_engine(request: dict):
    """An HF row: its generate and what it ran with (threads, attention, options, torch's BLAS)."""
    threads = _torch_threads(request["threads"])
    model, options = hf_model(request)
    info = {"threads": threads, "attention": model.config._attn_implementation, "blas": _torch_blas(),
            "options": {**options, "torch_compile": request["engine"] == "hf-compiled"}}  # fmt: skip
    return hf_generate(model, options), info | ({"route": HF_ROUTES[request["engine"]]} if request["engine"] in HF_ROUTES else {})


def _torch_blas() -> str:
    import torch

    shown = [line.strip() for line in torch.__config__.show().splitlines() if "BLAS_INFO" in line or "LAPACK_INFO" in line]
    return "; ".join(shown) or "-"


class _Vocabulary:
    """What CTranslate2's converter reads of a tokenizer, for a folder that has none (random weights, nothing
    downloaded): opus-mt's special tokens at their ids, a stand-in name for every other id."""

    eos_token, unk_token, pad_token = "</s>", "<unk>", "<pad>"

    def __init__(self, size: int, pad_id: int):
        names = [f"t{i}" for i in range(size)]
        names[0], names[1], names[pad_id] = self.eos_token, self.unk_token, self.pad_token
        self.names = names

    def get_vocab(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.names)}


def convert_ct2(folder: str, output: str, quantization: str) -> dict:
    """The HF folder converted by CTranslate2's TransformersConverter (its MarianMTLoader, transformers 5.23's
    MarianMTModel.from_pretrained), the tokenizer the folder lacks given as `_Vocabulary`."""
    from ctranslate2.converters import TransformersConverter

    config = json.loads((Path(folder) / "config.json").read_text())

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _Vocabulary(config["vocab_size"], config["pad_token_id"])

    started = time.perf_counter()
    Converter(folder).convert(output, quantization=quantization, force=True)
    return {"convert_s": time.perf_counter() - started, "quantization": quantization,
            "model_bin_bytes": (Path(output) / "model.bin").stat().st_size}  # fmt: skip


def ct2_engine(request: dict):
    """CTranslate2's Translator on the converted folder (float32 or int8; a -mkl row with CT2_USE_MKL=1 set by
    `run_child`), 2 intra-op threads and one translation at a time (inter_threads=1): `translate_batch` on the
    source's token strings, beam 4, min = max decoding length."""
    import ctranslate2

    quantization = request["engine"].split("-")[1]
    output = str(Path(request["work"]) / f"ct2-{quantization}")
    conversion = convert_ct2(request["folder"], output, quantization)
    config = json.loads((Path(request["folder"]) / "config.json").read_text())
    vocabulary = _Vocabulary(config["vocab_size"], config["pad_token_id"])
    index = vocabulary.get_vocab()
    translator = ctranslate2.Translator(output, device="cpu", compute_type=quantization, intra_threads=request["threads"],
                                        inter_threads=1)  # fmt: skip

    def generate(ids: np.ndarray, mask: np.ndarray, n: int) -> list[list[int]]:
        source = [[vocabulary.names[token] for token in row[: int(m.sum())]] for row, m in zip(ids, mask, strict=True)]
        found = translator.translate_batch(source, beam_size=request["num_beams"], min_decoding_length=n,
                                           max_decoding_length=n, max_batch_size=0)  # fmt: skip
        return [[index[token] for token in result.hypotheses[0]] for result in found]

    info = {"threads": {"intra_threads": request["threads"], "inter_threads": 1}, "conversion": conversion,
            "compute_type": translator.compute_type}  # fmt: skip
    return generate, info


def keras_engine(request: dict):
    """Ours: the Keras MarianMTModel read from the folder, `tf_impl.generation.generate` (jitted on JAX, XLA on
    TensorFlow); None while that function is not written (the row reads "pending")."""
    try:
        from tf_impl import generation
    except ModuleNotFoundError as error:
        if error.name != "tf_impl.generation":
            raise  # the module is there and fails: its own error, not "pending"
        return None
    if not hasattr(generation, "generate"):
        return None
    from shared.generation import settings
    from shared.hf import folders
    from tf_impl.hf import families
    from tf_impl.keras_compat import backends

    backends.set_threads(request["threads"])
    found = folders.read_folder(request["folder"])
    model = families.build(found.config, "float32")
    families.load_hf_weights(model, found.arrays)
    plan, pad, beams = settings.read(request["folder"]), found.config["pad_token_id"], request["num_beams"]

    def generate(ids: np.ndarray, mask: np.ndarray, n: int) -> list[list[int]]:
        out = generation.generate(
            model,
            ids,
            mask,
            settings=plan,
            model_config=found.config,
            num_beams=beams,
            min_new_tokens=n,
            max_new_tokens=n,
            forced_eos_token_id=None,
        )  # [B, 1 + n] fmt: skip
        return [[token for token in row[1:] if token != pad] for row in np.asarray(out).tolist()]

    return generate, {"threads": backends.thread_settings(), "backend": KERAS_BACKENDS[request["engine"]]}


def versions(engine: str) -> dict:
    stack = STACKS.get(engine) or STACKS[engine.split("-")[0]]
    found = {}
    for package in ("numpy", *VERSIONS[stack]):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def run_engine(request: dict) -> dict:
    """One engine's record: its speed per batch and its step split, or why it was not run."""
    engine = request["engine"]
    started = time.perf_counter()
    if engine.startswith("hf-"):
        made = hf_engine(request)
    elif engine.startswith("ct2-"):
        made = ct2_engine(request)
    else:
        made = keras_engine(request)
    if made is None:
        return {"status": "pending", "reason": "tf_impl.generation.generate is not written yet", "versions": versions(engine)}
    generate, info = made
    setup = time.perf_counter() - started
    return {"engine": engine, "setup_s": setup, **info, "versions": versions(engine), **timed(generate, request)}


# ---- the child: where HF's eager generate spends its time ----

PARTS = {  # a module's record_function label: what the profile calls it
    "encoder": "encoder (once a call)",
    "self_attn": "decoder self-attention",
    "encoder_attn": "decoder cross-attention",
    "fc": "decoder feed-forward (fc1, fc2)",
    "norm": "decoder layer norms",
    "lm_head": "output projection (d_model x 58,101)",
}
STEP = "decoder step"  # the model's call in each step: the parts above inside it
STEP_REST = "decoder step: Python between its ops"
STEP_OPS = "decoder step: other ops (embeddings, activation, residual adds, masks)"
LOOP_OPS = "generate's own ops (beam search, logits processors, cache reorder)"
LOOP_PYTHON = "generate's loop: Python between ops"


def _label(module, name: str, stack: list) -> None:
    """A torch.profiler record_function around every call of `module`, named `name`."""
    import torch

    def enter(*_):
        stack.append(torch.profiler.record_function(name))
        stack[-1].__enter__()

    def leave(*_):
        stack.pop().__exit__(None, None, None)

    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave)


def profile_hf(request: dict) -> dict:
    """torch.profiler over one warm call of HF's eager generate at the profile batch: each part of the model (module
    hooks), the ops generate runs between the model's calls (beam search, logits processors, cache reorder) by name,
    and the rest of the wall time (Python between ops)."""
    import torch

    request = request | {"engine": BASELINE}
    threads = _torch_threads(request["threads"])
    model, options = hf_model(request)
    stack: list = []
    _label(model, STEP, stack)
    _label(model.model.encoder, PARTS["encoder"], stack)
    _label(model.lm_head, PARTS["lm_head"], stack)
    for layer in model.model.decoder.layers:
        _label(layer.self_attn, PARTS["self_attn"], stack)
        _label(layer.encoder_attn, PARTS["encoder_attn"], stack)
        for fc in (layer.fc1, layer.fc2):
            _label(fc, PARTS["fc"], stack)
        for norm in (layer.self_attn_layer_norm, layer.encoder_attn_layer_norm, layer.final_layer_norm):
            _label(norm, PARTS["norm"], stack)
    batch, n = request["profile_batch"], request["new_tokens"]
    ids, mask = rows_of(*source_batch(batch, request["seed"], tuple(request["source_lengths"])), batch)
    generate = hf_generate(model, options)
    generate(ids, mask, n)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        started = time.perf_counter()
        with torch.profiler.record_function("generate"):
            generate(ids, mask, n)
        wall = time.perf_counter() - started
    return {"status": "measured", "engine": BASELINE, "batch": batch, "new_tokens": n, "threads": threads,
            **breakdown(profiler.events(), wall), "flops_per_step": step_flops(model.config, request)}  # fmt: skip


def _add(totals: dict, name: str, us: float) -> None:
    totals[name] = totals.get(name, 0.0) + us / 1e3


def breakdown(events, wall_s: float) -> dict:
    """The profiled call's time split (ms): the model's parts (the labels' inclusive times), a decoder step's ops
    outside them, generate's own ops between the model's calls (by name), and the wall time no op or label covers
    (Python in generate's loop). The parts add up to the profiled wall."""
    root = next(event for event in events if event.name == "generate")
    parts: dict[str, float] = {}
    step_ops: dict[str, float] = {}
    loop_ops: dict[str, float] = {}
    labels = set(PARTS.values())
    for child in root.cpu_children:
        if child.name in labels:
            _add(parts, child.name, child.cpu_time_total)
        elif child.name == STEP:
            inside = 0.0
            for inner in child.cpu_children:
                _add(parts if inner.name in labels else step_ops, inner.name, inner.cpu_time_total)
                inside += inner.cpu_time_total
            _add(parts, STEP_REST, child.cpu_time_total - inside)
        else:
            _add(loop_ops, child.name, child.cpu_time_total)
    covered = sum(parts.values()) + sum(step_ops.values()) + sum(loop_ops.values())
    parts[STEP_OPS] = sum(step_ops.values())
    parts[LOOP_OPS] = sum(loop_ops.values())
    parts[LOOP_PYTHON] = wall_s * 1e3 - covered
    top = dict(sorted(loop_ops.items(), key=lambda item: -item[1])[:8])
    return {"profiled_wall_ms": wall_s * 1e3, "parts_ms": parts, "generate_ops_ms": top,
            "step_other_ops_ms": dict(sorted(step_ops.items(), key=lambda item: -item[1])[:8])}  # fmt: skip


def step_flops(config, request: dict) -> dict:
    """Multiply-adds x 2 of one decoding step at the profile batch x beam rows (from the config: no measurement):
    the output projection beside the decoder layers' products (cross-attention keys and values computed once)."""
    rows = request["profile_batch"] * request["num_beams"]
    d, ffn, layers, vocabulary = config.d_model, config.decoder_ffn_dim, config.decoder_layers, config.vocab_size
    per_layer = 4 * d * d + 2 * d * d + 2 * d * ffn  # self q k v o, cross q o, fc1 fc2
    return {"rows": rows, "output_projection_gflop": 2 * rows * d * vocabulary / 1e9,
            "decoder_layers_gflop": 2 * rows * layers * per_layer / 1e9}  # fmt: skip


def run_step(step: str, request: dict) -> dict:
    if step == "profile":
        return profile_hf(request)
    if step not in ENGINES:
        raise ValueError(f"step {step!r}: one of profile, {', '.join(ENGINES)}")
    return run_engine(request)


def main(argv: list[str]) -> int:
    """`python -m shared.tools.generation_speed STEP REQUEST.json RESULT.json`: what `run_child` starts."""
    step, request_path, result_path = argv
    result = run_step(step, json.loads(Path(request_path).read_text()))
    Path(result_path).write_text(json.dumps(result))
    return 0


# ---- the report: plain text from the results file ----


def load(path, missing: list[str]) -> dict | None:
    """The results file, or None (absent: not measured; unreadable or of another schema: named in `missing`)."""
    if path is None or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as error:
        missing.append(f"{Path(path).name}: not readable JSON ({error})")
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("engines"), dict):
        missing.append(f"{Path(path).name}: schema {data.get('schema') if isinstance(data, dict) else None!r} is not "
                       f"the one this report reads ({SCHEMA})")  # fmt: skip
        return None
    return data


def _markdown(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]


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
    return "\n".join(_markdown(SPEED_HEADER, speed_rows(data)))


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
             *_markdown(["part", "ms", "share"], rows), ""]  # fmt: skip
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
    lines += [*_markdown(SPEED_HEADER, speed_rows(data)), ""]
    split = split_rows(data)
    if split:
        lines += ["Each engine's time split: one new token (the encoder and one step) and each further step.", "",
                  *_markdown(["engine", "batch", "1 new token ms", "per further step ms"], split), ""]  # fmt: skip
    lines += profile_lines(data.get("profile"))
    lines += ["CTranslate2 offers no op profile in its wheels; its design, where the gap comes from:", ""]
    return [*lines, *(f"- {reason}." for reason in data.get("ct2_design") or CT2_DESIGN), ""]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
