"""`rosetta hf-ports`: Hugging Face models at their published sizes (shared/hf/real_sizes.py) built with random weights,
ported folder -> .keras -> folder by `rosetta port`'s own pipeline, each step in a fresh process so their peaks do not
mix, with keras-hub's own loading of the same folders beside them (shared/hf/peer.py).

Per model: the folder is built by transformers and `save_pretrained` (not timed), then each direction's
`porting.port()` is timed in its own process (wall seconds of the call, the process's RSS before it and its peak),
with the port's verdict and each check's largest differences. A model whose float64 verification would not fit in
the machine's available memory is skipped with the reason, never crashed into. Results go to one JSON file with a
SCHEMA version, written after each model; a rerun keeps the models measured or skipped under the same config.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from shared.hf import real_sizes
from shared.hf.structure import state_dict_shapes
from shared.io.atomic import write_atomic
from shared.tools import machine

SCHEMA = 1
STEPS = ("build", "to_keras", "to_hf", "peer")
DIRECTIONS = {"to_keras": "HF folder -> .keras", "to_hf": ".keras -> HF folder"}
# A port holds, at its peak: the source's arrays and the written file's read back, both users' models (the file's
# precision), the float64 arrays (tied entries repeated) and the float64 model built from them; 4+4+4+4+8+8 bytes a
# value, and the Keras model written and its float64 twin beside them: 48 bytes a state_dict value, counted so.
BYTES_PER_VALUE = 48
FRAMEWORKS_MB = 1536  # torch, TensorFlow, Keras and transformers imported in one process, before any model
VERSIONS = ("numpy", "torch", "tensorflow", "tensorflow-cpu", "keras", "transformers", "keras-hub", "safetensors")
TIMEOUT_S = 3600
RESTORED = ("tie_word_embeddings",)  # config.json fields transformers 5 rewrites on save that the published file holds
ROOT = Path(__file__).resolve().parents[2]


# ---- the parent: one model after another, each step a child process ----


def measure(models: dict, output, work, *, threads: int | None = None, memory_mb: float | None = None,
            notes: tuple[str, ...] = (), runner=None) -> dict:  # fmt: skip
    """Measure `models` ({name: (checkpoint, config.json dict)}) into the results file `output`, building folders
    under `work`; models already in `output` under the same config, measured, or skipped and still too large, are
    kept (resume); a failed one is measured again.

    Args:
        threads: each child's thread count (default: the machine's cores).
        memory_mb: the memory a port may use (default: MemAvailable now); a model estimated above it is skipped.
        runner: `runner(step, request) -> dict` (default: `run_child`, a fresh process per step).
    """
    threads = threads or os.cpu_count() or 1
    memory_mb = memory_mb if memory_mb is not None else available_mb()
    runner = runner or (lambda step, request: run_child(step, request, threads))
    results = _resumed(Path(output), environment(threads, memory_mb), list(notes))
    for name, (checkpoint, config) in models.items():
        if _kept(results["models"].get(name), config, memory_mb):
            continue
        results["models"][name] = measure_model(name, checkpoint, config, Path(work) / name, memory_mb, runner)
        write_results(Path(output), results)
    order = [*models, *(name for name in results["models"] if name not in models)]  # this run's, then the file's others
    results["models"] = {name: results["models"][name] for name in order if name in results["models"]}
    write_results(Path(output), results)
    return results


def _kept(record: dict | None, config: dict, memory_mb: float) -> bool:
    """Whether a previous record stands: the same config, measured, or skipped and still too large for this memory."""
    if record is None or record["config_sha"] != config_sha(config):
        return False
    return record["status"] == "measured" or (record["status"] == "skipped" and record["estimate_peak_mb"] > memory_mb)


def _resumed(output: Path, env: dict, notes: list[str]) -> dict:
    """The results file to continue: its models where it is of this SCHEMA, else a new one; this run's environment."""
    previous = json.loads(output.read_text()) if output.is_file() else {}
    models = previous.get("models", {}) if previous.get("schema") == SCHEMA else {}
    kept_notes = previous.get("notes", []) if models else []
    return {"schema": SCHEMA, "environment": env, "notes": list(dict.fromkeys([*kept_notes, *notes])), "models": models}


def write_results(output: Path, results: dict) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(output, (json.dumps(results, indent=1, allow_nan=False) + "\n").encode())


def measure_model(name: str, checkpoint: str, config: dict, folder: Path, memory_mb: float, runner) -> dict:
    """One model's record: built, ported both ways and given to keras-hub, or skipped with the reason; a port that
    fails ends our side of the record with its error, keras-hub still measured (the folders are removed afterwards)."""
    record = {"name": name, "checkpoint": checkpoint, "model_type": config["model_type"], "config_sha": config_sha(config),
              "state_dict_values": state_dict_values(config), "estimate_peak_mb": estimate_peak_mb(config),
              "status": "measured", "reason": None, "directions": {}, "peer": []}  # fmt: skip
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        if record["estimate_peak_mb"] > memory_mb:
            record |= {"status": "skipped", "reason": _memory_reason(record, memory_mb)}
            record["peer"] = _records(runner("peer", _peer_request(config, _config_only(folder / "config-only", config), True)))
            return record
        _measure_ports(record, config, folder, runner)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return record


