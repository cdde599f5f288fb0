"""The class code belongs to the teacher (issue 27): none exists before "Start teaching"; a reload
or a reopened tab (the teacher key in the URL, not the browser session) takes the same class back,
an uploaded lesson too; the teacher ends it, or it ends when the teacher's pages are gone a while,
and the followers are told which; closing a lesson keeps the code for the next; codes per client
and follow guesses are bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptest_helpers import app_session, ok, shipped_room
from streamlit.testing.v1 import AppTest

from gptviz.dashboard.classroom import live, slides
from gptviz.dashboard.widgets import plain
from gptviz.lessons import shipped_lesson

ROOT = Path(__file__).resolve().parents[1]
LESSON = "how-attention-works"
TITLES = [s.title for s in shipped_lesson(LESSON).slides]


@pytest.fixture
def room(tmp_path, monkeypatch):
    """A server over the shipped checkpoints, an empty registry and a clock the test moves."""
    shipped_room(monkeypatch)  # the shipped lesson's checkpoints
    clock = [1000.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    return clock


def teacher(**query) -> AppTest:
    return ok(app_session(timeout=90, lesson=LESSON, slide="1", **query))


def heading(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("### ")]


def shows(at: AppTest, i: int) -> bool:
    return f"### {plain(TITLES[i])}" in heading(at)


def texts(at: AppTest) -> str:
    return " ".join(str(e.value) for kind in ("info", "warning", "error", "markdown") for e in at.get(kind))


def start(at: AppTest) -> str:
    ok(at.button(key="start_teaching").click().run())
    return at.session_state[slides.CODE_KEY]


def test_no_code_exists_before_start_teaching(room):
    at = teacher()
    assert "Class code" not in texts(at) and live._owners == {} and live._live == {}
    code = start(at)
    assert f"Class code **{code}**" in texts(at) and at.query_params["teach"]
    assert live.lookup(code).slide == 0


def test_a_reload_and_a_reopened_tab_keep_the_class(room):
    at = teacher()
    code = start(at)
    ok(at.button(key="slide_next").click().run())
    student = ok(app_session(follow=code))
    assert shows(student, 1)
    key = at.query_params["teach"]
    again = teacher(teach=key)  # the same URL in a new session: a reload, or the tab reopened
    assert again.session_state[slides.CODE_KEY] == code and shows(again, 1)
    ok(again.button(key="slide_next").click().run())
    assert shows(ok(student.run()), 2), "the students follow the reloaded teacher"
    assert len(live._owners) == 1, "no second code was made"


def test_an_uploaded_lesson_comes_back_from_the_teacher_key_alone(room, tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('title = "Mine"\n[[slides]]\npage = "mask"\ntitle = "my own slide"\n')
    at = ok(app_session())
    ok(at.switch_page("views/lesson.py").run())
    at.text_input(key="lesson_path").input(str(f)).run()
    ok(at.button(key="lesson_path_open").click().run())
    code = start(at)
    back = ok(app_session(teach=at.query_params["teach"]))  # no lesson name in the URL: the registry has it
    assert "### my own slide" in heading(back) and back.session_state[slides.CODE_KEY] == code


def test_the_teacher_ends_the_class_and_the_followers_are_told(room):
    at = teacher()
    code = start(at)
    student = ok(app_session(follow=code))
    ok(at.button(key="end_class").click().run())
    assert "teach" not in at.query_params and at.button(key="start_teaching")
    assert "ended the class" in texts(ok(student.run()))
    assert live.lookup(code) is None


def test_a_teacher_gone_for_a_while_ends_the_class_and_followers_are_told(room):
    at = teacher()
    code = start(at)
    student = ok(app_session(follow=code))
    room[0] += live.TEACHER_GONE_S - 5
    assert shows(ok(student.run()), 0), "a short absence (a reload, a break) keeps the class"
    room[0] += 10
    assert "has left" in texts(ok(student.run()))
    assert live.lookup(code) is None
    late = teacher(teach=at.query_params["teach"])  # the teacher's old link: the class is over, said so
    assert late.button(key="start_teaching") and slides.CODE_KEY not in late.session_state


def test_closing_a_lesson_keeps_the_code_for_the_next(room):
    at = teacher()
    code = start(at)
    student = ok(app_session(follow=code))
    ok(at.button(key="lesson_close").click().run())
    assert f"Class code **{code}**" in texts(at)
    assert "closed the lesson" in texts(ok(student.run()))
    nxt = ok(app_session(timeout=90, lesson=LESSON, slide="3", teach=at.query_params["teach"]))
    assert nxt.session_state[slides.CODE_KEY] == code
    assert shows(ok(student.run()), 2), "the next lesson comes up under the same code"


def test_codes_per_client_are_bounded(room):
    made = [live.start("10.0.0.7") for _ in range(live.MAX_CODES_PER_CLIENT)]
    assert all(isinstance(m, tuple) for m in made)
    assert "end one first" in live.start("10.0.0.7")
    assert isinstance(live.start("10.0.0.8"), tuple), "another computer may"
    live.end(made[0][0])
    assert isinstance(live.start("10.0.0.7"), tuple)


def test_follow_guesses_are_rate_limited(room):
    for i in range(live.GUESSES_PER_MINUTE):
        assert "No lesson is live" in texts(ok(app_session(follow=f"ZZ{live.ALPHABET[i]}Z")))
    assert "Too many class codes" in texts(app_session(follow="QQQQ"))
    assert "No lesson is live" in texts(app_session(follow="ZZAZ")), "asking again (a poll) is free"
    room[0] += 61
    assert "No lesson is live" in texts(ok(app_session(follow="QQQQ")))
