"""Per-head weight views (analysis/circuits.py) against what the model computed and against
TransformerLens's own W_Q / W_K / W_V / W_O and QK / OV circuits on the same weights."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.analysis.circuits import head_weights, ov_circuit, qk_circuit
from gptviz.errors import ArgumentError

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def run(model: gptviz.GPT, layer: int) -> tuple[dict, torch.Tensor]:
    """The Trace's values of one layer, and that layer's ln_1 output computed from its resid_pre."""
    tr = gptviz.trace(model, IDS)
    at = {site: torch.as_tensor(tr[gptviz.point(site, layer)]) for site in ("resid_pre", "attn.q", "attn.z")}
    at |= {site: torch.as_tensor(tr[gptviz.point(site, layer)]) for site in ("attn.scores", "attn.weights", "attn.out")}
    with torch.no_grad():
        x = model.transformer.h[layer].ln_1(at["resid_pre"])  # [T, C]
    return at, x


def test_each_heads_query_and_the_output_are_the_views_products():
    """q[h] = x W_Q[h] + b_Q[h] and attn.out = Σ_h z[h] W_O[h] + b_O, with biases (GPT-2's shape)."""
    model = tiny_model(seed=3)
    at, x = run(model, 1)
    w = head_weights(model, 1)
    torch.testing.assert_close(torch.einsum("tc,hcd->htd", x, w.W_Q) + w.b_Q[:, None], at["attn.q"])
    torch.testing.assert_close(torch.einsum("htd,hdc->tc", at["attn.z"], w.W_O) + w.b_O, at["attn.out"])


def test_the_qk_and_ov_circuits_give_the_scores_and_the_output_with_grouped_heads():
    """Without biases: scores[h] = x QK[h] xᵀ × scale, and attn.out = Σ_h weights[h] x OV[h], with 4 query
    heads reading 2 key/value heads."""
    model = tiny_model(seed=4, n_head=4, n_kv_head=2, n_embd=16, bias=False)
    at, x = run(model, 0)
    scale = model.transformer.h[0].attn.spec.scale
    out = torch.zeros_like(at["attn.out"])
    for h in range(4):
        torch.testing.assert_close(x @ qk_circuit(model, 0, h) @ x.T * scale, at["attn.scores"][h])
        out += at["attn.weights"][h] @ x @ ov_circuit(model, 0, h)
    torch.testing.assert_close(out, at["attn.out"])
    assert head_weights(model, 0).W_K.shape == (2, 16, 4) and head_weights(model, 0).kv_head(3) == 1


def test_the_views_share_the_models_storage():
    model = tiny_model()
    assert head_weights(model, 0).W_Q.data_ptr() == model.transformer.h[0].attn.c_attn.weight.data_ptr()


@pytest.mark.parametrize(("layer", "head"), [(2, 0), (-1, 0), (0, 2), (0, 1.0)])
def test_a_layer_or_head_the_model_lacks_is_one_line(layer, head):
    with pytest.raises(ArgumentError):
        qk_circuit(tiny_model(), layer, head)


@pytest.mark.skipif(importlib.util.find_spec("transformer_lens") is None, reason="TransformerLens is a test extra")
def test_the_views_are_transformer_lens_own():
    """TransformerLens's W_Q, W_K, W_V, W_O, their biases and its QK / OV circuits, on the same GPT-2
    weights converted by its own converter (unfolded, uncentred)."""
    from gptviz.bench.forward import to_hf_gpt2, to_transformer_lens

    model = tiny_model(seed=5)
    tl = to_transformer_lens(to_hf_gpt2(model, "eager"))
    assert not isinstance(tl, str), tl
    for l in range(model.config.n_layer):
        w = head_weights(model, l)
        for ours, theirs in [
            (w.W_Q, tl.W_Q[l]),
            (w.W_K, tl.W_K[l]),
            (w.W_V, tl.W_V[l]),
            (w.W_O, tl.W_O[l]),
            (w.b_Q, tl.b_Q[l]),
            (w.b_O, tl.b_O[l]),
        ]:
            torch.testing.assert_close(ours, theirs.detach())
        for h in range(model.config.n_head):
            torch.testing.assert_close(qk_circuit(model, l, h), tl.QK[l, h].AB.detach())
            torch.testing.assert_close(ov_circuit(model, l, h), tl.OV[l, h].AB.detach())
