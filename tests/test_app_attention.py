"""The Attention page: the heatmap is the Trace's weights (NaN where masked) and its scores view the
scores before the mask."""

from __future__ import annotations

import numpy as np
import pytest
from apptest_helpers import (
    PROMPT,
    array,
    errors,
    figure,
    ok,
    reference_trace,
    run_prompt,
)

import gptviz
from gptviz import analysis
from gptviz.bench.checkpoints import NAME


def test_heatmap_equals_the_traces_weights(at, env):
    ok(run_prompt(at, PROMPT))
    at.radio(key="layer").set_value(1)
    at.radio(key="head").set_value(2)
    ok(at.switch_page("views/attention.py").run())
    z = array(figure(at, "attn_heatmap")["data"][0]["z"])
    t = reference_trace(env, PROMPT)
    expected = np.where(t["blocks.1.attn.mask"], t["blocks.1.attn.weights"][2], np.nan)
    np.testing.assert_array_equal(z, expected)  # NaN where masked, the exact float32 weights elsewhere
    assert np.isnan(z[0, 1:]).all() and not np.isnan(np.tril(z)).any()


def test_scores_view_and_token_lookup(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/attention.py").run())
    ok(at.button_group(key="attn_kind").set_value("scores").run())
    t = reference_trace(env, PROMPT)
    z = array(figure(at, "attn_heatmap")["data"][0]["z"])
    np.testing.assert_array_equal(z, t["blocks.0.attn.scores"][0])  # before the mask: every cell
    ok(at.switch_page("views/next_token.py").run())
    ok(at.text_input(key="lookup_token").input("e").run())
    tok = gptviz.load(env / NAME).tokenizer
    rank, p = analysis.token_rank(t["logits"][-1], tok.encode("e")[0])
    assert {m.label: m.value for m in at.metric}["Rank"] == f"{rank} of {len(tok.itos)}"
    at.text_input(key="lookup_token").input("~").run()
    assert "does not know" in errors(at)


def test_why_panel_splits_a_cells_score_as_the_library_does(at, env):
    ok(run_prompt(at, PROMPT))
    at.radio(key="layer").set_value(1)
    at.radio(key="head").set_value(2)
    ok(at.switch_page("views/attention.py").run())
    assert not [e for e in at.get("plotly_chart") if e.key == "attn_why"]  # off until asked for
    ok(at.toggle(key="attn_why_on").set_value(True).run())
    ok(at.number_input(key="why_query").set_value(7).run())
    ok(at.number_input(key="why_key").set_value(3).run())
    bars = figure(at, "attn_why")["data"][0]
    t = reference_trace(env, PROMPT)
    model = gptviz.load(env / NAME).model
    parts = gptviz.attention_attribution(model, t, 1, 2, 7, 3)
    assert sum(array(bars["x"])) == pytest.approx(float(t["blocks.1.attn.scores"][2, 7, 3]), abs=1e-4)
    top = parts.loc[parts["score"].abs().sort_values(ascending=False).index[0]]
    assert array(bars["x"])[-1] == pytest.approx(top["score"], rel=1e-6)  # the largest part, drawn on top
    ok(at.number_input(key="why_key").set_value(7).run())
    ok(at.number_input(key="why_query").set_value(2).run())
    assert any("masked" in i.value for i in at.info)  # a key after its query


def test_a_click_on_a_heatmap_cell_picks_its_query_and_key(at, env):
    """AppTest cannot click: the heatmap's invisible cell markers carry each readable cell's (query,
    key) and value, and what Streamlit hands back from a click maps to that cell, the split opened."""
    from gptviz.dashboard.panels.attention_why import clicked_cell

    ok(run_prompt(at, PROMPT))
    at.radio(key="layer").set_value(1)
    at.radio(key="head").set_value(2)
    ok(at.switch_page("views/attention.py").run())
    data = figure(at, "attn_heatmap")["data"]
    z = array(data[0]["z"])
    picker = next(d for d in data if d.get("name") == "cells")
    cells = np.array(picker["customdata"])
    assert len(cells) == np.count_nonzero(~np.isnan(z))  # every readable cell, no masked one
    q, k = cells[:, 0].astype(int), cells[:, 1].astype(int)
    np.testing.assert_array_equal(cells[:, 2], z[q, k])  # each marker on its own cell
    assert list(picker["x"]) == [data[0]["x"][i] for i in k] and list(picker["y"]) == [data[0]["y"][i] for i in q]
    T = z.shape[0]
    layout = figure(at, "attn_heatmap")["layout"]  # the markers do not widen the map's axes
    assert list(layout["xaxis"]["range"]) == [-0.5, T - 0.5] and list(layout["yaxis"]["range"]) == [T - 0.5, -0.5]
    assert clicked_cell([{"customdata": [7.0, 3.0, 0.25]}], T) == (7, 3)
    assert clicked_cell([{"customdata": {"0": 7, "1": 3, "2": 0.25}}], T) == (7, 3)  # as Streamlit may send it
    for bad in ([], [{}], [{"customdata": [3, 7, 0.1]}], [{"customdata": [T, 0]}], [{"customdata": ["x", 1]}]):
        assert clicked_cell(bad, T) is None  # no point, another trace, a masked cell, outside the run
