"""An attribution graph drawn layer × position: embeddings at the bottom, each layer's features and
errors above, the target logits on top; nodes sized by influence, edges by |weight| (blue adds, red
subtracts). Pure: a graph's nodes and edges tables in, a Plotly figure out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .presentation import presentation
from .style import plotly_text, style

KIND_COLOURS = {"embedding": "#6b7280", "feature": "#2563eb", "error": "#9ca3af", "logit": "#16a34a"}
PLOT_PX = 800  # the plot's width at 1280 × 720 beside the sidebar: sizes markers so neighbours do not overlap
MAX_EDGES = 400  # the strongest edges drawn: more would hide the nodes at 1440 × 900
LABELLED = 12  # the cells whose strongest feature is named on the figure; hover names the rest
EDGE_WIDTHS = (0.6, 1.4, 2.6, 4.0)  # four width classes by |weight| quantile: one trace each, not one per edge


def stacks(n_layer: int) -> int:
    """How many rows a crowded (layer, position) cell may stack its nodes in: a layer's band is
    620 px / (n_layer + 2) tall, and a row needs about 24 px of it."""
    return 3 if n_layer <= 8 else 2 if n_layer <= 16 else 1


def column_widths(nodes: pd.DataFrame, T: int, n_layer: int = 0) -> np.ndarray:
    """Each position's column width. A column is as wide as its busiest cell's row of nodes (one unit
    a node, a cell's nodes stacked in up to `stacks` rows); a position that holds no more than its
    embedding is half a unit, so the prompt's quiet stretches give their width to the crowded
    positions (the last, usually)."""
    width = np.full(T, 0.5)
    if len(nodes):
        count = nodes.groupby(["layer", "pos"]).size()
        need = np.ceil(count / stacks(n_layer)).astype(float)
        need[(count.index.get_level_values("layer") < 0) & (count == 1).to_numpy()] = 0.5  # a lone embedding
        widest = need.groupby(level="pos").max()
        width[widest.index.to_numpy(int)] = widest.to_numpy()
    return width


def columns(nodes: pd.DataFrame, T: int, n_layer: int = 0) -> np.ndarray:
    """The x of each position's column centre (column_widths side by side)."""
    width = column_widths(nodes, T, n_layer)
    return np.cumsum(width) - width / 2


def tick_positions(centres: np.ndarray, width: np.ndarray, gap: float = 1.6) -> list[int]:
    """The positions whose token is written under the axis, the widest columns (those holding the
    most nodes) first, each kept `gap` units from every label already chosen, so the rotated labels
    do not overprint."""
    chosen: list[int] = []
    for i in sorted(range(len(centres)), key=lambda i: (-width[i], i)):
        if all(abs(centres[i] - centres[j]) >= gap for j in chosen):
            chosen.append(i)
    return sorted(chosen)


def node_xy(nodes: pd.DataFrame, centres: np.ndarray, n_layer: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x: its position's column, the nodes of one (layer, position) cell side by side one unit apart,
    the most influential in the middle of the top row, in up to `stacks(n_layer)` rows a layer; y: the
    layer (embeddings -1, logits n_layer), a stacked row a fraction above or below. No two nodes
    share a place."""
    x = centres[nodes["pos"].to_numpy(int)].astype(float)
    y = nodes["layer"].to_numpy(float)
    rows = stacks(n_layer)
    influence = np.nan_to_num(nodes["influence"].to_numpy(float))
    for idx in nodes.groupby(["layer", "pos"]).indices.values():
        if len(idx) == 1:
            continue
        idx = idx[np.argsort(-influence[idx], kind="stable")]  # the strongest first
        r = min(rows, len(idx))
        heights = np.linspace(0.22, -0.22, r) if r > 1 else np.zeros(1)  # the strongest on top
        for row in range(r):
            members = idx[row::r]
            slots = np.arange(len(members)) - (len(members) - 1) / 2
            x[members] += slots[np.argsort(np.abs(slots), kind="stable")]  # the strongest in the middle
            y[members] += heights[row]
    return x, y


def _labels(
    fig: go.Figure, nodes: pd.DataFrame, x: np.ndarray, y: np.ndarray, sizes: np.ndarray, logit_text: dict[int, str]
) -> None:
    """Name on the figure every logit (its token) and the strongest feature (its index) of each of the
    LABELLED most influential cells, one a cell so the names do not pile up; hover names the rest."""
    kind = nodes["kind"].to_numpy()
    infl = pd.Series(np.nan_to_num(nodes["influence"].to_numpy(float)))
    features = nodes[kind == "feature"].assign(infl=infl[kind == "feature"].to_numpy())
    strongest = features.sort_values("infl", ascending=False, kind="stable").groupby(["layer", "pos"]).head(1)
    shown = [*strongest.index[:LABELLED], *np.flatnonzero(kind == "logit")]
    for i in shown:
        if kind[i] == "feature":
            text = f"#{int(nodes['feature'].iat[i])}"
        else:
            token = str(logit_text.get(int(nodes["feature"].iat[i]), nodes["feature"].iat[i]))
            text = token if token.strip() else repr(token)  # a space or a newline, shown
        fig.add_annotation(
            x=x[i], y=y[i], text=plotly_text(text), showarrow=False, yshift=sizes[i] / 2 + 7,
            font=dict(size=10, color="#111827"), bgcolor="rgba(255,255,255,0.8)", borderpad=1,
        )  # fmt: skip


def _hover(nodes: pd.DataFrame, token_text: list[str], logit_text: dict[int, str]) -> list[str]:
    out = []
    for r in nodes.itertuples(index=False):
        if r.kind == "feature":
            what = (
                f"feature {r.feature} (layer {r.layer})<br>activation {r.activation:.3g}, pre-activation {r.input:.3g}"
            )
        elif r.kind == "error":
            what = f"MLP error, layer {r.layer}"
        elif r.kind == "embedding":
            what = "embedding"
        else:
            what = (
                f"logit {plotly_text(str(logit_text.get(int(r.feature), r.feature)))}<br>minus the mean: {r.input:.3g}"
            )
        token = token_text[int(r.pos)] if 0 <= int(r.pos) < len(token_text) else ""
        out.append(f"{what}<br>position {r.pos} ({plotly_text(token)})<br>influence {r.influence:.3g}")
    return out


def graph_figure(
    nodes: pd.DataFrame,
    edges: pd.DataFrame,
    token_text: list[str],
    logit_text: dict[int, str],
    n_layer: int,
    selected: str | None = None,
    on: bool = False,
) -> go.Figure:
    """The graph as one figure. Each node marker carries its node id as customdata (a click names it)."""
    T = len(token_text)
    widths = column_widths(nodes, T, n_layer)
    centres = np.cumsum(widths) - widths / 2
    x, y = node_xy(nodes, centres, n_layer)
    where = {nid: (a, b) for nid, a, b in zip(nodes["node_id"], x, y)}
    fig = go.Figure()
    drawn = edges[edges["source"].isin(where) & edges["target"].isin(where)]
    drawn = drawn.reindex(drawn["weight"].abs().sort_values(ascending=False).index)[:MAX_EDGES]
    if len(drawn):
        size = drawn["weight"].abs().to_numpy()
        cuts = np.quantile(size, [0.5, 0.8, 0.95])
        klass = np.searchsorted(cuts, size)
        for sign, colour in ((1, "rgba(37,99,235,0.35)"), (-1, "rgba(220,38,38,0.35)")):
            for k, width in enumerate(EDGE_WIDTHS):
                part = drawn[(np.sign(drawn["weight"].to_numpy()) == sign) & (klass == k)]
                if not len(part):
                    continue
                xs, ys = [], []
                for s, t in zip(part["source"], part["target"]):
                    (x0, y0), (x1, y1) = where[s], where[t]
                    xs += [x0, x1, None]
                    ys += [y0, y1, None]
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=ys,
                        mode="lines",
                        line=dict(width=width, color=colour),
                        hoverinfo="skip",
                        showlegend=False,
                    )  # fmt: skip
                )
    infl = nodes["influence"].to_numpy(float)
    top = np.nanmax(infl) if len(infl) and np.isfinite(infl).any() and np.nanmax(infl) > 0 else 1.0
    unit = PLOT_PX / max(float(widths.sum()), 1.0)  # px a unit, about
    largest = float(np.clip(0.9 * unit, 9, 29))  # neighbours one unit apart touch at most
    sizes = min(7.0, largest / 2) + (largest - min(7.0, largest / 2)) * np.sqrt(
        np.clip(np.nan_to_num(infl) / top, 0, 1)
    )
    hover = _hover(nodes, token_text, logit_text)
    for kind, colour in KIND_COLOURS.items():
        m = (nodes["kind"] == kind).to_numpy()
        if not m.any():
            continue
        line = [3 if nid == selected else 0.5 for nid in nodes["node_id"][m]]
        fig.add_trace(
            go.Scatter(
                x=x[m],
                y=y[m],
                mode="markers",
                name=kind,
                marker=dict(size=sizes[m], color=colour, line=dict(width=line, color="#111827")),
                customdata=nodes["node_id"][m].tolist(),
                hovertext=[h for h, keep in zip(hover, m) if keep],
                hoverinfo="text",
            )
        )
    _labels(fig, nodes, x, y, sizes, logit_text)
    ticks = [-1, *range(n_layer), n_layer]
    labels = ["embed", *[f"L{l}" for l in range(n_layer)], "logits"]
    shown = tick_positions(centres, widths)
    style(
        fig,
        "Attribution graph",
        height=620,
        subtitle="each edge a direct effect in the local replacement model; node size: influence on the targets",
        xaxis=dict(
            tickmode="array",
            tickvals=centres[shown].tolist(),
            ticktext=[plotly_text(token_text[i]) for i in shown],
            title="position",
            # the positions that hold nodes: pruning usually keeps the last few, which would be a sliver of a
            # long prompt's width
            range=[float(x.min()) - 0.7, float(x.max()) + 0.7] if T and len(x) else None,
        ),
        yaxis=dict(tickmode="array", tickvals=ticks, ticktext=labels, title="layer", range=[-1.6, n_layer + 0.6]),
        legend=dict(orientation="h", y=-0.12, x=0),
        clickmode="event+select",
        dragmode="pan",
    )
    return presentation(fig, on)


def score_parts_bars(parts: pd.DataFrame, n: int = 16, on: bool = False) -> go.Figure:
    """The largest parts of an attention score (attention_attribution's rows), one bar each, labelled
    'source (query side)' or '(key side)'; the rest summed into one bar, so the bars add up to the score."""
    order = parts["score"].abs().sort_values(ascending=False).index
    top, rest = parts.loc[order[:n]], parts.loc[order[n:]]
    labels = [f"{s} ({side} side)" for s, side in zip(top["source"], top["side"])]
    values = top["score"].tolist()
    if len(rest):
        labels.append(f"the other {len(rest)} parts")
        values.append(float(rest["score"].sum()))
    fig = go.Figure(
        go.Bar(
            x=values[::-1],
            y=[plotly_text(t) for t in labels[::-1]],
            orientation="h",
            marker_color=["#2563eb" if v >= 0 else "#dc2626" for v in values[::-1]],
        )
    )
    total = parts["score"].sum()
    style(
        fig,
        "What each source writes into the score",
        height=120 + 22 * len(labels),
        subtitle=f"they add up to {total:.4g}",
    )
    return presentation(fig, on)
