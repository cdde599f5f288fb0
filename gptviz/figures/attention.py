"""Attention views: one head's heatmap, a layer's heads as small multiples, every layer × head as
one clickable grid (the bertviz-style line view of one query is in lines.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.blocks import block_labels, block_reduce
from ..analysis.map_blocks import MapBlocks, block_side, reduce_maps
from .style import (
    MASKED,
    NAN,
    ORANGE,
    category_axis,
    cell_notes,
    colorbar_title,
    colorscale,
    diverging_range,
    from_spec,
    layout_spec,
    nan_overlay,
    plotly_text,
    style,
    token_matrix_axes,
    windowed,
)

MAX_CELLS = 256  # a heatmap side longer than this is averaged into blocks
PICKER_SIDE = 128  # up to this many cells a side, a click on a head's heatmap picks a cell (cell_picker)
GRID_TILE = 32  # side of one head's tile in the layer × head grid
GRID_GAP = 2  # NaN cells between tiles

COLORBAR_TITLE = {
    "weights": "attention weight",
    "masked scores": "score q·k/√D<br>(unitless)",
    "scores": "score q·k/√D<br>(unitless)",
}


def _colorbar(kind: str, score_rule: str | None) -> str:
    if kind == "weights" or not score_rule:
        return COLORBAR_TITLE[kind]
    return f"score {score_rule}<br>(unitless)"


def position_labels(tokens: Sequence[str]) -> list[str]:
    """'position token' for display strings, as a person reads them: for a select box, a sentence
    (through widgets.plain), a table or a file. Never put into a Plotly figure: see token_labels."""
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def token_labels(tokens: Sequence[str]) -> list[str]:
    """position_labels as Plotly text, for a figure's axes and titles only: unique even when tokens
    repeat, so a categorical axis never merges two positions; tags in a token stay text (plotly_text).
    Anywhere else they would read `0 &lt;|begin_of_text|&gt;` (escaped twice)."""
    return [plotly_text(label) for label in position_labels(tokens)]


def _range(z: np.ndarray, kind: str, skip_first_key: bool) -> tuple[float, float, str]:
    """(zmin, zmax, note) of the colour scale. The note says when values fall outside it. Scores
    get a diverging scale symmetric about 0 (Plotly ignores zmid once zmin and zmax are set)."""
    finite = z[np.isfinite(z)]
    if finite.size == 0:
        return 0.0, 1.0, ""
    body = z[:, 1:] if skip_first_key and z.shape[1] > 1 else z
    body = body[np.isfinite(body)]
    if not body.size:
        body = finite
    note = ""
    if kind == "weights":
        hi = float(body.max())
        if skip_first_key and float(finite.max()) > hi:
            note = f"key 0 left out of the scale: its cells up to {finite.max():.3g} show as the top colour"
        return 0.0, max(hi, 1e-9), note
    r = diverging_range(body)
    if skip_first_key and float(np.abs(finite).max()) > r:
        note = f"key 0 left out of the scale: its cells up to ±{np.abs(finite).max():.3g} show as the end colours"
    return -r, r, note


def _cells(m: np.ndarray, mask: np.ndarray | None, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, masked, bad) of one [T, T] matrix: values with masked and non-finite cells as NaN,
    masked = the cells the mask hides, bad = allowed cells where the model computed NaN or ±Inf.
    Without a mask every NaN is taken for masked (the analysis functions' convention), unless kind
    is "scores", which are never masked."""
    m = np.array(m, dtype=np.float32)
    if kind == "scores":
        masked = np.zeros(m.shape, dtype=bool)
    elif mask is not None:
        masked = ~np.asarray(mask, dtype=bool)
    else:
        masked = np.isnan(m)
    bad = ~np.isfinite(m) & ~masked
    m[masked | bad] = np.nan
    return m, masked, bad


def _reduce(m: np.ndarray, masked: np.ndarray, bad: np.ndarray, max_cells: int):
    """Block means of values, and per block: masked when all its cells are, bad when any is."""
    z, b = block_reduce(m, max_cells)
    if b == 1:
        return z, masked, bad, 1
    all_masked = block_reduce(masked.astype(np.float32), max_cells)[0] == 1
    any_bad = block_reduce(bad.astype(np.float32), max_cells)[0] > 0
    return z, all_masked, any_bad, b


def _map_blocks(maps: np.ndarray, mask: np.ndarray | None, max_cells: int) -> MapBlocks:
    """Whole maps [H, T, T] in blocks of at most max_cells a side (mask None: every NaN is masked)."""
    return reduce_maps(np.asarray(maps, dtype=np.float32), mask, block_side(np.shape(maps)[-1], max_cells))


