"""The slide list and the first / last slide (what Home and End press) through AppTest, on the shipped
checkpoints: each shows its slide, moves the URL and the class with it, and Exit presentation turns
presentation mode off. The keys themselves are pressed in Chromium (tests/e2e/test_slides.py)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

import pytest
from apptest_helpers import app_session, figure, ok, serve, slide_counter

from gptviz.dashboard.classroom import live, slides
from gptviz.dashboard.classroom.slide_style import counter_html
from gptviz.lessons import parse_lesson, shipped_lesson

ROOT = Path(__file__).resolve().parents[1]
LESSON = shipped_lesson("how-attention-works")
N = len(LESSON.slides)


@pytest.fixture
def env(monkeypatch):
    serve(monkeypatch, ROOT / "checkpoints", "shakespeare-char")


def where(at) -> str:
    return slide_counter(at)


def test_the_slide_list_and_the_ends(env):
    at = ok(app_session(timeout=90, lesson=LESSON.name, slide="2", present="1"))
    ok(at.button(key="start_teaching").click().run())
    code = at.session_state[slides.CODE_KEY]
    box = at.selectbox(key=slides.list_key(1))
    assert box.value == 1 and box.options == [f"{k + 1}. {s.title}" for k, s in enumerate(LESSON.slides)]
    ok(box.select(N - 2).run())  # a slide by its title
    assert where(at).endswith(f"slide {N - 1} of {N}") and at.query_params["slide"] == str(N - 1)
    assert live.lookup(code).slide == N - 2  # the class sees it too
    assert figure(at, "slide_figure")["data"]  # the slide's figure is drawn
    ok(at.button(key="slide_first").click().run())
    assert where(at).endswith(f"slide 1 of {N}") and at.selectbox(key=slides.list_key(0)).value == 0
    ok(at.button(key="slide_last").click().run())
    assert where(at).endswith(f"slide {N} of {N}") and live.lookup(code).slide == N - 1
    assert at.selectbox(key=slides.list_key(N - 1)).value == N - 1  # the list follows the buttons
    ok(at.button(key="slide_back").click().run())
    assert at.selectbox(key=slides.list_key(N - 2)).value == N - 2
    ok(at.button(key="leave_presentation").click().run())
    assert at.session_state["presentation"] is False and "present" not in at.query_params
    assert not [b for b in at.button if b.key == "leave_presentation"]
    ok(at.button(key="end_class").click().run())


def test_a_slides_full_page_link_keeps_the_sessions_steering_on_its_checkpoint(env):
    steer = "neuron:0.1@0*4"
    at = ok(app_session(timeout=90, checkpoint="shakespeare-char", dtype="bfloat16", steer=steer, lesson=LESSON.name))

    def full_page(slide: int) -> dict[str, list[str]]:
        ok(at.selectbox(key=slides.list_key(at.session_state[slides.SLIDE_KEY])).select(slide).run())
        link = next(el.proto for el in at.get("page_link") if el.proto.label == "Open this in its full page")
        return parse_qs(link.query_string)

    same = next(i for i, s in enumerate(LESSON.slides) if s.checkpoint == "shakespeare-char" and s.steer is None)
    q = full_page(same)
    assert q["steer"] == [steer] and q["dtype"] == ["bfloat16"] and q["checkpoint"] == ["shakespeare-char"]
    other = next(i for i, s in enumerate(LESSON.slides) if s.checkpoint not in (None, "shakespeare-char"))
    q = full_page(other)  # another model: a neuron's number there is another neuron
    assert "steer" not in q and q["dtype"] == ["bfloat16"]


def test_a_slides_full_page_link_names_the_sae_the_slide_reads_not_the_sessions(env):
    # a slide naming no SAE reads its checkpoint's first (lesson_check.slide_sae); the link must say so,
    # or the page opens with the session's SAE (here none), where the feature and its steering mean nothing
    toml = """
[[slides]]
page = "features"
title = "A feature"
checkpoint = "shakespeare-char"
feature = 1454
[[slides]]
page = "attention"
title = "Steered by a feature"
checkpoint = "shakespeare-char"
steer = { feature = 1454, layer = 2, coeff = 8.0 }
"""
    at = ok(app_session(timeout=90, checkpoint="shakespeare-char", sae="none"))
    at.session_state[slides.LESSON_KEY] = parse_lesson(toml, "mine", origin="upload")
    at.session_state[slides.SLIDE_KEY] = 0
    at.switch_page("views/lesson.py").run()
    for i in range(2):
        if i:
            ok(at.button(key="slide_next").click().run())
        link = next(el.proto for el in at.get("page_link") if el.proto.label == "Open this in its full page")
        assert parse_qs(link.query_string)["sae"] == ["l2-resid-post-topk-8x"], i


def test_a_slides_full_page_link_naming_the_sessions_own_sae_keeps_its_steering(env):
    # the session opened no ?sae=: it reads its checkpoint's first SAE, the one the features slide names
    steer = "neuron:0.1@0*4"
    at = ok(app_session(timeout=90, checkpoint="shakespeare-char", steer=steer, lesson=LESSON.name))
    i = next(i for i, s in enumerate(LESSON.slides) if s.page == "features")
    ok(at.selectbox(key=slides.list_key(at.session_state[slides.SLIDE_KEY])).select(i).run())
    link = next(el.proto for el in at.get("page_link") if el.proto.label == "Open this in its full page")
    q = parse_qs(link.query_string)
    assert q["sae"] == ["l2-resid-post-topk-8x"] and q["steer"] == [steer]


def test_next_pressed_twice_quickly_moves_two_slides(env):
    """The second press leaves the browser before the first one's URL comes back: it carries the
    URL of the slide before, which is stale, not a link to that slide."""
    at = ok(app_session(timeout=90, lesson=LESSON.name, slide="1", present="1"))
    ok(at.button(key="slide_next").click().run())
    assert where(at).endswith(f"slide 2 of {N}") and at.query_params["slide"] == "2"
    at.query_params["slide"] = "1"  # the browser's URL when it sent the second press
    ok(at.button(key="slide_next").click().run())
    assert where(at).endswith(f"slide 3 of {N}") and at.query_params["slide"] == "3"


def test_the_counter_shows_a_lessons_title_as_text():
    """The counter is st.html (drawn with the clicker's script): a lesson's title never becomes markup."""
    body = counter_html('<img src=x onerror="alert(1)"> & <b>bold</b>', 1, 3)
    assert body == (
        "<p><strong>&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; &lt;b&gt;bold&lt;/b&gt;</strong>"
        " · slide 2 of 3</p>"
    )
