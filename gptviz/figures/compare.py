"""Figures of a comparison (two Traces, A and B) and of a timeline (one run's checkpoints by step).

Differences are A − B on a diverging scale centred on 0 (zmin = −r, zmax = r: Plotly ignores zmid
once both are set), red where A is larger, blue where B is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..analysis.blocks import block_labels, block_mean
from ..analysis.map_blocks import MapBlocks
from .attention import MAX_CELLS, token_labels
from .style import (
    BLUE,
    INK,
    LOSS_AXIS,
    LOSS_UNIT,
    MASKED,
    ORANGE,
    category_spec,
    colorbar_title,
    colorscale,
    diverging_range,
    from_spec,
    layout_spec,
    plotly_text,
    style,
    token_matrix_axes,
)

__all__ = [
    "attention_difference_heatmap",
    "head_change_heatmap",
    "kl_bars",
    "loss_pair",
    "timeline_losses",
    "head_score_curves",
    "token_labels",
]


# The four figures of the Compare page are built as dicts (style.from_spec): the page draws them on
# every view, and Plotly's objects took 10-25 ms each.
def attention_difference_heatmap(
    diff: np.ndarray | MapBlocks,
    labels: Sequence[str],
    *,
    title: str,
    mask: np.ndarray | None = None,
    height: int = 560,
    max_cells: int = MAX_CELLS,
) -> go.Figure:
    """One head's A − B attention [T, T] (queries rows, keys columns); masked cells stay grey. A side
    longer than max_cells is drawn as b × b block means of the cells the mask allows (a long prompt's
    T² cells are more than a browser draws). diff may be those blocks already (a MapBlocks of one head,
    analysis.map_blocks.difference_blocks: made a band of rows at a time, no [T, T] map)."""
    if isinstance(diff, MapBlocks):  # the blocks know their mask: no [T, T] one is needed
        z, b, masked = diff.means[0], diff.b, bool(diff.masked.any())
    else:
        z = np.array(diff, dtype=np.float64)
        if mask is not None:
            z[~np.asarray(mask, dtype=bool)] = np.nan
        z, b = block_mean(z, max_cells)
        masked = mask is not None
    if b > 1:
        labels = block_labels(labels, b)
        title += f" · each cell is the mean of a {b}×{b} block"
    r = diverging_range(z)
    heat = dict(
        type="heatmap",
        z=z,
        x=list(labels),
        y=list(labels),
        zmin=-r,
        zmax=r,
        colorscale=colorscale("RdBu_r"),
        hoverongaps=False,
        colorbar=dict(title=dict(text=colorbar_title("A − B", -r, r))),
        hovertemplate="query %{y}<br>key %{x}<br>A − B %{z:+.4f}<extra></extra>",
    )
    layout = layout_spec(
        title,
        height=height,
        subtitle="red: A attends more · blue: B attends more · grey: masked",
        plot_bgcolor=MASKED if masked else "white",
        margin=dict(t=110),
    )
    layout.update(token_matrix_axes(labels, "key position and token", "query position and token"))
    return from_spec(dict(data=[heat], layout=layout))


def head_change_heatmap(change: np.ndarray, *, title: str, what: str = "change") -> go.Figure:
    """A [L, H] grid of a per-head change (B − A), centred on 0."""
    z = np.asarray(change, dtype=np.float64)
    r = diverging_range(z)
    L, H = z.shape
    heat = dict(
        type="heatmap",
        z=z,
        x=[f"head {h}" for h in range(H)],
        y=[f"layer {l}" for l in range(L)],
        zmin=-r,
        zmax=r,
        colorscale=colorscale("RdBu_r"),
        texttemplate="%{z:+.3f}",
        colorbar=dict(title=dict(text=colorbar_title(what, -r, r, ".2g"))),
        hovertemplate="%{y}, %{x}<br>" + what + " %{z:+.4f}<extra></extra>",
    )
    layout = layout_spec(
        title,
        height=max(260, 120 + 60 * L),
        subtitle="red: higher in B · blue: higher in A",
        margin=dict(t=100, l=90),
    )
    layout["yaxis"] = dict(autorange="reversed", automargin=True)  # "layer 0" was cut at the left edge
    return from_spec(dict(data=[heat], layout=layout))


def kl_bars(kl: Sequence[float], labels: Sequence[str], *, title: str) -> go.Figure:
    """KL(A ‖ B) of the next-token distributions at each position, in nats."""
    bars = dict(
        type="bar",
        x=list(labels),
        y=list(kl),
        marker=dict(color=BLUE),
        hovertemplate="after %{x}<br>KL %{y:.4f} nats<extra></extra>",
    )
    subtitle = "0 where A and B expect the same next-token distribution"
    layout = layout_spec(title, height=380, subtitle=subtitle, margin=dict(t=100))
    layout["yaxis"] = dict(title=dict(text="KL(A ‖ B), nats"), rangemode="tozero")
    layout["xaxis"] = dict(title=dict(text="position (the prediction made after it)"), **category_spec(labels))
    return from_spec(dict(data=[bars], layout=layout))


def loss_pair(df: pd.DataFrame, labels: Sequence[str], *, title: str, names: tuple[str, str] = ("A", "B")) -> go.Figure:
    """Per-token loss of both Traces (df from compare.loss_comparison; labels name its positions)."""
    data = [
        dict(
            type="bar",
            x=list(labels),
            y=df[col].to_numpy(),
            name=name,
            marker=dict(color=colour),
            hovertemplate=plotly_text(name) + ": %{x}<br>loss %{y:.3f} " + LOSS_UNIT + "<extra></extra>",
        )
        for col, name, colour in (("loss_a", names[0], BLUE), ("loss_b", names[1], ORANGE))
    ]
    # which colour is which, in the subtitle: a legend above the plot ran into the title
    colours = f"blue: {plotly_text(names[0])} · orange: {plotly_text(names[1])}"
    layout = layout_spec(title, height=400, subtitle=colours, barmode="group", margin=dict(t=100), showlegend=False)
    layout["yaxis"] = dict(title=dict(text=LOSS_AXIS), rangemode="tozero")
    layout["xaxis"] = dict(title=dict(text="predicted token"), **category_spec(labels))
    return from_spec(dict(data=data, layout=layout))


def timeline_losses(steps: pd.DataFrame, *, title: str, marked: int | None = None) -> go.Figure:
    """Train, validation (from the cards) and the prompt's loss against the training step."""
    fig = go.Figure()
    for col, name, colour, dash in (
        ("train_loss", "train (card)", BLUE, "dot"),
        ("val_loss", "validation (card)", BLUE, "solid"),
        ("prompt_loss", "this prompt", ORANGE, "solid"),
    ):
        y = steps[col].to_numpy(dtype=np.float64)
        if np.isfinite(y).any():
            fig.add_trace(
                go.Scatter(
                    x=steps["step"],
                    y=y,
                    name=name,
                    mode="lines+markers",
                    line=dict(color=colour, dash=dash),
                    hovertemplate=name + "<br>step %{x}<br>loss %{y:.4f}<extra></extra>",
                )
            )
    if marked is not None:
        fig.add_vline(x=marked, line=dict(color=INK, dash="dash", width=1))
    style(
        fig,
        title,
        height=420,
        subtitle=f"{LOSS_UNIT} per token; dashed: the step on view",
        margin=dict(t=110),
        legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
    )
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(title_text=f"loss ({LOSS_UNIT})")
    return fig


def head_score_curves(
    heads: pd.DataFrame, score: str, *, title: str, marked: int | None = None, chosen: tuple[int, int] | None = None
) -> go.Figure:
    """One line per (layer, head): its `score` against the training step (heads from timeline)."""
    fig = go.Figure()
    for (layer, head), g in heads.groupby(["layer", "head"], sort=True):
        is_chosen = chosen == (layer, head)
        fig.add_trace(
            go.Scatter(
                x=g["step"],
                y=g[score],
                name=f"L{layer} H{head}",
                mode="lines+markers",
                line=dict(width=4 if is_chosen else 1.8),
                hovertemplate=f"layer {layer} head {head}<br>step %{{x}}<br>{score} %{{y:.3f}}<extra></extra>",
            )
        )
    if marked is not None:
        fig.add_vline(x=marked, line=dict(color=INK, dash="dash", width=1))
    fig.add_hline(y=0.4, line=dict(color="#999999", dash="dot", width=1))
    style(fig, title, height=420, subtitle="dotted: 0.4, where a head is labelled with this kind", margin=dict(t=110))
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(title_text=score.replace("_", " ") + " score")
    return fig
