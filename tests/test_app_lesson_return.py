"""From a slide to its full page and back (issue 38): "Open this in its full page" on the sharp tiny-head
slide opens the Worked examples page on the sharp numbers (the weights the slide showed, not the
textbook's), a real-model slide's link carries its model, prompt, layer and head, and "Back to the
lesson" returns to that slide with the class still taught. AppTest, shipped lesson."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pytest
from apptest_helpers import app_session, ok, shipped_room

from gptviz.analysis import worked
from gptviz.dashboard.classroom import live, slides
from gptviz.lessons import shipped_lesson

ROOT = Path(__file__).resolve().parents[1]
LESSON = "how-attention-works"
SLIDES = shipped_lesson(LESSON).slides


@pytest.fixture
def room(monkeypatch):
    shipped_room(monkeypatch)


def link(at, label: str) -> dict[str, str]:
    found = [x.proto for x in at.get("page_link") if x.proto.label.startswith(label)]
    assert found, [x.proto.label for x in at.get("page_link")]
    return {k: v[0] for k, v in parse_qs(found[0].query_string).items()}


def follow(at, page: str, params: dict[str, str]):
    """A page link followed in the same tab: its URL, the same session."""
    at.query_params.clear()
    at.query_params.update(params)
    return ok(at.switch_page(page).run())


def numbers(at) -> list[float]:
    out = []
    for df in at.dataframe:
        v = df.value.to_numpy()
        if v.dtype.kind == "f":
            out += v[np.isfinite(v)].round(4).tolist()
    return out


def test_the_full_page_shows_the_slides_numbers_and_leads_back(room):
    assert SLIDES[0].page == "tiny-head" and SLIDES[0].preset == "sharp"
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide="1"))
    ok(teacher.button(key="start_teaching").click().run())
    code = teacher.session_state[slides.CODE_KEY]
    q = link(teacher, "Open this in its full page")
    assert q["preset"] == "sharp" and q["mask"] == "1" and q["lesson"] == LESSON and q["slide"] == "1"
    assert q["teach"] == teacher.session_state[slides.TEACH_KEY]
    follow(teacher, "views/worked_examples.py", q)
    sharp = worked.toy_attention(**{k: worked.TOY_PRESETS["sharp"][k] for k in ("X", "Wq", "Wk", "Wv")})["weights"]
    textbook = worked.toy_attention(**{k: worked.TOY_PRESETS["textbook"][k] for k in ("X", "Wq", "Wk", "Wv")})
    shown = numbers(teacher)
    assert round(float(sharp[2, 1]), 4) in shown  # the slide's 0.9966, not the textbook's 0.5006
    assert round(float(textbook["weights"][2, 1]), 4) not in shown
    assert "preset" not in teacher.query_params  # a link's choice, read once
    back = link(teacher, "◀ Back to the lesson")
    assert back == {"lesson": LESSON, "slide": "1", "teach": teacher.session_state[slides.TEACH_KEY]}
    follow(teacher, "views/lesson.py", back)
    assert teacher.session_state[slides.SLIDE_KEY] == 0 and teacher.session_state[slides.CODE_KEY] == code
    assert live.lookup(code).slide == 0  # the class is still taught, on that slide


def test_a_real_model_slide_opens_its_model_prompt_layer_and_head(room):
    i = next(i for i, s in enumerate(SLIDES) if s.page == "attention")
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide=str(i + 1)))
    q = link(teacher, "Open this in its full page")
    s = SLIDES[i]
    assert (q["checkpoint"], q["prompt"], q["layer"], q["head"]) == (s.checkpoint, s.prompt, str(s.layer), str(s.head))
    follow(teacher, "views/attention.py", q)
    assert (teacher.session_state["layer"], teacher.session_state["head"]) == (s.layer, s.head)
    assert teacher.session_state["prompt"] == s.prompt
    assert link(teacher, "◀ Back to the lesson")["slide"] == str(i + 1)