def _measure_ports(record: dict, config: dict, folder: Path, runner) -> None:
    paths = {"hf": folder / "hf", "keras": folder / "model.keras", "back": folder / "back"}
    built = runner("build", {"config": config, "folder": str(paths["hf"])})
    record["build"] = built
    if built.get("error"):
        record |= {"status": "failed", "reason": f"build: {built['error']}"}
        return
    back = {"source": str(paths["keras"]), "destination": str(paths["back"]), "tokenizer": str(paths["hf"])}
    requests = {"to_keras": {"source": str(paths["hf"]), "destination": str(paths["keras"])}, "to_hf": back}
    for step, request in requests.items():
        found = record["directions"][step] = runner(step, request)
        if found.get("error") or not found.get("ok"):
            record |= {"status": "failed", "reason": f"{DIRECTIONS[step]}: {found.get('error') or 'not verified'}"}
            break
    record["peer"] = _records(runner("peer", _peer_request(config, paths["hf"], False)))  # on the folder built, whatever ours did


def _records(found: dict) -> list[dict]:
    """The peer step's records; where the step itself failed, one record saying so."""
    failed = {"folder": "as written", "loads": False, "error": f"the measurement failed: {found.get('error')}"}
    return found.get("records") or [failed]


def _memory_reason(record: dict, memory_mb: float) -> str:
    return (f"its port would need about {record['estimate_peak_mb'] / 1024:.1f} GiB ({record['state_dict_values']:,} "
            f"state_dict values x {BYTES_PER_VALUE} bytes: the float32 copies and the float64 pair the verification "
            f"builds, + {FRAMEWORKS_MB} MiB of frameworks); {memory_mb / 1024:.1f} GiB available")  # fmt: skip


def _config_only(folder: Path, config: dict) -> Path:
    """A folder holding config.json alone: what keras-hub is given for a model too large to build here."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder


def _peer_request(config: dict, folder: Path, config_only: bool) -> dict:
    """keras-hub's folders: the one written, and for BART also a copy naming `num_hidden_layers` as the published
    config.json does (transformers 5's save_pretrained leaves it out; keras-hub 0.32 reads it)."""
    probes = {"as written": str(folder)}
    if config["model_type"] == "bart" and "num_hidden_layers" in config and not config_only:
        probes["num_hidden_layers as published"] = str(folder.parent / "hf-num-hidden-layers")
    return {"folders": probes, "config_only": config_only}


# ---- estimates, identities, the machine ----


def state_dict_values(config: dict) -> int:
    """The values of the model's state_dict as a port holds it (tied entries repeated), from the config alone."""
    return sum(int(np.prod(shape)) for shape in state_dict_shapes(config, config["model_type"]).values())


def estimate_peak_mb(config: dict) -> float:
    return FRAMEWORKS_MB + state_dict_values(config) * BYTES_PER_VALUE / 2**20


def config_sha(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def available_mb() -> float:
    """MemAvailable from /proc/meminfo (MiB); infinite where there is none."""
    meminfo = Path("/proc/meminfo")
    lines = meminfo.read_text().splitlines() if meminfo.is_file() else []
    found = [int(line.split()[1]) / 1024 for line in lines if line.startswith("MemAvailable:")]
    return found[0] if found else float("inf")


def environment(threads: int, memory_mb: float) -> dict:
    cpu, cores = machine.cpu_model(), os.cpu_count() or 1
    versions = {}
    for package in VERSIONS:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return {"machine": machine.machine_slug(cpu, cores, None), "cpu": cpu, "cores": cores, "threads": threads,
            "memory_available_mb": None if memory_mb == float("inf") else round(memory_mb), "versions": versions,
            "commit": machine.git_commit(),
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}  # fmt: skip


def run_child(step: str, request: dict, threads: int, timeout_s: float = TIMEOUT_S) -> dict:
    """`step` in a fresh Python process (its threads fixed before any framework is imported): its result, or
    {"error": the last line it printed} where it failed, was killed or ran past `timeout_s`."""
    folder = Path(request.get("folder") or request.get("destination") or next(iter(request["folders"].values())))
    folder.parent.mkdir(parents=True, exist_ok=True)
    paths = [folder.parent / f".{step}-request.json", folder.parent / f".{step}-result.json"]
    paths[0].write_text(json.dumps(request))
    paths[1].unlink(missing_ok=True)
    env = {**os.environ, **machine.thread_environment(threads), "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "shared.tools.hf_ports", step, *map(str, paths)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout_s:.0f} s"}
    if done.returncode != 0 or not paths[1].is_file():
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:] or [f"exit {done.returncode}"]
        return {"error": f"exit {done.returncode}: {tail[0][:300]}"}
    return json.loads(paths[1].read_text()) | {"process_s": time.perf_counter() - started}


# ---- the child: one step ----


def run_step(step: str, request: dict) -> dict:
    """One step in this process: `build`, `to_keras`, `to_hf` or `peer`."""
    if step not in STEPS:
        raise ValueError(f"step {step!r}: one of {', '.join(STEPS)}")
    if step != "peer":
        return {"build": _build, "to_keras": _port, "to_hf": _port}[step](request)
    return _peer(request)


def _rss() -> dict:
    return {"peak_rss_mb": machine.peak_rss_mb()}


def _build(request: dict) -> dict:
    """transformers' model of the config with random weights (seeded; final_logits_bias made nonzero, as Marian's
    checkpoints have it), saved by `save_pretrained`: a user's folder."""
    import torch

    from shared import stacks

    torch.manual_seed(0)
    started = time.perf_counter()
    model = stacks.import_module("torch", "hf.families").build(request["config"], "float32")
    if hasattr(model, "final_logits_bias"):
        with torch.no_grad():
            model.final_logits_bias.normal_()
    untied = request["config"].get("tie_word_embeddings") is False and _untie(model)
    model.save_pretrained(request["folder"])
    folder = Path(request["folder"])
    return {"parameters": int(model.num_parameters()), "safetensors_bytes": _bytes(folder, "*.safetensors"),
            "untied_lm_head": untied, "config_restored": _restore(folder / "config.json", request["config"]),
            "wall_s": time.perf_counter() - started, **_rss()}  # fmt: skip


def _restore(path: Path, published: dict) -> dict:
    """config.json's RESTORED fields put back to the published values where save_pretrained rewrote them: the folder as
    the checkpoint's page holds it (transformers 5 writes tie_word_embeddings true for every T5)."""
    saved = json.loads(path.read_text())
    restored = {key: published[key] for key in RESTORED if key in published and saved.get(key) != published[key]}
    if restored:
        path.write_text(json.dumps(saved | restored, indent=2, sort_keys=True) + "\n")
    return restored


def _untie(model) -> bool:
    """An lm_head of its own random values where the published config unties it (flan-t5's tie_word_embeddings false):
    transformers 5's T5Config ties every model it builds, while a checkpoint holding both matrices loads them untied."""
    import torch

    embedding = model.get_input_embeddings().weight
    if model.lm_head.weight.data_ptr() != embedding.data_ptr():
        return False
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(embedding.detach()) * float(embedding.detach().std()))
    return True


