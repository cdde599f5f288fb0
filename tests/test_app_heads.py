"""The Heads and Logit lens pages through Streamlit's AppTest: the numbers on screen against the
library run outside Streamlit, opening a head in Attention, and bad target tokens."""

from __future__ import annotations

import html
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


def test_logit_lens_page_shows_the_library_lens(at, env):
    ok(at.switch_page("views/logit_lens.py").run())
    assert at.title[0].value == "Logit lens"
    assert "final norm and LM head applied to an intermediate residual" in at.markdown[0].value
    bundle, t = reference(env)
    lens = gptviz.logit_lens(bundle.model, t, k=5)
    fig = figure(at, "lens_grid")
    assert "the final norm and LM head applied to an intermediate residual" in fig["layout"]["title"]["text"]
    T = t.n_tokens
    W = min(T, 48)
    z = array(fig["data"][0]["z"])
    assert z.shape == (5, W)
    pos = T - 1  # a new prompt opens at its last token; the window ends there
    start = max(0, min(pos - W // 2, T - W))
    np.testing.assert_allclose(z, lens.top_probs[:, start : start + W, 0], rtol=1e-5)
    shown = np.asarray(fig["data"][0]["text"], dtype=object)
    expected_tokens = [bundle.tokenizer.display(row.tolist()) for row in lens.top_ids[:, start : start + W, 0]]
    assert shown.tolist() == [[html.escape(s) for s in row] for row in expected_tokens]
    assert fig["layout"]["xaxis"]["type"] == "category" and fig["layout"]["yaxis"]["type"] == "category"
    assert fig["layout"]["yaxis"]["categoryarray"][0] == "embed"

    # the default target is the model's own top token: rank 1 at the output
    top = int(np.argmax(t["logits"][pos]))
    rank_fig = figure(at, "lens_target_chart")
    ranks = array(rank_fig["data"][0]["y"])
    assert ranks[-1] == 1
    with_target = gptviz.logit_lens(bundle.model, t, k=1, target=top)
    np.testing.assert_array_equal(ranks, with_target.target_rank[:, pos] + 1)
    # the page runs the lens on one position: float32 matmuls over fewer rows round differently
    np.testing.assert_allclose(array(rank_fig["data"][1]["y"]), with_target.target_prob[:, pos], rtol=1e-5)


def test_a_typed_target_token_is_followed_through_depth(at, env):
    ok(at.switch_page("views/logit_lens.py").run())
    at.text_input(key="lens_target").input("q")
    ok(at.run())
    bundle, t = reference(env)
    target = bundle.tokenizer.encode("q")[0]
    lens = gptviz.logit_lens(bundle.model, t, k=1, target=target)
    ranks = array(figure(at, "lens_target_chart")["data"][0]["y"])
    np.testing.assert_array_equal(ranks, lens.target_rank[:, -1] + 1)
    assert at.metric[0].value == "q"


@pytest.mark.parametrize(
    "text, kind, words",
    [
        ("qu", "warning", "2 tokens"),
        ("~", "error", "Cannot follow that token"),
    ],
)
def test_bad_target_tokens_get_a_message(at, text, kind, words):
    ok(at.switch_page("views/logit_lens.py").run())
    at.text_input(key="lens_target").input(text)
    at.run()
    assert not at.exception
    messages = [m.value for m in getattr(at, kind)]
    assert any(words in m for m in messages), messages
    assert at.get_by_key("lens_grid") is not None  # the grid stays drawn above the message
