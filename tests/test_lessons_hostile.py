"""A lesson file as a hostile student's upload (issue 27): what Python's tomllib pays for (dotted
keys, nesting, keys, items) is bounded before it runs, a RecursionError never escapes, a byte-order
mark is fine, each content is parsed once, and a slide's error names its line in the file.
`gptviz bench --lessons` measures time and memory on 64 KB files of each kind."""

from __future__ import annotations

import pytest

from gptviz import lessons
from gptviz.bench.lessons import cases, peak_mb
from gptviz.lessons import LessonError, bounded_toml, parse_lesson

GOOD = 'title = "Mine"\n\n[[slides]]\npage = "mask"\ntitle = "one"\n\n[[slides]]\npage = "tiny-head"\ntitle = "two"\n'


def refused(text: str, *words: str) -> str:
    with pytest.raises(LessonError) as e:
        parse_lesson(text, "mine")
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 300, msg
    assert all(w in msg for w in words), msg
    return msg


def test_a_long_dotted_key_is_refused_before_tomllib_reads_it():
    # 4,000 parts: tomllib alone takes ~65 MB and a third of a second on it (quadratic: 64 KB took 4.4 GB)
    refused("a." * 4000 + "a = 1\n", "line 1", "dotted key")
    assert peak_mb("a." * 4000 + "a = 1\n", "mem") < 5


def test_deep_nesting_is_one_line_not_a_recursion_error():
    refused("x = " + "[" * 900 + "]" * 900 + "\n", "nested more than")
    refused("x = " + "{ a = " * 300 + "1" + " }" * 300 + "\n", "nested more than")


def test_too_many_keys_items_and_tables_are_refused_with_their_line():
    refused("".join(f"k{i} = 1\n" for i in range(3000)), f"line {bounded_toml.MAX_KEYS + 1}", "keys")
    refused("x = [" + "1," * 5000 + "]\n", "items")
    refused("".join(f"[t{i}]\n" for i in range(3000)), "tables")


def test_what_is_inside_strings_and_comments_is_not_counted():
    dots = "a.b.c.d.e.f.g.h.i.j.k [[[[[[[[[[ {{{{{{{{{ = , ' \\\" "
    text = GOOD.replace('title = "one"', f'title = "one"\nnote = "{dots}"  # {dots}')
    text += "\n# " + "[" * 50 + "\n" + "\n".join(f'[[slides]]\npage = "mask"\ntitle = "{dots}"' for _ in range(40))
    text = text.replace('title = "two"', "title = '''two " + dots + "'''")
    lesson = parse_lesson(text, "mine")
    assert len(lesson.slides) == 42 and lesson.slides[0].note == dots.replace('\\"', '"')


def test_every_hostile_64kb_case_is_bounded_in_memory():
    for name, text in cases().items():
        assert len(text.encode()) <= lessons.MAX_BYTES, name
        assert peak_mb(text, f"mem-{name}") < 50, name


def test_a_byte_order_mark_is_accepted():
    lesson = parse_lesson(b"\xef\xbb\xbf" + GOOD.encode(), "mine")
    assert lesson.title == "Mine" and len(lesson.slides) == 2


def test_each_content_is_parsed_once(monkeypatch):
    calls = []
    real = lessons.load
    monkeypatch.setattr(lessons, "load", lambda raw: calls.append(1) or real(raw))
    text = GOOD.replace("Mine", "Parsed once")
    first = parse_lesson(text, "mine")
    assert parse_lesson(text, "mine") is first
    bad = text.replace('"mask"', '"nope"')
    for _ in range(3):  # an error is remembered too: a rerun does not parse it again
        refused(bad, "nope")
    assert len(calls) == 2


def test_a_slides_error_names_its_line():
    # the line of the wrong key (the slide's [[slides]] is line 7; its page line 8)
    refused(GOOD.replace('page = "tiny-head"', 'page = "tiny-head"\nfontsize = 4'), "line 9, slide 2", "fontsize")
    lesson = parse_lesson(GOOD, "mine")
    assert lesson.lines == (3, 7) and lesson.where(1) == "line 7, slide 2"
    assert dict(lesson.key_lines[1])["page"] == 8
