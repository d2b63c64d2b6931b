"""Bad batches every stack must reject with the same ValueError (built from a model's good fixture batch)."""

from __future__ import annotations

import numpy as np

from shared.catalogue import ModelSpec


def _replace(batch: dict, **arrays) -> dict:
    return {**batch, **arrays}


def bad_batches(spec: ModelSpec, batch: dict) -> list[tuple[str, dict, str]]:
    """(case id, bad batch, fragment the error message must contain) for `spec`'s interface."""
    if spec.interface == "attention":
        query, values = batch["query"], batch["values"]
        return [
            ("wrong-rank", _replace(batch, query=query[0]), "must have rank 3"),
            ("wrong-width", _replace(batch, values=values[..., :-1]), "features"),
            ("integer-vectors", _replace(batch, query=query.astype(np.int64)), "floating-point"),
            ("empty-batch", _replace(batch, query=query[:0], values=values[:0]), "is empty"),
            ("length-zero", _replace(batch, values=values[:, :0]), "is empty"),
            ("nan", _replace(batch, query=np.where(query > 1, np.nan, query)), "NaN"),
            ("missing-key", {"query": query}, "missing 'values'"),
        ]
    src, tgt_in = batch["src"], batch["tgt_in"]
    lengths = [("src-len-on-fixed-length-model", _replace(batch, src_len=np.full(len(src), src.shape[1])), "takes no 'src_len'")]
    if spec.variable_length:
        src_len = batch["src_len"]
        lengths = [
            ("src-len-too-long", _replace(batch, src_len=src_len + 1), "must lie in \\[1, "),
            ("src-len-zero", _replace(batch, src_len=src_len * 0), "must lie in \\[1, "),
            ("src-len-float", _replace(batch, src_len=src_len.astype(float)), "integer lengths"),
            ("src-len-wrong-shape", _replace(batch, src_len=src_len[:-1]), "one length per row"),
        ]
    return lengths + [
        ("id-too-large", _replace(batch, src=np.where(src == src.max(), spec.src_vocab_size, src)), "outside the vocabulary"),
        ("negative-id", _replace(batch, tgt_in=np.where(tgt_in == tgt_in.max(), -1, tgt_in)), "token id -1"),
        ("wrong-rank", _replace(batch, src=src[0]), "must have rank 2"),
        ("float-ids", _replace(batch, src=src.astype(np.float32)), "integer token ids"),
        ("bool-ids", _replace(batch, src=src > 5), "integer token ids"),
        ("empty-batch", _replace(batch, src=src[:0], tgt_in=tgt_in[:0], tgt_out=batch["tgt_out"][:0]), "is empty"),
        ("length-zero", _replace(batch, src=src[:, :0]), "is empty"),
        ("batch-size-mismatch", _replace(batch, tgt_in=tgt_in[:-1]), "disagree on the batch size"),
        ("missing-key", {"src": src}, "missing 'tgt_in'"),
    ]
