"""The class against the model through AppTest, on the shipped lesson's predict slide (round =
"probability"): three students guess, the teacher reveals, and the teacher's and a student's screens show
each guess with the model's probability and log-probability, the room's score, and where the logit lens
first ranks the favourite and the answer, all equal to lessons.class_round on the model loaded here; the
link opens the Logit lens page at the slide's prompt and its last position."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pytest
import torch
from apptest_helpers import app_session, ok, shipped_room

import gptviz
from gptviz.dashboard.classroom import slides
from gptviz.figures import site_label
from gptviz.lessons import parse_lesson, shipped_lesson
from gptviz.lessons.class_round import class_round, depth_line

ROOT = Path(__file__).resolve().parents[1]
LESSON = "how-attention-works"
K = next(i for i, s in enumerate(shipped_lesson(LESSON).slides) if s.page == "predict")


@pytest.fixture
def room(monkeypatch):
    shipped_room(monkeypatch)


def test_the_reveal_scores_the_room_by_the_models_probabilities(room):
    slide = shipped_lesson(LESSON).slides[K]
    assert slide.round == "probability"
    teacher = ok(app_session(timeout=90, lesson=LESSON, slide=str(K + 1)))
    ok(teacher.button(key="start_teaching").click().run())
    code = teacher.session_state[slides.CODE_KEY]
    students = [ok(app_session(timeout=90, follow=code)) for _ in range(3)]
    for s, g in zip(students, ("o", "o", "e")):  # the room's favourite is not the model's answer (e)
        s.text_input(key=f"poll_guess_{K}").input(g)
        ok(s.button(key=f"poll_send_{K}").click().run())
    ok(teacher.run())
    ok(teacher.button(key="poll_reveal").click().run())
    # the model's probabilities, by hand: softmax of the last logits of a plain forward
    bundle = gptviz.load(ROOT / "checkpoints" / "shakespeare-char")
    ids = bundle.tokenizer.encode(slide.prompt)
    with torch.no_grad():
        z = bundle.model(torch.tensor([ids]))[0, -1].double()
    p = torch.softmax(z, -1).numpy()
    e, o = (bundle.tokenizer.encode(c)[0] for c in "eo")
    table = teacher.table[-1].value
    assert int(np.argmax(p)) == e
    assert list(table.index) == ["o", "e"] and list(table["votes"]) == [2, 1]
    assert list(table["model %"]) == [f"{100 * p[o]:.2f}", f"{100 * p[e]:.2f}"]
    assert list(table["log p"]) == [f"{np.log(p[o]):.2f}".replace("-", "−"), f"{np.log(p[e]):.2f}".replace("-", "−")]
    text = " ".join(m.value for m in teacher.markdown)
    assert f"Room **{100 * (2 * p[o] + p[e]) / 3:.2f} %** · model **{100 * p.max():.2f} %**" in text.replace("\\", "")
    want = class_round(bundle.model, gptviz.trace(bundle.model, ids), bundle.tokenizer, [("o", 2), ("e", 1)])
    assert [d.who for d in want.depths] == ["the room's favourite", "the model's answer"]
    for d in want.depths:  # the lens's sites, as the library finds them
        assert depth_line(d) in text.replace("\\", "")
    link = [x for x in teacher.get("page_link") if "logit lens" in x.proto.label][0]
    assert link.proto.page == "logit-lens" and link.proto.label == "Follow 'o' in the logit lens ↗"
    q = {k: v[0] for k, v in parse_qs(link.proto.query_string).items()}
    assert q == {"checkpoint": "shakespeare-char", "prompt": slide.prompt, "position": str(len(ids) - 1), "target": "o"}
    # one click: the Logit lens page at that prompt and position, following the favourite, its numbers the same
    teacher.query_params.clear()
    teacher.query_params.update(q)
    lens = ok(teacher.switch_page("views/logit_lens.py").run())
    metrics = {m.label: m.value for m in lens.metric}
    assert metrics["Token"] == "o" and lens.session_state["position"] == len(ids) - 1
    fav = want.depths[0]
    assert metrics["First site where it is the top token"] == (site_label(fav.top1) if fav.top1 else "never")
    # a student sees the same numbers
    student = ok(students[2].run())
    assert list(student.table[-1].value["model %"]) == list(table["model %"])


def test_round_is_a_predict_slides_key():
    with pytest.raises(Exception, match="round 'points' is not one of tally, probability"):
        parse_lesson('[[slides]]\npage = "predict"\ntitle = "t"\nround = "points"\n')
    with pytest.raises(Exception, match="'round' belongs on a predict slide"):
        parse_lesson('[[slides]]\npage = "mask"\ntitle = "t"\nround = "probability"\n')
    assert parse_lesson('[[slides]]\npage = "predict"\ntitle = "t"\n').slides[0].round == "tally"
