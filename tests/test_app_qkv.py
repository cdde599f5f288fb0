"""The Q / K / V page through AppTest: the q matrix drawn is the run's q of the chosen head, and the
query's bars are its scores against every key, the masked future left out."""

from __future__ import annotations

import numpy as np
from apptest_helpers import PROMPT, app_session, array, figure, ok, reference_trace

import gptviz


def test_q_and_the_querys_scores_are_the_runs(env):
    at = ok(app_session("views/qkv.py", prompt=PROMPT, layer="1", head="1", position="5"))
    assert at.title[0].value == "Q / K / V"
    t = reference_trace(env, PROMPT)
    q = array(figure(at, "qkv_q")["data"][0]["z"])
    np.testing.assert_allclose(q, t[gptviz.point("attn.q", 1)][1], rtol=1e-5, atol=1e-6)
    bars = figure(at, "qkv_scores")["data"]
    allowed = array(bars[0]["y"])
    scores = t[gptviz.point("attn.scores", 1)][1, 5]
    np.testing.assert_allclose(allowed[:6], scores[:6], rtol=1e-5, atol=1e-6)
    assert np.isnan(allowed[6:]).all()  # keys after the query are not its to read
