"""The dashboard's bars for the checkpoint's load and the model's first run (dashboard/progress.py bar),
through AppTest: a step that runs past SHOW_AFTER_S draws a bar fed by gptviz.load's and gptviz.trace's
own reports, from 0 to the total, and removes it when done; a cached model or run draws nothing; a
load stopped by a Cancelled is not remembered as the checkpoint's failure; the bars' Cancel stops the
load or the run, says so, and holds for that checkpoint or prompt until its button asks again."""

from __future__ import annotations

import threading
import time

import pytest
from apptest_helpers import app_session, ok, run_prompt
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.bench.checkpoints import NAME
from gptviz.dashboard import caches, progress, sidebar


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


def test_a_load_that_reports_nothing_for_a_while_has_its_bar_drawn_by_then(env, monkeypatch):
    """A Llama-3 tokenizer is read and checked before the load counts its first byte: the bar must not
    wait for that count. Here the load says its stage, then is silent for longer than SHOW_AFTER_S: the
    timer draws the bar, saying the stage, during the silence; the load's counts then move it on."""
    silence = progress.SHOW_AFTER_S + 1.0
    real_load = caches.load

    def slow(path, device, dtype, progress=None):
        gptviz.progress.begin(progress, "reading the tokenizer")
        time.sleep(silence)  # nothing reported meanwhile
        return real_load(path, device, dtype, progress=progress)

    monkeypatch.setattr(caches, "load", slow)
    draws: list[tuple[float, bool, gptviz.Progress | None]] = []
    real_draw = progress._LateBar._draw

    def draw(self) -> None:
        real_draw(self)
        if self.shown is not None:  # seconds since the step began, drawn by the timer, what it drew
            draws.append(
                (
                    time.perf_counter() - self.started,
                    isinstance(threading.current_thread(), threading.Timer),
                    self.drawn,
                )
            )

    monkeypatch.setattr(progress._LateBar, "_draw", draw)
    at = ok(app_session())
    seconds, by_timer, shown = draws[0]
    assert by_timer and progress.SHOW_AFTER_S <= seconds < silence
    assert shown is not None and shown.stage == "reading the tokenizer" and not shown.counts
    assert any(p is not None and p.what == "kB" for _, _, p in draws[1:])  # the counts followed, by the load
    assert not at.get("progress") and at.get("plotly_chart")  # gone once loaded; the page drawn


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


def cancel_first(monkeypatch, module, name: str, step: str) -> list[list]:
    """Wrap module.name (a cached step taking its key and _progress=) so that the first time it works (a
    cached value makes no report) it is cancelled at its first report, as a click on the bar's Cancel
    would (the button's callback stores the step's key); later ones run. Returns, for each time it
    worked, its key and reports."""
    real, runs = getattr(module, name), []

    def wrapped(key, _progress=None):
        seen: list = []

        def report(p: gptviz.Progress) -> None:
            if not seen:
                runs.append(seen)
            seen.append(p)
            if len(runs) == 1:
                progress._cancel(step, key)
            _progress(p)

        return real(key, _progress=report)

    monkeypatch.setattr(module, name, wrapped)
    return runs


def cancelled(at: AppTest, what: str, again: str) -> bool:
    """The page says only that the step was cancelled (not "nothing to show"), with the button to go on."""
    return [i.value for i in at.info] == [f"{what}: cancelled."] and again in [b.label for b in at.button]


def test_cancel_stops_the_load_until_load_again(env, monkeypatch):
    runs = cancel_first(monkeypatch, caches, "load_bundle", "load")
    at = ok(app_session())
    assert cancelled(at, "Loading the checkpoint", "Load again")
    assert not at.get("plotly_chart") and len(runs) == 1
    ok(at.run())  # a rerun (another widget) does not load it again: the Cancel holds
    assert cancelled(at, "Loading the checkpoint", "Load again") and len(runs) == 1
    ok(next(b for b in at.button if b.label == "Load again").click().run())
    assert len(runs) == 2 and not at.info and at.get("plotly_chart")  # loaded and drawn


def test_cancel_stops_the_first_run_until_run_again(env, monkeypatch):
    runs = cancel_first(monkeypatch, sidebar, "run_trace", "first_run")
    at = ok(app_session())
    assert cancelled(at, "Running the model", "Run again") and not at.get("plotly_chart")
    ok(next(b for b in at.button if b.label == "Run again").click().run())
    assert len(runs) == 2 and not at.info and at.get("plotly_chart")


def test_a_cancel_holds_for_its_prompt_only(env, monkeypatch):
    runs = cancel_first(monkeypatch, sidebar, "run_trace", "first_run")
    at = ok(app_session())
    assert cancelled(at, "Running the model", "Run again")
    ok(run_prompt(at, "ROMEO:"))
    assert len(runs) == 2 and not at.info and at.get("plotly_chart")  # run at once, no Run again needed
