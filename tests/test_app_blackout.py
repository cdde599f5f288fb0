"""The black screen is the class's (issue 38): the teacher's `b` (the hidden Black screen button the
key presses) blanks the teacher's page and every follower's, Next on a black screen brings the slide
back without moving on, and the same button brings it back too. AppTest, shipped lesson."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptest_helpers import app_session, ok, shipped_room

from gptviz.dashboard.classroom import blackout, slides

ROOT = Path(__file__).resolve().parents[1]
LESSON = "how-attention-works"


@pytest.fixture
def room(monkeypatch):
    shipped_room(monkeypatch)
    monkeypatch.setattr(blackout, "_dark", blackout.OrderedDict())


def black(at) -> bool:
    return any(h.proto.body == blackout.BLANK_HTML for h in at.get("html"))


def heading(at) -> str:
    return " ".join(m.value for m in at.markdown if m.value.startswith("###"))


def test_the_black_screen_is_the_classs(room):
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide="2"))
    ok(teacher.button(key="start_teaching").click().run())
    code = teacher.session_state[slides.CODE_KEY]
    student = ok(app_session(timeout=90, follow=code))
    assert "Step 1 of 5" in heading(student) and not black(student)

    ok(teacher.button(key=blackout.BUTTON).click().run())
    assert black(teacher) and blackout.is_dark(code)
    ok(student.run())
    assert black(student) and heading(student) == ""  # nothing of the slide under the black

    ok(teacher.button(key="slide_next").click().run())  # Next brings the slide back, and stays on it
    assert not black(teacher) and teacher.session_state[slides.SLIDE_KEY] == 1
    ok(student.run())
    assert not black(student) and "Step 1 of 5" in heading(student)

    ok(teacher.button(key="slide_next").click().run())  # then Next moves on
    ok(student.run())
    assert "Step 2 of 5" in heading(student)

    ok(teacher.button(key=blackout.BUTTON).click().run())
    ok(teacher.button(key=blackout.BUTTON).click().run())  # the same key brings it back
    assert not black(teacher) and not blackout.is_dark(code)

    ok(teacher.button(key=blackout.BUTTON).click().run())
    ok(teacher.button(key="end_class").click().run())  # the class ends: its black screen with it
    assert not blackout.is_dark(code)


def test_a_teacher_without_a_class_blacks_out_their_own_screen(room):
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide="1"))
    ok(teacher.button(key=blackout.BUTTON).click().run())
    assert black(teacher)
    ok(teacher.button(key="slide_next").click().run())
    assert not black(teacher) and teacher.session_state[slides.SLIDE_KEY] == 0


def test_a_mistyped_code_is_not_promised_a_lesson(room):
    said = " ".join(i.value for i in ok(app_session(timeout=90, follow="ZZZZ")).info)
    assert "no class uses that code" in said and "as soon as" not in said
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide="1"))
    ok(teacher.button(key="start_teaching").click().run())
    ok(teacher.button(key="lesson_close").click().run())  # a real code between lessons: the lesson will come
    said = " ".join(i.value for i in ok(app_session(timeout=90, follow=teacher.session_state[slides.CODE_KEY])).info)
    assert "The teacher closed the lesson" in said


def test_an_ended_classs_teacher_link_says_so(room):
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide="1"))
    ok(teacher.button(key="start_teaching").click().run())
    key = teacher.session_state[slides.TEACH_KEY]
    ok(teacher.button(key="end_class").click().run())
    again = ok(app_session(timeout=90, lesson=LESSON, slide="1", teach=key))  # the old link, reopened
    assert any("has ended" in w.value for w in again.warning)
    assert "teach" not in again.query_params
