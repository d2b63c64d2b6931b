"""A model's weight-owning layers as both stacks' walks name them (torch_impl/conversion.py, tf_impl/conversion.py),
framework-neutral: the Leaf record, one leaf per layer by its shortest path, a Transformer block's configuration on
its self-attention leaf, and a verification batch spread over a model's arguments. `convert` pairs the leaves
(shared.port.pairing) and copies the weights across (shared.port.conversion)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping

import numpy as np


@dataclasses.dataclass
class Leaf:
    """One weight-owning layer of a model, as a stack's walk sees it.

    Args:
        path: attribute path (`encoder.rnn`; `rnn[1]` for layer 1 of a stacked recurrent layer; a Keras
            functional or Sequential model's layer by its name).
        kind: the leaf rule's kind: linear, embedding, rnn, gru, lstm, layer_norm, conv1d, parameter.
        layer: what the user wrote, for messages (`nn.LSTM layer 1`, `Bidirectional(LSTM)`).
        shapes: canonical suffix -> shape, in torch's layout (`weight_ih_l0`, `bias`, ...).
        facts: the options of its kind (shared.port.pairing.OPTIONS) its layer fixes, which both sides must share
            for equal outputs.
        read: () -> the canonical arrays; write: canonical arrays -> None (cast to the leaf's dtype).
        summed: a stock Keras cell holding one bias (b_ih + b_hh).
        handles: the framework's weight objects behind it (a walk finds the weights no leaf covers).
        splits: the ways a composite layer (a Keras MultiHeadAttention) reads as plain leaves, first choice first
            (its q, k, v and output projections; q, k, v packed in one): pairing splits it where the other model
            has no leaf of its kind.
        part_of: a split part's composite (`encoder.attention (MultiHeadAttention, 2 heads)`); a pair with a part
            is settled by running both models, as the heads and the scores are the other model's own code.
        refusal: why the leaf cannot be ported whole (it may still be split), or None.
    """

    path: str
    kind: str
    layer: str
    shapes: dict[str, tuple]
    facts: dict[str, object]
    read: Callable[[], dict[str, np.ndarray]]
    write: Callable[[Mapping[str, np.ndarray]], None]
    summed: bool = False
    handles: list = dataclasses.field(default_factory=list)
    splits: list[list[Leaf]] = dataclasses.field(default_factory=list)
    part_of: str | None = None
    refusal: str | None = None

    def describe(self) -> str:
        return f"{self.path} ({self.layer})"


def state_block_facts(found: list[Leaf], block_path: str, facts: dict) -> None:
    """A Transformer block's configuration (norm order, activation) stated on its self-attention leaf, the one
    both stacks name `<block>.self_attn`: two blocks computing otherwise then do not pair."""
    for leaf in found:
        if leaf.path == f"{block_path}self_attn":
            leaf.facts.update(facts)


def shortest_paths(leaves: list[Leaf]) -> list[Leaf]:
    """One leaf per layer, in order of first appearance, named by its shortest path: a layer reachable by
    several (an attribute and a `hparams` dict's entry) is found once per path by a walk."""
    kept: dict[tuple, Leaf] = {}
    for leaf in leaves:
        key = tuple(id(handle) for handle in leaf.handles)
        held = kept.setdefault(key, leaf)
        if _path_length(leaf.path) < _path_length(held.path):
            held.path = leaf.path
    return list(kept.values())


def _path_length(path: str) -> tuple[int, int]:
    return path.count(".") + path.count("["), len(path)


def map_inputs(inputs, fn):
    """`fn` applied to each array of a verification batch: an array, a tuple (or list) or a dict of arrays."""
    if isinstance(inputs, Mapping):
        return {key: fn(value) for key, value in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return tuple(fn(value) for value in inputs)
    return fn(inputs)


def positional(function) -> list[str]:
    """The positional parameters of a model's `forward`/`call` a verification batch may be spread over."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    parameters = inspect.signature(function).parameters.values()
    return [p.name for p in parameters if p.kind in kinds and p.name not in ("training", "mask")]
