"""The teacher's page computes the next slide ahead (slide_view.prepare, issue 38): a slide never shown
before used to be computed on the press, and the class waited for it (after a teacher's reload, 3 s onto
the predict slide). Prepared in a thread, the press finds it made: the slide is built once, by the thread,
and the press takes the very object the thread cached."""

from __future__ import annotations

from pathlib import Path

from apptest_helpers import serve

from gptviz.dashboard.classroom import slide_view
from gptviz.dashboard.classroom.lesson_check import model_key
from gptviz.lessons import content, shipped_lesson

ROOT = Path(__file__).resolve().parents[1]
LESSON = shipped_lesson("how-attention-works")


def test_the_next_slide_is_computed_ahead_once(monkeypatch):
    serve(monkeypatch, ROOT / "checkpoints", "shakespeare-char")
    monkeypatch.setattr(slide_view, "_PREPARED", set())
    calls = []
    real = content.build
    monkeypatch.setattr(content, "build", lambda *a, **k: calls.append(a[0].title) or real(*a, **k))
    slide = next(s for s in LESSON.slides if s.page == "predict")
    assert slide_view.prepare(slide) is None  # no server here (AppTest counts its own computations)
    worker = slide_view.prepare(slide, force=True, after=0.0)
    assert worker is not None
    worker.join(120)
    assert not worker.is_alive() and calls == [slide.title]
    assert slide_view.prepare(slide, force=True, after=0.0) is None  # once per slide and process
    shown = slide_view.slide_content(slide, model_key(slide))  # the press: cached, not computed again
    assert not isinstance(shown, str) and calls == [slide.title]
    assert shown is slide_view.slide_content(slide, model_key(slide))
