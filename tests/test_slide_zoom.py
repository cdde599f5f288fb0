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
from gptviz.figures.style import ORANGE
from gptviz.lessons import Highlight, content, shipped_lesson
from gptviz.lessons.zoom import BAR_TOKENS, HEAD_TOKENS, ZOOM_TOKENS, window

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


def shipped_slide(page: str):
    slide = next(s for s in shipped_lesson("how-attention-works").slides if s.page == page)
    bundle = gptviz.load(ROOT / "checkpoints" / slide.checkpoint)
    return slide, bundle, gptviz.trace(bundle.model, bundle.tokenizer.encode(slide.prompt), bundle.tokenizer)


def test_the_heads_slide_shows_one_layers_heads_zoomed_to_the_models_weights():
    slide, bundle, trace = shipped_slide("heads")
    c = content.build(slide, bundle, trace)
    fig = json.loads(c.figure.to_json())
    H, T = bundle.model.config.n_head, trace.n_tokens
    assert len(fig["data"]) == H and T > HEAD_TOKENS  # one tile a head of the slide's layer, a window of each
    w = analysis.layer_weights(trace, slide.layer)  # [H, T, T]
    lo = T - HEAD_TOKENS  # no highlight: the window ends at the prompt's last position
    for h, tile in enumerate(fig["data"]):
        assert len(tile["y"]) == HEAD_TOKENS and str(tile["y"][0]).startswith(f"{lo} ")
        np.testing.assert_allclose(array(tile["z"]).astype(float), w[h, lo:, lo:], atol=1e-6)  # causal: no NaN here
    (frame,) = fig["layout"]["shapes"]  # the slide's head outlined, on its own tile
    n = slide.head + 1
    assert frame["xref"] == f"x{n} domain" and frame["yref"] == f"y{n} domain"
    assert f"Shown: positions {lo}–{T - 1} of {T}." in c.caption


def test_the_features_slide_shows_bars_a_class_can_tell_apart():
    slide, bundle, trace = shipped_slide("features")
    sae = gptviz.load_sae(ROOT / "checkpoints" / slide.checkpoint / "saes" / slide.sae, model=bundle.model)
    c = content.build(slide, bundle, trace, sae)
    bars = c.figure.data[0]
    x = [int(i) for i in bars.x]
    T = trace.n_tokens
    assert len(x) == BAR_TOKENS < T and x == list(range(x[0], x[0] + BAR_TOKENS)) and slide.position in x
    acts = gptviz.feature_activations(trace, sae)[:, slide.feature]
    np.testing.assert_allclose(np.asarray(bars.y), acts[x[0] : x[-1] + 1], atol=1e-6)
    assert [i for i, colour in zip(x, bars.marker.color) if colour == ORANGE] == [slide.position]
    assert f"Shown: positions {x[0]}–{x[-1]} of {T}." in c.caption
