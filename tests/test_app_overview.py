"""The Overview page through AppTest: its heatmap is the chosen head's weights on the run, named by the
run's own tokens, and its bars are the next token's probabilities; a second session on the same run
gets the same figures from the process-wide cache."""

from __future__ import annotations

import numpy as np
from apptest_helpers import PROMPT, app_session, array, figure, ok, reference_trace, run_prompt

import gptviz
from gptviz import analysis, figures
from gptviz.bench.checkpoints import NAME


def test_the_heatmap_is_the_heads_weights_named_by_the_runs_tokens(env):
    at = ok(app_session(prompt=PROMPT, layer="1", head="1"))
    assert at.title[0].value == "Overview"
    t = reference_trace(env, PROMPT)
    heat = figure(at, "overview_heatmap")["data"][0]
    z, want = array(heat["z"]), analysis.attention_matrix(t, 1, 1)
    causal = np.tril(np.ones_like(want, dtype=bool))
    np.testing.assert_allclose(z[causal], want[causal], atol=1e-6)
    assert np.isnan(z[~causal]).all()  # the future is masked, not drawn
    tok = gptviz.load(env / NAME).tokenizer
    labels = figures.token_labels(tok.display([int(i) for i in t.token_ids]))
    assert list(heat["x"]) == labels and list(heat["y"]) == labels
    assert "Layer 1, head 1" in figure(at, "overview_heatmap")["layout"]["title"]["text"]


def test_the_bars_are_the_next_tokens_probabilities(at, env):
    ok(run_prompt(at, PROMPT))
    t = reference_trace(env, PROMPT)
    top = analysis.top_k(t["logits"][-1], 10)
    bars = figure(at, "overview_topk")["data"][0]
    np.testing.assert_allclose(array(bars["x"]), top["probability"], rtol=1e-5)
    assert abs(float(array(bars["x"]).sum()) - 1) < 1, "ten of the vocabulary's probabilities, each below 1"


def test_a_second_session_gets_the_same_figures(env):
    first = ok(app_session(prompt=PROMPT))
    second = ok(app_session(prompt=PROMPT))
    for key in ("overview_heatmap", "overview_topk"):
        assert figure(first, key) == figure(second, key)
