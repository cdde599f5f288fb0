"""Attention views: one head's heatmap, a layer's heads as small multiples, every layer × head as
one clickable grid, and the bertviz-style line view of one query."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.blocks import block_labels, block_reduce
from .style import BLUE, MASKED, style

MAX_CELLS = 256  # a heatmap side longer than this is averaged into blocks
GRID_TILE = 32  # side of one head's tile in the layer × head grid
GRID_GAP = 2  # NaN cells between tiles

COLORBAR_TITLE = {
    "weights": "attention weight<br>(probability, 0–1)",
    "masked scores": "score q·k/√D<br>(unitless)",
    "scores": "score q·k/√D<br>(unitless)",
}


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Axis labels 'position token' for display strings: unique even when tokens repeat, so a
    categorical axis never merges two positions."""
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def _range(z: np.ndarray, kind: str, skip_first_key: bool) -> tuple[float, float, str]:
    """(zmin, zmax, note) of the colour scale. The note says when values fall outside it."""
    finite = z[np.isfinite(z)]
    if finite.size == 0:
        return 0.0, 1.0, ""
    body = z[:, 1:] if skip_first_key and z.shape[1] > 1 else z
    body = body[np.isfinite(body)]
    hi = float(body.max()) if body.size else float(finite.max())
    note = ""
    if skip_first_key and float(finite.max()) > hi:
        note = f"key 0 left out of the scale: its cells up to {finite.max():.3g} show as the top colour"
    if kind == "weights":
        return 0.0, max(hi, 1e-9), note
    lo = float(body.min()) if body.size else float(finite.min())
    return lo, hi, note


def attention_heatmap(
    matrix: np.ndarray,
    labels: Sequence[str],
    *,
    kind: str = "weights",
    title: str = "Attention",
    skip_first_key: bool = False,
    max_cells: int = MAX_CELLS,
    height: int = 680,
) -> go.Figure:
    """One head's [T, T] matrix, queries as rows and keys as columns. NaN cells (masked: the key
    comes after the query) are not drawn: the grey background shows through and the caption says so.

    kind: "weights", "masked scores" or "scores" (sets the colour scale and its title).
    skip_first_key: scale the colours without key 0, which often takes most of the weight (a sink).
    A side longer than max_cells is averaged into blocks (NaN-aware) and the title says so."""
    z, b = block_reduce(np.asarray(matrix, dtype=np.float32), max_cells)
    ticks = block_labels(labels, b)
    zmin, zmax, note = _range(z, kind, skip_first_key)
    if b > 1:
        title += f" · each cell is the mean of a {b}×{b} block (T = {len(labels)})"
    diverging = kind != "weights"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=ticks,
            y=ticks,
            zmin=zmin,
            zmax=zmax,
            zmid=0.0 if diverging and zmin < 0 < zmax else None,
            colorscale="RdBu_r" if diverging else "Viridis",
            hoverongaps=False,
            colorbar=dict(title=dict(text=COLORBAR_TITLE[kind] + f"<br>{zmin:.3g} … {zmax:.3g}")),
            hovertemplate="query %{y}<br>key %{x}<br>" + kind + " %{z:.4f}<extra></extra>",
        )
    )
    masked = np.isnan(z).any()
    caption = "grey = masked: the key comes after the query, so it is not read" if masked else "no masked cells"
    if note:
        caption += f"; {note}"
    style(fig, title, height=height, subtitle=caption, plot_bgcolor=MASKED if masked else "white", margin=dict(t=90))
    fig.update_xaxes(
        title_text="key position and token (what is read)", side="bottom", showgrid=False, constrain="domain"
    )
    fig.update_yaxes(
        title_text="query position and token (who reads)",
        autorange="reversed",
        showgrid=False,
        scaleanchor="x",
        constrain="domain",
    )
    return fig


