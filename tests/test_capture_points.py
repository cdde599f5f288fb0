"""The sub-layer outputs' capture points (attn.z, attn.out, mlp.hidden, mlp.out): what each sub-layer
wrote, checked against the residual stream and against Hugging Face's GPT-2 seen through its own hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import VARIANTS, tiny_model, variant_id
from hf_helpers import hf_random

import gptviz

transformers = pytest.importorskip("transformers")

transformers.logging.set_verbosity_error()
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


@pytest.mark.parametrize("variant", VARIANTS[::3], ids=variant_id)
def test_sublayer_outputs_add_up_to_the_residual_stream(variant):
    model = tiny_model(**variant)
    tr = gptviz.trace(model, IDS)
    for l in range(model.config.n_layer):
        p = lambda site: tr[gptviz.point(site, l)]  # noqa: E731
        # the forward pass computes resid_mid as resid_pre + attn.out: the same float32 add, bit for bit
        np.testing.assert_array_equal(p("resid_pre") + p("attn.out"), p("resid_mid"))
        np.testing.assert_array_equal(p("resid_mid") + p("mlp.out"), p("resid_post"))
    with torch.no_grad():
        plain = model(torch.tensor([IDS]))[0].numpy()
    np.testing.assert_array_equal(tr["logits"], plain)  # the new probes read only


def test_z_is_weights_times_v_and_out_is_its_projection(model):
    tr = gptviz.trace(model, IDS)
    T, C = len(IDS), model.config.n_embd
    with torch.no_grad():
        for l, block in enumerate(model.transformer.h):
            t = lambda site: torch.from_numpy(tr[gptviz.point(site, l)].copy())  # noqa: E731
            torch.testing.assert_close(t("attn.z"), t("attn.weights") @ t("attn.v"), atol=1e-6, rtol=1e-5)
            merged = t("attn.z").transpose(0, 1).reshape(T, C)
            torch.testing.assert_close(block.attn.c_proj(merged), t("attn.out"), atol=1e-6, rtol=1e-5)
            hidden = block.mlp.act(block.mlp.c_fc(block.ln_2(t("resid_mid"))))
            torch.testing.assert_close(hidden, t("mlp.hidden"), atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(block.mlp.c_proj(t("mlp.hidden")), t("mlp.out"), atol=1e-6, rtol=1e-5)


def test_explicit_path_captures_z_from_its_own_weights(model):
    # On the explicit path z is weights @ v of the very tensors it computed: exact, not close
    seen = {}
    h = model.transformer.h[0].attn.z.register_forward_hook(lambda m, a, out: seen.__setitem__("z", out[0].clone()))
    w = model.transformer.h[0].attn.weights.register_forward_hook(lambda m, a, out: seen.__setitem__("w", out[0]))
    v = model.transformer.h[0].attn.v.register_forward_hook(lambda m, a, out: seen.__setitem__("v", out[0]))
    try:
        with torch.no_grad():
            model(torch.tensor([IDS]), explicit=True)
    finally:
        for handle in (h, w, v):
            handle.remove()
    torch.testing.assert_close(seen["z"], seen["w"] @ seen["v"], atol=0, rtol=0)


@pytest.mark.parametrize("overrides", [{}, dict(activation_function="relu", tie_word_embeddings=False)])
def test_new_points_match_hugging_face_hooks(tmp_path, overrides):
    hf = hf_random(**overrides)
    hf.save_pretrained(tmp_path / "hf")
    model = gptviz.load(tmp_path / "hf").model
    H, C = hf.config.n_head, hf.config.n_embd
    theirs, handles = {}, []

    def keep(name, value):
        theirs[name] = value[0].detach().clone()

    for l, block in enumerate(hf.transformer.h):
        # c_proj's input is the heads merged: [T, C] -> [H, T, D]
        handles.append(block.attn.c_proj.register_forward_pre_hook(lambda m, a, l=l: keep(f"z{l}", a[0])))
        handles.append(block.attn.register_forward_hook(lambda m, a, out, l=l: keep(f"attn_out{l}", out[0])))
        handles.append(block.mlp.act.register_forward_hook(lambda m, a, out, l=l: keep(f"hidden{l}", out)))
        handles.append(block.mlp.register_forward_hook(lambda m, a, out, l=l: keep(f"mlp_out{l}", out)))
    try:
        with torch.no_grad():
            hf(torch.tensor([IDS]))
    finally:
        for h in handles:
            h.remove()
    tr = gptviz.trace(model, IDS)
    T = len(IDS)
    close = dict(atol=1e-5, rtol=1e-5)
    for l in range(hf.config.n_layer):
        z = theirs[f"z{l}"].view(T, H, C // H).transpose(0, 1)
        torch.testing.assert_close(tr.tensor(gptviz.point("attn.z", l)), z, **close)
        torch.testing.assert_close(tr.tensor(gptviz.point("attn.out", l)), theirs[f"attn_out{l}"], **close)
        torch.testing.assert_close(tr.tensor(gptviz.point("mlp.hidden", l)), theirs[f"hidden{l}"], **close)
        torch.testing.assert_close(tr.tensor(gptviz.point("mlp.out", l)), theirs[f"mlp_out{l}"], **close)


def test_new_points_are_named_in_forward_order():
    sites = gptviz.names.BLOCK_SITES
    assert sites.index("attn.weights") < sites.index("attn.z") < sites.index("attn.out") < sites.index("resid_mid")
    assert sites.index("resid_mid") < sites.index("mlp.hidden") < sites.index("mlp.out") < sites.index("resid_post")
    assert gptviz.point("mlp.hidden", 2) == "blocks.2.mlp.hidden"
    st = gptviz.trace(tiny_model(n_layer=1), IDS).shape_trace
    assert st[st.capture == "blocks.0.mlp.hidden"].iloc[0].outputs == ((1, len(IDS), 64),)


def test_a_parallel_block_sums_in_hugging_faces_order_and_an_edited_resid_mid_carries_on():
    """A parallel block (GPT-NeoX) adds resid_pre + (attn.out + mlp.out), Hugging Face's order, while
    resid_mid = resid_pre + attn.out is still captured bit for bit; an edit of resid_mid reaches the
    output as resid_mid + mlp.out, as in a sequential block."""
    model = tiny_model(parallel=True, n_layer=3)
    tr = gptviz.trace(model, IDS)
    differs = False
    for l in range(model.config.n_layer):
        p = lambda site: tr[gptviz.point(site, l)]  # noqa: E731
        np.testing.assert_array_equal(p("resid_pre") + p("attn.out"), p("resid_mid"))
        np.testing.assert_array_equal(p("resid_pre") + (p("attn.out") + p("mlp.out")), p("resid_post"))
        differs |= not np.array_equal(p("resid_mid") + p("mlp.out"), p("resid_post"))
    assert differs  # the two orders do round apart here: the equalities above say which one ran
    shift = torch.linspace(-1, 1, model.config.n_embd)
    edited = gptviz.trace(model, IDS, interventions=[gptviz.intervene("blocks.1.resid_mid", lambda x: x + shift)])
    e = lambda site: edited[gptviz.point(site, 1)]  # noqa: E731
    np.testing.assert_array_equal(e("resid_mid"), tr[gptviz.point("resid_mid", 1)] + shift.numpy())
    np.testing.assert_array_equal(e("resid_mid") + e("mlp.out"), e("resid_post"))
