"""The Features page and the steering panel (Next token) through AppTest: the numbers drawn against
the library run directly, and a bad or mismatched SAE as one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from sae_helpers import random_sae

import gptviz
from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard.state import PRESET_PROMPT
from gptviz.features import save_sae

SITE = "blocks.1.resid_post"


@pytest.fixture(scope="module")
def ckpt_root(tmp_path_factory) -> Path:
    root = make_checkpoints(tmp_path_factory.mktemp("checkpoints"))
    save_sae(random_sae("topk", d_in=32, d_sae=96, site=SITE, k=8), root / NAME / "saes" / "tiny-sae")
    save_sae(random_sae("topk", d_in=16, site=SITE), root / "other-sae")
    samples = tmp_path_factory.mktemp("samples")
    (samples / "shakespeare").mkdir()
    (samples / "shakespeare" / "a.txt").write_text("To be, or not to be, that is the question.\n" * 20)
    return root, samples


def open_page(monkeypatch, roots, page: str):
    root, samples = roots
    monkeypatch.setenv("GPTVIZ_SAMPLES_DIR", str(samples))
    serve(monkeypatch, root, NAME)
    return ok(app_session(page, timeout=180))


def _run(root: Path):
    bundle = gptviz.load(root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, PRESET_PROMPT, bundle.model.config.block_size)
    return bundle, ids, gptviz.trace(bundle.model, ids, bundle.tokenizer)


def test_features_page_draws_the_prompts_features_and_edits_one(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    assert at.title[0].value == "Features"
    bundle, ids, t = _run(ckpt_root[0])
    sae = gptviz.load_sae(ckpt_root[0] / NAME / "saes" / "tiny-sae")
    acts = gptviz.feature_activations(t, sae)
    heat = figure(at, "ft_heatmap")["data"][0]
    shown = [int(x[1:]) for x in heat["x"]]
    np.testing.assert_allclose(array(heat["z"]), acts[:, shown], atol=1e-6)
    assert acts[:, shown].max(0).min() >= np.sort(acts.max(0))[-len(shown)]  # the strongest ones
    feature = int(at.number_input(key="ft_feature").value)
    bars = figure(at, "ft_effect")["data"][0]
    effect = bundle.model.lm_head.weight.detach() @ sae.W_dec[feature]
    assert max(array(bars["x"])) == pytest.approx(float(effect.max()), abs=1e-5)
    edited = gptviz.trace(bundle.model, ids, interventions=[gptviz.edit_features(sae, [feature])])
    after = figure(at, "ft_after")["data"][0]
    top = np.sort(np.exp(edited["logits"][-1] - edited["logits"][-1].max()))[::-1]
    top = top / np.exp(edited["logits"][-1] - edited["logits"][-1].max()).sum()
    np.testing.assert_allclose(sorted(array(after["x"]), reverse=True), top[: len(array(after["x"]))], atol=1e-5)
    at.toggle(key="ft_scan").set_value(True)
    ok(at.run())
    contexts = at.dataframe[-1].value  # the strongest contexts of the feature in the sample corpus
    s = gptviz.scan(bundle.model, ckpt_root[1] / "shakespeare", bundle.tokenizer, k=8, saes=[sae])
    want = s.features[s.features.feature == feature].sort_values("rank")
    np.testing.assert_allclose(contexts["activation"], want.value, atol=1e-6)
    assert all(c.endswith("]]") for c in contexts.iloc[:, -1])


def test_a_bad_or_mismatched_sae_is_one_line(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/features.py")
    at.selectbox(key="ft_sae").set_value("a local path…")
    ok(at.run())
    at.text_input(key="ft_path").set_value(str(ckpt_root[0] / "other-sae"))
    at.run()
    assert not at.exception
    assert "trained on another model" in at.error[0].value and "\n" not in at.error[0].value
    at.text_input(key="ft_path").set_value(str(ckpt_root[0] / "nothing-here"))
    at.run()
    assert not at.exception and "no such file" in at.error[0].value


def test_steering_panel_matches_the_library(monkeypatch, ckpt_root):
    at = open_page(monkeypatch, ckpt_root, "views/next_token.py")
    bundle, ids, t = _run(ckpt_root[0])
    with pytest.raises(KeyError):  # off until asked: the page runs nothing more
        at.get_by_key("st_sweep")
    at.toggle(key="st_on").set_value(True)
    ok(at.run())
    at.segmented_control(key="st_source").set_value("a neuron")
    ok(at.run())
    at.number_input(key="st_neuron").set_value(5)
    at.slider(key="st_coeff").set_value(6.0)
    ok(at.run())
    layer = int(at.selectbox(key="st_layer").value)
    v = gptviz.neuron_direction(bundle.model, 0, 5)
    site = f"blocks.{layer}.resid_post"
    steered = gptviz.trace(bundle.model, ids, interventions=[gptviz.steer(site, v, 6.0)])
    probs = np.exp(steered["logits"][-1] - steered["logits"][-1].max())
    probs /= probs.sum()
    bars = figure(at, "st_top_steered")["data"][0]
    np.testing.assert_allclose(
        sorted(array(bars["x"]), reverse=True), np.sort(probs)[::-1][: len(array(bars["x"]))], atol=1e-5
    )
    sweep = figure(at, "st_sweep")["data"]
    assert [s["name"] for s in sweep] == ["blocks.0.resid_post", "blocks.1.resid_post"]
    want = gptviz.steering_sweep(bundle.model, ids, v, "resid_post", [-16, -8, -4, -2, 2, 4, 8, 16])
    np.testing.assert_allclose(array(sweep[0]["y"]), want[want.site == "blocks.0.resid_post"].kl, atol=1e-5)
    at.segmented_control(key="st_source").set_value("prompt pairs")
    ok(at.run())
    at.text_area(key="st_pairs").set_value("no bar here")
    at.run()
    assert not at.exception and "between its positive and negative" in at.error[0].value
