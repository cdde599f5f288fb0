"""Figures of a corpus scan: window losses, each head's score over windows, a neuron's contexts."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .style import BLUE, INK, ORANGE, style

MAX_BOX_POINTS = 2000  # per head: a box summarises more; the figure stays small at any corpus size


def window_loss_histogram(losses: np.ndarray, marked: float | None = None) -> go.Figure:
    """How the windows' mean losses spread; the chosen window's loss as a line."""
    fig = go.Figure(go.Histogram(x=np.asarray(losses, dtype=float), nbinsx=60, marker_color=BLUE, name="windows"))
    if marked is not None and np.isfinite(marked):
        fig.add_vline(x=float(marked), line_color=ORANGE, line_width=2, annotation_text="chosen window")
    style(fig, "Windows by loss", height=300, subtitle="mean next-token loss over each window, nats")
    fig.update_xaxes(title_text="window loss (nats)")
    fig.update_yaxes(title_text="windows")
    return fig


def head_score_distribution(per_window: pd.DataFrame, means: pd.DataFrame, score: str) -> go.Figure:
    """One box per head of a score's values over the windows, with the mean over windows (the
    scan's heads table) as a diamond. per_window: layer, head, value; means: layer, head, <score>."""
    fig = go.Figure()
    rng = np.random.default_rng(0)
    for (layer, head), rows in per_window.groupby(["layer", "head"], sort=True):
        values = rows["value"].to_numpy(dtype=float)
        if len(values) > MAX_BOX_POINTS:  # a fixed-seed sample: the box looks the same, the figure stays small
            values = rng.choice(values, MAX_BOX_POINTS, replace=False)
        fig.add_trace(go.Box(y=values, name=f"L{layer} H{head}", marker_color=BLUE, boxpoints=False, showlegend=False))
    names = [f"L{l} H{h}" for l, h in zip(means["layer"], means["head"])]
    fig.add_trace(
        go.Scatter(
            x=names,
            y=means[score].to_numpy(dtype=float),
            mode="markers",
            marker=dict(symbol="diamond", size=9, color=ORANGE, line=dict(color=INK, width=1)),
            name="mean over windows",
        )
    )
    style(
        fig,
        f"{score.replace('_', ' ')} per head over the windows",
        height=420,
        subtitle="box: the windows' quartiles and range; diamond: the mean (the scan's heads table)",
    )
    fig.update_xaxes(title_text="layer, head", type="category")
    fig.update_yaxes(title_text=score.replace("_", " "))
    return fig


_MARK = (
    '<span style="background:{bg};border-radius:4px;padding:0 2px;outline:1px solid {edge}" title="{tip}">{tok}</span>'
)


def context_html(labels: Sequence[str], at: int, value: float) -> str:
    """A context as one line of monospace text, the token at `at` highlighted with its value.
    Every token is HTML-escaped: corpus text never becomes markup."""
    parts = []
    for i, tok in enumerate(labels):
        t = html.escape(tok)
        if i == at:
            tip = html.escape(f"activation {value:.4f}")
            parts.append(_MARK.format(bg="#ffd8b0", edge=ORANGE, tip=tip, tok=t))
        else:
            parts.append(t)
    return '<span style="font-family:monospace;white-space:pre-wrap">' + "".join(parts) + "</span>"


def ranked_context_html(rank: int, value: float, window: int, labels: Sequence[str], at: int) -> str:
    """One of a neuron's strongest contexts: its rank, value and window, then the context (context_html)."""
    return f"<b>#{int(rank)}</b> · {float(value):.3f} · window {int(window)} · " + context_html(labels, at, value)