def attention_heatmap(matrix: np.ndarray | MapBlocks, labels: Sequence[str], **options) -> go.Figure:
    """One head's [T, T] matrix, queries as rows and keys as columns: the figure of
    attention_heatmap_spec (which lists the options)."""
    return from_spec(attention_heatmap_spec(matrix, labels, **options))


def attention_heatmap_spec(
    matrix: np.ndarray | MapBlocks,
    labels: Sequence[str],
    *,
    kind: str = "weights",
    title: str = "Attention",
    skip_first_key: bool = False,
    max_cells: int = MAX_CELLS,
    height: int = 680,
    mask: np.ndarray | None = None,
    score_rule: str | None = None,
    clickable: bool = False,
) -> dict:
    """The figure dict of one head's [T, T] matrix, queries as rows and keys as columns. Masked cells
    (the key comes after the query) are not drawn: the grey background shows through. Cells where the model itself
    computed NaN or Inf are painted red (a second trace), so they are never taken for masked ones.

    kind: "weights", "masked scores" or "scores" (sets the colour scale and its title).
    skip_first_key: scale the colours without key 0, which often takes most of the weight (a sink).
    mask: the layer's [T, T] attention mask (True = may read); without it every NaN counts as masked.
    Block means (a MapBlocks) carry their own mask: it is not needed with them.
    score_rule: the model's own score formula (analysis.score_rule) where it is not q·k/√D.
    clickable: a click on a readable cell selects it (cell_picker), up to PICKER_SIDE cells a side.
    A side longer than max_cells is averaged into blocks (NaN-aware) and the title says so; matrix may
    be those blocks already (weights: a MapBlocks of one head, analysis.weight_blocks)."""
    if isinstance(matrix, MapBlocks):  # the blocks know their mask: no [T, T] one is needed
        z, masked, bad, b, window = matrix.means[0], matrix.masked[0], matrix.bad[0], matrix.b, matrix.window
    else:
        m, masked, bad = _cells(matrix, mask, kind)
        z, masked, bad, b = _reduce(m, masked, bad, max_cells)
        window = windowed(mask)
    ticks = block_labels(labels, b)
    zmin, zmax, note = _range(z, kind, skip_first_key)
    if b > 1:
        title += f"<br>each cell is the mean of a {b}×{b} block (T = {len(labels)})"  # its own line: half-width maps
    diverging = kind != "weights"
    heat = dict(
        type="heatmap",
        z=z,
        x=ticks,
        y=ticks,
        zmin=zmin,
        zmax=zmax,
        colorscale=colorscale("RdBu_r" if diverging else "Viridis"),
        hoverongaps=False,
        colorbar=dict(title=dict(text=colorbar_title(_colorbar(kind, score_rule), zmin, zmax))),
        hovertemplate="query %{y}<br>key %{x}<br>" + kind + " %{z:.4f}<extra></extra>",
    )
    data = [heat, nan_overlay(bad, ticks, ticks).to_plotly_json()] if bad.any() else [heat]
    picker = cell_picker(z, masked | bad, ticks, b, kind) if clickable else None
    if picker is not None:  # the markers take the hover too, so a click lands on them, not on the map
        heat.pop("hovertemplate")
        heat["hoverinfo"] = "skip"
        data.append(picker)
    caption = cell_notes(bool(masked.any()), bool(bad.any()), window)
    if note:
        caption += f"; {note}"
    # built as a dict (figures.style.from_spec): a class draws this chart for each new prompt
    layout = layout_spec(
        title, height=height, subtitle=caption, plot_bgcolor=MASKED if masked.any() else "white", margin=dict(t=90)
    )
    layout.update(token_matrix_axes(ticks, "key (read)", "query (reads)"))
    layout["xaxis"]["side"] = "bottom"
    if picker is not None:  # markers would pad the autorange: the map's own cells, edge to edge
        n = len(ticks)
        layout["xaxis"]["range"] = [-0.5, n - 0.5]
        layout["yaxis"].update(range=[n - 0.5, -0.5], autorange=False)
    return dict(data=data, layout=layout)


