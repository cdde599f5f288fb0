"""Shared look of every figure: fonts readable on a projector, one colour convention for masked and
NaN cells, category axes for tokens, diverging scales centred on 0 (presentation mode: presentation.py)."""

from __future__ import annotations

import copy
import functools
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
TEXT = "#262730"  # every figure's text: dark on the white paper, whatever the page's theme
TEXT_SOFT = "#4d5060"  # tick labels
FONT_FAMILY = "Inter, 'Source Sans Pro', Arial, sans-serif"
MASKED_NOTE = "grey = masked (a key after its query: not read)"
NAN_NOTE = "red = NaN computed by the model"
# One unit of loss on every page: nats, the unit of the training loss nanoGPT prints and the cards
# record (bits = nats / ln 2 only in a CSV's loss_bits column).
LOSS_UNIT = "nats"
LOSS_AXIS = "loss −ln p (nats)"


# GitHub-flavoured Markdown (Streamlit's renderer) turns www.…, http(s)://… and name@host into links
# after escapes and character references are resolved, so neither can stop it; an invisible WORD
# JOINER (U+2060) where those patterns join does: "www⁠.", "https:⁠//", "name⁠@host" read the same.
WORD_JOINER = "\u2060"
_AUTOLINK = re.compile(r"(?i)(?<=www)(?=\.)|(?<=:)(?=//)|(?=@)")
_ASCII_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")


def no_autolink(s: str) -> str:
    """Text that GitHub-flavoured Markdown will not turn into a link (see WORD_JOINER)."""
    return _AUTOLINK.sub(WORD_JOINER, s)


def html_text(s: str) -> str:
    """Token text inside HTML that Streamlit reads as Markdown too (st.markdown with
    unsafe_allow_html): every ASCII punctuation mark as a numeric character reference, which HTML
    shows as the character and CommonMark never reads as markup (no emphasis across chips, no link,
    no tag), and no autolink."""
    return _ASCII_PUNCT.sub(lambda m: f"&#{ord(m.group())};", no_autolink(s))


def plotly_text(s: str) -> str:
    """Token text as Plotly shows it, never as markup: Plotly reads tags such as <a href> and <br> in
    titles, ticks and hover text, and turns &lt; / &gt; back into < / >."""
    return s.replace("<", "&lt;").replace(">", "&gt;")


def number(x: float, spec: str = ".3f") -> str:
    """A value for a title or label: "NaN" (or "Inf") when the model computed one, never "nan"; a
    negative number with the minus sign Plotly's own ticks use (−), not a hyphen."""
    x = float(x)
    if np.isnan(x):
        return "NaN"
    return f"{x:{spec}}".replace("-", "−") if np.isfinite(x) else ("Inf" if x > 0 else "−Inf")


def percent(p: float) -> str:
    """A probability as a percentage that never reads 0.0% for a value above 0: one decimal from 0.1 %
    up, else two significant digits (a 128k vocabulary spreads its mass thin: "0.00078%")."""
    p = float(p)
    if not np.isfinite(p) or p == 0 or abs(p) >= 1e-3:
        return f"{p:.1%}"
    return np.format_float_positional(100 * p, precision=2, unique=False, fractional=False, trim="-") + "%"


def percent_ticks(hi: float) -> str:
    """A d3 tick format for a probability axis up to hi, with as many decimals as its ticks need."""
    if not hi > 0:
        return ".0%"
    return f".{max(0, int(np.ceil(-np.log10(100 * hi))) + 1)}~%"


def mean_loss(values: Sequence[float] | np.ndarray, spec: str = ".3f") -> str:
    """The mean of per-token losses in LOSS_UNIT for a title or legend, saying how many are NaN
    instead of printing "mean nan": "mean 1.234 nats", "mean 1.234 nats over 40 tokens, 19 NaN",
    "every loss NaN"."""
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    if v.size and not finite.size:
        return "every loss NaN"
    text = f"mean {number(finite.mean() if finite.size else np.nan, spec)} {LOSS_UNIT}"
    return text + (f" over {finite.size} tokens, {v.size - finite.size} NaN" if finite.size < v.size else "")


def nan_figure(fig: go.Figure, message: str) -> go.Figure:
    """Say on an empty chart that there is nothing to draw because the model computed NaN: red text
    in the middle of the plot, no axes that would suggest a scale. Returns the same figure."""
    fig.add_annotation(
        text=wrap(plotly_text(message), 56),
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
        font=dict(color=NAN),
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def layout_spec(title: str, height: int = 420, subtitle: str = "", **layout) -> dict:
    """The common layout as a figure dict's "layout": title (and a smaller subtitle line), font,
    margins, white paper. layout: properties that replace the common ones by name."""
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
        hoverlabel=dict(font=dict(size=FONT)),
    )
    return {**base, **layout}


