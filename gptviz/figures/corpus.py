"""Figures of a corpus scan: window losses, each head's score over windows, a neuron's contexts."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..tokenizers import display_token
from .style import BLUE, INK, ORANGE, plotly_text, style
from .tokens import token_chips_html


def window_loss_histogram(losses: np.ndarray, marked: float | None = None) -> go.Figure:
    """How the windows' mean losses spread; the chosen window's loss as a line."""
    fig = go.Figure(go.Histogram(x=np.asarray(losses, dtype=float), nbinsx=60, marker_color=BLUE, name="windows"))
    if marked is not None and np.isfinite(marked):
        fig.add_vline(x=float(marked), line_color=ORANGE, line_width=2, annotation_text="chosen window")
    style(fig, "Windows by loss", height=300, subtitle="mean next-token loss over each window, nats")
    fig.update_xaxes(title_text="window loss (nats)")
    fig.update_yaxes(title_text="windows")
    return fig


def head_label(layer: int, head: int) -> str:
    return f"L{int(layer)} H{int(head)}"


def head_score_distribution(per_window: pd.DataFrame, score: str) -> go.Figure:
    """One box per head of a score over the windows: the box spans the quartiles (the line is the
    median), the dashed line is the mean; no whiskers (the extremes of hundreds of windows make every
    head look alike). Heads are ordered by their mean, highest first. per_window: layer, head, value."""
    g = per_window.groupby(["layer", "head"])["value"]
    stats = g.quantile([0.25, 0.5, 0.75]).unstack()
    stats["mean"] = g.mean()
    stats = stats.sort_values("mean", ascending=False)
    names = [head_label(l, h) for l, h in stats.index]
    q1, med, q3 = (stats[q].to_numpy(dtype=float) for q in (0.25, 0.5, 0.75))
    fig = go.Figure(
        go.Box(
            x=names,
            q1=q1,
            median=med,
            q3=q3,
            lowerfence=q1,
            upperfence=q3,
            mean=stats["mean"].to_numpy(dtype=float),
            boxmean=True,
            marker_color=BLUE,
            name="windows",
            showlegend=False,
        )
    )
    style(
        fig,
        f"{score.replace('_', ' ')} per head over the windows, highest mean first",
        height=420,
        subtitle="box: the windows' quartiles, line: median, dashed: mean over windows",
    )
    fig.update_xaxes(title_text="layer, head", type="category", categoryorder="array", categoryarray=names)
    fig.update_yaxes(title_text=score.replace("_", " "))
    return fig


def heads_scatter(metrics: pd.DataFrame, x: str, y: str, chosen: tuple[int, int] | None = None) -> go.Figure:
    """Every head as a labelled point by two of its metrics (columns of metrics, with layer, head)."""
    labels = [head_label(l, h) for l, h in zip(metrics["layer"], metrics["head"])]
    colors = [ORANGE if chosen == (int(l), int(h)) else BLUE for l, h in zip(metrics["layer"], metrics["head"])]
    fig = go.Figure(
        go.Scatter(
            x=metrics[x].to_numpy(dtype=float),
            y=metrics[y].to_numpy(dtype=float),
            mode="markers+text",
            text=labels,
            textposition="top center",
            marker=dict(size=10, color=colors, line=dict(color=INK, width=1)),
            hovertemplate="%{text}<br>" + f"{x}: " + "%{x:.4f}<br>" + f"{y}: " + "%{y:.4f}<extra></extra>",
        )
    )
    style(fig, "Every head across the corpus", height=460, subtitle="one point per head; orange: the chosen head")
    fig.update_xaxes(title_text=x.replace("_", " "))
    fig.update_yaxes(title_text=y.replace("_", " "))
    return fig


def qk_distance_figure(histogram: dict) -> go.Figure:
    """HeadVis's q-k distance histogram: attention mass kept in each |q - k| bin (log-spaced edges)."""
    edges, values = histogram["bin_edges"], histogram["bin_values"]
    names = [f"{a}" if b - a == 1 else f"{a}–{b - 1}" for a, b in zip(edges[:-1], edges[1:])]
    fig = go.Figure(go.Bar(x=names, y=values, marker_color=BLUE))
    style(fig, "How far back it looks", height=300, subtitle="attention mass by query-key distance, sampled windows")
    fig.update_xaxes(title_text="|query − key| (tokens)", type="category")
    fig.update_yaxes(title_text="attention mass")
    return fig


def top_tokens_figure(rows: list[dict], side: str, top: int = 15) -> go.Figure:
    """The tokens holding the most attention as queries (side="query") or keys, largest on top."""
    rows = rows[:top][::-1]
    fig = go.Figure(
        go.Bar(
            x=[r["weight"] for r in rows],
            y=[plotly_text(display_token(r["token"])) for r in rows],
            orientation="h",
            marker_color=BLUE if side == "query" else ORANGE,
        )
    )
    style(fig, f"Top {side} tokens", height=360, subtitle=f"attention mass on each token as the {side}")
    fig.update_yaxes(type="category")
    fig.update_xaxes(title_text="attention mass")
    return fig


def window_chips_html(
    labels: Sequence[str], ids: Sequence[int] | np.ndarray, losses: Sequence[float] | np.ndarray
) -> str:
    """A window's tokens coloured by loss, the loss printed on each chip; position 0, which nothing
    predicts, drawn as "not predicted" (a grey chip with "—"), never as a NaN the model computed."""
    values = [None] + [float(x) for x in list(losses)[1:]]
    return token_chips_html(labels, ids, values, unit="nats", show_values=True)


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
    # overflow-wrap: a context without spaces (code, symbols) still wraps within its column
    css = "font-family:monospace;white-space:pre-wrap;overflow-wrap:anywhere"
    return f'<span style="{css}">' + "".join(parts) + "</span>"


def ranked_context_html(rank: int, value: float, window: int, labels: Sequence[str], at: int) -> str:
    """One of a neuron's strongest contexts: its rank, value and window, then the context (context_html)."""
    return f"<b>#{int(rank)}</b> · {float(value):.3f} · window {int(window)} · " + context_html(labels, at, value)
