"""Real-model slides zoom to the tokens that matter (lessons.zoom, issue 38): at most ZOOM_TOKENS
positions, the highlight's row and column inside the window, the weights the window shows equal the
model's own at those positions, and the caption says which part is shown."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import array

import gptviz
from gptviz import analysis
from gptviz.lessons import Highlight, content, shipped_lesson
from gptviz.lessons.zoom import ZOOM_TOKENS, window

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "T,h,row,want",
    [
        (10, Highlight("row", (3,)), 3, (0, 10)),  # short: whole
        (60, Highlight("row", (20,)), 20, (7, 23)),
        (42, Highlight("cell", (30, 16)), 30, (15, 31)),  # its column one after the first
        (60, Highlight("cell", (50, 2)), 50, (1, 17)),  # too far apart: the column's side
        (60, None, 59, (44, 60)),  # no highlight: ends at the slide's position
    ],
)
def test_the_window(T, h, row, want):
    z = window(T, h, row)
    assert z.hi == want[1] and z.hi - z.lo == min(T, ZOOM_TOKENS)
    if want[0] >= 0:
        assert z.lo == want[0]
    if h is not None and h.at[0] - h.at[-1] < ZOOM_TOKENS:  # every position of the highlight is shown
        assert all(z.lo <= a < z.hi for a in h.at)


def test_the_induction_slide_shows_its_cell_and_the_models_weights():
    lesson = shipped_lesson("how-attention-works")
    slide = next(s for s in lesson.slides if s.checkpoint == "induction-2l")
    bundle = gptviz.load(ROOT / "checkpoints" / "induction-2l")
    prompt = (bundle.card or {}).get("preset_prompt")  # 42 tokens, not the slide's 24: a window is shown
    trace = gptviz.trace(bundle.model, bundle.tokenizer.encode(prompt), bundle.tokenizer)
    c = content.build(slide, bundle, trace)
    fig = json.loads(c.figure.to_json())
    ticks = fig["data"][0]["y"]
    assert len(ticks) <= ZOOM_TOKENS < trace.n_tokens
    first = int(str(ticks[0]).split(" ")[0].split("&")[0])
    r, col = slide.highlight.at
    assert first <= col and first + len(ticks) > r
    z = array(fig["data"][0]["z"]).astype(float)
    w = analysis.attention_matrix(trace, slide.layer, slide.head)
    np.testing.assert_allclose(
        np.nan_to_num(z), np.nan_to_num(w[first : first + len(ticks), first : first + len(ticks)]), atol=1e-6
    )
    assert f"Shown: positions {first}–{first + len(ticks) - 1} of {trace.n_tokens}." in c.caption
    # the frame sits on the window's own row and column
    xs = {s["xanchor"] for s in fig["layout"]["shapes"] if s.get("xsizemode") == "pixel"}
    assert {col - first - 0.5, col - first + 0.5} <= xs