def cell_picker(z: np.ndarray, unreadable: np.ndarray, ticks: Sequence[str], b: int, kind: str) -> dict | None:
    """Heatmaps send Streamlit no selection on a click: one invisible marker on each readable cell's
    centre carries it, its customdata the cell's (query, key) position (a block's first) and value,
    its hover the heatmap's. None above PICKER_SIDE cells a side (the markers would outweigh the map)."""
    n = z.shape[0]
    if n > PICKER_SIDE:
        return None
    q, k = np.nonzero(~unreadable)
    return dict(
        type="scatter",
        x=[ticks[i] for i in k.tolist()],
        y=[ticks[i] for i in q.tolist()],
        mode="markers",
        marker=dict(size=max(6, min(30, 560 // n)), opacity=0),
        customdata=np.stack([q * b, k * b, z[q, k]], axis=1).tolist(),
        hovertemplate="query %{y}<br>key %{x}<br>" + kind + " %{customdata[2]:.4f}<br>click: why this score"
        "<extra></extra>",
        showlegend=False,
        name="cells",
    )


def head_grid(
    matrices: np.ndarray | MapBlocks,
    labels: Sequence[str],
    *,
    layer: int,
    max_cells: int = 64,
    mask: np.ndarray | None = None,
    cols: int = 4,
) -> go.Figure:
    """Every head of one layer as small multiples sharing one colour scale: weights [H, T, T] with
    masked cells as NaN (analysis.layer_weights), drawn as grey gaps; with the layer's mask [T, T],
    NaN the model computed is told apart and painted red; or those maps in blocks already (a MapBlocks,
    analysis.weight_blocks). cols: tiles per row (2 on a projector)."""
    blocks = matrices if isinstance(matrices, MapBlocks) else _map_blocks(matrices, mask, max_cells)
    H, b = blocks.means.shape[0], blocks.b
    ticks = block_labels(labels, b)
    cols = max(1, min(H, cols))
    rows = math.ceil(H / cols)
    # the gap between rows is a share of the whole figure: a fixed 0.12 left 32 heads' 8 rows 2 % of it each
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.04, vertical_spacing=min(0.12, 0.3 / rows))
    any_masked, any_bad = bool(blocks.masked.any()), bool(blocks.bad.any())
    for h in range(H):
        z, bad = blocks.means[h], blocks.bad[h]
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
        if bad.any():
            fig.add_trace(nan_overlay(bad, ticks, ticks), row=h // cols + 1, col=h % cols + 1)
    title = f"Layer {layer}: every head's attention weights"
    if b > 1:
        title += f" · cells are means of {b}×{b} blocks"
    style(
        fig,
        title,
        height=260 * rows + 110,
        subtitle=cell_notes(any_masked, any_bad, windowed(mask)),
        plot_bgcolor=MASKED,
    )
    # Subplots: the automatic title margin ignores the subtitle, so the title sits in a fixed top margin.
    fig.update_layout(title_yref="container", title_y=1, title_yanchor="top", title_pad_t=10, margin_t=110)
    fig.update_layout(
        coloraxis=dict(
            colorscale="Viridis", cmin=0, cmax=1, colorbar=dict(title=dict(text=colorbar_title("weight", 0, 1)))
        )
    )
    fig.update_xaxes(showticklabels=False, showgrid=False, title_text="")
    fig.update_yaxes(showticklabels=False, showgrid=False, autorange="reversed")
    category_axis(fig, "x", ticks)
    category_axis(fig, "y", ticks)
    for h in range(H):  # square tiles, like the single heatmap, each named below (a title above
        n = "" if h == 0 else str(h + 1)  # would collide with the figure's subtitle)
        fig.layout["yaxis" + n].update(scaleanchor="x" + n, constrain="domain")
        fig.layout["xaxis" + n].update(constrain="domain", title_text=f"head {h} (keys →)", title_standoff=4)
    fig.update_yaxes(title_text="← queries", col=1)
    return fig


GRID_PLOT_WIDTH = 1000  # px: the layer × head grid's plot area on a wide page at 1440 px


def _grid_geometry(side: int, tile: int) -> tuple[int, int]:
    """(side, pitch) of the tiles: a tile is as many cells as it has (at most `tile`), and the gap
    between tiles about a sixteenth of a tile, so tiles sit centred on their tick labels at any T."""
    side = max(1, min(side, tile))
    return side, side + max(1, round(side * GRID_GAP / tile))


def layer_head_grid(
    weights: Iterable[np.ndarray | MapBlocks],
    tile: int = GRID_TILE,
    *,
    masks: Iterable[np.ndarray] | None = None,
    selected: tuple[int, int] | None = None,
) -> go.Figure:
    """Every layer × head as one heatmap of tiles (rows = layers, columns = heads), each tile a
    head's weights averaged down to at most tile × tile. weights: each layer's [H, T, T] in turn,
    masked cells NaN (left out of the block means), or its MapBlocks (analysis.weight_blocks). masks: each
    layer's [T, T] mask: masked cells (grey) told from NaN the model computed (red); else every NaN is masked.
    selected: (layer, head) outlined (mark_tile). A click selects the marker at a tile's centre,
    whose customdata is (layer, head); overview_cell(x, y, pitch) maps x, y back too."""
    mask_iter = iter(masks) if masks is not None else None
    rows, codes, b, side, pitch = [], [], 1, 1, 1
    for layer in weights:  # one layer at a time: a Trace may build each layer's maps on demand
        mask = next(mask_iter) if mask_iter is not None else None
        blocks = layer if isinstance(layer, MapBlocks) else _map_blocks(layer, mask, tile)
        (H, n, _), b = blocks.means.shape, blocks.b
        side, pitch = _grid_geometry(n, tile)
        row = np.full((pitch, H, pitch), np.nan, dtype=np.float32)  # each head's tile, then a gap
        code = np.zeros((pitch, H, pitch), dtype=np.uint8)  # 0 nothing, 1 masked, 2 NaN by the model
        row[:n, :, :n] = blocks.means.transpose(1, 0, 2)  # [n, H, n]: a tile row of every head at once
        code[:n, :, :n] = np.where(blocks.bad, 2, np.where(blocks.masked, 1, 0)).transpose(1, 0, 2)
        rows.append(row.reshape(pitch, H * pitch))
        codes.append(code.reshape(pitch, H * pitch))
    grid, code, L = np.concatenate(rows), np.concatenate(codes), len(rows)
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
            colorbar=dict(title=dict(text=colorbar_title("weight", 0, 1))),
        )
    )
    # Masked and NaN cells as one small uint8 layer over the weights: 0 is transparent, so the gaps
    # between tiles stay white while masked cells are grey, as in every other heatmap.
    fig.add_trace(
        go.Heatmap(
            z=code,
            x0=0,
            dx=1,
            y0=0,
            dy=1,
            zmin=0,
            zmax=2,
            colorscale=[
                [0, "rgba(0,0,0,0)"],
                [1 / 3, "rgba(0,0,0,0)"],
                [1 / 3, MASKED],
                [2 / 3, MASKED],
                [2 / 3, NAN],
                [1, NAN],
            ],
            showscale=False,
            hoverinfo="skip",
            name="masked / NaN",
        )
    )
    # Heatmaps cannot be selected in Streamlit, so one invisible marker per tile centre carries the
    # click; hoverdistance=-1 makes a click anywhere pick the nearest tile.
    H = grid.shape[1] // pitch
    ls, hs = np.divmod(np.arange(L * H), H)
    centre = (side - 1) / 2
    fig.add_trace(
        go.Scatter(
            x=hs * pitch + centre,
            y=ls * pitch + centre,
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
        # square tiles: 80 px a layer, or less where the heads' row is the limit (32 heads across about
        # 1,000 px of a wide page leave 31 px a tile: 16 layers at 80 px were 800 px of white space)
        height=max(300, round(min(80 * L, GRID_PLOT_WIDTH * L / H)) + 150),
        subtitle=cell_notes(bool((code == 1).any()), bool((code == 2).any())) + "; white = gaps between tiles",
        plot_bgcolor="white",
        meta=dict(tile_pitch=pitch, tile_side=side),
        hovermode="closest",
        hoverdistance=-1,
    )
    centers = [i * pitch + centre for i in range(max(L, H))]
    # constrain="domain" shrinks the drawing area rather than widening the range, so the layer
    # labels stay beside the tiles instead of far to their left.
    fig.update_xaxes(
        title_text="head",
        tickvals=centers[:H],
        ticktext=[str(h) for h in range(H)],
        showgrid=False,
        zeroline=False,
        constrain="domain",
        range=[-0.5, H * pitch - (pitch - side) - 0.5],
    )
    fig.update_yaxes(
        title_text="layer",
        tickvals=centers[:L],
        ticktext=[str(l) for l in range(L)],
        range=[L * pitch - (pitch - side) - 0.5, -0.5],
        showgrid=False,
        zeroline=False,
        scaleanchor="x",
        constrain="domain",
    )
    if selected is not None:
        mark_tile(fig, *selected, inplace=True)
    return fig


def mark_tile(fig: go.Figure, layer: int, head: int, *, inplace: bool = False) -> go.Figure:
    """Outline the tile of (layer, head) in a layer_head_grid figure (the head on view). Returns a
    new figure unless inplace, so a cached grid is never changed."""
    if not inplace:
        fig = go.Figure(fig)
    pitch, side = fig.layout.meta["tile_pitch"], fig.layout.meta["tile_side"]
    fig.add_shape(
        type="rect",
        x0=head * pitch - 0.5,
        x1=head * pitch + side - 0.5,
        y0=layer * pitch - 0.5,
        y1=layer * pitch + side - 0.5,
        line=dict(color=ORANGE, width=4),
        fillcolor="rgba(0,0,0,0)",
        name="selected",
    )
    return fig


def overview_cell(x: float, y: float, tile: int = GRID_TILE, pitch: int | None = None) -> tuple[int, int]:
    """(layer, head) of a point clicked in layer_head_grid; pitch: the figure's meta tile_pitch
    (the default is the pitch of full-size tiles, T ≥ tile)."""
    pitch = pitch or tile + GRID_GAP
    return int((y + 0.5) // pitch), int((x + 0.5) // pitch)
