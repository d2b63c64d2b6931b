"""The torch stack against the documents' own listings (tests/doc_listings.py), and golden regeneration."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_impl
from shared import catalogue
from shared.verify import fixtures
from shared.verify.equality import assert_close
from tests import doc_listings

LISTED = {  # catalogue name -> the document's own class
    "reverse_rnn": doc_listings.ReverseTaskV0,
    "reverse_bahdanau": doc_listings.ReverseTaskV6,
    "reverse_luong_general": doc_listings.ReverseTaskV7,
    "reverse_luong_dot": doc_listings.ReverseTaskV8,
}


@pytest.mark.parametrize("name", LISTED)
def test_document_state_dict_loads_strictly_and_gives_the_same_logits(name):
    torch.manual_seed(0)
    listing = LISTED[name]().double()
    ours = torch_impl.build(name, "float64")
    ours.load_state_dict(listing.state_dict(), strict=True)
    rng = np.random.default_rng(1)
    src, tgt = (torch.as_tensor(rng.integers(0, 20, (4, length))) for length in (10, 11))
    with torch.no_grad():
        assert_close(ours(src, tgt), listing(src, tgt), 1e-12, what=f"{name} logits vs document listing")


def test_additive_attention_matches_the_document_unbatched_and_batched():
    torch.manual_seed(0)
    listing = doc_listings.AdditiveAttention(encoder_dim=100, decoder_dim=50).double()
    ours = torch_impl.build("additive_attention", "float64")
    ours.load_state_dict(listing.state_dict(), strict=True)
    values, queries = torch.rand(10, 100, dtype=torch.float64), torch.rand(13, 50, dtype=torch.float64)
    with torch.no_grad():
        for step in range(13):  # the document's heatmap loop
            assert_close(ours(queries[step], values), listing(queries[step], values), 1e-12, what="context")
            assert_close(ours._get_weights(queries[step], values), listing._get_weights(queries[step], values), 1e-12)
        context, attention = ours.attend(queries[None], values[None])
        expected = torch.stack([torch.softmax(listing._get_weights(q, values), 0) for q in queries])
        assert_close(attention[0], expected, 1e-12, what="batched attention")
        assert_close(ours(queries[:2], values.expand(2, -1, -1)), torch.stack([listing(q, values) for q in queries[:2]]), 1e-12)


@pytest.mark.parametrize("name", catalogue.built())
def test_golden_files_regenerate_to_float64_rounding(name):
    """A fresh generation equals the golden file: inputs byte for byte, computed floats to rounding (a CPU's kernels
    may round otherwise: tests/shared/test_golden_files.py holds the negative controls)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert fixtures.golden_differences(fixtures.golden_bytes(name, torch_impl), fixtures.golden_path(name)) == []
    finally:
        torch.set_num_threads(threads)
