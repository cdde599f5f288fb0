"""Figures of two scans compared (gptviz.scanning.compare): each document's loss in both, and every
head's score in both. Scan A is blue, scan B orange, on every figure."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .style import BLUE, INK, LOSS_AXIS, ORANGE, number, plotly_text, style


def document_loss_figure(docs: pd.DataFrame, top: int = 30) -> go.Figure:
    """A dumbbell per document: its loss in A and in B joined by a line; the `top` documents whose loss
    changed most (docs as document_losses orders them), the largest change on top."""
    shown = docs.head(top).iloc[::-1]
    names = [plotly_text(f"{d}: {name}"[:48]) for d, name in zip(shown["doc"], shown["document"])]
    fig = go.Figure()
    for (_, r), name in zip(shown.iterrows(), names):
        fig.add_trace(
            go.Scatter(
                x=[r["loss_a"], r["loss_b"]],
                y=[name, name],
                mode="lines",
                line=dict(color="#b8b8b8", width=3),
                hoverinfo="skip",
                showlegend=False,
            )
        )
    for col, color, label in (("loss_a", BLUE, "scan A"), ("loss_b", ORANGE, "scan B")):
        fig.add_trace(
            go.Scatter(
                x=shown[col].to_numpy(dtype=float),
                y=names,
                mode="markers",
                marker=dict(size=11, color=color, line=dict(color=INK, width=1)),
                name=label,
                hovertemplate="%{y}<br>" + label + ": %{x:.4f} nats<extra></extra>",
            )
        )
    more = f" (the {top} that changed most of {len(docs):,})" if len(docs) > top else ""
    style(
        fig,
        f"Loss per document, scan A against scan B{more}",
        height=max(300, 90 + 26 * len(shown)),
        subtitle="mean over each document's predicted tokens; the line joins A to B",
    )
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=names)
    fig.update_xaxes(title_text=LOSS_AXIS)
    return fig


def head_change_figure(changes: pd.DataFrame, score: str) -> go.Figure:
    """Every head as a labelled point: its score in A (x) against B (y); above the diagonal it rose."""
    a, b = changes["a"].to_numpy(dtype=float), changes["b"].to_numpy(dtype=float)
    lo, hi = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
    pad = (hi - lo) * 0.05 or 0.05
    name = score.replace("_", " ")
    fig = go.Figure(
        go.Scatter(
            x=[lo - pad, hi + pad], y=[lo - pad, hi + pad], mode="lines", line=dict(color=INK, dash="dot", width=1),
            hoverinfo="skip", showlegend=False,
        )
    )  # fmt: skip
    # orange and named: the (at most) five that changed most, of those that moved a tenth of the most
    first = changes.head(5)
    top = set(first.loc[first["change"].abs() >= 0.1 * first["change"].abs().max(), "name"])
    fig.add_trace(
        go.Scatter(
            x=a,
            y=b,
            mode="markers+text",
            text=[n if n in top else "" for n in changes["name"]],  # the rest crowd where nothing moved
            customdata=list(zip(changes["name"], [number(c, "+.4f") for c in changes["change"]])),
            textposition="top center",
            marker=dict(size=10, color=[ORANGE if n in top else BLUE for n in changes["name"]],
                        line=dict(color=INK, width=1)),
            hovertemplate="%{customdata[0]}<br>A: %{x:.4f}<br>B: %{y:.4f}<br>change: %{customdata[1]}<extra></extra>",
            showlegend=False,
        )
    )  # fmt: skip
    style(
        fig, f"{name} per head: scan A against scan B", height=460,
        subtitle="one point per head; above the dotted diagonal it rose; orange, named: those that changed most",
    )  # fmt: skip
    fig.update_xaxes(title_text=f"{name} in scan A")
    fig.update_yaxes(title_text=f"{name} in scan B")
    return fig
