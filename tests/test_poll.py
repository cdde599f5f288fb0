"""The "predict the next token" poll: a tally that is anonymous, one answer per student, bounded
(a guess's length, answers per poll and per class code, distinct answers shown), kept with the class
code (gptviz.dashboard.live) and gone with it; and the predict slide in a lesson file."""

from __future__ import annotations

import pytest
from apptest_helpers import fresh_class

from gptviz.dashboard.classroom import live
from gptviz.lessons import LessonError, parse_lesson, poll, shipped_lesson
from gptviz.lessons.poll import GuessError, Tally, normal_guess, tally_table


@pytest.fixture
def registry(monkeypatch):
    fresh_class(monkeypatch)


def test_one_answer_per_student_a_second_replaces_the_first():
    t = Tally()
    assert t.vote("s1", "e") == "e"
    t.vote("s2", "e")
    t.vote("s3", "i")
    t.vote("s1", "a")  # s1 changes their mind: still one answer
    snap = t.snapshot()
    assert snap.answers == 3 and dict(snap.counts) == {"e": 1, "i": 1, "a": 1}
    t.vote("s2", "e")  # the same answer again changes nothing
    assert t.snapshot().version == snap.version


def test_the_counts_most_first_and_anonymous():
    t = Tally()
    for i, g in enumerate("eeeiia"):
        t.vote(f"session-{i}", g)
    snap = t.snapshot()
    assert snap.counts == (("e", 3), ("i", 2), ("a", 1))
    assert "session" not in repr(snap)  # nothing of who answered leaves the tally


def test_guesses_are_bounded_and_normalised():
    assert normal_guess(" ") == "␣" and normal_guess("\n") == "↵"  # a char model's own tokens
    assert normal_guess("  the \x00") == "the"
    assert normal_guess("e\u0301") == "é"  # NFC: the same letter typed two ways is one guess
    for bad in ("", "   ", "\x07"):
        with pytest.raises(GuessError, match="type a guess"):
            normal_guess(bad)
    with pytest.raises(GuessError, match=f"at most {poll.MAX_GUESS_CHARS}"):
        normal_guess("x" * (poll.MAX_GUESS_CHARS + 1))
    with pytest.raises(GuessError):
        normal_guess("x" * 10_000_000)  # read only up to a few times the limit


def test_answers_per_poll_are_bounded_and_the_screen_shows_a_few_distinct(monkeypatch):
    monkeypatch.setattr(poll, "MAX_ANSWERS", 50)
    t = Tally()
    for i in range(50):
        t.vote(f"s{i}", f"g{i % 25}")  # 25 distinct guesses, 2 each
    with pytest.raises(GuessError, match="50 answers"):
        t.vote("late", "e")
    t.vote("s0", "e")  # one who answered may still change their answer
    snap = t.snapshot()
    assert snap.answers == 50
    assert len(snap.counts) == poll.MAX_SHOWN + 1 and snap.counts[-1][0] == poll.OTHER
    assert sum(n for _, n in snap.counts) == 50  # the rest are counted, as "other"


def test_the_reveal_closes_the_poll():
    t = Tally()
    t.vote("s1", "e")
    t.reveal()
    with pytest.raises(GuessError, match="closed"):
        t.vote("s2", "i")
    assert t.snapshot().revealed and t.snapshot().answers == 1


def test_the_tally_beside_the_models_distribution():
    import pandas as pd

    t = Tally()
    for i, g in enumerate("eeia"):
        t.vote(str(i), g)
    model = pd.DataFrame({"token": ["e", "i", "␣"], "probability": [0.6, 0.3, 0.1]})
    table = tally_table(t.snapshot(), model).set_index("token")
    assert table.loc["e", "class %"] == 50 and table.loc["e", "model %"] == pytest.approx(60)
    assert table.loc["a", "class %"] == 25 and pd.isna(table.loc["a", "model %"])  # a guess the model ranks low
    assert table.loc["␣", "class %"] == 0 and table.loc["␣", "model %"] == pytest.approx(10)
    fig = poll.tally_figure(tally_table(t.snapshot(), model), 4, revealed=True)
    assert [b.name for b in fig.data] == ["class (4 answers)", "model"]
    hostile = Tally()
    hostile.vote("x", "<b>hi</b>")
    fig = poll.tally_figure(tally_table(hostile.snapshot(), None), 1, revealed=False)
    assert list(fig.data[0].x) == ["&lt;b&gt;hi&lt;/b&gt;"]  # a student's text is never markup


