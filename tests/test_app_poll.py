"""The predict slide through AppTest, on the shipped checkpoints: followers send guesses from their
own pages (picked or typed), the teacher's screen counts them, Reveal shows the model's distribution
beside the tally to the teacher and the class and closes the poll; the first page's join box follows
a code."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptest_helpers import app_session, array, figure, ok, shipped_room

import gptviz
from gptviz.analysis import top_k
from gptviz.dashboard.classroom import live, slides
from gptviz.dashboard.widgets import plain
from gptviz.lessons import shipped_lesson

ROOT = Path(__file__).resolve().parents[1]
LESSON = "how-attention-works"
K = next(i for i, s in enumerate(shipped_lesson(LESSON).slides) if s.page == "predict")


@pytest.fixture
def room(monkeypatch):
    shipped_room(monkeypatch)


def guess(student, text=None, pick=None):
    if pick is not None:
        student.radio(key=f"poll_pick_{K}").set_value(pick)
    if text is not None:
        student.text_input(key=f"poll_guess_{K}").input(text)
    return ok(student.button(key=f"poll_send_{K}").click().run())


def test_the_class_guesses_and_the_teacher_reveals(room):
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide=str(K + 1)))
    assert "slide_figure" in [e.key for e in teacher.get("plotly_chart")]
    ok(teacher.button(key="start_teaching").click().run())
    code = teacher.session_state[slides.CODE_KEY]
    students = [ok(app_session(timeout=90, follow=code)) for _ in range(3)]
    assert "What comes next" in " ".join(m.value for m in students[0].markdown)
    guess(students[0], "e")
    guess(students[1], pick="i")
    guess(students[2], "a")
    guess(students[2], "e")  # a change of mind: still one answer
    assert any("Your guess: **e**" in m.value for m in students[2].markdown)
    ok(teacher.run())
    tally = figure(teacher, "slide_figure")
    assert tally["layout"]["title"]["text"] == "The class's guesses: 3 answers"
    assert [d["name"] for d in tally["data"]] == ["class (3 answers)"]  # no model yet
    assert dict(zip(tally["data"][0]["x"], array(tally["data"][0]["y"]).tolist())) == pytest.approx(
        {"e": 200 / 3, "i": 100 / 3}
    )
    ok(teacher.button(key="poll_reveal").click().run())
    assert "poll_reveal" not in [b.key for b in teacher.button]  # a scored round's reveal takes its place
    shown = figure(teacher, "slide_figure")
    assert [d["name"] for d in shown["data"]] == ["class (3 answers)", "model"]
    # the model's bars are its own probabilities after the prompt, as gptviz computes them
    bundle = gptviz.load(ROOT / "checkpoints" / "shakespeare-char")
    slide = shipped_lesson(LESSON).slides[K]
    want = top_k(gptviz.trace(bundle.model, bundle.tokenizer.encode(slide.prompt)).part("logits", -1), 8)
    model = dict(zip(shown["data"][1]["x"], array(shown["data"][1]["y"]).tolist()))
    e = bundle.tokenizer.encode("e")[0]
    assert model["e"] == pytest.approx(100 * float(want.loc[want["id"] == e, "probability"].iloc[0]), abs=0.01)
    # the class sees the answer too, and the poll is closed
    late = ok(students[0].run())
    assert [d["name"] for d in figure(late, "follow_figure")["data"]] == ["class (3 answers)", "model"]
    assert not late.get("text_input")
    assert live.poll(code, live.poll_key(shipped_lesson(LESSON), K)).answers == 3


def test_a_bad_guess_says_why_in_one_line(room):
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide=str(K + 1)))
    ok(teacher.button(key="start_teaching").click().run())
    student = ok(app_session(timeout=90, follow=teacher.session_state[slides.CODE_KEY]))
    student.text_input(key=f"poll_guess_{K}").input("   ")
    student.button(key=f"poll_send_{K}").click().run()
    assert [e.value for e in student.error] == [plain("type a guess first (a space is ␣)")]
    student.text_input(key=f"poll_guess_{K}").input("th")  # two characters: no token of a character model
    student.button(key=f"poll_send_{K}").click().run()
    assert [e.value for e in student.error] == [plain("this model writes one character at a time: guess one character")]
    assert live.poll(teacher.session_state[slides.CODE_KEY], live.poll_key(shipped_lesson(LESSON), K)).answers == 0


def test_the_join_box_follows_a_code(room):
    at = ok(app_session(timeout=90))
    at.text_input(key="join_code").input("nope!")
    at.button(key="join_go").click().run()
    assert "is not a class code" in at.error[0].value and "follow" not in at.query_params
    at.text_input(key="join_code").input(" k7qx ")
    at.button(key="join_go").click().run()
    assert at.query_params["follow"] == ["K7QX"] or at.query_params["follow"] == "K7QX"
    assert "No lesson is live under K7QX" in " ".join(i.value for i in at.info)


def test_the_teachers_class_bar_offers_the_join_screen(room):
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide="1"))
    ok(teacher.button(key="start_teaching").click().run())
    assert teacher.button(key="join_open").label.endswith(" Join")
    assert teacher.session_state[slides.CODE_KEY] in live._owners
