"""Presentation mode and the page's ink: every figure restyled on its plain dict, with fonts scaled
for a projected classroom, titles wrapped to half a 1024 px screen, colour bars made compact, and every
text dark on the white paper whatever the page's theme."""

from __future__ import annotations

import functools
import re

import plotly.graph_objects as go
from plotly.basedatatypes import BaseTraceType

from .style import FONT, PRESENTATION_SCALE, PRESENTATION_WRAP, TEXT, TEXT_SOFT, colorbar_title, from_spec, wrap

# Restyling works on the figure's plain dict and gives back a Figure that Plotly does not validate
# again: every chart on every page passes through presentation() on each rerun, and Plotly's
# update machinery (property paths, validators, its template copied into each figure) took 12 ms per
# chart, 28 ms in presentation mode; the same edits on the dict take a fraction of a millisecond.
# The figures it receives were built, and validated, by this package's builders.
_AXIS = re.compile(r"[xy]axis\d*")


@functools.cache
def _colorbar_traces() -> frozenset[str]:
    """The trace types with a colour bar of their own (heatmap, contour, …), from Plotly's own
    property lists (imports every trace class once: 80 ms)."""
    classes = (getattr(go, name) for name in dir(go))
    return frozenset(
        c.__name__.lower()
        for c in classes
        if isinstance(c, type) and issubclass(c, BaseTraceType) and "colorbar" in getattr(c, "_valid_props", ())
    )


def _node(d: dict, path: str) -> dict:
    """The dict at a dotted path of properties, made where missing (a bare title string becomes
    {"text": …}, as Plotly reads it)."""
    for key in path.split("."):
        v = d.get(key)
        if isinstance(v, str):
            v = {"text": v}
        elif not isinstance(v, dict):
            v = {}
        d[key] = v
        d = v
    return d


def _put(d: dict, **props) -> None:
    """Set properties by Plotly's underscore paths (title_font_size=…) in a figure dict."""
    for path, value in props.items():
        *parents, last = path.replace("_", ".").split(".")
        (_node(d, ".".join(parents)) if parents else d)[last] = value


def _text(d: dict, path: str) -> str:
    """The text at a dotted path ("title.subtitle.text"), "" where unset."""
    for key in path.split("."):
        if isinstance(d, str):  # a bare title string stands for {"text": …}
            d = {"text": d}
        d = d.get(key) if isinstance(d, dict) else None
    return d if isinstance(d, str) else ""


def _axes(layout: dict) -> list[str]:
    """The layout's x and y axes, as Plotly's update_xaxes / update_yaxes reach them."""
    return sorted({"xaxis", "yaxis", *(k for k in layout if _AXIS.fullmatch(k))})


def _colorbar_compact(spec: dict, font: int) -> None:
    """Colour bar titles along the bar (not above it), so a wide title neither covers the plot's
    titles nor pushes the plot narrow; the bar starts at the bottom and leaves the top fifth free
    for a subtitle that runs over the plot's width. spec: a figure's dict, changed in place."""

    def compact(bar: dict) -> None:
        title = colorbar_title(_text(bar, "title.text"))
        _put(bar, title_side="right", title_font_size=font, tickfont_size=font, thickness=18, len=0.8, y=0)
        _put(bar, yanchor="bottom", title_text=title)

    for tr in spec.get("data", ()):
        if tr.get("type", "scatter") in _colorbar_traces() and tr.get("showscale") is not False:
            compact(_node(tr, "colorbar"))
        elif _text(tr, "marker.colorbar.title.text"):
            compact(_node(tr, "marker.colorbar"))
    compact(_node(spec.setdefault("layout", {}), "coloraxis.colorbar"))


