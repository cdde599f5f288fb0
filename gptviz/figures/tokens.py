"""Token views: chips with index, id and visible whitespace; top-k next-token bars; per-token loss."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .style import (
    BLUE,
    LOSS_AXIS,
    LOSS_UNIT,
    NAN,
    category_axis,
    category_spec,
    from_spec,
    html_text,
    layout_spec,
    mean_loss,
    nan_figure,
    percent,
    percent_ticks,
    plotly_text,
    style,
)

_CHIP = (
    '<span title="{tip}" style="display:inline-block;margin:2px;padding:2px 6px;border-radius:6px;'
    'border:1px solid #bbb;background:{bg};font-family:monospace;line-height:1.2;text-align:center">'
    '<span style="font-size:0.7em;color:#555">{head}</span><br><b>{tok}</b></span>'
)


def _heat(frac: float) -> str:
    """White (0) to orange-red (1): the colour of a surprised model."""
    frac = float(np.clip(frac, 0, 1))
    r, g, b = 255, round(255 - 140 * frac), round(255 - 215 * frac)
    return f"rgb({r},{g},{b})"


def token_chips_html(
    labels: Sequence[str],
    ids: Sequence[int] | np.ndarray,
    values: Sequence[float | None] | None = None,
    vmax: float | None = None,
    unit: str = "",
    show_values: bool = False,
    first: int = 0,
) -> str:
    """Tokens as HTML chips 'index·id / token'. With values (one per token), each chip is coloured
    from white (0) to orange-red (vmax) and its tooltip shows the value; None = no value (pale grey,
    e.g. the first token, which nothing predicts); NaN = the model computed NaN (NAN red, the colour
    NaN has on every chart, so it is never taken for a white "certain"). Text is HTML-escaped.
    show_values: each chip's small line shows its value (readable without hovering), "—" where none.
    first: the position of the first chip (a window of a long prompt starts past 0)."""
    chips = []
    if values is not None and vmax is None:
        finite = [v for v in values if v is not None and np.isfinite(v)]
        vmax = max(finite) if finite else 1.0
    for i, (tok, tid) in enumerate(zip(labels, ids)):
        v = values[i] if values is not None else None
        tip = f"position {first + i}, id {tid}"
        if v is None:
            bg = "#f4f4f4"
        elif np.isfinite(v):
            bg, tip = _heat(v / vmax) if vmax else _heat(0), f"{tip}, {v:.3f} {unit}"
        else:
            bg, tip = NAN, f"{tip}, NaN (the model computed NaN here)"
        head = f"{first + i}·{int(tid)}"
        if show_values:
            head = "—" if v is None else (f"{v:.2f}" if np.isfinite(v) else "NaN")
        chips.append(_CHIP.format(tip=html.escape(tip), bg=bg, head=html.escape(head), tok=html_text(tok)))
    return '<div style="line-height:2.6">' + "".join(chips) + "</div>"


def topk_bars(top: pd.DataFrame, *, position_label: str, temperature: float = 1.0) -> go.Figure:
    """Horizontal bars of a top-k table (analysis.top_k): probability on x (0–1 shown as %),
    the logit in the text and hover. The most likely token is on top. A table from NaN logits (no
    rows, attrs["nan"]) gives a chart that says so instead of bars."""
    if top.attrs.get("nan"):
        fig = go.Figure()
        style(fig, f"Next token after {position_label}: logits are NaN", height=260)
        return nan_figure(fig, f"The logits after {position_label} are NaN: no next-token distribution to rank.")
    names = [f"#{r} {plotly_text(t)}" for r, t in zip(top["rank"], top["token"])]
    bars = dict(
        type="bar",
        x=top["probability"].to_numpy(),
        y=names,
        orientation="h",
        marker=dict(color=BLUE),
        text=[f"{percent(p)} · logit {l:.2f}" for p, l in zip(top["probability"], top["logit"])],
        textposition="auto",  # inside a long bar, outside a short one: never clipped
        customdata=np.stack([top["id"].to_numpy(), top["logit"].to_numpy()], axis=1),
        hovertemplate=(
            "%{y}<br>id %{customdata[0]}<br>probability %{x:.4%}<br>logit %{customdata[1]:.3f}<extra></extra>"
        ),
    )
    t = "" if temperature == 1.0 else f", temperature {temperature:g}"
    hi = float(top["probability"].max()) if len(top) else 1.0
    # built as a dict (figures.style.from_spec): a class draws this chart for each new prompt
    layout = layout_spec(f"Next token after {position_label}: top {len(top)}{t}", height=max(260, 34 * len(top) + 110))
    layout["xaxis"] = dict(
        title=dict(text="probability (softmax of logits / temperature)"),
        tickformat=percent_ticks(hi),
        range=[0, min(1.0, hi * 1.35) or 1.0],
        showgrid=True,
        gridcolor="#eee",
    )
    layout["yaxis"] = dict(title=dict(text="token (rank)"), autorange="reversed", **category_spec(names))
    return from_spec(dict(data=[bars], layout=layout))


def loss_bars(loss: pd.DataFrame, labels: Sequence[str]) -> go.Figure:
    """Per-token loss of the prompt (analysis.per_token_loss): one bar per predicted token, in nats.
    A NaN loss gets a red "NaN" mark on the axis (a bar of no height would read as "certain")."""
    pos = loss["position"].to_numpy()
    nats = loss["loss_nats"].to_numpy(dtype=np.float64)
    x = [labels[p] for p in pos]
    finite = nats[np.isfinite(nats)]
    top = float(finite.max()) if finite.size else 1.0
    fig = go.Figure(
        go.Bar(
            x=x,
            y=nats,
            marker=dict(
                color=nats,
                colorscale="OrRd",
                cmin=0,
                cmax=top,
                showscale=bool(finite.size),  # no scale for colours nothing has
                colorbar=dict(title=dict(text=f"loss ({LOSS_UNIT})")),
            ),
            customdata=loss["probability"].to_numpy(),
            hovertemplate=f"token %{{x}}<br>loss %{{y:.3f}} {LOSS_UNIT}<br>p = %{{customdata:.4f}}<extra></extra>",
            showlegend=False,
        )
    )
    bad = ~np.isfinite(nats)
    if bad.any():
        fig.add_scatter(
            x=[x[i] for i in np.flatnonzero(bad)],
            y=np.zeros(int(bad.sum())),
            mode="markers+text",
            marker=dict(color=NAN, symbol="x", size=12),
            text=["NaN"] * int(bad.sum()),
            textposition="top center",
            textfont=dict(color=NAN),
            name="loss NaN",
            hovertemplate="token %{x}<br>loss NaN: the model computed NaN here<extra></extra>",
            showlegend=False,
        )
    style(fig, f"How surprised the model is by each prompt token ({mean_loss(nats)})", height=420)
    fig.update_xaxes(
        title_text="token (position and text), predicted from the tokens before it",
        tickangle=-90 if len(pos) > 8 else 0,  # slanted labels of many tokens run into each other
    )
    category_axis(fig, "x", x)
    fig.update_yaxes(title_text=LOSS_AXIS, rangemode="tozero", gridcolor="#eee", range=[0, top * 1.15])
    return fig
