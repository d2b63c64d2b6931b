"""The engines of the generation speed bench (shared/tools/generation_speed.py), each run in its own process by
`python -m shared.tools.generation_engines STEP REQUEST.json RESULT.json`: transformers' `generate`, CTranslate2 and
ours in Keras timed on the same sources, and torch.profiler's breakdown of HF's eager generate."""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from shared.tools import machine
from shared.tools.generation_speed import (
    BASELINE,
    ENGINES,
    HF_ROUTES,
    KERAS_BACKENDS,
    STACKS,
    UNPROBED,
    VERSIONS,
    rows_of,  # fmt: skip
    source_batch,
)


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
    """torch's BLAS and LAPACK as its build settings name them (mkl, openblas...)."""
    import re

    import torch

    found = re.findall(r"\b((?:BLAS|LAPACK)_INFO=[^,\s]+)", torch.__config__.show())
    return ", ".join(found) or "-"


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
    """`python -m shared.tools.generation_engines STEP REQUEST.json RESULT.json`: what `run_child` starts."""
    step, request_path, result_path = argv
    result = run_step(step, json.loads(Path(request_path).read_text()))
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
