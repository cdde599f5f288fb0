"""The handout prints (issue 27: printing split figures across pages). The same command that writes
the HTML prints it to a PDF with the machine's Chromium (`gptviz handout ... --pdf`), and the print CSS
starts each slide on its own page and keeps figures and tables whole: a PDF with exactly as many
pages as the lesson has slides has every slide, so every figure and table, on one page."""

from __future__ import annotations

import re
from pathlib import Path

from gptviz import cli
from gptviz.lessons import handout, parse_lesson, pdf, shipped_lesson

ROOT = Path(__file__).resolve().parents[1]


def page_tree_count(data: bytes) -> int:
    """The page count the PDF's own page tree states (its root /Pages node has the largest /Count)."""
    return max(int(n) for n in re.findall(rb"/Type\s*/Pages\s*/Count\s+(\d+)", data))


def test_the_shipped_lesson_prints_a_slide_a_page(tmp_path, capsys):
    html, out = tmp_path / "lesson.html", tmp_path / "lesson.pdf"
    assert cli.main(["handout", "--lesson", "how-attention-works", "--out", str(html), "--pdf", str(out)]) == 0
    n = len(shipped_lesson("how-attention-works").slides)
    data = out.read_bytes()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    assert pdf.pages(out) == page_tree_count(data) == n  # one page per slide: nothing ran onto another
    assert f"({n} pages)" in capsys.readouterr().out
    assert html.is_file() and "Plotly.newPlot(" in html.read_text()  # the HTML is still written beside it


def test_a_slide_too_long_for_a_page_shows_in_the_count(tmp_path):
    """The page count can tell: a note far longer than a page pushes its slide onto a second one."""
    long_note = " ".join(["A note that goes on."] * 28)  # 588 characters, under the 600 a note may have
    lesson = parse_lesson(
        '[[slides]]\npage = "mask"\ntitle = "short"\n'
        f'[[slides]]\npage = "softmax"\ntitle = "long"\nnote = "{long_note}"\n'
    )
    html = handout.write(lesson, handout.local_runs(ROOT / "checkpoints"), tmp_path / "h.html")
    text = html.read_text().replace('<p class="note">', '<p class="note" style="font-size: 40px">', 1)
    html.write_text(text.replace("A note that goes on.", "A note that goes on and on.<br>"))
    out = pdf.print_pdf(html, tmp_path / "h.pdf")
    assert pdf.pages(out) > len(lesson.slides)


def test_no_browser_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPTVIZ_CHROMIUM", str(tmp_path / "no-such-browser"))
    args = ["handout", "--lesson", "how-attention-works", "--out", str(tmp_path / "l.html"), "--pdf", "l.pdf"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GPTVIZ_CHROMIUM" in err and "not a program" in err
    assert not (tmp_path / "l.pdf").exists()
