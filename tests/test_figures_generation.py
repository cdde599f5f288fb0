"""The Generate page's text box (figures.generation.generated_text_html): escaped, prompt grey, step marked."""

import html
import re

from markdown_it import MarkdownIt

from gptviz.figures.generation import generated_text_html


def test_the_text_box_escapes_every_piece_and_marks_the_step_on_view():
    pieces = ["<b>hi</b>", " *no*", " [x](y)", " ok"]
    out = generated_text_html(pieces, prompt_len=2, on_view=3)
    spans = re.findall(r'<span style="([^"]*)">(.*?)</span>', out)
    # a run of one style is one span (a prompt of 8,192 tokens is its text, not 8,192 tags)
    assert [s for s, _ in spans] == [
        "color:#8a8a8a",
        "color:inherit",
        "background:#e4572e;color:white;border-radius:3px",
    ]
    assert html.unescape(spans[0][1]) == "<b>hi</b> *no*"
    assert "<b>" not in out and "*" not in out and "[" not in out  # as character references only
    rendered = MarkdownIt("commonmark", {"html": True}).render(out)
    assert "<em>" not in rendered and "<a " not in rendered and "<b>" not in rendered


def test_the_text_after_the_step_on_view_is_a_span_of_its_own():
    out = generated_text_html(["a", "b", "c", "d", "e"], prompt_len=2, on_view=3)
    spans = re.findall(r'<span style="([^"]*)">(.*?)</span>', out)
    assert [t for _, t in spans] == ["ab", "c", "d", "e"]


def test_no_step_marked_before_the_first_token():
    assert "e4572e" not in generated_text_html(["a", "b"], prompt_len=2)
