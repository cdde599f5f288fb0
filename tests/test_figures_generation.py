"""The Generate page's text box (figures.generation.generated_text_html): escaped, prompt grey, step marked."""

import re

from markdown_it import MarkdownIt

from gptviz.figures.generation import generated_text_html


def test_the_text_box_escapes_every_piece_and_marks_the_step_on_view():
    pieces = ["<b>hi</b>", " *no*", " [x](y)", " ok"]
    out = generated_text_html(pieces, prompt_len=2, on_view=3)
    spans = re.findall(r'<span style="([^"]*)">(.*?)</span>', out)
    assert [s for s, _ in spans] == ["color:#8a8a8a"] * 2 + [
        "color:inherit",
        "background:#e4572e;color:white;border-radius:3px",
    ]
    assert "<b>" not in out and "*" not in out and "[" not in out  # as character references only
    rendered = MarkdownIt("commonmark", {"html": True}).render(out)
    assert "<em>" not in rendered and "<a " not in rendered and "<b>" not in rendered


def test_no_step_marked_before_the_first_token():
    assert "e4572e" not in generated_text_html(["a", "b"], prompt_len=2)
