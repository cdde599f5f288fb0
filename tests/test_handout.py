"""The handout: a lesson as one HTML file that opens without a server. plotly.js is inside it (no
script is fetched from anywhere), every slide has its figure, notes, table and numbers, and text
from the lesson file reaches it escaped, never as markup. Built from the shipped checkpoints."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
from apptest_helpers import array

import gptviz
from gptviz import cli
from gptviz.analysis import worked
from gptviz.lessons import handout, parse_lesson, shipped_lesson

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_lesson_as_one_file(tmp_path):
    out = tmp_path / "lesson.html"
    assert cli.main(["handout", "--lesson", "how-attention-works", "--out", str(out)]) == 0
    text = out.read_text()
    lesson = shipped_lesson("how-attention-works")
    assert not re.search(r"<script[^>]+src=", text)  # nothing fetched: plotly.js is inlined
    assert text.count("Plotly.newPlot(") == len(lesson.slides) and "plotly.js v" in text[:3_000_000]
    for i, s in enumerate(lesson.slides, start=1):
        assert f"<h2>{i}. {html.escape(s.title)}</h2>" in text and f'id="figure-{i}"' in text
    # the induction slide's numbers: the shipped run's own weight of its highlighted query on its key
    slide = next(s for s in lesson.slides if s.checkpoint == "induction-2l")
    bundle = gptviz.load(Path(__file__).resolve().parents[1] / "checkpoints" / "induction-2l")
    w = gptviz.trace(bundle.model, bundle.tokenizer.encode(slide.prompt))["blocks.1.attn.weights"][1]
    assert f"{w[slide.highlight.at]:.4f}" in text and "induction score" in text
    # the first slide's figure carries the worked example's weights
    data = re.search(r'Plotly.newPlot\(\s*"figure-1",\s*(\[.*?\]),\s*\{', text, re.S)
    z = json.loads(data.group(1))[0]["z"]
    want = worked.toy_attention(**worked.TOY_ATTENTION_SHARP)["weights"]
    assert np.allclose(np.nan_to_num(array(z).astype(float)), want, atol=1e-6)


def test_lesson_text_is_escaped_and_a_bad_slide_says_why(tmp_path):
    lesson = parse_lesson(
        """title = "<script>alert(1)</script>"
[[slides]]
page = "mask"
title = "A <b>bold</b> claim"
note = "<img src=x onerror=alert(1)>"
[[slides]]
page = "attention"
title = "Missing model"
checkpoint = "no-such-model"
"""
    )
    out = handout.write(lesson, handout.local_runs(ROOT / "checkpoints"), tmp_path / "h.html")
    text = out.read_text()
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<img src=x" not in text and "A &lt;b&gt;bold&lt;/b&gt; claim" in text
    assert "This slide could not be drawn" in text and "no-such-model" in text


def test_the_cli_says_one_line_for_a_bad_lesson(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[slides]]\npage = "mask"\ntitle = "t"\nspeed = 2\n')
    assert cli.main(["handout", "--lesson", str(bad), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'speed'" in err


def test_a_figure_of_panels_has_its_title_above_them():
    from gptviz.lessons import content

    slide = next(s for s in shipped_lesson("how-attention-works").slides if s.step == "qkv")
    fig = content.build(slide).figure
    assert fig.layout.annotations  # the panels' titles
    page = handout._for_page(fig)
    # the title in the top margin (from the container's top), the panels' titles under it in the plot area
    assert page.layout.title.yref == "container" and page.layout.title.y == 1 and page.layout.margin.t >= 100
    assert page.layout.title.xanchor == "left" and page.layout.title.x > 0  # its start is not cut off
    assert fig.layout.title.yref != "container"  # the slide's own figure is left as it is
