"""The logit lens: sites × positions with the top token and its probability in each cell, and one
token's rank and probability through depth. Token text is HTML-escaped: Plotly reads tags in text."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .style import BLUE, ORANGE, category_axis, colorbar_title, nan_overlay, percent, style

LENS_TITLE = "the final norm and LM head applied to an intermediate residual (a logit lens)"
MAX_TEXT_COLUMNS = 48  # positions shown with their token text; the page picks a window this wide


def site_label(site: str) -> str:
    """'blocks.3.resid_mid' -> 'L3 mid' for a compact axis; embed stays."""
    if site == "embed":
        return "embed"
    _, layer, kind = site.split(".")
    return f"L{layer} {kind.removeprefix('resid_')}"


def lens_grid(
    sites: Sequence[str],
    position_labels: Sequence[str],
    top_tokens: np.ndarray,
    top_probs: np.ndarray,
    *,
    first_position: int = 0,
    n_tokens: int | None = None,
) -> go.Figure:
    """Sites as rows (embed at the bottom, the model's own output at the top), positions as columns.
    top_tokens: display strings [S, W, k] (k >= 1); top_probs: [S, W, k]. Each cell is coloured by
    the top token's probability and shows that token; the hover lists all k. first_position and
    n_tokens put the window's place in the prompt into the title."""
    top_tokens = np.asarray(top_tokens, dtype=object)
    top_probs = np.asarray(top_probs, dtype=np.float64)
    S, W, k = top_probs.shape
    ys = [site_label(s) for s in sites]
    xs = [html.escape(str(p)) for p in position_labels]
    esc = np.vectorize(lambda s: html.escape(str(s)), otypes=[object])(top_tokens) if top_tokens.size else top_tokens
    # where a site's logits are NaN there is no top token (the argmax of NaN is just id 0): say NaN, in red
    nan = ~np.isfinite(top_probs[:, :, 0])
    if nan.any():
        esc = esc.copy()
        esc[nan] = "NaN"
    hover = np.empty((S, W), dtype=object)
    for s in range(S):
        for w in range(W):
            hover[s, w] = (
                "NaN: the logits here are NaN"
                if nan[s, w]
                else "<br>".join(f"{esc[s, w, j]}  {percent(top_probs[s, w, j])}" for j in range(k))
            )
    fig = go.Figure(
        go.Heatmap(
            z=top_probs[:, :, 0],
            x=xs,
            y=ys,
            zmin=0,
            zmax=1,
            colorscale="Blues",
            text=esc[:, :, 0] if W <= MAX_TEXT_COLUMNS else None,
            texttemplate="%{text}" if W <= MAX_TEXT_COLUMNS else None,
            customdata=hover,
            hovertemplate="site %{y}<br>position %{x}<br>top tokens:<br>%{customdata}<extra></extra>",
            colorbar=dict(title=dict(text=colorbar_title("probability of the top token", 0, 1))),
        )
    )
    if nan.any():
        fig.add_trace(
            nan_overlay(
                nan,
                xs,
                ys,
                text=esc[:, :, 0],
                texttemplate="%{text}",
                hovertemplate="site %{y}<br>position %{x}<br>NaN: the logits here are NaN<extra></extra>",
            )
        )
    T = n_tokens if n_tokens is not None else W
    where = f"positions {first_position}–{first_position + W - 1} of {T}" if W < T else f"all {T} positions"
    style(
        fig,
        f"Logit lens: {LENS_TITLE}",
        height=max(360, 26 * S + 200),
        subtitle=f"{where}; cell = the most likely next token if the model stopped at that site, coloured by its "
        "probability; each site normalised with its own statistics",
        margin=dict(t=100, l=90),
    )
    fig.update_xaxes(title_text="position and token (the prediction is for the token after it)", showgrid=False)
    fig.update_yaxes(title_text="site (depth ↑)", showgrid=False)
    category_axis(fig, "x", xs)
    category_axis(fig, "y", ys)
    return fig


def target_depth(
    sites: Sequence[str], rank: np.ndarray, prob: np.ndarray, *, token: str, position_label: str
) -> go.Figure:
    """One token's rank (1 = the most likely, log scale) and probability at each site, at one position."""
    ys = [site_label(s) for s in sites]
    tok, pos = html.escape(str(token)), html.escape(str(position_label))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    # a site whose logits are NaN ranks nothing: a gap in both lines, not "rank 1"
    rank1 = np.where(np.isfinite(np.asarray(prob, dtype=np.float64)), np.asarray(rank, dtype=np.float64) + 1, np.nan)
    fig.add_trace(
        go.Scatter(
            x=ys,
            y=rank1,
            mode="lines+markers",
            line_color=ORANGE,
            name="rank",
            hovertemplate="%{x}<br>rank %{y} (1 = top)<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=ys,
            y=np.asarray(prob, dtype=np.float64),
            mode="lines+markers",
            line_color=BLUE,
            name="probability",
            hovertemplate="%{x}<br>probability %{y:.2%}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    style(
        fig,
        f"Where “{tok}” ranks through depth, after {pos}",
        height=460,
        subtitle="the final norm and LM head applied at each site; rank 1 = the most likely token",
        showlegend=False,
    )
    fig.update_yaxes(title_text="rank (log)", type="log", autorange="reversed", row=1, col=1)
    fig.update_yaxes(title_text="probability", range=[0, 1], tickformat=".0%", row=2, col=1)
    fig.update_xaxes(title_text="site (embed → output)", row=2, col=1)
    category_axis(fig, "x", ys, row=1, col=1)
    category_axis(fig, "x", ys, row=2, col=1)
    return fig
