"""References for `rosetta port` in PyTorch: the tutorial models the torch presets port, run on the user's file.

Ben Trevett's pytorch-seq2seq notebook 3 ("Neural Machine Translation by Jointly Learning to Align and
Translate"), transcribed in its own layout (time-major, `rnn`, `attn`/`attn_fc`, `v`/`v_fc` without bias,
`fc_out`, the encoder's final states forward first): the torchtext-era listing (legacy/) and the 2024 rewrite
differ only in the attention's attribute names. `trevett_nmt3(path)` loads a `tut3-model.pt` the notebook's
way (`load_state_dict`, strict), `run_trevett_nmt3` runs it with teacher forcing and returns what shared.
references compares; document 002 (our `bahdanau_bigru`) follows the same notebook.

Legend: S source length, B batch, T target length, E embedding, He/Hd encoder/decoder hidden, V vocabulary.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shared.core.taps import ENCODER_OUTPUTS, ENCODER_STATE
from shared.port.references import ATTENTION_WEIGHTS, LOGITS

# what a key map may name (`"reference"`, `"runner"`): a key map is data, passed around like a checkpoint
SHIPPED = ("trevett_nmt3", "trevett_nmt3_legacy", "run_trevett_nmt3")


class TrevettEncoder(nn.Module):
    """Notebook 3's `Encoder`: embedding, bidirectional GRU, `fc` over [forward final; backward final], tanh."""

    def __init__(self, input_dim: int, emb_dim: int, enc_hid_dim: int, dec_hid_dim: int, dropout: float):
        super().__init__()
        self.embedding = nn.Embedding(input_dim, emb_dim)
        self.rnn = nn.GRU(emb_dim, enc_hid_dim, bidirectional=True)
        self.fc = nn.Linear(enc_hid_dim * 2, dec_hid_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src):
        embedded = self.dropout(self.embedding(src))  # [S, B, E]
        outputs, hidden = self.rnn(embedded)  # [S, B, 2He], [2, B, He]
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2], hidden[-1]), dim=1)))  # forward first; [B, Hd]
        return outputs, hidden


class TrevettAttention(nn.Module):
    """Notebook 3's `Attention`: `v(tanh(attn([s; h_i])))`, `v` without bias; `names` are the revision's."""

    def __init__(self, enc_hid_dim: int, dec_hid_dim: int, names: tuple[str, str]):
        super().__init__()
        self.names = names
        setattr(self, names[0], nn.Linear(enc_hid_dim * 2 + dec_hid_dim, dec_hid_dim))
        setattr(self, names[1], nn.Linear(dec_hid_dim, 1, bias=False))

    def forward(self, hidden, encoder_outputs):
        attn, v = (getattr(self, name) for name in self.names)
        hidden = hidden.unsqueeze(1).repeat(1, encoder_outputs.shape[0], 1)  # [B, S, Hd]
        encoder_outputs = encoder_outputs.permute(1, 0, 2)  # [B, S, 2He]
        energy = torch.tanh(attn(torch.cat((hidden, encoder_outputs), dim=2)))  # [B, S, Hd]
        return F.softmax(v(energy).squeeze(2), dim=1)  # [B, S]


class TrevettDecoder(nn.Module):
    """Notebook 3's `Decoder`: GRU over [embedding; weighted], `fc_out` over [output; weighted; embedding]."""

    def __init__(self, output_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout, attention):
        super().__init__()
        self.output_dim = output_dim
        self.attention = attention
        self.embedding = nn.Embedding(output_dim, emb_dim)
        self.rnn = nn.GRU(enc_hid_dim * 2 + emb_dim, dec_hid_dim)
        self.fc_out = nn.Linear(enc_hid_dim * 2 + dec_hid_dim + emb_dim, output_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input.unsqueeze(0)))  # [1, B, E]
        a = self.attention(hidden, encoder_outputs).unsqueeze(1)  # [B, 1, S]
        weighted = torch.bmm(a, encoder_outputs.permute(1, 0, 2)).permute(1, 0, 2)  # [1, B, 2He]
        output, hidden = self.rnn(torch.cat((embedded, weighted), dim=2), hidden.unsqueeze(0))  # [1, B, Hd] x 2
        prediction = self.fc_out(torch.cat((output.squeeze(0), weighted.squeeze(0), embedded.squeeze(0)), dim=1))  # [B, V]
        return prediction, hidden.squeeze(0), a.squeeze(1)


class TrevettSeq2Seq(nn.Module):
    """Notebook 3's `Seq2Seq(encoder, decoder, device)`; the runner below drives its parts step by step."""

    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder


ATTENTION_NAMES = {"2024": ("attn_fc", "v_fc"), "legacy": ("attn", "v")}


def _load(path, revision: str) -> TrevettSeq2Seq:
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
    attention = TrevettAttention(enc_hid, dec_hid, ATTENTION_NAMES[revision])
    model = TrevettSeq2Seq(
        TrevettEncoder(input_dim, enc_emb, enc_hid, dec_hid, 0.5),
        TrevettDecoder(output_dim, dec_emb, enc_hid, dec_hid, 0.5, attention),
    )
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{path}: does not load into notebook 3's Seq2Seq ({revision}): {error}") from None
    return model.eval()


def trevett_nmt3(path) -> TrevettSeq2Seq:
    """The 2024 rewrite's model holding `path` (`attention.attn_fc`, `attention.v_fc`)."""
    return _load(Path(path), "2024")


def trevett_nmt3_legacy(path) -> TrevettSeq2Seq:
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
