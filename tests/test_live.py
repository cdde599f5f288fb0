"""The registry of lessons being taught (gptviz.dashboard.live): bounded against a neighbour who makes
up codes or opens many lessons, without ever ending a class that is being taught."""

from __future__ import annotations

import pytest

from gptviz.dashboard.classroom import live
from gptviz.lessons import shipped_lesson


@pytest.fixture
def registry(monkeypatch):
    """An empty registry and a clock the test moves."""
    monkeypatch.setattr(live, "_live", {})
    monkeypatch.setattr(live, "_followers", {})
    for state in ("_owners", "_ended", "_guesses"):  # a teacher another test left must not hold a place
        monkeypatch.setattr(live, state, {})
    clock = [1000.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    return clock


def test_followers_of_a_code_nobody_teaches_are_not_remembered(registry):
    for i in range(1000):  # a script opening ?follow=... with made-up codes
        live.follow(f"Z{i:03d}", f"session-{i}")
    assert live._followers == {}
    lesson = shipped_lesson("how-attention-works")
    live.publish("ABCD", lesson, 0)
    live.follow("ABCD", "student")  # once the lesson is live, its followers are
    assert live.followers("ABCD") == ["student"]


def test_a_full_server_refuses_a_new_lesson_and_keeps_every_class_being_taught(registry):
    lesson = shipped_lesson("how-attention-works")
    assert live.publish("TCHR", lesson, 0) is not None  # the teacher, first
    live.follow("TCHR", "student")
    for i in range(live.MAX_LIVE - 1):  # a neighbour fills every other place
        registry[0] += 1
        assert live.publish(f"N{i:03d}", lesson, 0) is not None
    registry[0] += 1
    assert live.publish("LATE", lesson, 0) is None  # no place: refused, nobody pushed out
    assert live.lookup("LATE") is None and len(live._live) == live.MAX_LIVE
    moved = live.publish("TCHR", lesson, 1)  # the teacher still moves, the student still follows
    assert moved is not None and moved.slide == 1 and live.followers("TCHR") == ["student"]


def test_a_lesson_nobody_moves_for_hours_is_forgotten_and_frees_its_place(registry):
    lesson = shipped_lesson("how-attention-works")
    for i in range(live.MAX_LIVE):
        live.publish(f"N{i:03d}", lesson, 0)
    registry[0] += live.IDLE_S + 1
    assert live.publish("NEXT", lesson, 0) is not None
    assert live.lookup("N000") is None and len(live._live) == 1
