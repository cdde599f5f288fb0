"""Shared look of every figure: fonts readable on a projector, one colour convention for masked and
NaN cells, category axes for tokens, diverging scales centred on 0, and a presentation mode."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

FONT = 14  # base font size in px; presentation mode scales it
PRESENTATION_SCALE = 1.45
PRESENTATION_WRAP = 46  # characters per title line in presentation mode: a half-width chart at 1024 px
MASKED = "#c8c8c8"  # grey, everywhere: masked (future) positions, which the model does not read
NAN = "#d62728"  # red, everywhere: NaN the model computed (NaN or Inf weights upstream)
BLUE = "#1f6fb4"  # the main series: bars, lines, boxes
ORANGE = "#e4572e"  # the second series, or the one chosen
INK = "#333333"  # reference lines
FONT_FAMILY = "Inter, 'Source Sans Pro', Arial, sans-serif"
MASKED_NOTE = "grey = masked (a key after its query: not read)"
NAN_NOTE = "red = NaN computed by the model"


def plotly_text(s: str) -> str:
    """Token text as Plotly shows it, never as markup: Plotly reads tags such as <a href> and <br> in
    titles, ticks and hover text, and turns &lt; / &gt; back into < / >."""
    return s.replace("<", "&lt;").replace(">", "&gt;")


def style(fig: go.Figure, title: str, height: int = 420, subtitle: str = "", **layout) -> go.Figure:
    """Apply the common layout: title (and a smaller subtitle line), font, margins, white paper.
    Returns the same figure."""
    base = dict(
        title=dict(
            text=title,
            x=0,
            xanchor="left",
            # the margin grows to fit the title and its subtitle, however many lines they wrap to
            automargin=True,
            yref="paper",
            y=1,
            yanchor="bottom",
            # the title sits on the plot's top edge and its subtitle is drawn below it, into the plot:
            # the pad lifts both by the subtitle's line
            pad=dict(b=12 + (2 * FONT if subtitle else 0)),
            font=dict(size=FONT + 3),
            subtitle=dict(text=subtitle, font=dict(size=FONT - 1)),
        ),
        font=dict(size=FONT, family=FONT_FAMILY),
        height=height,
        margin=dict(l=70, r=30, t=70, b=60),
        paper_bgcolor="white",
        plot_bgcolor="white",
        hoverlabel=dict(font_size=FONT),
    )
    fig.update_layout(**{**base, **layout})
    return fig


def category_axis(fig: go.Figure, axis: str, labels: Sequence[str], **selector) -> go.Figure:
    """Make an axis labelled by tokens categorical, in the order given. Plotly would otherwise guess
    the type from the labels: "3" or "0 3" (it ignores spaces) make a numeric axis, which sorts and
    spaces positions by value and scrambles the rows. selector: row/col of a subplot, as
    fig.update_xaxes takes them. Returns the same figure."""
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="category", categoryorder="array", categoryarray=[str(s) for s in labels], **selector)
    return fig


def diverging_range(*arrays: np.ndarray) -> float:
    """r for a diverging colour scale from -r to r, centred on 0: the largest finite |value| (1 if
    there is none). Plotly ignores zmid once zmin and zmax are set, so centring means symmetry."""
    r = 0.0
    for a in arrays:
        finite = np.abs(np.asarray(a, dtype=np.float64))
        finite = finite[np.isfinite(finite)]
        if finite.size:
            r = max(r, float(finite.max()))
    return r if r > 0 else 1.0


def nan_overlay(nan_cells: np.ndarray, x, y, **trace) -> go.Heatmap:
    """A heatmap drawn over another one that paints the cells where the model computed NaN red,
    so they cannot be taken for masked (grey) cells. nan_cells: bool, True where NaN."""
    z = np.where(np.asarray(nan_cells, dtype=bool), 1.0, np.nan).astype(np.float32)
    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        colorscale=[[0, NAN], [1, NAN]],
        zmin=0,
        zmax=1,
        showscale=False,
        hoverongaps=False,
        name="NaN",
        hovertemplate="query %{y}<br>key %{x}<br>NaN computed by the model<extra></extra>",
        **trace,
    )


WINDOW_NOTE = "grey = masked (a key after its query, or older than the layer's window: not read)"


def windowed(mask) -> bool:
    """Whether an attention mask [T, T] also hides earlier keys (a sliding-window or local layer)."""
    if mask is None:
        return False
    m = np.asarray(mask, dtype=bool)
    return bool((~m & np.tri(*m.shape, dtype=bool)).any())


def cell_notes(masked: bool, nan: bool, window: bool = False) -> str:
    """The caption of a heatmap's colourless cells: what grey and red mean, when they occur.
    window: the mask also hides keys older than a sliding window."""
    notes = ([WINDOW_NOTE if window else MASKED_NOTE] if masked else []) + ([NAN_NOTE] if nan else [])
    return "; ".join(notes) if notes else "no masked cells"


def wrap(text: str, width: int) -> str:
    """Break a title into lines of at most ~width characters at spaces (<br>); existing <br> kept,
    and no break inside an HTML tag."""
    if not text:
        return text
    lines = []
    for part in re.split(r"<br\s*/?>", text):
        line = ""
        for word in part.split(" "):
            visible = len(re.sub(r"<[^>]+>", "", line + " " + word))
            if line and visible > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def _colorbar_compact(fig: go.Figure, font: int) -> None:
    """Colour bar titles along the bar (not above it), so a wide title neither covers the plot's
    titles nor pushes the plot narrow; the bar starts at the bottom and leaves the top fifth free
    for a subtitle that runs over the plot's width."""
    bar = dict(
        title_side="right", title_font_size=font, tickfont_size=font, thickness=18, len=0.8, y=0, yanchor="bottom"
    )
    for tr in fig.data:
        if hasattr(tr, "colorbar") and getattr(tr, "showscale", None) is not False:
            tr.update(colorbar=bar)
        elif getattr(getattr(tr, "marker", None), "colorbar", None) is not None and tr.marker.colorbar.title.text:
            tr.update(marker_colorbar=bar)
    if fig.layout.coloraxis and fig.layout.coloraxis.colorbar:
        fig.update_layout(coloraxis_colorbar=bar)


