"""The shape of every step of the forward pass as a flow diagram in the textbooks' notation."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .style import BLUE, from_spec, layout_spec


def shape_flow(flow: pd.DataFrame, dims: dict[str, int]) -> go.Figure:
    """A top-to-bottom flow of the steps in analysis.shape_flow: each box shows the notation, the
    real shape of this run and what the step does. dims: B, T, C, H, D, V, L of this run."""
    n = len(flow)
    # built as a dict (figures.style.from_spec): Plotly's add_shape / add_annotation re-check every
    # earlier one on each call, 0.2 s for this figure on each view of the page
    shapes, notes = [], []
    for i, r in enumerate(flow.itertuples()):
        y = n - 1 - i
        shapes.append(
            dict(
                type="rect",
                x0=0,
                x1=1,
                y0=y - 0.38,
                y1=y + 0.38,
                line=dict(color=BLUE),
                fillcolor="#eaf2fb" if "h.0" in r.module else "#f6f6f6",
                layer="below",
            )
        )
        real = "(" + ", ".join(str(s) for s in r.shape) + ")"
        notes.append(
            dict(
                x=0.02,
                y=y,
                xanchor="left",
                showarrow=False,
                font=dict(color="#1a1a1a"),
                text=f"<b>{r.notation}</b> = {real}   {r.what}  <span style='color:#777'>[{r.module}]</span>",
            )
        )
        if i < n - 1:
            notes.append(
                dict(
                    x=0.5,
                    y=y - 0.62,
                    ax=0.5,
                    ay=y - 0.38,
                    xref="x",
                    yref="y",
                    axref="x",
                    ayref="y",
                    showarrow=True,
                    arrowhead=2,
                    arrowwidth=1.5,
                    arrowcolor=BLUE,
                    text="",
                )
            )
    # invisible points carry the hover text: the real shape of each step
    points = dict(
        type="scatter",
        x=[0.5] * n,
        y=[n - 1 - i for i in range(n)],
        mode="markers",
        marker=dict(opacity=0),
        customdata=flow["module"].to_numpy(),
        text=[str(s) for s in flow["shape"]],
        hovertemplate="%{customdata}<br>output shape %{text}<extra></extra>",
        showlegend=False,
    )
    sizes = ", ".join(f"{k} = {v}" for k, v in dims.items())
    title = f"One forward pass, step by step (blue: block 0, repeated L times) · {sizes}"
    layout = layout_spec(title, height=58 * n + 110, shapes=shapes, annotations=notes)
    layout["margin"].update(l=10, r=10)
    layout["xaxis"] = dict(visible=False, range=[0, 1])
    layout["yaxis"] = dict(visible=False, range=[-0.6, n - 0.4])
    return from_spec(dict(data=[points], layout=layout))
