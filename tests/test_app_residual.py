"""The Residual stream page through AppTest: the heatmap is the library's statistic at every point of
the stream and position, the statistic switch redraws it, and an ordinary run is not flagged."""

from __future__ import annotations

import numpy as np
from apptest_helpers import PROMPT, array, figure, ok, reference_trace, run_prompt

from gptviz import analysis


def test_the_heatmap_is_the_librarys_statistic_for_each_choice(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/residual.py").run())
    assert at.title[0].value == "Residual stream"
    t = reference_trace(env, PROMPT)
    for stat in ("norm", "mean", "std"):
        at.get_by_key("resid_stat").set_value(stat)
        ok(at.run())
        sites, grid = analysis.residual_stat_grid(t, stat)
        heat = figure(at, "resid_heatmap")["data"][0]
        assert list(heat["y"]) == sites
        np.testing.assert_allclose(array(heat["z"]), grid, rtol=1e-4, atol=1e-5)
    assert not analysis.residual_flags(t) and at.success and "No runaway growth" in at.success[0].value
