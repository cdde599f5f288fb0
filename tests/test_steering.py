"""Steering and feature edits: through the intervention mechanism, in trace and in generate (with the
KV cache and a cropped context), checked against hand-written forward hooks on a random model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model
from sae_helpers import random_sae

import gptviz
from gptviz.interventions import InterventionError

IDS = [1, 5, 2, 7, 3, 9, 4, 4, 0, 6]
SITE = "blocks.1.resid_mid"


def _vec(seed: int = 0, n: int = 16) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def _manual(model, site_module, add, positions=None):
    """A forward hook written by hand: output + add at the given positions (all when None)."""

    def hook(mod, args, out):
        if positions is None:
            return out + add
        out = out.clone()
        out[:, positions] = out[:, positions] + add
        return out

    return site_module.register_forward_hook(hook)


@torch.no_grad()
def test_steer_equals_a_manual_hook_exactly():
    model = tiny_model()
    v, coeff = _vec(), 3.0
    steered = gptviz.trace(model, IDS, interventions=[gptviz.steer(SITE, v, coeff)])
    h = _manual(model, model.transformer.h[1].resid_mid, coeff * v)
    try:
        manual = model(torch.tensor([IDS]))[0]
    finally:
        h.remove()
    assert torch.equal(steered.tensor("logits"), manual)  # 0.0 difference
    assert not torch.equal(manual, model(torch.tensor([IDS]))[0])  # and steering did change them
    gen = gptviz.generate(model, IDS, 1, temperature=0, interventions=[gptviz.steer(SITE, v, coeff)])
    probs = torch.softmax(manual[-1], -1)
    assert gen.steps[0].id == int(probs.argmax()) and gen.steps[0].prob == float(probs.max())
    assert gen.steps[0].top == list(zip(*[t.tolist() for t in reversed(torch.topk(probs, 10))]))


@torch.no_grad()
def _rerun(model, ids, n, add, positions=None, block=None):
    """Greedy generation re-running the whole (cropped) context each step with a manual hook."""
    ids = list(ids)
    probs = []
    for _ in range(n):
        start = 0 if block is None else max(0, len(ids) - block)
        local = None if positions is None else [p - start for p in positions if start <= p < len(ids)]
        h = _manual(model, model.transformer.h[1].resid_mid, add, local) if local != [] else None
        try:
            p = torch.softmax(model(torch.tensor([ids[start:]]))[0, -1], -1)
        finally:
            if h is not None:
                h.remove()
        ids.append(int(p.argmax()))
        probs.append(float(p.max()))
    return ids, probs


@pytest.mark.parametrize("positions", [None, [2, 11, 13]])
def test_steered_generation_with_the_cache_equals_a_full_rerun(positions):
    model = tiny_model(block_size=32)
    v, coeff = _vec(1), 2.5
    gen = gptviz.generate(model, IDS, 8, temperature=0, interventions=[gptviz.steer(SITE, v, coeff, positions)])
    ids, probs = _rerun(model, IDS, 8, coeff * v, positions)
    assert gen.ids == ids
    np.testing.assert_allclose([s.prob for s in gen.steps], probs, atol=1e-5)
    plain = gptviz.generate(model, IDS, 8, temperature=0)
    assert plain.ids != gen.ids or [s.prob for s in plain.steps] != [s.prob for s in gen.steps]


def test_steered_generation_with_a_cropped_context():
    model = tiny_model()  # block_size 16: 10 prompt tokens + 12 new ones crop the window
    v, coeff = _vec(2), 2.0
    for positions in (None, [12]):
        iv = gptviz.steer(SITE, v, coeff, positions)
        gen = gptviz.generate(model, IDS, 12, temperature=0, crop_context=True, interventions=[iv])
        ids, probs = _rerun(model, IDS, 12, coeff * v, positions, block=16)
        assert gen.ids == ids
        np.testing.assert_allclose([s.prob for s in gen.steps], probs, atol=1e-5)


def test_a_mean_ablation_reruns_the_context_in_generate():
    """Not pointwise: each step's mean is over the whole context, as a re-run computes it."""
    model = tiny_model(block_size=32)
    iv = gptviz.ablate("blocks.0.mlp.out", how="mean")
    gen = gptviz.generate(model, IDS, 5, temperature=0, interventions=[iv])
    ids = list(IDS)
    for _ in range(5):
        t = gptviz.trace(model, ids, interventions=[iv])
        ids.append(int(np.argmax(t["logits"][-1])))
    assert gen.ids == ids


def test_bad_steering_gets_one_line():
    model = tiny_model()
    with pytest.raises(InterventionError, match="16 per token"):
        gptviz.trace(model, IDS, interventions=[gptviz.steer(SITE, np.ones(5), 1.0)])
    with pytest.raises(InterventionError, match="finite"):
        gptviz.steer(SITE, np.ones(16), float("nan"))
    with pytest.raises(InterventionError, match="negative"):
        gptviz.generate(model, IDS, 2, interventions=[gptviz.steer(SITE, np.ones(16), 1.0, positions=[-1])])
    with pytest.raises(InterventionError, match="2 layers"):
        gptviz.generate(model, IDS, 2, interventions=[gptviz.steer("blocks.5.resid_mid", np.ones(16), 1.0)])


