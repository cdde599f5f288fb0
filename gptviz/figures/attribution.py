"""Logit attribution views: what each component adds to one token's logit, as sorted bars and as a
layer × head grid on a scale centred at 0."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .style import colorbar_title, style

UP, DOWN = "#b2182b", "#2166ac"  # the ends of RdBu_r, as in the head grid: red pushes up, blue down
MAX_BARS = 30  # more parts than this: the largest by |value|, the rest summed into one bar
# title and subtitle pinned to the top of the figure, so the subtitle never sits on the plot
TITLE_TOP = dict(yref="container", y=1.0, yanchor="top", pad=dict(t=14))


def _symmetric(z: np.ndarray) -> float:
    finite = np.abs(z[np.isfinite(z)])
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


def attribution_bars(df: pd.DataFrame, labels: Sequence[str], *, what: str, max_bars: int = MAX_BARS) -> go.Figure:
    """df: a logit_attribution table; labels: a name per row (analysis.component_labels); what: the
    logit described, e.g. "logit('e') at 12 ␣". Bars sorted from the largest push up to the largest
    push down. With more rows than max_bars the smallest by |value| are summed into one bar, so the
    bars still add up to the logit."""
    values = df["value"].to_numpy(np.float64)
    names = list(labels)
    if len(values) > max_bars:
        keep = np.sort(np.argsort(-np.abs(values), kind="stable")[: max_bars - 1])
        rest = np.setdiff1d(np.arange(len(values)), keep)
        names = [names[i] for i in keep] + [f"{len(rest)} other parts (sum)"]
        values = np.append(values[keep], values[rest].sum())
    order = np.argsort(-values, kind="stable")
    names, values = [names[i] for i in order], values[order]
    fig = go.Figure(
        go.Bar(
            x=values,
            y=names,
            orientation="h",
            marker_color=[UP if v >= 0 else DOWN for v in values],
            text=[f"{v:+.3f}" for v in values],
            textposition="auto",
            hovertemplate="%{y}<br>adds %{x:+.4f} to the logit<extra></extra>",
        )
    )
    total, logit = float(df["value"].sum()), df.attrs.get("logit")
    subtitle = f"the parts sum to {total:.4f}" + (
        f"; the model's own value is {logit:.4f}" if logit is not None else ""
    )
    subtitle += " · final norm's scale frozen at the real run's"
    style(
        fig,
        f"What each component adds to {what}",
        height=max(300, 24 * len(names) + 170),
        subtitle=subtitle,
        margin=dict(l=120, r=30, t=100, b=60),  # room for the subtitle above the first bar
    )
    fig.update_layout(title=TITLE_TOP)
    fig.update_xaxes(title_text="contribution to the logit (red up, blue down)", zeroline=True, gridcolor="#eee")
    fig.update_yaxes(
        title_text="component", type="category", categoryorder="array", categoryarray=names, autorange="reversed"
    )
    return fig


def attribution_heads(matrix: np.ndarray, *, what: str) -> go.Figure:
    """matrix [L, H]: each head's contribution to the logit, red up and blue down, centred at 0."""
    z = np.asarray(matrix, dtype=np.float64)
    L, H = z.shape
    r = _symmetric(z)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(h) for h in range(H)],
            y=[str(l) for l in range(L)],
            colorscale="RdBu_r",
            zmin=-r,
            zmax=r,
            colorbar=dict(title=dict(text=colorbar_title("logit", -r, r))),
            hovertemplate="layer %{y}, head %{x}<br>adds %{z:+.4f} to the logit<extra></extra>",
            texttemplate="%{z:.2f}" if L * H <= 64 else None,
        )
    )
    style(
        fig,
        f"Each head's part of {what}",
        height=max(280, 38 * L + 190),
        subtitle="red pushes the logit up, blue down; scale centred at 0",
        margin=dict(l=70, r=30, t=100, b=60),
    )
    fig.update_layout(title=TITLE_TOP)
    fig.update_xaxes(title_text="head", type="category", showgrid=False)
    fig.update_yaxes(title_text="layer", type="category", autorange="reversed", showgrid=False)
    return fig
