"""Figures of the what-if pages: the patching sweep as a heatmap, and a run before and after an edit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .style import FONT, LOSS_AXIS, LOSS_UNIT, NAN, mean_loss, style

# Numbers are written in the cells up to this many columns, in a fixed readable size: Plotly
# otherwise shrinks them to fit the cell (about 5 px tall at 60 columns); beyond it the hover has them.
MAX_TEXT_COLUMNS = 24


def patching_heatmap(sweep: np.ndarray, site: str, labels: Sequence[str] | None = None, first: int = 0) -> go.Figure:
    """The sweep [L, T] or [L, H] as a heatmap centred at 0 (white: the patch changed nothing);
    1 (full red) is the clean run's preference restored, and the colour bar marks it. first: the
    position (or head) of the first column, where the sweep given is a window of a long prompt's."""
    L, n = sweep.shape
    heads = site == "attn.z"
    cols = [f"H{h}" for h in range(n)] if heads else list(labels or [str(i) for i in range(n)])
    top = max(1.0, float(np.nanmax(np.abs(sweep))) if sweep.size else 1.0)
    text = np.vectorize(lambda v: f"{v:.2f}")(sweep) if sweep.size and n <= MAX_TEXT_COLUMNS else None
    fig = go.Figure(
        go.Heatmap(
            z=sweep,
            x=list(range(first, first + n)),
            y=list(range(L)),
            colorscale="RdBu",
            reversescale=True,
            zmid=0,
            zmin=-top,
            zmax=top,
            text=text,
            texttemplate="%{text}" if text is not None else None,
            textfont=dict(size=FONT - 2),
            customdata=np.array([[cols[c] for c in range(n)]] * L),
            colorbar=dict(
                title=dict(text="restored"),
                tickvals=sorted({-top, 0.0, 1.0, top}),
                ticktext=[("1 = clean" if v == 1.0 else f"{v:.2g}") for v in sorted({-top, 0.0, 1.0, top})],
            ),
            hovertemplate=(
                "layer %{y}, " + ("head" if heads else "position") + " %{customdata}<br>"
                "restored %{z:.3f} of the clean − corrupt difference<extra></extra>"
            ),
        )
    )
    what = "head" if heads else "position"
    note = "" if text is not None else f"more than {MAX_TEXT_COLUMNS} columns: each cell's value is in its hover"
    style(fig, f"Patching {site}: every layer × {what}", height=max(300, 40 * L + 160), subtitle=note)
    fig.update_xaxes(title_text=what, tickvals=list(range(first, first + n)), ticktext=cols)
    fig.update_yaxes(title_text="layer", tickvals=list(range(L)), autorange="reversed")
    return fig


def loss_before_after(
    before: pd.DataFrame,
    after: pd.DataFrame,
    labels: Sequence[str],
    names: tuple[str, str] = ("before", "after the edit"),
    title: str = "Loss of each prompt token, before and after the edit",
    shown: range | None = None,
) -> go.Figure:
    """Per-token loss (analysis.per_token_loss) of the plain and the edited run, side by side, in
    LOSS_UNIT. The colours and means are said in the subtitle, not in a legend that would sit on the
    title; a NaN loss is a red "NaN" mark on the axis. shown: the positions drawn (a long prompt's
    window); the means are the whole prompt's either way."""
    whole = (before, after)
    if shown is not None:
        before, after = (df[df["position"].between(shown.start, shown.stop - 1)] for df in whole)
    pos = before["position"].to_numpy()
    x = [labels[p] for p in pos]
    fig = go.Figure()
    runs = ((before, names[0], "#9aa5b1"), (after, names[1], "#d1495b"))
    for df, name, color in runs:
        fig.add_bar(
            x=x,
            y=df["loss_nats"].to_numpy(),
            name=name,
            marker_color=color,
            hovertemplate="%{x}<br>%{y:.3f} " + LOSS_UNIT + "<extra>" + name + "</extra>",
        )
    nan = ~np.isfinite(before["loss_nats"].to_numpy()) | ~np.isfinite(after["loss_nats"].to_numpy())
    if nan.any():
        fig.add_scatter(
            x=[x[i] for i in np.flatnonzero(nan)],
            y=np.zeros(int(nan.sum())),
            mode="markers+text",
            marker=dict(color=NAN, symbol="x", size=12),
            text=["NaN"] * int(nan.sum()),
            textposition="top center",
            textfont=dict(color=NAN),
            hovertemplate="%{x}<br>loss NaN in a run: the model computed NaN here<extra></extra>",
        )
    subtitle = " · ".join(
        f"{c}: {n} ({mean_loss(df['loss_nats'])})" for df, (_, n, _), c in zip(whole, runs, ("grey", "red"))
    )
    style(fig, f"{title} ({LOSS_UNIT})", height=400, subtitle=subtitle)
    fig.update_layout(barmode="group", showlegend=False)
    fig.update_xaxes(title_text="token predicted from the tokens before it", type="category", categoryarray=x)
    fig.update_yaxes(title_text=LOSS_AXIS, rangemode="tozero")
    return fig
