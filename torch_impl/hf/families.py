"""transformers' seq2seq models (MarianMT, BART, mBART, T5) as a port meets them: built from a config.json dict,
loaded from a folder as `from_pretrained` loads it, their state_dict in and out as numpy, run on one batch.

The mirror of tf_impl/hf/families.py (the same names, reached through shared/stacks.py's door `hf.families`);
attention pinned to transformers' "eager" implementation, the one every proof compares against.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.initialization import no_init_weights

DTYPES = {"float32": torch.float32, "float64": torch.float64}
ATTENTION = "eager"


def _config(config: dict) -> transformers.PretrainedConfig:
    fields = {key: value for key, value in config.items() if key != "model_type"}
    return transformers.AutoConfig.for_model(config["model_type"], **fields)


def build(config: dict, dtype: str = "float32", blank: bool = False) -> torch.nn.Module:
    """The model a config.json dict describes, in eval mode, eager attention: random weights, or with `blank` left
    uninitialised (transformers' `no_init_weights`: every weight is loaded next, and initialising a large model costs)."""
    options = {"attn_implementation": ATTENTION, "dtype": DTYPES[dtype]}
    with no_init_weights() if blank else contextlib.nullcontext():
        made = transformers.AutoModelForSeq2SeqLM.from_config(_config(config), **options)
    return made.eval()


def describe(model) -> str:
    return f"transformers.{type(model).__name__}"


def family_of(model) -> str:
    return model.config.model_type


def load_hf_weights(model: torch.nn.Module, state: dict[str, np.ndarray]) -> None:
    """Every state_dict entry of `model` from `state` (strict; tied entries repeat one matrix); one ValueError."""
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    shapes = [f"{key} is {tuple(np.shape(state[key]))}, the model needs {tuple(own[key].shape)}"
              for key in sorted(set(own) & set(state)) if tuple(np.shape(state[key])) != tuple(own[key].shape)]  # fmt: skip
    problems = ([f"missing {missing}"] if missing else []) + ([f"unexpected {unexpected}"] if unexpected else []) + shapes
    if problems:
        raise ValueError(f"the state does not fit {describe(model)}: {'; '.join(problems)}")
    _untie_differing(model, state)
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        model.load_state_dict({key: torch.as_tensor(np.asarray(value)).to(dtype) for key, value in state.items()})


def _untie_differing(model: torch.nn.Module, state: dict[str, np.ndarray]) -> None:
    """A tie whose two entries `state` gives different values is undone, as `from_pretrained` leaves it untied
    (modeling_utils.py `tie_weights`); a tied parameter would otherwise take whichever entry loads last."""
    for target, source in list(getattr(model, "all_tied_weights_keys", {}).items()):
        if target in state and source in state and not np.array_equal(state[target], state[source]):
            owner, _, name = target.rpartition(".")
            module = model.get_submodule(owner)
            setattr(module, name, torch.nn.Parameter(getattr(module, name).detach().clone()))
            model.all_tied_weights_keys.pop(target)


def hf_state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The model's state_dict as numpy (tied entries repeated, as `state_dict()` gives them)."""
    return {key: value.detach().cpu().numpy().copy() for key, value in model.state_dict().items()}


def hf_config(model: torch.nn.Module) -> dict:
    return model.config.to_dict()


def from_folder(path: Path, dtype: str | None = None) -> torch.nn.Module:
    """The model `AutoModelForSeq2SeqLM.from_pretrained(path)` loads, as a user loads it; a missing or unexpected key
    is one ValueError naming the folder."""
    options = {"attn_implementation": ATTENTION, "output_loading_info": True}
    model, info = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        str(path), **options, **({"dtype": DTYPES[dtype]} if dtype else {})
    )
    problems = {name: info[name] for name in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(name)}
    if problems:
        raise ValueError(f"{path}: from_pretrained reports {problems}")
    return model.eval()


def run(model: torch.nn.Module, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Encoder and decoder last hidden states [B, S, E], [B, T, E], logits [B, T, V] on keras-hub's four inputs, and
    HF's cross_attentions (output_attentions) stacked over the L decoder layers [B, L, N, T, S]; run with eager attention
    (a model loaded with another, e.g. from_pretrained's default sdpa, is switched for the call and back)."""
    ids = {key: torch.as_tensor(np.asarray(value, np.int64)) for key, value in batch.items()}
    previous = model.config._attn_implementation
    if previous != ATTENTION:
        model.set_attn_implementation(ATTENTION)
    try:
        with torch.no_grad():
            out = model(input_ids=ids["encoder_token_ids"], attention_mask=ids["encoder_padding_mask"],
                        decoder_input_ids=ids["decoder_token_ids"], decoder_attention_mask=ids["decoder_padding_mask"],
                        output_hidden_states=True, output_attentions=True)  # fmt: skip
    finally:
        if previous != ATTENTION:
            model.set_attn_implementation(previous)
    found = {"encoder": out.encoder_last_hidden_state, "decoder": out.decoder_hidden_states[-1], "logits": out.logits,
             "cross_attention": torch.stack(out.cross_attentions, dim=1)}  # fmt: skip
    return {name: value.detach().cpu().numpy() for name, value in found.items()}
