"""The logit lens over the vocabulary in chunks: the same top k, ranks and probabilities as one pass over
every column, and a 128k vocabulary never holds a [T, V] logits buffer (malloc's own count)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.bench.forward import PeakAllocated, allocated_bytes

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]


def same_lens(a, b) -> None:
    assert a.sites == b.sites
    np.testing.assert_array_equal(a.top_ids, b.top_ids)
    np.testing.assert_allclose(a.top_probs, b.top_probs, rtol=1e-6, atol=0)
    if a.target is not None:
        np.testing.assert_array_equal(a.target_rank, b.target_rank)
        np.testing.assert_allclose(a.target_prob, b.target_prob, rtol=1e-6, atol=0)


@pytest.mark.parametrize("overrides", [{}, {"final_softcap": 3.0}])
@pytest.mark.parametrize("chunk", [1, 7, 40])
def test_chunks_give_what_one_pass_gives(overrides, chunk):
    model = tiny_model(vocab_size=97, **overrides)
    t = gptviz.trace(model, IDS)
    whole = gptviz.logit_lens(model, t, k=5, target=42)
    assert whole.top_ids.shape == (5, len(IDS), 5)
    same_lens(gptviz.logit_lens(model, t, k=5, target=42, chunk=chunk), whole)
    window = gptviz.logit_lens(model, t, k=3, target=0, positions=[2, 9], chunk=chunk)
    same_lens(window, gptviz.logit_lens(model, t, k=3, target=0, positions=[2, 9]))
    # the last site is the model's own output: its top k are the run's logits' top k
    np.testing.assert_array_equal(whole.top_ids[-1], torch.topk(t.tensor("logits"), 5).indices.numpy())


@pytest.mark.skipif(allocated_bytes() is None, reason="malloc's count (glibc mallinfo2) is what is measured")
def test_a_128k_vocabulary_is_never_held_whole():
    torch.manual_seed(0)
    V, T = 128_256, 256
    model = gptviz.GPT(gptviz.GPTConfig(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=64)).eval()
    ids = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(1))
    t = gptviz.trace(model, ids)
    logits_bytes = T * V * 4  # one [T, V] float32: 131 MB
    with PeakAllocated() as chunked:
        small = gptviz.logit_lens(model, t, k=5, target=7, chunk=4096)  # a [256, 4096] buffer: 4 MB
    with PeakAllocated() as one_pass:
        whole = gptviz.logit_lens(model, t, k=5, target=7, chunk=V)
    same_lens(small, whole)
    assert one_pass.bytes >= logits_bytes  # the measurement sees a [T, V] buffer when there is one
    assert chunked.bytes < logits_bytes / 8
