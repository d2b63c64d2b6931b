"""References for `rosetta port` in PyTorch: the tutorial models the torch presets port, run on the user's file.

Ben Trevett's pytorch-seq2seq notebook 3, whose classes torch_impl/tutorials/trevett_nmt3.py transcribes (the
torchtext-era listing and the 2024 rewrite differ only in the attention's attribute names). `trevett_nmt3(path)`
loads a `tut3-model.pt` the notebook's way (`load_state_dict`, strict), `run_trevett_nmt3` runs it with teacher
forcing and returns what shared.port.references compares; document 002 (our `bahdanau_bigru`) follows the same
notebook.

Legend: S source length, B batch, T target length, E embedding, He/Hd encoder/decoder hidden, V vocabulary.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from torch import nn

from shared.core import moved
from shared.core.reference_runs import ATTENTION_WEIGHTS, LOGITS
from shared.core.taps import ENCODER_OUTPUTS, ENCODER_STATE
from torch_impl.tutorials import trevett_nmt3 as tutorial

# what a key map may name (`"reference"`, `"runner"`): a key map is data, passed around like a checkpoint
SHIPPED = ("trevett_nmt3", "trevett_nmt3_legacy", "run_trevett_nmt3")


def _load(path, revision: str) -> tutorial.TrevettSeq2Seq:
    """A `tut3-model.pt` in the notebook's model: sizes read from its shapes, then `load_state_dict` (strict)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a bad file
        raise ValueError(f"{path}: not a loadable torch state_dict ({type(error).__name__}: {error})") from None
    state = state.get("model", state) if isinstance(state, dict) else state
    try:
        input_dim, enc_emb = state["encoder.embedding.weight"].shape
        output_dim, dec_emb = state["decoder.embedding.weight"].shape
        enc_hid, dec_hid = state["encoder.rnn.weight_hh_l0"].shape[1], state["decoder.rnn.weight_hh_l0"].shape[1]
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"{path}: not a state_dict of notebook 3's Seq2Seq (no encoder.embedding / encoder.rnn)") from None
    attention = tutorial.TrevettAttention(enc_hid, dec_hid, tutorial.ATTENTION_NAMES[revision])
    model = tutorial.TrevettSeq2Seq(
        tutorial.TrevettEncoder(input_dim, enc_emb, enc_hid, dec_hid, 0.5),
        tutorial.TrevettDecoder(output_dim, dec_emb, enc_hid, dec_hid, 0.5, attention),
    )
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{path}: does not load into notebook 3's Seq2Seq ({revision}): {error}") from None
    return model.eval()


def trevett_nmt3(path) -> tutorial.TrevettSeq2Seq:
    """The 2024 rewrite's model holding `path` (`attention.attn_fc`, `attention.v_fc`)."""
    return _load(Path(path), "2024")


def trevett_nmt3_legacy(path) -> tutorial.TrevettSeq2Seq:
    """The torchtext-era model holding `path` (`attention.attn`, `attention.v`)."""
    return _load(Path(path), "legacy")


def run_trevett_nmt3(model: nn.Module, batch: dict) -> dict[str, np.ndarray]:
    """Notebook 3's encoder, then its decoder step by step fed `tgt_in` (teacher forcing, as training with
    ratio 1): encoder outputs and state, attention weights and logits, batch-first."""
    src = torch.as_tensor(np.asarray(batch["src"]).T, dtype=torch.long)  # [S, B]
    tgt_in = torch.as_tensor(np.asarray(batch["tgt_in"]), dtype=torch.long)  # [B, T]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            encoder_outputs, hidden = model.encoder(src)  # [S, B, 2He], [B, Hd]
            state, logits, weights = hidden, [], []
            for t in range(tgt_in.shape[1]):
                weights.append(model.decoder.attention(hidden, encoder_outputs))  # [B, S]
                prediction, hidden = model.decoder(tgt_in[:, t], hidden, encoder_outputs)[:2]  # [B, V], [B, Hd]
                logits.append(prediction)
    finally:
        model.train(was_training)
    return {
        ENCODER_OUTPUTS: encoder_outputs.permute(1, 0, 2).numpy(),  # [B, S, 2He]
        ENCODER_STATE: state.numpy(),  # [B, Hd]
        ATTENTION_WEIGHTS: torch.stack(weights, 1).numpy(),  # [B, T, S]
        LOGITS: torch.stack(logits, 1).numpy(),  # [B, T, V]
    }


def in_float64(model: nn.Module, builder, source: str) -> tuple[nn.Module, str]:
    """A float64 copy of the user's torch model (exact: float32 values widen without rounding)."""
    return copy.deepcopy(model).double(), "float64"


__getattr__ = moved.getattr_for(__name__)  # the notebook's classes moved to torch_impl/tutorials/: they warn
