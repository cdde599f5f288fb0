"""The Logit lens page through Streamlit's AppTest: the lens on screen against the library's, a typed
target token followed through depth, and bad target tokens as one message."""

from __future__ import annotations

import html

import numpy as np
import pytest
import test_app_heads as heads
from apptest_helpers import array, figure, ok
from test_app_heads import reference

import gptviz

at, env = heads.at, heads.env  # the Heads page's tests' session on the same prompt


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
