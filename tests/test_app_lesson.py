"""Lessons through AppTest, on the shipped checkpoints: ?lesson=NAME&slide=N opens a slide (counted
from 1) from any page, Back / Next move and the URL follows, each slide shows its own numbers, a
follower (?follow=CODE) sees the teacher's slide and builds no sidebar, a slide is computed once
for every viewer, and a bad lesson file gets one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve, slide_counter
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.analysis import worked
from gptviz.dashboard.classroom import slides
from gptviz.dashboard.widgets import plain
from gptviz.lessons import content, shipped_lesson

ROOT = Path(__file__).resolve().parents[1]
LESSON = "how-attention-works"


@pytest.fixture
def env(monkeypatch):
    serve(monkeypatch, ROOT / "checkpoints", "shakespeare-char")


def opened(**query) -> AppTest:
    return ok(app_session(timeout=90, **query))


def where(at: AppTest) -> str:
    return slide_counter(at)


def test_a_lesson_link_opens_its_slide_and_next_moves_on(env):
    lesson = shipped_lesson(LESSON)
    at = opened(lesson=LESSON, slide="3", present="1")  # from the default page: it switches to the lesson
    n = len(lesson.slides)
    assert where(at).endswith(f"slide 3 of {n}")
    assert at.query_params["lesson"] == LESSON and at.query_params["slide"] == "3"
    assert at.query_params["present"] == "1" and at.session_state["presentation"] is True
    assert any(m.value == f"### {plain(lesson.slides[2].title)}" for m in at.markdown)
    ok(at.button(key="slide_next").click().run())
    assert where(at).endswith(f"slide 4 of {n}") and at.query_params["slide"] == "4"
    ok(at.button(key="slide_back").click().run())
    ok(at.button(key="slide_back").click().run())
    assert where(at).endswith(f"slide 2 of {n}")
    # walk to the end: every slide draws without an error, and Next stops at the last
    for i in range(2, n + 1):
        assert where(at).endswith(f"slide {i} of {n}")
        assert at.get_by_key("slide_figure") is not None, i
        if i < n:
            ok(at.button(key="slide_next").click().run())
    assert at.button(key="slide_next").disabled and not at.button(key="slide_back").disabled


def test_slides_show_their_own_numbers(env):
    at = opened(lesson=LESSON, slide="1")
    z = array(figure(at, "slide_figure")["data"][0]["z"]).astype(float)  # masked cells are NaN
    want = worked.toy_attention(**worked.TOY_ATTENTION_SHARP)["weights"]
    assert np.allclose(np.nan_to_num(z), want, atol=1e-6)
    # the induction slide: the shipped induction run on its own prompt, layer 1 head 1
    lesson = shipped_lesson(LESSON)
    k = next(i for i, s in enumerate(lesson.slides) if s.checkpoint == "induction-2l")
    at = opened(lesson=LESSON, slide=str(k + 1))
    bundle = gptviz.load(ROOT / "checkpoints" / "induction-2l")
    ids = bundle.tokenizer.encode(lesson.slides[k].prompt)
    w = gptviz.trace(bundle.model, ids)["blocks.1.attn.weights"][1]
    r, c = lesson.slides[k].highlight.at
    top = at.table[0].value  # where the highlighted query looks, strongest key first
    assert top.iloc[0, 0] == f"{np.nanmax(w[r]):.4f}" and top.index[0].startswith(f"{c} ")
    assert int(np.nanargmax(w[r])) == c


def test_a_follower_sees_the_teachers_slide_computed_once(env, monkeypatch):
    calls = []
    real = content.build
    monkeypatch.setattr(content, "build", lambda *a, **k: calls.append(a[0].title) or real(*a, **k))
    teacher = opened(lesson=LESSON, slide="2")
    ok(teacher.button(key="start_teaching").click().run())
    code = teacher.session_state[slides.CODE_KEY]
    assert f"Class code **{code}**" in [m.value for m in teacher.markdown]
    followers = [opened(follow=code.lower()) for _ in range(3)]  # the code as a student types it
    title = shipped_lesson(LESSON).slides[1].title
    for f in followers:
        assert any(m.value == f"### {plain(title)}" for m in f.markdown)
        assert not f.sidebar.children or not list(f.sidebar), "no sidebar for a follower"
        assert "prompt" not in f.session_state  # nothing of the teacher's sidebar was built
        assert not f.button, "read-only: no Back / Next"
    assert calls.count(title) == 1, calls  # one computation for the teacher and three students
    ok(teacher.button(key="slide_next").click().run())
    nxt = shipped_lesson(LESSON).slides[2].title
    ok(followers[0].run())  # what the follower's poll triggers when the version changed
    assert any(m.value == f"### {plain(nxt)}" for m in followers[0].markdown)
    assert calls.count(nxt) == 1


def test_an_unknown_code_and_an_unknown_lesson(env):
    at = opened(follow="ZZZZ")
    assert "No lesson is live under ZZZZ" in at.info[0].value
    at = app_session(timeout=90, lesson="no-such-lesson")
    assert not at.exception and len(at.error) == 1
    assert plain("no shipped lesson is called 'no-such-lesson'") in at.error[0].value


def test_a_teachers_bad_lesson_file_gets_one_line(env, tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('title = "Mine"\n[[slides]]\npage = "mask"\ntitle = "t"\nfontsize = 40\n')
    at = ok(app_session(timeout=90))
    at.switch_page("views/lesson.py").run()
    at.text_input(key="lesson_path").input(str(f)).run()
    at.button(key="lesson_path_open").click().run()
    assert not at.exception
    msg = at.error[0].value
    assert plain("slide 1: unknown key 'fontsize'") in msg and "\n" not in msg
    f.write_text('title = "Mine"\n[[slides]]\npage = "mask"\ntitle = "My own slide"\nmask = false\n')
    at.button(key="lesson_path_open").click().run()
    assert any(m.value == "### My own slide" for m in ok(at).markdown)
    assert "lesson" not in at.query_params  # a file's lesson has no name a link could open
