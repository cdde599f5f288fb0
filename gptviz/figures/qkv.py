"""Q / K / V views: per-head matrices, and one query's attention worked through step by step."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..analysis.blocks import block_labels, block_mean
from .style import (
    BLUE,
    MASKED,
    ORANGE,
    category_spec,
    colorbar_title,
    colorscale,
    deep_update,
    diverging_range,
    from_spec,
    layout_spec,
    subplots_spec,
)

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
    heat = dict(
        type="heatmap",
        z=m,
        y=list(row_labels),
        x=np.arange(m.shape[1]),
        colorscale=colorscale("RdBu_r"),
        zmin=-r,
        zmax=r,
        colorbar=dict(title=dict(text=colorbar_title(value_name, -r, r))),
        hovertemplate="token %{y}<br>dimension %{x}<br>" + value_name + " %{z:.4f}<extra></extra>",
    )
    # this page's figures are built as dicts (figures.style.from_spec): on every view, 15-25 ms each
    layout = layout_spec(title, height=min(900, max(300, 14 * m.shape[0] + 140)))
    layout["xaxis"] = dict(title=dict(text="dimension d of the head (0 … D−1)"), showgrid=False)
    layout["yaxis"] = dict(title=dict(text="token"), autorange="reversed", showgrid=False, **category_spec(row_labels))
    return from_spec(dict(data=[heat], layout=layout))


def query_scores(
    keys: pd.DataFrame, labels: Sequence[str], *, query_label: str, head_dim: int, rule: str | None = None
) -> go.Figure:
    """The computation of one query's attention, one bar per key: the score q·k/√D (masked keys
    hatched grey: they take no part), then the softmax weight. The bars are the Trace's own values
    (analysis.query_computation's "score (Trace)" and "weight (Trace)"); q·k shows in the hover."""
    x = [labels[k] for k in keys["key"]]
    allowed = keys["allowed"].to_numpy()
    # rule: the model's own formula (analysis.query_computation's), where it is not q·k / √D
    titles = (f"score = {rule or f'q·k / √{head_dim}'}", "weight = softmax over the allowed keys")
    layout = subplots_spec(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12, subplot_titles=titles)
    score = keys["score (Trace)"].to_numpy()
    data = [
        dict(
            type="bar",
            x=x,
            y=np.where(allowed, score, np.nan),
            name="allowed key",
            marker=dict(color=BLUE),
            customdata=keys["q·k"].to_numpy(),
            hovertemplate="key %{x}<br>q·k %{customdata:.4f}<br>score %{y:.4f}<extra></extra>",
            xaxis="x",
            yaxis="y",
        )
    ]
    if (~allowed).any():
        data.append(
            dict(
                type="bar",
                x=x,
                y=np.where(allowed, np.nan, score),
                name="masked key (score set to −∞)",
                marker=dict(color=MASKED, pattern=dict(shape="/")),
                hovertemplate="key %{x}: masked<br>score before the mask %{y:.4f}<extra></extra>",
                xaxis="x",
                yaxis="y",
            )
        )
    data.append(
        dict(
            type="bar",
            x=x,
            y=keys["weight (Trace)"].to_numpy(),
            name="attention weight",
            marker=dict(color=ORANGE),
            hovertemplate="key %{x}<br>weight %{y:.4f}<extra></extra>",
            xaxis="x2",
            yaxis="y2",
        )
    )
    title = f"Query {query_label}: {rule or 'q·k / √D'} for every key, mask, softmax"
    deep_update(layout, layout_spec(title, height=560, barmode="overlay", legend=dict(orientation="h", y=-0.18)))
    layout["title"]["pad"]["b"] = 34  # clear of the first subplot's own title
    weight_top = 1.05 * max(1e-9, float(np.nanmax(keys["weight (Trace)"])))
    deep_update(layout["yaxis"], dict(title=dict(text="score (unitless)"), zeroline=True, gridcolor="#eee"))
    deep_update(layout["yaxis2"], dict(title=dict(text="weight (0–1)"), range=[0, weight_top], gridcolor="#eee"))
    deep_update(layout["xaxis2"], dict(title=dict(text="key position and token")))
    for axis in ("xaxis", "xaxis2"):
        layout[axis].update(category_spec(x))
    return from_spec(dict(data=data, layout=layout))


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
    layout = subplots_spec(rows=2, cols=1, shared_xaxes=True, row_heights=(0.85, 0.15), vertical_spacing=0.06)
    common = dict(type="heatmap", colorscale=colorscale("RdBu_r"), zmin=-r, zmax=r, x=np.arange(rows.shape[1]))
    data = [
        dict(
            z=rows,
            y=list(labels),
            colorbar=dict(title=dict(text=colorbar_title("value", -r, r))),
            hovertemplate="key %{y}<br>dimension %{x}<br>weight·v %{z:.4f}<extra></extra>",
            xaxis="x",
            yaxis="y",
            **common,
        ),
        dict(
            z=np.asarray(output)[None, :],
            y=["Σ = head output"],
            showscale=False,
            hovertemplate="head output<br>dimension %{x}<br>%{z:.4f}<extra></extra>",
            xaxis="x2",
            yaxis="y2",
            **common,
        ),
    ]
    title = f"Query {query_label}: weighted value rows and their sum{note}"
    deep_update(layout, layout_spec(title, height=min(900, max(320, 14 * rows.shape[0] + 200))))
    deep_update(layout["yaxis"], dict(autorange="reversed", showgrid=False, **category_spec(labels)))
    deep_update(layout["yaxis"], dict(title=dict(text="key (weight · v)")))
    deep_update(layout["yaxis2"], dict(autorange="reversed", showgrid=False, **category_spec(["Σ = head output"])))
    deep_update(layout["xaxis2"], dict(title=dict(text="dimension d of the head (0 … D−1)"), showgrid=False))
    return from_spec(dict(data=data, layout=layout))
