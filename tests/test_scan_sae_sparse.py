"""The scan reads a topk SAE sparsely (its k values and indices per token, never the dense
[tokens × d_sae] features): the same numbers as the dense path, which the other architectures keep."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sae_helpers import random_sae

import gptviz

DOCS = ["to be or not to be that is the question " * 3, "whether tis nobler in the mind to suffer " * 3]


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"rescale_acts_by_decoder_norm": True},
        {"normalize_activations": "layer_norm"},
        {"apply_b_dec_to_input": False},
    ],
)
def test_encode_topk_holds_what_encode_does(cfg):
    sae = random_sae("topk", d_in=16, d_sae=48, k=6, **cfg)
    x = torch.randn(3, 7, 16)
    values, index = sae.encode_topk(x)
    assert values.shape == index.shape == (3, 7, 6)
    dense = torch.zeros(3, 7, 48).scatter(-1, index, values)
    np.testing.assert_allclose(dense.numpy(), sae.encode(x).numpy(), atol=1e-6)
    assert random_sae("standard").encode_topk(x) is None


def test_the_sparse_scan_equals_the_dense_one(monkeypatch):
    torch.manual_seed(0)
    chars = sorted(set("".join(DOCS)))
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=len(chars), block_size=32, n_layer=2, n_head=2, n_embd=16))
    tok = gptviz.CharTokenizer(chars)
    sae = random_sae("topk", d_in=16, d_sae=40, site="blocks.1.resid_post", k=5)
    sparse = gptviz.scan(model, DOCS, tok, window=12, k=3, saes=[sae])
    monkeypatch.setattr(sae, "encode_topk", lambda x: None)  # the dense path
    dense = gptviz.scan(model, DOCS, tok, window=12, k=3, saes=[sae])
    assert len(sparse.features) > 20 and sparse.feature_density.fires.sum() > 0
    assert sparse.features.equals(dense.features) and sparse.feature_density.equals(dense.feature_density)
