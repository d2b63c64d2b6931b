"""`rosetta port` for Hugging Face's pretrained seq2seq models (MarianMT, BART, mBART, T5): a folder as
`save_pretrained` writes it, a Keras model of the family (`.keras`, `.weights.h5`), or HF's state_dict alone (`.pt`,
`.safetensors`), each to any other, verified, placed only once verified.

The same stages as the catalogue's port (shared/port/porting.py), over another canonical form: config.json's dict
and HF's whole state_dict (shared/port/pretrained_formats.py). Two checks decide:
1. the mapping: the source's arrays in its stack's model and the written file's arrays read back in the
   destination stack's model, both built in float64 (widening is exact), within 1e-12 of each output's largest value;
2. the user's models: the source as its user loads it against the written file as the port's line loads it
   (`from_pretrained` for a folder: no missing or unexpected key), in the file's precision, within the float32
   bound plus NOISE_FACTOR times the source model's own float32 rounding.
"""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path

import numpy as np

from shared.hf import folders
from shared.port import file_metadata
from shared.port.endpoints import Endpoint, check_destination, endpoint, move_into_place, staged_beside
from shared.port.formats import ALL
from shared.port.pretrained_formats import PRETRAINED, Pretrained, families
from shared.port.stages import import_stacks
from shared.port.verification import NOISE_FACTOR, Check, Component, close, render_check

FLOAT64_BOUND = 1e-12  # relative to each output's largest |value|: the proof bound
FLOAT32_BOUND = 1e-5  # the equality policy's float32 output bound, relative likewise
OUTPUTS = ("encoder", "decoder", "cross_attention", "logits")  # cross_attention: [B, L, N, T, S], every decoder layer
# the registered names of the families' Keras models
KERAS_CLASSES = ("rosetta_hf>", "keras_hub>BartSeq2SeqLM", "keras_hub>T5Seq2SeqLM")
SIZES = (3, 7, 6)  # batch, source length, target length of the verification batch


@dataclasses.dataclass
class PretrainedReport:
    """What a pretrained port did: the two ends, the family, the models on each side, the checks, the load line."""

    source: Endpoint
    destination: Endpoint
    model_type: str
    models: tuple[str, str]
    dtype: str
    values: int
    checks: list[Check]
    load: str = ""

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def render(self) -> str:
        lines = [f"{self.source.describe()} -> {self.destination.describe()}: Hugging Face {self.model_type}, "
                 f"{self.values:,} values, {self.dtype}",
                 f"models: {self.models[0]} -> {self.models[1]}"]  # fmt: skip
        for check in self.checks:
            lines += render_check(check)
        failed = next((c for check in self.checks for c in check.components if not c.ok), None)
        if failed is not None:
            return "\n".join([*lines, f"not ported: {failed.name} differs (nothing written)"])
        return "\n".join([*lines, "ported: the written file computes the source's model", f"load it: {self.load}"])


def is_pretrained(src: Endpoint, dst: Endpoint, config: str | None) -> bool:
    """Whether the port is the pretrained pipeline's: an HF folder at either end, `--config`, or a `.keras` file
    holding one of the families' Keras models."""
    if src.format.pretrained or dst.format.pretrained or config is not None:
        return True
    if src.format is ALL["keras"] and src.path.is_file():
        try:
            name = file_metadata.keras_registered_name(src.path) or ""
        except ValueError:  # a config.json that is no JSON: the catalogue's reader names the file's problem
            return False
        return name.startswith(KERAS_CLASSES)
    return False


def read_config(path) -> dict:
    """`--config`: a config.json file, or the folder holding one."""
    path = Path(path)
    return (folders.read_config(path) if path.is_dir() else folders.read_config_file(path))[0]


def port(source, destination, to: str | None = None, source_format: str | None = None, force: bool = False,
         dtype: str | None = None, config: str | None = None, tokenizer: str | None = None) -> PretrainedReport:  # fmt: skip
    """Port a Hugging Face model from `source` to `destination`: read -> write (staged) -> read back -> verify -> place.

    Args:
        config: a config.json (or its folder) for a source or destination that names no architecture.
        tokenizer: a folder whose tokenizer files an HF folder written carries, and its generation_config.json where
            the source carries none (default: the source folder). A folder's generation_config.json goes into a
            `.keras` file written (the model's `generation_config`) and back out of it.
    """
    src, dst = endpoint(source, source_format), endpoint(destination, to, destination=True)
    check_destination(src, dst, force)
    src_io, dst_io = _io(src), _io(dst)
    given = read_config(config) if config is not None else None
    if src_io.needs_config and given is None:
        raise ValueError(f"{src.path}: a {src.format.description} names no architecture: pass --config CONFIG.json "
                         "(the Hugging Face model's config.json, or its folder)")  # fmt: skip
    import_stacks(src_io.stack, dst_io.stack)  # torch before TensorFlow
    found, user_source = src_io.read_and_open(src.path, given)
    dtype = dtype or found.dtype
    config_path = _config_path(src, config, dst_io)
    carried = Path(tokenizer) if tokenizer is not None else (src.path if src.format.pretrained else None)
    with staged_beside(dst.path) as staged:
        dst_io.write(staged, found, dtype, carried)
        back, user_written = dst_io.read_and_open(staged, found.config)
        models = (families(src_io.stack).describe(user_source), families(dst_io.stack).describe(user_written))
        batch = verification_batch(found.config)
        source_run = _run_arrays(src_io.stack, found, batch)  # float64: the mapping's reference, the users' yardstick
        checks = [_mapping(source_run, back, dst_io.stack, src_io.stack, batch),
                  _users(source_run, families(src_io.stack).run(user_source, batch),
                         families(dst_io.stack).run(user_written, batch))]  # fmt: skip
        report = PretrainedReport(src, dst, found.config["model_type"], models, dtype,
                                  sum(int(np.size(a)) for a in found.arrays.values()), checks,
                                  dst_io.load_line(repr(str(dst.path)), repr(config_path)))  # fmt: skip
        if report.ok:
            move_into_place(staged, dst.path, force)
    return report


