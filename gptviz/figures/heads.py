"""Head scores: every layer × head coloured by one score, each cell with its value and label, and a
click target per cell that names its (layer, head)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .style import ORANGE, category_axis, colorbar_title, style

SCORE_TITLES = {
    "previous_token": "previous-token score (share of attention)",
    "duplicate_token": "duplicate-token score (share of attention)",
    "induction": "induction score (share of attention)",
    "sink": "sink: mean weight on key 0",
    "self": "self: mean weight on the diagonal",
    "entropy": "entropy per query (nats)",
}
SHORT = {"previous_token": "prev", "duplicate_token": "dup", "induction": "ind", "sink": "sink", "self": "self"}


def head_score_grid(
    scores: pd.DataFrame, score: str, *, selected: tuple[int, int] | None = None, n_tokens: int | None = None
) -> go.Figure:
    """Layers as rows (0 at the top) and heads as columns, coloured by `score` (a column of
    analysis.head_scores). Each cell shows the value and the head's label; an invisible marker per
    cell carries (layer, head) for a click (clicked_head). Shares use a fixed 0–1 scale; entropy runs
    from 0 to ln T (a head spreading evenly over every key), when n_tokens is given."""
    if score not in SCORE_TITLES:
        raise ValueError(f"score={score!r}: choose one of {', '.join(SCORE_TITLES)}")
    L, H = int(scores["layer"].max()) + 1, int(scores["head"].max()) + 1
    z = np.full((L, H), np.nan)
    text = np.full((L, H), "", dtype=object)
    for row in scores.itertuples(index=False):
        l, h = int(row.layer), int(row.head)
        value = getattr(row, score)
        z[l, h] = value
        text[l, h] = f"{value:.2f}" + (f"<br>{SHORT.get(row.label, row.label)}" if row.label else "")
    layers, heads = [str(l) for l in range(L)], [str(h) for h in range(H)]
    if score == "entropy":
        top = (
            float(np.log(n_tokens)) if n_tokens and n_tokens > 1 else float(np.nanmax(z)) if np.isfinite(z).any() else 1
        )
        zmin, zmax, scale = 0.0, max(top, 1e-9), "Viridis_r"  # low entropy = focused: bright
    else:
        zmin, zmax, scale = 0.0, 1.0, "Viridis"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=heads,
            y=layers,
            zmin=zmin,
            zmax=zmax,
            colorscale=scale,
            text=text,
            texttemplate="%{text}" if L * H <= 400 else None,  # values in the cells while they stay legible
            hoverongaps=False,
            colorbar=dict(title=dict(text=colorbar_title(SCORE_TITLES[score], zmin, zmax))),
            hovertemplate="layer %{y}, head %{x}<br>" + score + " %{z:.3f}<extra></extra>",
        )
    )
    hs, ls = np.meshgrid(np.arange(H), np.arange(L))
    fig.add_trace(
        go.Scatter(
            x=[heads[h] for h in hs.ravel()],
            y=[layers[l] for l in ls.ravel()],
            mode="markers",
            marker=dict(size=14, opacity=0),
            customdata=np.stack([ls.ravel(), hs.ravel()], axis=1).tolist(),  # lists: a click hands them back as sent
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}<br>click to open it<extra></extra>",
            showlegend=False,
        )
    )
    if selected is not None:
        fig.add_trace(
            go.Scatter(
                x=[heads[selected[1]]],
                y=[layers[selected[0]]],
                mode="markers",
                marker=dict(symbol="square-open", size=34, color=ORANGE, line=dict(width=3)),
                hoverinfo="skip",
                showlegend=False,
                name="selected",
            )
        )
    style(
        fig,
        f"Every head's {score.replace('_', '-')} score (click a head to open it in Attention)",
        height=max(320, 46 * L + 170),
        subtitle="cell text: the score, then the head's label where one passed its threshold",
        hovermode="closest",
    )
    fig.update_xaxes(title_text="head", showgrid=False)
    fig.update_yaxes(title_text="layer", showgrid=False, autorange="reversed")
    category_axis(fig, "x", heads)
    category_axis(fig, "y", layers)
    return fig


def clicked_head(point: dict) -> tuple[int, int] | None:
    """(layer, head) of a click on head_score_grid's markers (x = head, y = layer, as category
    strings); None for anything else."""
    try:
        return int(point["y"]), int(point["x"])
    except (KeyError, TypeError, ValueError):
        return None