def presentation(fig: go.Figure, on: bool = True) -> go.Figure:
    """Larger fonts for a projected classroom: every font in the layout scaled by PRESENTATION_SCALE,
    titles wrapped to fit half of a 1024 px screen, colour bar titles along the bar, a taller figure.
    Pure: returns a new figure, the input is left as it was."""
    fig = go.Figure(fig)
    if not on:
        _colorbar_compact(fig, FONT - 1)
        return fig
    big = round(FONT * PRESENTATION_SCALE)
    title = wrap(fig.layout.title.text or "", PRESENTATION_WRAP)
    subtitle = wrap(fig.layout.title.subtitle.text or "", round(PRESENTATION_WRAP * 1.15))
    lines = title.count("<br>") + 1 + (subtitle.count("<br>") + 1 if subtitle else 0)
    fig.update_layout(
        font_size=big,
        title_text=title,
        title_subtitle_text=subtitle,
        title_font_size=big + 4,
        title_subtitle_font_size=big - 2,
        hoverlabel_font_size=big,
    )
    fig.update_annotations(font_size=big - 2)
    fig.update_xaxes(tickfont_size=big - 2, title_font_size=big)
    fig.update_yaxes(tickfont_size=big - 2, title_font_size=big)
    _colorbar_compact(fig, big - 4)
    old_top = fig.layout.margin.t if fig.layout.margin.t is not None else 70
    # The title block in a top margin sized for its wrapped lines (Plotly's automatic title margin
    # misjudges several lines), plus room for subplot titles that sit just above the plot.
    title_lines = title.count("<br>") + 1
    need = 20 + title_lines * round(1.3 * (big + 4)) + (lines - title_lines) * round(1.3 * (big - 2))
    if any(a.yref == "paper" and (a.y or 0) >= 1 for a in fig.layout.annotations):
        need += 30
    # Plotly anchors a title of several lines by its middle line: pad the first line into view.
    shift = (title_lines - 1) * round(0.7 * (big + 4))
    top = max(old_top, need + shift)
    fig.update_layout(
        margin_t=top,
        title_automargin=False,
        title_yref="container",
        title_y=1,
        title_yanchor="top",
        title_pad_t=10 + shift,
    )
    if fig.layout.height:  # taller by a fifth, plus what the wrapped title takes from the plot
        fig.update_layout(height=int(fig.layout.height * 1.2) + top - old_top)
    return fig