def head_grid(matrices: np.ndarray, labels: Sequence[str], *, layer: int, max_cells: int = 64) -> go.Figure:
    """Every head of one layer as small multiples sharing one colour scale: weights [H, T, T] with
    masked cells as NaN (analysis.layer_weights), drawn as grey gaps."""
    H = matrices.shape[0]
    cols = min(H, 4)
    rows = math.ceil(H / cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[f"head {h}" for h in range(H)],
        horizontal_spacing=0.04,
        vertical_spacing=0.08,
    )
    b = 1
    for h in range(H):
        z, b = block_reduce(matrices[h], max_cells)
        ticks = block_labels(labels, b)
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=ticks,
                y=ticks,
                coloraxis="coloraxis",
                hoverongaps=False,
                hovertemplate=f"head {h}<br>query %{{y}}<br>key %{{x}}<br>weight %{{z:.4f}}<extra></extra>",
            ),
            row=h // cols + 1,
            col=h % cols + 1,
        )
    title = f"Layer {layer}: every head's attention weights"
    if b > 1:
        title += f" · cells are means of {b}×{b} blocks"
    style(fig, title, height=260 * rows + 80, plot_bgcolor=MASKED)
    fig.update_layout(
        coloraxis=dict(colorscale="Viridis", cmin=0, cmax=1, colorbar=dict(title=dict(text="weight<br>0 … 1")))
    )
    fig.update_xaxes(showticklabels=False, showgrid=False, title_text="")
    fig.update_yaxes(showticklabels=False, showgrid=False, autorange="reversed")
    fig.update_xaxes(title_text="keys →", row=rows, col=1)
    fig.update_yaxes(title_text="← queries", row=rows, col=1)
    return fig


def layer_head_grid(weights: Iterable[np.ndarray], tile: int = GRID_TILE) -> go.Figure:
    """Every layer × head as one heatmap of tiles (rows = layers, columns = heads), each tile a
    head's weights averaged down to at most tile × tile. weights: each layer's [H, T, T] in turn,
    masked cells NaN (left out of the block means). A click selects the marker at a tile's centre,
    whose x, y map back to (layer, head) with overview_cell(x, y, tile)."""
    pitch = tile + GRID_GAP
    rows, b = [], 1
    for layer in weights:  # one layer at a time: a Trace may build each layer's maps on demand
        H = layer.shape[0]
        row = np.full((pitch, H * pitch), np.nan, dtype=np.float32)
        for h in range(H):
            z, b = block_reduce(layer[h], tile)
            row[: z.shape[0], h * pitch : h * pitch + z.shape[1]] = z
        rows.append(row)
    grid, L = np.concatenate(rows), len(rows)
    title = "Every layer × head (click a tile to open it)"
    if b > 1:
        title += f" · {b}×{b} blocks averaged"
    fig = go.Figure(
        go.Heatmap(
            z=grid,
            x0=0,
            dx=1,
            y0=0,
            dy=1,
            colorscale="Viridis",
            zmin=0,
            zmax=1,
            hoverinfo="skip",
            colorbar=dict(title=dict(text="weight<br>0 … 1")),
        )
    )
    # Heatmaps cannot be selected in Streamlit, so one invisible marker per tile centre carries the
    # click; hoverdistance=-1 makes a click anywhere pick the nearest tile.
    ls, hs = np.divmod(np.arange(L * H), H)
    fig.add_trace(
        go.Scatter(
            x=hs * pitch + tile / 2 - 0.5,
            y=ls * pitch + tile / 2 - 0.5,
            mode="markers",
            marker=dict(size=12, opacity=0),
            customdata=np.stack([ls, hs], axis=1),
            hovertemplate="layer %{customdata[0]}, head %{customdata[1]}<br>click to open it<extra></extra>",
            showlegend=False,
        )
    )
    style(
        fig,
        title,
        height=max(260, 70 * L + 120),
        subtitle="white: masked cells, and the gaps between tiles",
        plot_bgcolor="white",
        meta=dict(tile_pitch=pitch),
        hovermode="closest",
        hoverdistance=-1,
    )
    centers = [i * pitch + tile / 2 for i in range(max(L, H))]
    fig.update_xaxes(
        title_text="head", tickvals=centers[:H], ticktext=[str(h) for h in range(H)], showgrid=False, zeroline=False
    )
    fig.update_yaxes(
        title_text="layer",
        tickvals=centers[:L],
        ticktext=[str(l) for l in range(L)],
        autorange="reversed",
        showgrid=False,
        zeroline=False,
        scaleanchor="x",
    )
    return fig


def overview_cell(x: float, y: float, tile: int = GRID_TILE) -> tuple[int, int]:
    """(layer, head) of a point clicked in layer_head_grid."""
    pitch = tile + GRID_GAP
    return int(y // pitch), int(x // pitch)


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
    for k in keys:
        fig.add_trace(
            go.Scatter(
                x=[0, 1],
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