def presentation(fig: go.Figure, on: bool = True) -> go.Figure:
    """Larger fonts for a projected classroom: every font in the layout scaled by PRESENTATION_SCALE,
    titles wrapped to fit half of a 1024 px screen, colour bar titles along the bar, a taller figure.
    Pure: returns a new figure, the input is left as it was."""
    spec = fig.to_dict()  # a deep copy
    if on:
        _present(spec)
    else:
        _colorbar_compact(spec, FONT - 1)
    _ink(spec)
    return from_spec(spec)


def _ink(spec: dict) -> None:
    """Dark text wherever a figure leaves its colour unset. The paper is white, and Streamlit's
    theme in dark mode (many students' laptops) colours unset text near-white: titles, axes and
    ticks became white on white. Colours a builder set (red NaN notes) stay. In place."""

    def default(d: dict, path: str, colour: str) -> None:
        *parents, last = path.split(".")
        node = _node(d, ".".join(parents)) if parents else d
        node.setdefault(last, colour)

    layout = spec.setdefault("layout", {})
    for path in ("font.color", "title.font.color", "title.subtitle.font.color", "legend.font.color"):
        default(layout, path, TEXT)
    for axis in _axes(layout):
        default(layout, f"{axis}.tickfont.color", TEXT_SOFT)
        default(layout, f"{axis}.title.font.color", TEXT)
    for a in layout.get("annotations", []):
        default(a, "font.color", TEXT)
    bars = [_node(layout, "coloraxis.colorbar")] if "coloraxis" in layout else []
    for tr in spec.get("data", ()):
        if tr.get("type", "scatter") in _colorbar_traces() and tr.get("showscale") is not False:
            bars.append(_node(tr, "colorbar"))
        if isinstance(tr.get("marker"), dict) and ("colorscale" in tr["marker"] or "colorbar" in tr["marker"]):
            bars.append(_node(tr, "marker.colorbar"))
    for bar in bars:
        default(bar, "tickfont.color", TEXT_SOFT)
        default(bar, "title.font.color", TEXT)


def _present(spec: dict) -> None:
    """presentation(on=True) on a figure's dict, in place."""
    layout = spec.setdefault("layout", {})
    big = round(FONT * PRESENTATION_SCALE)
    title = wrap(_text(layout, "title.text"), PRESENTATION_WRAP)
    subtitle = wrap(_text(layout, "title.subtitle.text"), round(PRESENTATION_WRAP * 1.15))
    lines = title.count("<br>") + 1 + (subtitle.count("<br>") + 1 if subtitle else 0)
    _put(layout, font_size=big, title_text=title, title_subtitle_text=subtitle, title_font_size=big + 4)
    _put(layout, title_subtitle_font_size=big - 2, hoverlabel_font_size=big)
    annotations = layout.get("annotations", [])
    for a in annotations:
        _put(a, font_size=big - 2)
    for axis in _axes(layout):
        _put(_node(layout, axis), tickfont_size=big - 2, title_font_size=big)
    _colorbar_compact(spec, big - 4)
    old_top = _node(layout, "margin").get("t")
    old_top = 70 if old_top is None else old_top
    # The title block in a top margin sized for its wrapped lines (Plotly's automatic title margin
    # misjudges several lines), plus room for subplot titles that sit just above the plot.
    title_lines = title.count("<br>") + 1
    need = 20 + title_lines * round(1.3 * (big + 4)) + (lines - title_lines) * round(1.3 * (big - 2))
    if any(a.get("yref") == "paper" and (a.get("y") or 0) >= 1 for a in annotations):
        need += 30
    # Plotly anchors a title of several lines by its middle line: pad the first line into view.
    shift = (title_lines - 1) * round(0.7 * (big + 4))
    top = max(old_top, need + shift)
    _put(layout, margin_t=top, title_automargin=False, title_yref="container", title_y=1, title_yanchor="top")
    _put(layout, title_pad_t=10 + shift)
    if layout.get("height"):  # taller by a fifth, plus what the wrapped title takes from the plot
        layout["height"] = int(layout["height"] * 1.2) + top - old_top