def _bytes(path: Path, pattern: str = "*") -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob(pattern) if p.is_file())


def _port(request: dict) -> dict:
    """`porting.port(source, destination)` timed alone (the frameworks imported before it), with its verdict and each
    check's largest differences."""
    from shared.port import porting, stages

    stages.import_stacks("torch", "tf")  # torch before TensorFlow, and outside the timed call
    before = machine.peak_rss_mb()
    started = time.perf_counter()
    to = "hf" if not request["destination"].endswith(".keras") else None
    report = porting.port(request["source"], request["destination"], to=to, tokenizer=request.get("tokenizer"))
    wall = time.perf_counter() - started
    written = Path(request["destination"])
    return {"ok": bool(report.ok), "wall_s": wall, "rss_before_mb": before, **_rss(), "models": list(report.models),
            "values": report.values, "dtype": report.dtype, "output_bytes": _bytes(written) if written.exists() else None,
            "checks": [_check(check) for check in report.checks], "error": None}  # fmt: skip


def _check(check) -> dict:
    return {"title": check.title, "dtype": check.dtype, "bound": check.bound, "ok": bool(check.ok),
            "max_abs": {c.name: c.max_abs for c in check.components},
            "measured_dtype": check.measured_dtype or None,
            "measured": {n: c.max_abs for n, c in check.measured.items()}}  # fmt: skip


def _peer(request: dict) -> dict:
    """keras-hub's records on each folder (shared/hf/peer.py), the copy naming num_hidden_layers made first."""
    import torch  # noqa: F401  (torch before TensorFlow: keras-hub imports it)

    from shared.hf import peer

    folders = dict(request["folders"])
    written = Path(folders["as written"])
    for label, folder in folders.items():
        if label != "as written" and not Path(folder).exists():
            peer.with_num_hidden_layers(written, folder)
    kind = "config.json only (the model was not built)" if request["config_only"] else "save_pretrained folder"
    records = peer.measure(folders)
    return {"records": [record | {"folder": label, "folder_kind": kind} for label, record in zip(folders, records, strict=True)]}


def main(argv: list[str]) -> int:
    """`python -m shared.tools.hf_ports STEP REQUEST.json RESULT.json`: what `run_child` starts."""
    step, request_path, result_path = argv
    result = run_step(step, json.loads(Path(request_path).read_text()))
    Path(result_path).write_text(json.dumps(result))
    return 0


def default_models(names=None) -> dict:
    """The published configs to measure, by name (default: all, in REAL_SIZES's order)."""
    names = list(names or real_sizes.REAL_SIZES)
    unknown = [name for name in names if name not in real_sizes.REAL_SIZES]
    if unknown:
        raise ValueError(f"--models: unknown {unknown}; known: {', '.join(real_sizes.REAL_SIZES)}")
    return {name: real_sizes.REAL_SIZES[name] for name in names}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