@torch.no_grad()
def test_edit_features_keeps_the_error_term():
    model = tiny_model()
    sae = random_sae("topk", site="blocks.1.resid_post", k=4)
    plain = gptviz.trace(model, IDS)
    f = gptviz.feature_activations(plain, sae)
    assert f.shape == (len(IDS), sae.d_sae)
    np.testing.assert_array_equal(f, sae.encode(plain["blocks.1.resid_post"]))
    silent = int(np.flatnonzero(f.max(0) == 0)[0])  # fires on no token: editing it changes nothing
    same = gptviz.trace(model, IDS, interventions=[gptviz.edit_features(sae, [silent])])
    assert torch.equal(same.tensor("logits"), plain.tensor("logits"))
    loud = int(f.max(0).argmax())
    edited = gptviz.trace(model, IDS, interventions=[gptviz.edit_features(sae, [loud])])
    delta = edited["blocks.1.resid_post"] - plain["blocks.1.resid_post"]
    want = -f[:, loud, None] * sae.W_dec[loud].numpy()  # the feature's share of the reconstruction, removed
    np.testing.assert_allclose(delta, want, atol=1e-5)
    clamp = gptviz.trace(model, IDS, interventions=[gptviz.edit_features(sae, [loud], how=5.0, positions=[3])])
    d = clamp["blocks.1.resid_post"] - plain["blocks.1.resid_post"]
    np.testing.assert_allclose(d[3], (5.0 - f[3, loud]) * sae.W_dec[loud].numpy(), atol=1e-5)
    assert not d[np.arange(len(IDS)) != 3].any()
    with pytest.raises(InterventionError, match="48 features"):
        gptviz.edit_features(sae, [48])


@torch.no_grad()
def test_steering_vector_is_the_mean_difference_at_the_last_token():
    model = tiny_model()
    pairs = [([1, 2, 3], [4, 5]), ([6, 7], [8, 9, 10, 1])]
    v = gptviz.steering_vector(model, pairs, SITE)
    want = np.mean([gptviz.trace(model, p)[SITE][-1] - gptviz.trace(model, n)[SITE][-1] for p, n in pairs], axis=0)
    np.testing.assert_allclose(v, want, atol=1e-6)
    direction = gptviz.neuron_direction(model, 0, 3)
    np.testing.assert_array_equal(direction, model.transformer.h[0].mlp.c_proj.weight[:, 3].numpy())


@torch.no_grad()
def test_steering_sweep_matches_steered_traces():
    model = tiny_model()
    v, coeffs, target = _vec(3), [-4.0, 0.0, 2.0, 6.0], 4
    sweep = gptviz.steering_sweep(model, IDS, v, "resid_post", coeffs, target=target)
    assert list(sweep.columns) == ["site", "coeff", "target_logprob", "kl", "top_token"]
    assert len(sweep) == 2 * len(coeffs)
    base = torch.log_softmax(model(torch.tensor([IDS]))[0, -1], -1)
    for row in sweep.itertuples():
        t = gptviz.trace(model, IDS, interventions=[gptviz.steer(row.site, v, row.coeff)])
        logp = torch.log_softmax(t.tensor("logits")[-1], -1)
        assert row.target_logprob == pytest.approx(float(logp[target]), abs=1e-4)
        assert row.kl == pytest.approx(float((base.exp() * (base - logp)).sum()), abs=1e-4)
        assert row.top_token == int(logp.argmax())
    assert sweep[sweep.coeff == 0].kl.abs().max() < 1e-5
    assert sweep[sweep.coeff == 6].kl.min() > 1e-3


@torch.no_grad()
@pytest.mark.parametrize("overrides", [{}, dict(norm="rmsnorm", pos_encoding="rotary", bias=False)])
def test_steering_sweep_equals_a_manual_hook_bit_for_bit(overrides):
    """Each cell is a row of a batch (a residual site's rows start from the unsteered residual), and
    its numbers are those of the model run with a plain forward hook adding coeff * v, exactly: the
    head runs on every position, as in the forward pass (a product of the last row alone rounds
    differently), and a row of a batch is rounded as the same row alone."""
    model = tiny_model(n_layer=3, n_embd=32, vocab_size=50, **overrides)
    ids, v, target = [(7 * i + 3) % 50 for i in range(12)], _vec(5, 32), 4
    sites = ["blocks.0.resid_pre", "blocks.1.resid_post", "blocks.2.resid_post", "blocks.1.mlp.out"]
    sweep = gptviz.steering_sweep(model, ids, v, sites, [-3.0, 0.5, 4.0], target=target)
    idx = torch.tensor([ids])
    base = torch.log_softmax(model(idx)[0, -1].float(), -1)
    for row in sweep.itertuples():
        layer, site = gptviz.names.parse(row.site)
        module = model.get_submodule(f"transformer.h.{layer}.{site}")
        hook = module.register_forward_hook(lambda mod, args, out, c=row.coeff: out + c * v)
        try:
            logp = torch.log_softmax(model(idx)[0, -1].float(), -1)
        finally:
            hook.remove()
        assert row.target_logprob == float(logp[target])
        assert row.kl == float((base.exp() * (base - logp)).sum().clamp_min(0.0))
        assert row.top_token == int(logp.argmax())


@torch.no_grad()
def test_steering_sweep_at_other_sites_and_positions():
    """The batched path (hooks) for a non-residual site, and positions on the residual fast path."""
    model = tiny_model()
    v = _vec(4)
    for site in ("blocks.0.mlp.out", "blocks.1.resid_pre", "blocks.0.resid_post"):
        sweep = gptviz.steering_sweep(model, IDS, v, [site], [3.0, -5.0], target=2, positions=[1, 8])
        for row in sweep.itertuples():
            t = gptviz.trace(model, IDS, interventions=[gptviz.steer(site, v, row.coeff, positions=[1, 8])])
            logp = torch.log_softmax(t.tensor("logits")[-1], -1)
            assert row.target_logprob == pytest.approx(float(logp[2]), abs=1e-4)
