"""A teacher's lesson file is checked slide by slide when it is opened (issue 27), against the
models this server has: a layer, head, position or highlight the model or prompt lacks, or a
checkpoint it does not ship, refuses the file in one line naming the slide's line, before any slide
is drawn (a 2-layer model's slide asking for layer 9 head 42 was drawn as layer 1, head 3)."""

from __future__ import annotations

import pytest
from apptest_helpers import app_session, ok, open_lesson_file, serve

from gptviz.bench.checkpoints import NAME, make_checkpoints
from gptviz.dashboard import classmode
from gptviz.dashboard.widgets import plain

HEAD = 'title = "Mine"\n\n[[slides]]\npage = "mask"\ntitle = "first"\n\n[[slides]]\n'


@pytest.fixture
def teacher(tmp_path, monkeypatch):
    serve(monkeypatch, make_checkpoints(tmp_path / "checkpoints"), NAME)
    monkeypatch.setenv(classmode.CLASS_ENV, "0")  # a teacher's own machine: the path box opens files
    return tmp_path


def open_file(tmp_path, text: str):
    f = tmp_path / "mine.toml"
    f.write_text(text)
    return open_lesson_file(ok(ok(app_session()).switch_page("views/lesson.py").run()), f)


@pytest.mark.parametrize(
    "slide, said",
    [
        (f'page = "attention"\ntitle = "layer 9 head 42"\ncheckpoint = "{NAME}"\nlayer = 9\nhead = 42', "layer 9"),
        (f'page = "attention"\ntitle = "t"\ncheckpoint = "{NAME}"\nlayer = 1\nhead = 42', "head 42"),
        (f'page = "attention"\ntitle = "t"\ncheckpoint = "{NAME}"\nprompt = "abc"\nposition = 3', "position 3"),
        (f'page = "heads"\ntitle = "t"\ncheckpoint = "{NAME}"\nprompt = "abc"\nhighlight = {{ row = 7 }}', "row 7"),
        ('page = "tiny-head"\ntitle = "t"\nhighlight = { cell = [2, 3] }', "cell 3"),
        ('page = "mask"\ntitle = "t"\nlayer = 1', "layer 1"),
        ('page = "softmax"\ntitle = "t"\nhighlight = { row = 0 }', "draws no heatmap"),
        ('page = "attention"\ntitle = "t"\ncheckpoint = "not-shipped"', "not shipped"),
        (f'page = "attention"\ntitle = "t"\ncheckpoint = "{NAME}"\nprompt = "a€b"', "cannot read ('€')"),
    ],
)
def test_a_slide_asking_for_what_its_model_lacks_refuses_the_file_with_its_line(teacher, slide, said):
    at = open_file(teacher, HEAD + slide + "\n")
    (msg,) = [e.value for e in at.error]
    # the line of the key the message is about (the slide's [[slides]] is line 7), not the table's header
    key = next(
        k
        for k in ("layer", "head", "position", "highlight", "checkpoint", "prompt")
        if k in said
        or (k == "highlight" and ("row" in said or "cell" in said or "heatmap" in said))
        or (k == "checkpoint" and "shipped" in said)
        or (k == "prompt" and "read" in said)
    )
    line = 8 + next(n for n, text in enumerate(slide.split("\n")) if text.startswith(key))
    assert plain(f"mine: line {line}, slide 2: ") in msg and plain(said) in msg and "\n" not in msg
    assert "unknown=" not in msg
    assert not any(m.value.startswith("### ") for m in at.markdown), "no slide was drawn"


def test_a_slide_within_its_model_opens(teacher):
    slide = f'page = "attention"\ntitle = "the last head"\ncheckpoint = "{NAME}"\nprompt = "abcd"\nlayer = 1\nhead = 3'
    at = ok(open_file(teacher, HEAD + slide + "\nposition = 3\nhighlight = { cell = [3, 0] }\n"))
    assert any(m.value == "### first" for m in at.markdown)
