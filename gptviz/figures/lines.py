"""The bertviz-style line view of one query: where it looks, one line per key."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .style import BLUE, style


def attention_lines(weights_row: np.ndarray, labels: Sequence[str], query: int, *, top: int = 24) -> go.Figure:
    """bertviz's line view for one query: the query on the left, the keys on the right, one line per
    key, its width proportional to the weight (a weight of 1 is 14.5 px wide). Only the `top`
    heaviest keys are drawn."""
    w = np.nan_to_num(np.asarray(weights_row, dtype=np.float64)[: query + 1])
    keys = np.sort(np.argsort(-w, kind="stable")[: min(top, len(w))])
    wmax = w.max() if w.size and w.max() > 0 else 1.0
    fig = go.Figure()
    n = len(keys)
    ys = {int(k): n - 1 - i for i, k in enumerate(keys)}
    qy = (n - 1) / 2
    gap = 0.06  # the lines stop short of the labels: a weight near 1 draws a line 14.5 px wide
    for k in keys:
        fig.add_trace(
            go.Scatter(
                x=[gap, 1 - gap],
                y=[qy, ys[int(k)]],
                mode="lines",
                line=dict(width=0.5 + 14 * w[k], color=BLUE),
                opacity=0.3 + 0.7 * w[k] / wmax,
                hovertemplate=f"query {labels[query]} → key {labels[k]}<br>weight {w[k]:.4f}<extra></extra>",
                showlegend=False,
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[0],
            y=[qy],
            mode="text",
            text=[labels[query]],
            textposition="middle left",
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[1] * n,
            y=[ys[int(k)] for k in keys],
            mode="text",
            text=[f"{labels[k]}  ({w[k]:.2f})" for k in keys],
            textposition="middle right",
            hoverinfo="skip",
            showlegend=False,
        )
    )
    shown = "every key" if n == query + 1 else f"the {n} heaviest of {query + 1} keys"
    style(fig, f"Where query {labels[query]} looks ({shown}; line width ∝ weight)", height=max(260, 26 * n + 120))
    fig.update_xaxes(visible=False, range=[-0.6, 1.6])
    fig.update_yaxes(visible=False, range=[-1, n])
    return fig
