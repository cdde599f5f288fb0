"""Q / K / V views: per-head matrices, and one query's attention worked through step by step."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.blocks import block_labels, block_mean
from .style import BLUE, MASKED, ORANGE, category_axis, colorbar_title, diverging_range, style

MAX_ROWS = 256


def matrix_heatmap(
    m: np.ndarray, row_labels: Sequence[str], *, title: str, value_name: str, max_rows: int = MAX_ROWS
) -> go.Figure:
    """A [T, D] per-head matrix (q, k or v): tokens as rows, the D dimensions as columns, a diverging
    scale centred on 0 whose range is the largest |value|. Long prompts are averaged into row blocks."""
    m = np.asarray(m, dtype=np.float32)
    m, b = block_mean(m, max_rows, axis=0)
    if b > 1:
        row_labels = block_labels(row_labels, b)
        title += f" · rows are means of {b} positions"
    r = diverging_range(m)
    fig = go.Figure(
        go.Heatmap(
            z=m,
            y=list(row_labels),
            x=np.arange(m.shape[1]),
            colorscale="RdBu_r",
            zmin=-r,
            zmax=r,
            colorbar=dict(title=dict(text=colorbar_title(value_name, -r, r))),
            hovertemplate="token %{y}<br>dimension %{x}<br>" + value_name + " %{z:.4f}<extra></extra>",
        )
    )
    style(fig, title, height=min(900, max(300, 14 * m.shape[0] + 140)))
    fig.update_xaxes(title_text="dimension d of the head (0 … D−1)", showgrid=False)
    fig.update_yaxes(title_text="token", autorange="reversed", showgrid=False)
    category_axis(fig, "y", row_labels)
    return fig


def query_scores(
    keys: pd.DataFrame, labels: Sequence[str], *, query_label: str, head_dim: int, rule: str | None = None
) -> go.Figure:
    """The computation of one query's attention, one bar per key: the score q·k/√D (masked keys
    hatched grey: they take no part), then the softmax weight. The bars are the Trace's own values
    (analysis.query_computation's "score (Trace)" and "weight (Trace)"); q·k shows in the hover."""
    x = [labels[k] for k in keys["key"]]
    allowed = keys["allowed"].to_numpy()
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        # rule: the model's own formula (analysis.query_computation's), where it is not q·k / √D
        subplot_titles=(f"score = {rule or f'q·k / √{head_dim}'}", "weight = softmax over the allowed keys"),
    )
    score = keys["score (Trace)"].to_numpy()
    fig.add_trace(
        go.Bar(
            x=x,
            y=np.where(allowed, score, np.nan),
            name="allowed key",
            marker_color=BLUE,
            customdata=keys["q·k"].to_numpy(),
            hovertemplate="key %{x}<br>q·k %{customdata:.4f}<br>score %{y:.4f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    if (~allowed).any():
        fig.add_trace(
            go.Bar(
                x=x,
                y=np.where(allowed, np.nan, score),
                name="masked key (score set to −∞)",
                marker=dict(color=MASKED, pattern_shape="/"),
                hovertemplate="key %{x}: masked<br>score before the mask %{y:.4f}<extra></extra>",
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            x=x,
            y=keys["weight (Trace)"].to_numpy(),
            name="attention weight",
            marker_color=ORANGE,
            hovertemplate="key %{x}<br>weight %{y:.4f}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    style(
        fig,
        f"Query {query_label}: {rule or 'q·k / √D'} for every key, mask, softmax",
        height=560,
        barmode="overlay",
        legend=dict(orientation="h", y=-0.18),
        title_pad_b=34,  # clear of the first subplot's own title
    )
    fig.update_yaxes(title_text="score (unitless)", row=1, col=1, zeroline=True, gridcolor="#eee")
    fig.update_yaxes(
        title_text="weight (0–1)",
        range=[0, 1.05 * max(1e-9, float(np.nanmax(keys["weight (Trace)"])))],
        row=2,
        col=1,
        gridcolor="#eee",
    )
    fig.update_xaxes(title_text="key position and token", row=2, col=1)
    category_axis(fig, "x", x)
    return fig


def query_weighted_values(
    weighted_v: np.ndarray, output: np.ndarray, labels: Sequence[str], *, query_label: str, max_rows: int = MAX_ROWS
) -> go.Figure:
    """weight_j · v_j for every key j (rows) and their sum, the head's output for this query (last row)."""
    rows = np.asarray(weighted_v, dtype=np.float64)
    if rows.shape[0] > max_rows:  # keep the heaviest rows: a sum of tiny rows is what the rest add
        keep = np.sort(np.argsort(-np.abs(rows).sum(1), kind="stable")[:max_rows])
        rows, labels = rows[keep], [labels[k] for k in keep]
        note = f" · the {max_rows} largest rows of {weighted_v.shape[0]}"
    else:
        note = ""
    r = diverging_range(rows, output)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.85, 0.15], vertical_spacing=0.06)
    common = dict(colorscale="RdBu_r", zmin=-r, zmax=r, coloraxis=None)
    fig.add_trace(
        go.Heatmap(
            z=rows,
            y=list(labels),
            x=np.arange(rows.shape[1]),
            colorbar=dict(title=dict(text=colorbar_title("value", -r, r))),
            hovertemplate="key %{y}<br>dimension %{x}<br>weight·v %{z:.4f}<extra></extra>",
            **common,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=np.asarray(output)[None, :],
            y=["Σ = head output"],
            x=np.arange(rows.shape[1]),
            showscale=False,
            hovertemplate="head output<br>dimension %{x}<br>%{z:.4f}<extra></extra>",
            **common,
        ),
        row=2,
        col=1,
    )
    style(
        fig,
        f"Query {query_label}: weighted value rows and their sum{note}",
        height=min(900, max(320, 14 * rows.shape[0] + 200)),
    )
    fig.update_yaxes(autorange="reversed", showgrid=False)
    category_axis(fig, "y", labels, row=1, col=1)
    category_axis(fig, "y", ["Σ = head output"], row=2, col=1)
    fig.update_yaxes(title_text="key (weight · v)", row=1, col=1)
    fig.update_xaxes(title_text="dimension d of the head (0 … D−1)", row=2, col=1, showgrid=False)
    return fig
