"""The tiny head's whole chain, one stage a slide, every number on screen so a class can check it by
hand: X and the weights → Q, K, V → the scores → the weights → the output (lessons.STEPS).

Each stage shows what it starts from (the table, left) and what it makes (the figure, right, each
cell's number written in it), so a student with a pencil can redo the step from that slide alone.
The numbers are the slide's preset (analysis.worked.TOY_PRESETS) or the teacher's own (numbers.py),
run through analysis.worked.toy_attention: the same function the Worked examples page draws.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import worked
from ..figures.style import style
from . import Slide
from .drawing import FIGURE_HEIGHT, Content, mark, mass_label, num, small_heatmap

MATRIX_SCALE = "RdBu"  # diverging around 0: a negative weight reads as the opposite colour


def inputs(slide: Slide) -> dict[str, np.ndarray]:
    """The slide's X, Wq, Wk, Wv as arrays: its own numbers, else its preset's."""
    d = slide.numbers.as_dict() if slide.numbers is not None else worked.TOY_PRESETS[slide.preset]
    return {k: np.asarray(v, dtype=np.float64) for k, v in d.items()}


def run(slide: Slide) -> dict:
    """Every stage of the head on the slide's numbers (worked.toy_attention)."""
    return worked.toy_attention(**inputs(slide), causal=slide.mask)


def tokens(slide: Slide) -> list[str]:
    return [f"t{i}" for i in range(len(inputs(slide)["X"]))]


def matrices_figure(panels: list[tuple[str, np.ndarray, list[str], list[str]]], title: str) -> go.Figure:
    """Matrices side by side, each cell's number written in it: (name, matrix, row labels, column
    labels) per panel, each panel as wide as its columns."""
    widths = [m.shape[1] for _, m, _, _ in panels]
    fig = make_subplots(
        rows=1,
        cols=len(panels),
        subplot_titles=[name for name, _, _, _ in panels],
        column_widths=widths,
        horizontal_spacing=0.06,
    )
    for c, (_, m, rows, cols) in enumerate(panels, start=1):  # rows are shared: labelled on the first only
        text = [[short(x) for x in row] for row in m]
        finite = np.where(np.isfinite(m), m, np.nan)
        lim = float(np.nanmax(np.abs(finite))) if np.isfinite(finite).any() else 1.0
        fig.add_trace(
            go.Heatmap(
                z=finite,
                x=cols,
                y=rows,
                text=text,
                texttemplate="%{text}",
                textfont=dict(size=cell_font(text)),
                colorscale=MATRIX_SCALE,
                zmid=0,
                zmin=-(lim or 1.0),
                zmax=lim or 1.0,
                showscale=False,
                hovertemplate="%{y}, %{x}: %{text}<extra></extra>",
            ),
            row=1,
            col=c,
        )
        fig.update_yaxes(autorange="reversed", type="category", showticklabels=c == 1, row=1, col=c)
        fig.update_xaxes(type="category", row=1, col=c)
    style(fig, title, height=FIGURE_HEIGHT)
    return fig


def cell_font(text: list[list[str]]) -> int:
    """px for a matrix's cell numbers: as large as a projector wants (24) where they are short
    enough to fit a narrow cell, smaller for longer ones."""
    longest = max(len(t) for row in text for t in row)
    return 24 if longest <= 2 else 20 if longest <= 4 else 16


def matrix_table(a: np.ndarray, rows: list[str], columns: list[str]) -> pd.DataFrame:
    """A matrix as the slide's table writes it: the same short numbers as the figure's cells (a
    6-column table of 4-decimal numbers does not fit half of a 1024 px screen)."""
    return pd.DataFrame([[short(x) for x in row] for row in np.atleast_2d(a)], index=rows, columns=columns)


def short(x: float) -> str:
    """A number in a matrix cell: num's 4 decimals without the zeros that say nothing (3, 0.25,
    6.364), so a cell of a narrow matrix still holds it on a projector; −∞ as num writes it."""
    s = num(float(x))
    return s.rstrip("0").rstrip(".") if "." in s else s


def _cols(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def build(slide: Slide) -> Content:
    """The Content of a tiny-head slide at its step (slide.step, one of lessons.STEPS)."""
    x = inputs(slide)
    r = run(slide)
    toks = tokens(slide)
    T, C = r["X"].shape
    dk, dv = r["Q"].shape[1], r["V"].shape[1]
    feats = _cols("c", C)
    facts = (("tokens T", str(T)), ("features C", str(C)), ("d_k", str(dk)))
    if slide.step == "input":
        fig = matrices_figure(
            [
                ("Wq", x["Wq"], feats, _cols("q", dk)),
                ("Wk", x["Wk"], feats, _cols("k", dk)),
                ("Wv", x["Wv"], feats, _cols("v", dv)),
            ],
            "the head's weights, one row per feature of X",
        )
        return Content(
            fig,
            "input X, one row per token",
            matrix_table(r["X"], toks, feats),
            facts,
            "Each token's row of X will be multiplied by Wq, Wk and Wv: the next slide.",
        )
    if slide.step == "qkv":
        W = np.concatenate([x["Wq"], x["Wk"], x["Wv"]], axis=1)
        fig = matrices_figure(
            [
                ("X", r["X"], toks, feats),
                ("Q", r["Q"], toks, _cols("q", dk)),
                ("K", r["K"], toks, _cols("k", dk)),
                ("V", r["V"], toks, _cols("v", dv)),
            ],
            "Q = X·Wq, K = X·Wk, V = X·Wv",
        )
        table = matrix_table(W, feats, [*_cols("q", dk), *_cols("k", dk), *_cols("v", dv)])
        return Content(
            fig,
            "Wq | Wk | Wv side by side (one row per feature of X)",
            table,
            facts,
            "Q[i, j] = Σ_c X[i, c] · Wq[c, j]: row i of X times column j of Wq; K and V the same way.",
        )
    if slide.step == "scores":
        root = float(np.sqrt(dk))
        fig = matrices_figure([("rows: queries · columns: keys", r["scores"], toks, toks)], "scores = Q·Kᵀ ÷ √d_k")
        table = matrix_table(np.concatenate([r["Q"], r["K"]], axis=1), toks, [*_cols("q", dk), *_cols("k", dk)])
        return Content(
            fig,
            "Q | K side by side (one row per token)",
            table,
            (("d_k", str(dk)), ("√d_k", num(root))),
            f"score[i, j] = (Q row i · K row j) ÷ {num(root)}: rows are queries, columns keys.",
        )
    if slide.step == "weights":
        mask = np.tril(np.ones((T, T), bool)) if slide.mask else np.ones((T, T), bool)
        title = "weights = softmax of each row" + ("" if slide.mask else " · mask OFF")
        fig = mark(small_heatmap(r["weights"], toks, title, mask), slide.highlight, T)
        head = "scores after the causal mask (−∞: a later key)" if slide.mask else "scores (mask off: nothing hidden)"
        return Content(
            fig,
            head,
            matrix_table(r["masked"], toks, toks),
            ((mass_label(T), num(r["future_mass"])),),
            "weight[i, j] = e^score[i, j] ÷ Σ_k e^score[i, k]: each row sums to 1; e^−∞ = 0.",
        )
    # output
    fig = matrices_figure(
        [("weights", r["weights"], toks, toks), ("output = weights·V", r["output"], toks, _cols("o", dv))],
        "output = weights · V",
    )
    return Content(
        fig,
        "V, one row per token",
        matrix_table(r["V"], toks, _cols("v", dv)),
        (("d_v", str(dv)),),
        "output[i] = Σ_j weight[i, j] · V[j]: a weighted average of the value rows.",
    )