def _io(end: Endpoint):
    if end.format.name not in PRETRAINED:
        raise ValueError(f"{end.path}: a Hugging Face model is ported to and from a folder, .keras, .weights.h5, .pt or "
                         f".safetensors, not a {end.format.description}")  # fmt: skip
    return PRETRAINED[end.format.name]


def _config_path(src: Endpoint, config: str | None, dst_io) -> str:
    """The config.json a written file that names no architecture is loaded with: `--config`'s, or the source folder's."""
    if config is not None:
        return str(Path(config) / "config.json" if Path(config).is_dir() else Path(config))
    if src.format.pretrained:
        return str(src.path / "config.json")
    if dst_io.needs_config:
        raise ValueError(f"{src.path}: the file to write names no architecture; pass --config CONFIG.json to say which "
                         "config.json loads it, or write a .keras file or a folder (--to hf)")  # fmt: skip
    return ""


def verification_batch(config: dict) -> dict[str, np.ndarray]:
    """keras-hub's four inputs: random ids of the source and target vocabularies, ragged source and target padding
    (pad ids under a 0 mask), every target starting with the decoder's start id."""
    batch, source_len, target_len = SIZES
    generator = np.random.default_rng(0)
    vocab = int(config["vocab_size"])
    target_vocab = int(config.get("decoder_vocab_size") or vocab)
    pad = int(config.get("pad_token_id") or 0)
    encoder_mask = np.arange(source_len) < np.array([source_len, 4, 2])[:, None]  # [B, S]
    decoder_mask = np.arange(target_len) < np.array([target_len, target_len, 3])[:, None]  # [B, T]
    encoder = np.where(encoder_mask, generator.integers(0, vocab, (batch, source_len)), pad)  # [B, S]
    decoder = np.where(decoder_mask, generator.integers(0, target_vocab, (batch, target_len)), pad)  # [B, T]
    decoder[:, 0] = int(config.get("decoder_start_token_id") or pad)
    return {"encoder_token_ids": encoder, "encoder_padding_mask": encoder_mask.astype(np.int32),
            "decoder_token_ids": decoder, "decoder_padding_mask": decoder_mask.astype(np.int32)}  # fmt: skip


def _run_arrays(stack: str, found: Pretrained, batch: dict) -> dict[str, np.ndarray]:
    """The arrays in `stack`'s float64 model (built blank: its weights are all loaded), run on `batch`; a tied matrix
    widened once, and the model let go before returning (a port holds several models' worth at its peak)."""
    hf = families(stack)
    model = hf.build(found.config, "float64", blank=True)
    widened: dict[int, np.ndarray] = {}
    hf.load_hf_weights(model, {key: widened.setdefault(id(value), np.asarray(value, np.float64))
                               for key, value in found.arrays.items()})  # fmt: skip
    del widened
    outputs = hf.run(model, batch)
    del model
    gc.collect()
    return outputs


def _mapping(expected: dict, back: Pretrained, destination_stack: str, source_stack: str, batch: dict) -> Check:
    actual = _run_arrays(destination_stack, back, batch)
    components = [close(name, actual[name], expected[name], FLOAT64_BOUND, 0.0, scaled=True) for name in OUTPUTS]
    title = f"the mapping: the source in {source_stack} vs the written file read back in {destination_stack}"
    return Check(title, "float64", f"{FLOAT64_BOUND:g} x max(1, the output's largest |value|)", components)


def _users(float64_run: dict, expected: dict, actual: dict) -> Check:
    """The source as its user loads it (`expected`) against the written file as the load line loads it (`actual`): in
    float64 where the source computes in float64, else within float32's bound plus the source's own rounding."""
    exact = all(np.asarray(value).dtype == np.float64 for value in expected.values())
    if exact:
        components = [close(name, actual[name], expected[name], FLOAT64_BOUND, 0.0, scaled=True) for name in OUTPUTS]
        bound = f"{FLOAT64_BOUND:g} x max(1, the output's largest |value|)"
    else:
        components = [_within_rounding(name, actual[name], expected[name], float64_run[name]) for name in OUTPUTS]
        bound = f"{FLOAT32_BOUND:g} x max(1, largest |value|) + {NOISE_FACTOR} x the source's own float32 rounding"
    title = "the models as their users load them: the source vs the written file"
    return Check(title, "float64" if exact else "float32", bound, components)


def _within_rounding(name: str, actual, expected, float64_run) -> Component:
    noise = float(np.abs(np.asarray(expected, np.float64) - float64_run).max(initial=0.0))
    scale = max(1.0, float(np.abs(float64_run).max(initial=0.0)))
    return close(name, actual, expected, FLOAT32_BOUND * scale + NOISE_FACTOR * noise, 0.0)
