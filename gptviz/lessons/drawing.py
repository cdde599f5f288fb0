"""The pieces every slide is drawn with: its Content record, numbers as a class reads them, the small
heatmap a class reads cell by cell, and the frame that marks a highlighted cell, row or token. Below
content.py and chain.py, which both build slides from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .. import figures
from ..figures.style import ORANGE, deep_update, from_spec
from . import Highlight

FIGURE_HEIGHT = 400  # px: a slide's figure beside its input, under the title and note, at 1280 × 720


@dataclass(frozen=True)
class Content:
    """One slide's input and result. Read-only once built (shared by every session)."""

    figure: go.Figure
    table_title: str
    table: pd.DataFrame | None
    facts: tuple[tuple[str, str], ...]  # (label, value) pairs shown as large numbers
    caption: str
    prompt_tail: pd.DataFrame | None = None  # a predict slide's last prompt tokens, one row (position columns)


def num(x: float) -> str:
    """A number to 4 decimals as a class reads it: 0.0000, never −0.0000; −∞ for a masked score."""
    if np.isneginf(x):
        return "−∞"
    if np.isposinf(x):
        return "∞"
    s = f"{x:.4f}"
    return "0.0000" if s == "-0.0000" else s.replace("-", "−")


def mass_label(T: int) -> str:
    """What a future attention mass is, said where it is shown: a sum over the rows (each row's
    weights add up to 1), so it runs from 0 to T - 1; a class otherwise reads it as a probability."""
    return f"future attention mass (weight on later keys, summed over {T} rows: 0 to {T - 1})"


def shown(a: np.ndarray, rows, columns) -> pd.DataFrame:
    """A small matrix as text cells (num), with query/key labels: what a slide's table shows."""
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    return pd.DataFrame([[num(x) for x in row] for row in a], index=list(rows), columns=list(columns))


def small_heatmap(
    w: np.ndarray,
    labels,
    title: str,
    mask: np.ndarray | None,
    height: int = FIGURE_HEIGHT,
    axis_titles: tuple[str, str] = ("key (read)", "query (reads)"),
    margin: dict | None = None,
) -> go.Figure:
    """An attention heatmap with each cell's weight written in it (for matrices a class reads).
    Built as a dict: the Worked examples page draws four of these on every view."""
    spec = figures.attention_heatmap_spec(w, labels, title=title, height=height, mask=mask)
    spec["data"][0].update(texttemplate="%{z:.4f}", textfont=dict(size=12))
    axes = dict(xaxis=dict(title=dict(text=axis_titles[0])), yaxis=dict(title=dict(text=axis_titles[1])))
    # cells as wide as the column allows, not square: a weight's four digits fit in them at 1024 px
    axes["yaxis"]["scaleanchor"] = False
    if max(len(str(s)) for s in labels) > 5:  # longer words would touch under narrow cells
        axes["xaxis"]["tickangle"] = -30
    deep_update(spec["layout"], dict(axes, margin=margin or {}))
    return from_spec(spec)


MARK_WIDTH = 3  # px: the highlight's lines
MARK_GAP = 1  # px between the cell's edge and the line's inner edge


def mark(fig: go.Figure, h: Highlight | None, T: int) -> go.Figure:
    """Frame the highlighted cell, row (a query) or token (its row and its column) on a heatmap,
    from outside: on a 42-60 token heatmap a row is 5-7 px tall, and an outline drawn on its border
    (half of the line inside) covered most of the very row it points at. Each side is a line set off
    the cells by a fixed number of pixels (Plotly's pixel sizing, anchored on the cell border in data
    units), whatever size the figure is drawn at; the axes get a margin of background a few pixels
    wide so a frame on the first or last row is not clipped by the plot area."""
    if h is None:
        return fig
    i = min(h.at[0], T - 1)
    if h.kind == "cell":
        boxes = [(i, i, min(h.at[1], T - 1), min(h.at[1], T - 1))]
    else:
        boxes = [(i, i, 0, T - 1)]
        if h.kind == "token":
            boxes.append((0, T - 1, i, i))
    pad = max(0.06, T / 36)  # rows of margin: H / 38 px on a plot H px tall, ≥ MARK_WIDTH + MARK_GAP from 160 px
    reversed_y = fig.layout.yaxis.autorange == "reversed"  # the first query on top
    fig.update_xaxes(range=[-0.5 - pad, T - 0.5 + pad], autorange=False)
    fig.update_yaxes(range=[T - 0.5 + pad, -0.5 - pad] if reversed_y else [-0.5 - pad, T - 0.5 + pad], autorange=False)
    off = MARK_WIDTH / 2 + MARK_GAP  # px from the cell border to the line's centre; Plotly's pixels go up
    line = dict(color=ORANGE, width=MARK_WIDTH)
    for k, (r0, r1, c0, c1) in enumerate(boxes):
        others = boxes[:k] + boxes[k + 1 :]  # a token's row and column: frame the cross, not both bars
        top, bottom = (r0 - 0.5, r1 + 0.5) if reversed_y else (r1 + 0.5, r0 - 0.5)
        for anchor, y in ((top, off), (bottom, -off)):
            cuts = [(o[2] - 0.5, o[3] + 0.5) for o in others if o[0] - 0.5 < anchor < o[1] + 0.5]
            for x0, x1 in _minus(c0 - 0.5, c1 + 0.5, cuts):
                fig.add_shape(type="line", x0=x0, x1=x1, ysizemode="pixel", yanchor=anchor, y0=y, y1=y, line=line)
        for anchor, x in ((c0 - 0.5, -off), (c1 + 0.5, off)):
            cuts = [(o[0] - 0.5, o[1] + 0.5) for o in others if o[2] - 0.5 < anchor < o[3] + 0.5]
            for y0, y1 in _minus(r0 - 0.5, r1 + 0.5, cuts):
                fig.add_shape(type="line", y0=y0, y1=y1, xsizemode="pixel", xanchor=anchor, x0=x, x1=x, line=line)
    return fig


def _minus(lo: float, hi: float, cuts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of [lo, hi] outside every cut."""
    parts = [(lo, hi)]
    for a, b in cuts:
        parts = [q for p0, p1 in parts for q in ((p0, min(p1, a)), (max(p0, b), p1)) if q[1] > q[0]]
    return parts
