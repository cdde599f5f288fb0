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


@torch.no_grad()
def lens_by_definition(model, t, sites: list[str], k: int, target: int):
    """Each site through ln_f and the LM head as the forward pass applies them, one [T, V] at a time, and
    softmax, top k and rank straight from their definitions (float64 probabilities, ties not counted above)."""
    ids, probs, ranks, t_probs = [], [], [], []
    for name in sites:
        last = name == sites[-1]
        x = t.tensor(name)
        logits = t.tensor("logits") if last else model.lm_head(model.transformer.ln_f(x[None]))[0]
        p = torch.softmax(logits.double(), -1)
        top = torch.topk(logits, k)
        ids.append(top.indices.numpy())
        probs.append(p.gather(1, top.indices).numpy())
        ranks.append((logits > logits[:, target : target + 1]).sum(-1).numpy())
        t_probs.append(p[:, target].numpy())
    return np.stack(ids), np.stack(probs), np.stack(ranks), np.stack(t_probs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [None, 64])
def test_lens_equals_its_definition_with_ties_and_ranks_past_bf16s_whole_numbers(dtype, chunk):
    """The lens returns what its definition gives: the same top k and ranks, probabilities to 1e-6. Tokens
    2 and 3 share the target's head row (their logits tie with it: not above), and a vocabulary of 997
    puts ranks past 256, which a count kept in bf16 would round."""
    model = tiny_model(vocab_size=997, tie_weights=False, n_embd=32)
    with torch.no_grad():
        model.lm_head.weight[2] = model.lm_head.weight[3] = model.lm_head.weight[500]
    model = model.to(dtype)
    t = gptviz.trace(model, IDS)
    lens = gptviz.logit_lens(model, t, k=4, target=500, chunk=chunk)
    ids, probs, ranks, t_probs = lens_by_definition(model, t, lens.sites, 4, 500)
    np.testing.assert_array_equal(lens.target_rank, ranks)
    if dtype == torch.bfloat16:  # bf16 logits tie often, and top k orders ties as it likes (tied
        # probabilities are equal, so they still compare); the exponentials are float32's, not bf16's
        np.testing.assert_allclose(lens.top_probs, probs, rtol=2e-6, atol=0)
        np.testing.assert_allclose(lens.target_prob, t_probs, rtol=2e-6, atol=0)
        return
    np.testing.assert_array_equal(lens.top_ids, ids)
    assert ranks.max() > 256 and ranks.min() < 256
    np.testing.assert_allclose(lens.top_probs, probs, rtol=1e-6, atol=0)
    np.testing.assert_allclose(lens.target_prob, t_probs, rtol=1e-6, atol=0)


def test_an_edited_runs_own_logits_are_its_last_site():
    """A run whose logits were edited holds them: the lens's last site reads them, not the head on ln_f."""
    model = tiny_model(vocab_size=97)
    bump = torch.zeros(97)
    bump[13] = 50.0
    t = gptviz.trace(model, IDS, interventions=[gptviz.intervene("logits", lambda v: v + bump)])
    lens = gptviz.logit_lens(model, t, k=2)
    assert (lens.top_ids[-1, :, 0] == 13).all()
    np.testing.assert_array_equal(lens.top_ids[-1], torch.topk(t.tensor("logits"), 2).indices.numpy())
    assert not (lens.top_ids[-2, :, 0] == 13).all()  # the sites before the edit do not see it
