"""Residual-stream views: a statistic along the depth of the network, per position, and what each
attention and MLP sub-layer adds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..analysis.blocks import block_labels, block_mean
from .style import BLUE, INK, ORANGE, category_axis, colorbar_title, diverging_range, style

STAT_NAMES = {"norm": "L2 norm ‖x‖ over C", "mean": "mean over C", "std": "standard deviation over C"}
# The y axis says the statistic short: the title names it in full, and a long axis title runs up into
# the chart's title on a 720 px high screen.
STAT_SHORT = {"norm": "‖x‖", "mean": "mean", "std": "std"}


def residual_lines(
    sites: Sequence[str], grid: np.ndarray, stat: str, *, position: int, position_label: str
) -> go.Figure:
    """grid [sites, T]: the statistic along the depth of the network. Lines for the mean over
    positions and for the chosen position, with the band from the smallest to the largest position."""
    sites = list(sites)
    lo, hi, mean = grid.min(1), grid.max(1), grid.mean(1)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=sites, y=hi, mode="lines", line=dict(width=0), showlegend=False, hoverinfo="skip"))
    fig.add_trace(
        go.Scatter(
            x=sites,
            y=lo,
            mode="lines",
            line=dict(width=0),
            fill="tonexty",
            fillcolor="rgba(31,111,180,0.15)",
            name="range over positions (min … max)",
            hovertemplate="%{x}: min %{y:.4g}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=sites,
            y=mean,
            mode="lines+markers",
            name="mean over positions",
            line=dict(color=BLUE, width=3),
            hovertemplate="%{x}: mean %{y:.4g}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=sites,
            y=grid[:, position],
            mode="lines+markers",
            name=f"position {position_label}",
            line=dict(color=ORANGE, width=2, dash="dash"),
            hovertemplate="%{x}: %{y:.4g}<extra></extra>",
        )
    )
    style(fig, f"Residual stream {STAT_NAMES[stat]}, layer by layer", height=420, legend=dict(orientation="h", y=-0.3))
    fig.update_xaxes(title_text="point in the residual stream (layer.sub-layer)")
    category_axis(fig, "x", sites)
    fig.update_yaxes(title_text=f"{STAT_SHORT[stat]} (activation units)", gridcolor="#eee")
    return fig


def residual_heatmap(
    sites: Sequence[str], grid: np.ndarray, labels: Sequence[str], stat: str, *, max_cells: int = 256
) -> go.Figure:
    """grid [sites, T] as a heatmap: depth down the rows, positions along the columns."""
    z, b = block_mean(np.asarray(grid, dtype=np.float32), max_cells, axis=1)
    cols = block_labels(labels, b)
    diverging = stat == "mean"
    finite = z[np.isfinite(z)]
    if diverging:  # centred on 0: symmetric, since Plotly ignores zmid once zmin and zmax are set
        r = diverging_range(z)
        lo, hi = -r, r
    else:
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=cols,
            y=list(sites),
            colorscale="RdBu_r" if diverging else "Viridis",
            zmin=lo,
            zmax=hi,
            colorbar=dict(title=dict(text=colorbar_title(stat, lo, hi))),
            hovertemplate="%{y}<br>token %{x}<br>" + stat + " %{z:.4g}<extra></extra>",
        )
    )
    title = f"Residual stream {STAT_NAMES[stat]} at every position"
    if b > 1:
        title += f" · columns are means of {b} positions"
    style(fig, title, height=max(300, 26 * len(sites) + 160))
    fig.update_xaxes(title_text="token position and text", showgrid=False)
    fig.update_yaxes(title_text="layer.sub-layer", autorange="reversed", showgrid=False)
    category_axis(fig, "x", cols)
    category_axis(fig, "y", sites)
    return fig


def contributions_bars(contrib: pd.DataFrame) -> go.Figure:
    """What each sub-layer writes into the residual stream (‖output‖, mean over positions), next to
    the norm of the stream it reads (sublayer_contributions)."""
    fig = go.Figure()
    for sub, color in (("attention", BLUE), ("MLP", ORANGE)):
        d = contrib[contrib["sublayer"] == sub]
        fig.add_trace(
            go.Bar(
                x=d["layer"].astype(str),
                y=d["added_norm"],
                name=f"{sub} adds ‖Δ‖",
                marker_color=color,
                customdata=d["added_ratio"],
                hovertemplate="layer %{x}<br>‖Δ‖ %{y:.4g}<br>= %{customdata:.2f} × the stream it reads<extra></extra>",
            )
        )
    attn = contrib[contrib["sublayer"] == "attention"]
    fig.add_trace(
        go.Scatter(
            x=attn["layer"].astype(str),
            y=attn["input_norm"],
            name="‖stream‖ entering the block",
            mode="lines+markers",
            line=dict(color=INK, dash="dot"),
            hovertemplate="layer %{x}<br>‖x‖ %{y:.4g}<extra></extra>",
        )
    )
    style(
        fig,
        "What each sub-layer adds to the residual stream (mean over positions)",
        height=400,
        barmode="group",
        legend=dict(orientation="h", y=-0.25),
    )
    fig.update_xaxes(title_text="layer")
    category_axis(fig, "x", [str(l) for l in sorted(contrib["layer"].unique())])
    fig.update_yaxes(title_text="L2 norm (activation units)", rangemode="tozero", gridcolor="#eee")
    return fig