def style(fig: go.Figure, title: str, height: int = 420, subtitle: str = "", **layout) -> go.Figure:
    """Apply the common layout (layout_spec) to a figure. Returns the same figure."""
    fig.update_layout(**layout_spec(title, height, subtitle, **layout))
    return fig


def from_spec(spec: dict) -> go.Figure:
    """A Figure of a figure dict, as Plotly would give it, without Plotly checking every property
    again (tens of ms a figure). For the builders a class's pages draw on each new prompt, whose
    dicts use only properties that tests pass through Plotly's validators."""
    return go.Figure(spec, _validate=False)


@functools.cache
def colorscale(name: str) -> tuple:
    """A named colour scale ("Viridis", "RdBu_r") as the list of stops Plotly's validator makes of
    it, for a figure dict: plotly.js knows no "_r" names."""
    return go.Heatmap(colorscale=name).colorscale


def deep_update(d: dict, u: dict) -> dict:
    """Merge u into the figure dict d as Plotly's update does: dicts key by key, anything else
    replaced. Returns d."""
    for k, v in u.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            deep_update(d[k], v)
        else:
            d[k] = v
    return d


@functools.cache
def _subplots(args: tuple) -> dict:
    from plotly.subplots import make_subplots

    layout = make_subplots(**dict(args)).to_dict()["layout"]
    layout.pop("template", None)
    return layout


def subplots_spec(**kwargs) -> dict:
    """make_subplots(**kwargs)'s layout (axes, their domains, subplot titles) as a figure dict's
    "layout", worked out once per arrangement: the traces of row r, column c go on axes x{n}, y{n}."""
    return copy.deepcopy(_subplots(tuple(sorted(kwargs.items()))))


def category_spec(labels: Sequence[str]) -> dict:
    """category_axis's properties, for a figure dict's axis."""
    return dict(type="category", categoryorder="array", categoryarray=[str(s) for s in labels])


def token_matrix_axes(labels: Sequence[str], key_title: str, query_title: str) -> dict:
    """The "xaxis" and "yaxis" of a figure dict for a [T, T] matrix of tokens: keys across, queries
    down (the first on top), square cells, no grid, category axes in position order."""
    return dict(
        xaxis=dict(title=dict(text=key_title), showgrid=False, constrain="domain", **category_spec(labels)),
        yaxis=dict(
            title=dict(text=query_title),
            autorange="reversed",
            showgrid=False,
            scaleanchor="x",
            constrain="domain",
            **category_spec(labels),
        ),
    )


def category_axis(fig: go.Figure, axis: str, labels: Sequence[str], **selector) -> go.Figure:
    """Make an axis labelled by tokens categorical, in the order given. Plotly would otherwise guess
    the type from the labels: "3" or "0 3" (it ignores spaces) make a numeric axis, which sorts and
    spaces positions by value and scrambles the rows. selector: row/col of a subplot, as
    fig.update_xaxes takes them. Returns the same figure."""
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(**category_spec(labels), **selector)
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
    trace = {"hovertemplate": "query %{y}<br>key %{x}<br>NaN computed by the model<extra></extra>", **trace}
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


def colorbar_title(name: str, lo: float | None = None, hi: float | None = None, spec: str = ".3g") -> str:
    """A colour bar's title on one line: the quantity and, when given, the range its colours span
    ("score q·k/√D, −4.1 … 5.2"). One line, because the title runs along the bar
    (_colorbar_compact), where a second line reads as a stray second scale beside the first."""
    text = re.sub(r"\s*<br\s*/?>\s*", " ", name)
    return text if lo is None else f"{text}, {number(lo, spec)} … {number(hi, spec)}"


def wrap_name(text: str, width: int = 44) -> str:
    """A checkpoint's name or path for a title, as Plotly text, never cut: a path has no spaces for
    wrap() to break at, so a long one is broken after a "/" (or every `width` characters)."""
    lines, line = [], ""
    for part in re.split(r"(?<=/)", text):
        while len(part) > width:  # one path component longer than a line
            if line:
                lines.append(line)
                line = ""
            lines.append(part[:width])
            part = part[width:]
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    lines.append(line)
    return "<br>".join(plotly_text(x) for x in lines if x)
