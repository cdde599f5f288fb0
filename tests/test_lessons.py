"""Lesson files (gptviz.lessons): the shipped lesson parses, a teacher's file is untrusted input
(size-bounded, unknown keys refused with one line naming the key, nothing executed), and what a
slide shows is the worked examples' own numbers, written as a class reads them."""

from __future__ import annotations

import numpy as np
import pytest

from gptviz import lessons
from gptviz.analysis import worked
from gptviz.lessons import LessonError, content, parse_lesson, read_lesson

GOOD = """
title = "Two slides"
[[slides]]
page = "tiny-head"
title = "A head"
note = "Look at row 2."
preset = "sharp"
highlight = { cell = [2, 1] }

[[slides]]
page = "attention"
title = "A real head"
checkpoint = "shakespeare-char"
prompt = "hello"
layer = 1
head = 2
highlight = { token = 3 }
"""


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 300, msg
    return msg


def test_a_good_lesson_parses_into_its_slides():
    lesson = parse_lesson(GOOD, "two")
    assert lesson.title == "Two slides" and len(lesson.slides) == 2
    a, b = lesson.slides
    assert (a.page, a.preset, a.highlight) == ("tiny-head", "sharp", lessons.Highlight("cell", (2, 1)))
    assert (b.checkpoint, b.prompt, b.layer, b.head) == ("shakespeare-char", "hello", 1, 2)
    assert b.highlight == lessons.Highlight("token", (3,)) and b.mask is True
    assert hash(a) != hash(b)  # a slide is a cache key


def test_the_shipped_lesson():
    assert "how-attention-works" in lessons.shipped_lessons()
    lesson = lessons.shipped_lesson("how-attention-works")
    pages = [s.page for s in lesson.slides]
    # tiny head -> mask -> softmax -> a real model's heads -> the induction head -> the mask leak
    assert pages[0] == "tiny-head" and pages[-1] == "mask-leak"
    assert pages.index("mask") < pages.index("softmax") < pages.index("heads")
    induction = next(s for s in lesson.slides if s.checkpoint == "induction-2l")
    assert (induction.layer, induction.head) == (1, 1)
    half = len(induction.prompt) // 2  # a sequence said twice: the pattern an induction head continues
    assert induction.prompt[:half] == induction.prompt[half:] and len(induction.prompt) <= 20


@pytest.mark.parametrize(
    "text,named",
    [
        ('title = "x"\ncolour = "red"\n[[slides]]\npage = "mask"\ntitle = "t"', "'colour'"),
        ('[[slides]]\npage = "mask"\ntitle = "t"\nfont_size = 9', "slide 1: unknown key 'font_size'"),
        ('[[slides]]\npage = "mask"\ntitle = "t"\nhighlight = { column = 2 }', "slide 1: unknown key 'column'"),
        ('[[slides]]\npage = "mask"\ntitle = "t"\n[[slides]]\npage = "shell"\ntitle = "u"', "slide 2: page 'shell'"),
        ('[[slides]]\npage = "mask"', "slide 1: 'title' is missing"),
        ('[[slides]]\npage = "mask"\ntitle = "t"\nlayer = -1', "slide 1: 'layer'"),
        ('[[slides]]\npage = "mask"\ntitle = "t"\nlayer = "1"', "slide 1: 'layer'"),
        ('[[slides]]\npage = "mask"\ntitle = "t"\nmask = "yes"', "slide 1: 'mask'"),
        ('[[slides]]\npage = "tiny-head"\ntitle = "t"\npreset = "huge"', "preset 'huge'"),
        ('title = "no slides"', "no slides"),
        ("[[slides]\n", "not valid TOML"),
    ],
)
def test_bad_files_are_refused_with_one_line_naming_the_problem(text, named):
    with pytest.raises(LessonError) as e:
        parse_lesson(text, "bad.toml")
    assert named in one_line(e), str(e.value)


def test_too_large_and_not_text():
    big = GOOD + "#" * lessons.MAX_BYTES
    with pytest.raises(LessonError) as e:
        parse_lesson(big, "big")
    assert "at most" in one_line(e)
    with pytest.raises(LessonError) as e:
        parse_lesson(b"\xff\xfe title", "bin")
    assert "UTF-8" in one_line(e)
    long_note = GOOD.replace('note = "Look at row 2."', f'note = "{"n" * 601}"')
    with pytest.raises(LessonError) as e:
        parse_lesson(long_note)
    assert "'note'" in one_line(e)


