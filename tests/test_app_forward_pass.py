"""The Forward pass page through AppTest: Next and Back walk the library's steps in order, each step's
shape is the run's, and the step is kept in the URL for a slide's link."""

from __future__ import annotations

from apptest_helpers import PROMPT, app_session, ok, reference_trace

import gptviz
from gptviz.analysis import walkthrough
from gptviz.bench.checkpoints import NAME


def test_next_and_back_walk_the_librarys_steps(env):
    at = ok(app_session("views/forward_pass.py", prompt=PROMPT))
    model = gptviz.load(env / NAME).model
    steps = walkthrough.forward_steps(model, reference_trace(env, PROMPT), 0)
    assert at.subheader[0].value == steps[0].title
    assert at.button(key="fp_back").disabled
    for s in steps[1:3]:
        ok(at.button(key="fp_next").click().run())
        assert at.subheader[0].value == s.title
        assert str(s.shape) in at.markdown[1].value.replace("\\", "")
    assert at.query_params["step"] == "3"
    ok(at.button(key="fp_back").click().run())
    assert at.subheader[0].value == steps[1].title
