"""Generation views: the alternatives a generated token beat, where it looked, and the probability of
every generated token. Pure: lists and arrays in, Plotly figures out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .style import BLUE, ORANGE, category_axis, html_text, mean_loss, percent, percent_ticks, plotly_text, style

GREY = "#9aa5b1"  # prompt tokens, set apart from the generated ones


def step_alternatives(tokens: Sequence[str], probs: Sequence[float], chosen: int, *, title: str) -> go.Figure:
    """Horizontal bars of the most likely next tokens at one step (probability before temperature),
    best on top; the bar at index `chosen` (the token that was picked) in orange, -1 if none is."""
    names = [f"#{i + 1} {plotly_text(t)}" for i, t in enumerate(tokens)]
    p = np.asarray(probs, dtype=np.float64)
    colours = [ORANGE if i == chosen else BLUE for i in range(len(p))]
    fig = go.Figure(
        go.Bar(
            x=p,
            y=names,
            orientation="h",
            marker_color=colours,
            text=[percent(x) + (" · chosen" if i == chosen else "") for i, x in enumerate(p)],
            textposition="auto",
            hovertemplate="%{y}<br>probability %{x:.4%}<extra></extra>",
        )
    )
    style(fig, f"{title} (orange = chosen)", height=max(260, 30 * len(p) + 110))
    hi = float(p.max()) if p.size else 1.0
    fig.update_xaxes(
        title_text="probability under the model (softmax of the logits, before temperature)",
        tickformat=percent_ticks(hi),
        range=[0, min(1.0, hi * 1.3) or 1.0],
        gridcolor="#eee",
    )
    fig.update_yaxes(title_text="token (rank)", autorange="reversed")
    category_axis(fig, "y", names)
    return fig


def step_attention(
    row: np.ndarray, labels: Sequence[str], prompt_len: int, *, title: str, first: int = 0, own: int | None = None
) -> go.Figure:
    """One generated token's attention row: a bar per key it may read (prompt in grey, generated
    tokens in blue, itself in orange). row: [t] weights, labels: the t keys' labels. first: the position
    of row[0] (a long row is drawn a window at a time); own: the token's own position (default the last)."""
    w = np.asarray(row, dtype=np.float64)
    t = len(w)
    own = first + t - 1 if own is None else own
    colours = [ORANGE if first + j == own else GREY if first + j < prompt_len else BLUE for j in range(t)]
    fig = go.Figure(
        go.Bar(
            x=list(labels[:t]),
            y=w,
            marker_color=colours,
            hovertemplate="key %{x}<br>weight %{y:.4f}<extra></extra>",
        )
    )
    style(fig, f"{title}<br><sup>grey = prompt, blue = generated, orange = the new token itself</sup>", height=360)
    fig.update_yaxes(title_text="attention weight (0–1)", rangemode="tozero", gridcolor="#eee")
    fig.update_xaxes(title_text="key position and token (what the new token reads)")
    category_axis(fig, "x", list(labels[:t]))
    return fig


def generated_probs(labels: Sequence[str], probs: Sequence[float], selected: int | None = None) -> go.Figure:
    """The probability of each generated token when it was chosen, one bar per step; the step on
    view (an index into probs) in orange."""
    p = np.asarray(probs, dtype=np.float64)
    colours = [ORANGE if i == selected else BLUE for i in range(len(p))]
    names = [f"{i + 1}: {s}" for i, s in enumerate(labels)]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=p,
            marker_color=colours,
            hovertemplate="step %{x}<br>probability %{y:.4%}<extra></extra>",
        )
    )
    surprise = -np.log(np.clip(p, 1e-30, 1))
    style(
        fig,
        f"Probability of each generated token when it was chosen (surprise −ln p: {mean_loss(surprise, '.2f')}; "
        "orange = the step on view)",
        height=340,
    )
    fig.update_yaxes(title_text="probability", range=[0, 1], tickformat=".0%", gridcolor="#eee")
    fig.update_xaxes(title_text="step: token")
    category_axis(fig, "x", names)
    return fig


def mark_row(fig: go.Figure, row: int, prompt_len: int) -> go.Figure:
    """Outline one query row of a per-token attention heatmap (category axes, queries as rows) and
    draw a line where the generated tokens start. Returns the same figure."""
    n = len(fig.data[0].y) if fig.data and fig.data[0].y is not None else 0
    fig.add_shape(
        type="rect",
        xref="x",
        yref="y",
        x0=-0.5,
        x1=n - 0.5,
        y0=row - 0.5,
        y1=row + 0.5,
        line=dict(color=ORANGE, width=2),
        fillcolor="rgba(0,0,0,0)",
    )
    if 0 < prompt_len < n:
        for axis in ("x", "y"):
            line = dict(x0=prompt_len - 0.5, x1=prompt_len - 0.5, y0=-0.5, y1=n - 0.5)
            if axis == "y":
                line = dict(x0=-0.5, x1=n - 0.5, y0=prompt_len - 0.5, y1=prompt_len - 0.5)
            fig.add_shape(type="line", xref="x", yref="y", line=dict(color="white", width=1, dash="dot"), **line)
    return fig


def generated_text_html(pieces: Sequence[str], prompt_len: int, on_view: int | None = None) -> str:
    """The prompt (grey) and the generated text in one monospace box, the token at index `on_view` in
    orange; every piece escaped (html_text), so the text never becomes markup. For st.markdown with
    unsafe_allow_html."""
    runs: list[tuple[str, list[str]]] = []  # (style, pieces): a run of one style is one span, so that a long
    for i, piece in enumerate(pieces):  # prompt costs its text, not a tag per token
        style = "color:#8a8a8a" if i < prompt_len else "color:inherit"
        if i == on_view:
            style = "background:#e4572e;color:white;border-radius:3px"
        if runs and runs[-1][0] == style and i - 1 != on_view:
            runs[-1][1].append(piece)
        else:
            runs.append((style, [piece]))
    spans = [f'<span style="{style}">{html_text("".join(run))}</span>' for style, run in runs]
    return (
        '<div style="white-space:pre-wrap;font-family:monospace;border:1px solid #ddd;border-radius:6px;'
        f'padding:10px;line-height:1.5">{"".join(spans)}</div>'
    )