def test_nothing_in_a_lesson_is_executed(tmp_path):
    marker = tmp_path / "ran"
    text = GOOD.replace('"Look at row 2."', f"\"__import__('os').system('touch {marker}')\"")
    lesson = parse_lesson(text)
    assert lesson.slides[0].note.startswith("__import__") and not marker.exists()  # text, shown as text


def test_read_lesson_from_a_path(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(GOOD)
    assert read_lesson(f).slides[1].head == 2 and read_lesson(f).origin == "file"
    with pytest.raises(LessonError) as e:
        read_lesson(tmp_path)  # a folder
    assert "no such lesson file" in one_line(e)
    with pytest.raises(LessonError):
        read_lesson(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (lessons.MAX_BYTES + 1))
    with pytest.raises(LessonError) as e:
        read_lesson(big)
    assert "at most" in one_line(e)
    with pytest.raises(LessonError) as e:
        lessons.shipped_lesson("../../etc/passwd")  # a URL names shipped lessons only
    assert "no shipped lesson" in one_line(e)


def test_numbers_are_written_as_a_class_reads_them():
    assert content.num(-0.0) == "0.0000" and content.num(-0.00001) == "0.0000"
    assert content.num(float("-inf")) == "−∞" and content.num(-1.5) == "−1.5000"


def test_slide_content_is_the_worked_examples_numbers():
    lesson = parse_lesson(GOOD)
    c = content.build(lesson.slides[0])
    r = worked.toy_attention(**worked.TOY_ATTENTION_SHARP)
    z = np.asarray(c.figure.data[0].z, dtype=float)
    assert np.allclose(np.nan_to_num(z), r["weights"], atol=1e-12)
    assert z[2, 1] > 0.99 and c.table.to_numpy()[0, 0] == "1.0000"  # the sharp preset chooses
    assert [s.type for s in c.figure.layout.shapes] == ["line"] * 4  # the cell, framed from outside (test_slide_marks)
    masked = content.build(lessons.Slide(page="mask", title="m", mask=True))
    assert masked.table.iloc[0, 1] == "−∞" and dict(masked.facts)[content.mass_label(4)] == "0.0000"
    leak = content.build(lessons.Slide(page="mask", title="m", mask=False))
    assert (
        dict(leak.facts)[content.mass_label(4)]
        == f"{worked.masked_softmax(worked.MASK_SCORES, False)['future_mass']:.4f}"
    )
    with pytest.raises(ValueError):
        content.build(lesson.slides[1])  # a real model's slide needs its run


def test_a_slide_states_what_a_mass_is_and_shows_no_nan_for_a_masked_key():
    """Issue 27: "future attention mass" (1.07, 23.9) was read as a probability; the top-5 keys of an
    early query listed masked keys as nan."""
    import gptviz
    from gptviz.formats.demo import demo_bundle

    bundle = demo_bundle("cpu")
    trace = gptviz.trace(bundle.model, bundle.tokenizer.encode("hello there"))
    T = trace.n_tokens
    early = lessons.Slide(page="attention", title="a", checkpoint="demo", highlight=lessons.Highlight("row", (1,)))
    table = content.build(early, bundle, trace).table
    assert len(table) == 2 and "nan" not in table.to_string().lower()  # query 1 reads keys 0 and 1 only
    leak = content.build(lessons.Slide(page="mask-leak", title="m", checkpoint="demo"), bundle, trace)
    assert leak.table.iloc[0, 0] == f"future attention mass (weight on later keys, summed over {T} rows: 0 to {T - 1})"
    tiny = content.build(lessons.Slide(page="tiny-head", title="t"))
    assert "summed over 3 rows: 0 to 2" in tiny.facts[0][0]


def test_a_token_with_a_tag_character_reads_as_itself_in_a_slides_table():
    """Issue 27: `&gt;` appeared literally (the Plotly escape reached a table and a title)."""
    import gptviz
    from gptviz.formats.demo import demo_bundle

    bundle = demo_bundle("cpu")
    trace = gptviz.trace(bundle.model, bundle.tokenizer.encode("a<b>c"))
    c = content.build(lessons.Slide(page="attention", title="a", checkpoint="demo"), bundle, trace)
    assert c.table_title == "where query 4 c looks (top 5 keys)"
    assert "1 <" in set(c.table["key"]) and not any("&" in k for k in c.table["key"])
    assert list(c.figure.data[0].x)[1] == "1 &lt;", "the figure's labels stay escaped for Plotly"
