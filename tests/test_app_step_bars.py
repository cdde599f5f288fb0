"""The bars of a page's own long steps (dashboard/progress.py waited): scoring every head, the health
checks, the Attention page's maps and layer × head grid and the Compare page's maps report each layer
(or map) into a bar with a Cancel, drawn once the step has run SHOW_AFTER_S (here 0: every
step counts as slow) and gone when it ends; a cached result draws nothing; a Cancel stops the page there."""

from __future__ import annotations

import pytest
from apptest_helpers import app_session, ok

import gptviz
from gptviz.bench.checkpoints import NAME
from gptviz.dashboard import progress

STEPS = [
    ("views/heads.py", "heads"),
    ("views/health.py", "health"),
    ("views/attention.py", "attention"),  # its maps, then the grid (each layer)
    ("views/compare.py", "cmp_maps"),  # its three maps, then each run's head scores (each layer)
]

MAPS = {"attention": 2, "cmp_maps": 3}  # the maps a page's figures step makes (one head's, then the rest)
SCORED = {"cmp_maps": 2}  # Compare scores every head of A, then of B (its default prompt B is another run)


@pytest.fixture
def drawn(monkeypatch) -> list[gptviz.Progress]:
    """Every report a bar drew (its text is made by progress.describe), every step counted as slow."""
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    got: list[gptviz.Progress] = []
    real = progress.describe
    monkeypatch.setattr(progress, "describe", lambda p: got.append(p) or real(p))
    return got


@pytest.mark.parametrize("page, name", STEPS)
def test_a_slow_step_draws_each_layer_into_its_bar(env, drawn, page, name):
    at = ok(app_session())
    layers = gptviz.load(env / NAME).model.config.n_layer
    drawn.clear()
    ok(at.switch_page(page).run())
    assert [p.done for p in drawn if p.what == "layers"] == list(range(layers + 1)) * SCORED.get(name, 1)
    assert [p.done for p in drawn if p.what == "maps"] == list(range(MAPS.get(name, -1) + 1))
    assert not at.get("progress")  # gone once done
    drawn.clear()
    ok(at.run())
    assert not drawn  # cached: nothing to wait for, no bar


WHAT = {
    "heads": "Scoring every head",
    "health": "Checking the checkpoint",
    "attention": "Drawing the attention maps",
    "cmp_maps": "Drawing the attention maps",
}


@pytest.mark.parametrize("page, name", STEPS)
def test_cancel_stops_the_step_until_run_again(env, monkeypatch, page, name):
    at = ok(app_session())
    real = progress._LateBar.update

    def cancel_once_drawn(self, p: gptviz.Progress) -> None:  # as a click on the bar's Cancel would
        if self.name == name:
            progress._cancel(self.name, self.key)
        real(self, p)

    monkeypatch.setattr(progress._LateBar, "update", cancel_once_drawn)
    ok(at.switch_page(page).run())
    cancelled = f"{WHAT[name]}: cancelled."
    assert cancelled in [i.value for i in at.info] and not at.get("plotly_chart") and not at.dataframe
    ok(at.run())  # another rerun does not start it again: the Cancel holds for this run
    assert cancelled in [i.value for i in at.info] and not at.get("plotly_chart")
    monkeypatch.setattr(progress._LateBar, "update", real)
    ok(next(b for b in at.button if b.label == "Run again").click().run())
    assert cancelled not in [i.value for i in at.info]
    assert at.get("plotly_chart") or at.dataframe  # the page drawn
