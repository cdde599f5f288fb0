"""Every numeric argument of the public library is checked where it enters (issue 21.6): a bad one
is one sentence from gptviz's own error classes, never a wrong answer (a batch of -1 used to run
nothing and return uninitialised memory) and never a torch or NumPy error from deep inside."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gptviz

torch.manual_seed(0)
MODEL = gptviz.GPT(gptviz.GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()
CLEAN, CORRUPT = [1, 2, 3, 4, 5, 1, 2], [1, 2, 3, 4, 6, 1, 2]
TRACE = gptviz.trace(MODEL, CLEAN)
NAN = float("nan")


def sweep(**kw):
    return gptviz.patching_sweep(MODEL, CLEAN, CORRUPT, 3, 4, **kw)


def lens(**kw):
    return gptviz.logit_lens(MODEL, TRACE, **kw)


def generate(**kw):
    return gptviz.generate(MODEL, CLEAN, 2, **kw)


def ablated(**kw):
    return gptviz.trace(MODEL, CLEAN, interventions=[gptviz.ablate(**kw)])


CASES = {
    "sweep batch_size=-1": (lambda: sweep(batch_size=-1), "batch_size must be at least 1, got -1"),
    "sweep batch_size=0": (lambda: sweep(batch_size=0), "batch_size must be at least 1"),
    "sweep batch_size=1.5": (lambda: sweep(batch_size=1.5), "batch_size must be a whole number"),
    "sweep batch_size=nan": (lambda: sweep(batch_size=NAN), "batch_size must be a whole number"),
    "sweep batch_size=True": (lambda: sweep(batch_size=True), "batch_size must be a whole number"),
    "sweep answer=3.0": (lambda: gptviz.patching_sweep(MODEL, CLEAN, CORRUPT, 3.0, 4), "answer token must be"),
    "sweep site=5": (lambda: sweep(site=5), "the sweep patches one of"),
    "generate temperature=nan": (lambda: generate(temperature=NAN), "temperature must be"),
    "generate temperature=-1": (lambda: generate(temperature=-1), "temperature must be"),
    "generate max_new_tokens=1.5": (lambda: gptviz.generate(MODEL, CLEAN, 1.5), "max_new_tokens must be"),
    "generate top_k=0": (lambda: generate(top_k=0), "top_k must be"),
    "generate top_p=nan": (lambda: generate(top_p=NAN), "top_p must be"),
    "lens k=0": (lambda: lens(k=0), "k (tokens per site) must lie in [1, 11], got 0"),
    "lens k=2.7": (lambda: lens(k=2.7), "k (tokens per site) must be a whole number, got 2.7"),
    "lens k=nan": (lambda: lens(k=NAN), "k (tokens per site) must be a whole number"),
    "lens k=None": (lambda: lens(k=None), "k (tokens per site) must be a whole number"),
    "lens k=True": (lambda: lens(k=True), "k (tokens per site) must be a whole number"),
    "lens positions=[1.5]": (lambda: lens(positions=[1.5]), "positions must be whole numbers"),
    "lens positions=['a']": (lambda: lens(positions=["a"]), "positions must be whole numbers"),
    "lens positions=[99]": (lambda: lens(positions=[99]), "positions must lie in [0, 6]"),
    "lens target=-1": (lambda: lens(target=-1), "outside the vocabulary"),
    "attribution position=1.5": (lambda: gptviz.logit_attribution(MODEL, TRACE, 3, position=1.5), "whole number"),
    "attribution position=99": (lambda: gptviz.logit_attribution(MODEL, TRACE, 3, position=99), "outside the"),
    "attribution target=nan": (lambda: gptviz.logit_attribution(MODEL, TRACE, NAN), "target must be a token id"),
    "ablate head 99": (lambda: ablated(name="blocks.0.attn.z", heads=[99]), "there is no head 99"),
    "ablate position 99": (lambda: ablated(name="blocks.0.resid_pre", positions=[99]), "no position 99"),
    "ablate how=nan": (lambda: gptviz.ablate("blocks.0.resid_pre", how=NAN), "finite number"),
    "trace ids [1.5]": (lambda: gptviz.trace(MODEL, [1.5, 2]), "token ids must be integers"),
    "trace ids [-1]": (lambda: gptviz.trace(MODEL, [-1, 2]), "outside the vocabulary"),
    "health tokenizer=5": (lambda: gptviz.health(MODEL, TRACE, tokenizer=5), "tokenizer must be"),
}


@pytest.mark.parametrize("call, words", CASES.values(), ids=CASES.keys())
def test_a_bad_argument_is_one_sentence(call, words):
    with pytest.raises(gptviz.GptvizError) as caught:
        call()
    assert words in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_temperature_near_zero_is_greedy_not_a_torch_error():
    """logits / 1e-45 overflow to inf in float32 and softmax gave NaN (torch.multinomial raised)."""
    greedy = gptviz.generate(MODEL, CLEAN, 6, temperature=0).ids
    for t in (1e-45, 5e-324, 1e-300):
        assert gptviz.generate(MODEL, CLEAN, 6, temperature=t, seed=1).ids == greedy, t


def test_every_batch_size_gives_the_same_sweep():
    """The batches cover every cell whatever their size: no cell is left as memory nobody wrote."""
    full = sweep()
    for batch_size in (1, 2, 3, 7, 100):
        np.testing.assert_allclose(sweep(batch_size=batch_size), full, atol=1e-3)  # float32 batching
    assert np.isfinite(full).all()


@pytest.mark.parametrize("batch_size", [0, -1, 1.5])
def test_a_scan_batch_size_out_of_range_is_one_sentence(batch_size):
    """batch_size=0 scanned as if it were the default; -1 ended in NumPy's "need at least one array"."""
    with pytest.raises(gptviz.GptvizError, match="batch_size must be"):
        gptviz.scan(MODEL, [[1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3]], window=8, k=2, batch_size=batch_size)
