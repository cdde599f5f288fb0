"""The dashboard's bars for the checkpoint's load and the model's first run (dashboard/progress.py bar),
through AppTest: a step that runs past SHOW_AFTER_S draws a bar fed by gptviz.load's and gptviz.trace's
own reports, from 0 to the total, and removes it when done; a cached model or run draws nothing; a
load stopped by a Cancelled is not remembered as the checkpoint's failure."""

from __future__ import annotations

import pytest
from apptest_helpers import app_session, ok

import gptviz
from gptviz.bench.checkpoints import NAME
from gptviz.dashboard import caches, progress


@pytest.fixture
def drawn(monkeypatch) -> list[gptviz.Progress]:
    """Every report a bar drew (its text is made by progress.describe)."""
    got: list[gptviz.Progress] = []
    real = progress.describe
    monkeypatch.setattr(progress, "describe", lambda p: got.append(p) or real(p))
    return got


def test_a_slow_load_and_first_run_draw_bars_that_go_when_done(env, monkeypatch, drawn):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)  # every step counts as slow
    at = ok(app_session())
    model = gptviz.load(env / NAME).model
    loads = [p for p in drawn if p.what == "kB"]  # a model under 16 MB counts kB
    kb = -(-model.num_params() * 4 // 2**10)
    assert loads[0].done == 0 and loads[-1].done == loads[-1].total == kb
    assert [p.done for p in drawn if p.what == "blocks"] == list(range(model.config.n_layer + 1))
    assert not at.get("progress")  # removed once done
    drawn.clear()
    ok(app_session())  # another session: the model and the run are cached
    assert not drawn


def test_a_quick_load_draws_no_bar(env, drawn):
    ok(app_session())
    assert not drawn  # a small model loads and runs in well under SHOW_AFTER_S


def test_a_cancelled_load_is_not_remembered_as_a_failure(env):
    key = caches.ModelKey(NAME, "cpu")

    def stop(p: gptviz.Progress) -> None:
        raise gptviz.Cancelled("stopped by the test")

    with pytest.raises(gptviz.Cancelled):
        caches.load_bundle(key, _progress=stop)
    assert isinstance(caches.load_bundle(key), gptviz.Bundle)  # loaded afresh, not the reason remembered