def test_the_tally_lives_with_the_class_code(registry):
    lesson = shipped_lesson("how-attention-works")
    k = next(i for i, s in enumerate(lesson.slides) if s.page == "predict")
    code, _ = live.start("10.0.0.2")
    live.publish(code, lesson, k)
    key = live.poll_key(lesson, k)
    for i, g in enumerate(["e", "e", "i"]):
        live.vote(code, key, f"session-{i}", g)
    live.vote(code, key, "session-0", "a")
    snap = live.poll(code, key)
    assert snap.answers == 3 and dict(snap.counts) == {"e": 1, "i": 1, "a": 1}
    assert live.my_guess(code, key, "session-0") == "a"
    # another slide's poll is another tally; a guess for a slide the class is not on is refused
    with pytest.raises(GuessError, match="moved on"):
        live.vote(code, live.poll_key(lesson, 0), "session-0", "e")
    live.publish(code, lesson, 0)  # a slide that is no poll takes no guess either
    with pytest.raises(GuessError, match="moved on"):
        live.vote(code, live.poll_key(lesson, 0), "session-0", "e")
    live.publish(code, lesson, k)
    live.reveal(code, key)
    assert live.poll(code, key).revealed
    with pytest.raises(GuessError, match="closed"):
        live.vote(code, key, "session-9", "e")
    live.end(code)
    assert live._polls == {} and live.poll(code, key).answers == 0  # gone with the code


def test_answers_per_class_code_are_bounded(registry, monkeypatch):
    monkeypatch.setattr(live, "MAX_ANSWERS_PER_CODE", 40)
    lesson = parse_lesson(PREDICT + PREDICT.split("\n", 1)[1] * 2, "three")  # three predict slides
    code, _ = live.start()
    for slide in (0, 1):
        live.publish(code, lesson, slide)
        for i in range(20):
            live.vote(code, live.poll_key(lesson, slide), f"s{i}", "e")
    live.publish(code, lesson, 2)
    with pytest.raises(GuessError, match="40 answers"):
        live.vote(code, live.poll_key(lesson, 2), "s0", "e")


def test_a_code_nobody_teaches_takes_no_guess(registry):
    lesson = shipped_lesson("how-attention-works")
    with pytest.raises(GuessError):
        live.vote("ZZZZ", live.poll_key(lesson, 0), "s", "e")
    live.reveal("ZZZZ", live.poll_key(lesson, 0))  # only a teacher's code reveals
    assert live._polls == {}


PREDICT = """title = "p"
[[slides]]
page = "predict"
title = "Guess"
checkpoint = "shakespeare-char"
prompt = "ROMEO:\\nWhat light is th"
"""


def test_a_predict_slide_in_a_lesson_file():
    s = parse_lesson(PREDICT + 'choices = ["e", " ", "i", "e"]\n').slides[0]
    assert s.page == "predict" and s.choices == ("e", "␣", "i")  # as tallied, once each
    for extra, named in [
        ("choices = []", "'choices' must be a list of 1 to 8"),
        ('choices = ["' + "x" * 30 + '"]', "'choices': a guess has at most"),
        ("choices = 3", "'choices' must be a list"),
        ('step = "qkv"', "'step' belongs on a tiny-head slide"),
    ]:
        with pytest.raises(LessonError, match=named) as e:
            parse_lesson(PREDICT + extra + "\n", "p")
        assert f"line {PREDICT.count(chr(10)) + 1}, slide 1" in str(e.value)  # the line of the wrong key
    with pytest.raises(LessonError, match="'choices' belongs on a predict slide"):
        parse_lesson('[[slides]]\npage = "mask"\ntitle = "t"\nchoices = ["a"]\n')


def test_the_shipped_lesson_has_a_predict_slide():
    lesson = shipped_lesson("how-attention-works")
    (s,) = [s for s in lesson.slides if s.page == "predict"]
    assert s.checkpoint == "shakespeare-char" and s.choices
