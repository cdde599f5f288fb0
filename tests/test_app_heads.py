"""The Heads page through Streamlit's AppTest: every head's scores on screen against the library run
outside Streamlit, and opening a head in Attention (the Logit lens page's tests share this session)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.bench.checkpoints import NAME

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "To be, or not to be: that is the question. To be, or not."


@pytest.fixture
def env(ckpt_root, monkeypatch):
    serve(monkeypatch, ckpt_root, NAME)
    return ckpt_root


@pytest.fixture
def at(env) -> AppTest:
    at = ok(app_session())
    at.text_area(key="prompt").input(PROMPT)
    return ok(at.button(key="run_btn").click().run())


def reference(root: Path) -> tuple[gptviz.Bundle, gptviz.Trace]:
    bundle = gptviz.load(root / NAME)
    ids = gptviz.encode_prompt(bundle.tokenizer, PROMPT, bundle.model.config.block_size)
    return bundle, gptviz.trace(bundle.model, ids, bundle.tokenizer)


def test_heads_page_shows_every_heads_scores_and_states_the_thresholds(at, env):
    ok(at.switch_page("views/heads.py").run())
    assert at.title[0].value == "Heads"
    assert "0.4" in at.info[0].value and "highest score" in at.info[0].value
    _, t = reference(env)
    expected = gptviz.head_scores(t)
    fig = figure(at, "heads_grid")
    z = array(fig["data"][0]["z"])
    L, H = 2, 4
    np.testing.assert_allclose(z, expected["previous_token"].to_numpy().reshape(L, H), rtol=1e-12)
    assert fig["layout"]["xaxis"]["type"] == "category" and fig["layout"]["yaxis"]["type"] == "category"
    clicks = fig["data"][1]
    assert [list(map(int, c)) for c in array(clicks["customdata"])] == [[l, h] for l in range(L) for h in range(H)]
    assert [gptviz.figures.clicked_head({"x": x, "y": y}) for x, y in zip(clicks["x"], clicks["y"])] == [
        (l, h) for l in range(L) for h in range(H)
    ]
    table = at.dataframe[0].value
    assert list(table.columns) == list(expected.columns) and len(table) == L * H
    np.testing.assert_allclose(table["entropy"].to_numpy(), expected["entropy"].to_numpy(), rtol=1e-12)

    at.selectbox(key="heads_score").set_value("entropy")
    ok(at.run())
    z = array(figure(at, "heads_grid")["data"][0]["z"])
    np.testing.assert_allclose(z, expected["entropy"].to_numpy().reshape(L, H), rtol=1e-12)
    zmax = figure(at, "heads_grid")["data"][0]["zmax"]
    assert zmax == pytest.approx(np.log(t.n_tokens))  # the entropy scale runs to a uniform head's


def test_opening_a_head_switches_to_attention_with_that_head(at):
    ok(at.switch_page("views/heads.py").run())
    ok(at.selectbox(key="heads_pick").set_value("1.2").run())  # choosing is a run of its own, as in a browser
    ok(at.button(key="heads_open").click().run())
    assert at.title[0].value == "Attention"
    assert at.session_state["layer"] == 1 and at.session_state["head"] == 2
    assert at.radio(key="layer").value == 1 and at.radio(key="head").value == 2
    assert at.get_by_key("attn_heatmap") is not None
    assert at.text_area(key="prompt").value == PROMPT  # the same run: the sidebar's choices survive the switch


def test_a_grid_click_names_the_clicked_head():
    # what Streamlit hands the on_select callback for a click on the marker of layer 0, head 3
    assert gptviz.figures.clicked_head({"x": "3", "y": "0", "customdata": [0, 3]}) == (0, 3)
    assert gptviz.figures.clicked_head({"x": 3, "y": 1}) == (1, 3)
    for bad in ({}, {"x": "3"}, {"x": None, "y": "0"}, {"x": "head", "y": "0"}):
        assert gptviz.figures.clicked_head(bad) is None
