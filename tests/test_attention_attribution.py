"""attention_attribution (docs/architecture.md, "Circuits"): the parts each upstream source writes
into q and k add up to the real pre-softmax score, in every family (rotary, grouped heads, q/k norms,
OLMo's clip, post-norms, soft-caps), with and without transcoders; the sources add up to resid_pre
and their q and k parts to the real q and k."""

from __future__ import annotations

import numpy as np
import pytest
from test_attribution_graph import IDS, random_model, transcoders
from test_hf_families import FAMILY_CONFIGS

import gptviz
from gptviz.circuits.attention import _sources


@pytest.mark.parametrize("variant", ["gpt2", *FAMILY_CONFIGS])
def test_the_parts_add_up_to_the_real_score(variant):
    fields = {} if variant == "gpt2" else dict(FAMILY_CONFIGS[variant])
    if "qkv_clip" in fields:
        fields["qkv_clip"] = 0.05  # small enough that the clip holds some entries at ±clip
    model = random_model(**fields)
    t = gptviz.trace(model, IDS)
    for tcs in (None, transcoders(model, [0, 1], skip=True)):
        for layer, head, query, key in ((0, 0, 8, 2), (1, 3, 5, 5), (2, 1, 7, 0), (2, 2, 8, 6)):
            df = gptviz.attention_attribution(model, t, layer, head, query, key, transcoders=tcs)
            real = float(t[f"blocks.{layer}.attn.scores"][head, query, key])
            size = df["score"].abs().sum()
            assert df.attrs["score"] == real
            assert df["score"].sum() == pytest.approx(real, abs=1e-5 * size + 1e-6)
            assert df.attrs["terms"]["score"].sum() == pytest.approx(real, abs=1e-5 * size + 1e-6)
            kv = head // (model.config.n_head // model.config.kv_heads)
            np.testing.assert_allclose(df.attrs["q"], t[f"blocks.{layer}.attn.q"][head, query], atol=1e-5)
            np.testing.assert_allclose(df.attrs["k"], t[f"blocks.{layer}.attn.k"][kv, key], atol=1e-5)
            assert set(df["side"]) == {"query", "key"}
            assert set(df.loc[df["side"] == "query", "position"]) == {query}
            heads = [s for s in df["source"] if s.startswith(f"L{layer - 1}H")] if layer else []
            assert len(heads) == (2 * model.config.n_head if layer else 0)  # every earlier head, on both sides


def test_the_sources_add_up_to_resid_pre():
    model = random_model(post_norm=True, norm="rmsnorm")
    tcs = transcoders(model, skip=True)
    t = gptviz.trace(model, IDS)
    for layer in range(3):
        names, vectors = _sources(model, t, layer, 6, tcs)
        assert len(names) == len(vectors)
        np.testing.assert_allclose(vectors.sum(0).numpy(), t[f"blocks.{layer}.resid_pre"][6], atol=1e-5)
        assert all(n.startswith(("embed", "L")) for n in names)


def test_bad_positions_are_one_line():
    model = random_model()
    t = gptviz.trace(model, IDS)
    with pytest.raises(gptviz.PromptError, match="key <= query"):
        gptviz.attention_attribution(model, t, 0, 0, 2, 5)
    with pytest.raises(gptviz.PromptError, match="3 layers of 4 heads"):
        gptviz.attention_attribution(model, t, 3, 0, 2, 1)
