"""Shared look of every figure: fonts readable on a projector, masked cells, a presentation mode."""

from __future__ import annotations

import plotly.graph_objects as go

FONT = 14  # base font size in px; presentation mode scales it
PRESENTATION_SCALE = 1.45
MASKED = "#c8c8c8"  # background shown through NaN cells: masked (future) positions
BLUE = "#1f6fb4"  # the main series: bars, lines, boxes
ORANGE = "#e4572e"  # the second series, or the one chosen
INK = "#333333"  # reference lines
FONT_FAMILY = "Inter, 'Source Sans Pro', Arial, sans-serif"


def style(fig: go.Figure, title: str, height: int = 420, subtitle: str = "", **layout) -> go.Figure:
    """Apply the common layout: title (and a smaller subtitle line), font, margins, white paper.
    Returns the same figure."""
    base = dict(
        title=dict(
            text=title,
            x=0,
            xanchor="left",
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


def presentation(fig: go.Figure, on: bool = True) -> go.Figure:
    """Larger fonts for a projected classroom: every font in the layout scaled by PRESENTATION_SCALE.
    Pure: returns a new figure, the input is left as it was."""
    fig = go.Figure(fig)
    if not on:
        return fig
    big = round(FONT * PRESENTATION_SCALE)
    fig.update_layout(
        font_size=big, title_font_size=big + 4, title_subtitle_font_size=big - 2, hoverlabel_font_size=big
    )
    fig.update_annotations(font_size=big - 2)
    fig.update_xaxes(tickfont_size=big - 2, title_font_size=big)
    fig.update_yaxes(tickfont_size=big - 2, title_font_size=big)
    if fig.layout.height:
        fig.update_layout(height=int(fig.layout.height * 1.2))
    return fig
