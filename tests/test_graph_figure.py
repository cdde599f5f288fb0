"""The attribution graph's drawing (gptviz.figures.circuits): with a crowded last position (a pruned
graph keeps most of its features there) no two nodes share a place, each stays in its position's
column and its layer's band, the axis labels do not overprint, and the strongest nodes are named."""

from __future__ import annotations

import base64

import numpy as np
import pandas as pd
import pytest

from gptviz.figures.circuits import LABELLED, column_widths, graph_figure, node_xy

T, N_LAYER = 40, 4


def crowded_nodes(seed: int = 0) -> pd.DataFrame:
    """About 200 nodes: 45 features in each layer at the last position, a few elsewhere, an embedding
    at every position, two logits; influence falling off as in a real graph."""
    rng = np.random.default_rng(seed)
    rows = []
    for l in range(N_LAYER):
        for f in range(45):
            rows.append((f"{l}_{f}_{T - 1}", "feature", l, T - 1, f))
        for p in rng.choice(T - 1, 6, replace=False):
            rows.append((f"{l}_{100 + p}_{p}", "feature", l, int(p), 100 + int(p)))
        rows.append((f"{l}_-1_{T - 1}", "error", l, T - 1, -1))
    rows += [(f"E_{p}_{p}", "embedding", -1, p, -1) for p in range(T)]
    rows += [(f"{N_LAYER + 1}_{v}_{T - 1}", "logit", N_LAYER, T - 1, v) for v in (7, 9)]
    nodes = pd.DataFrame(rows, columns=["node_id", "kind", "layer", "pos", "feature"])
    nodes["token"] = nodes["pos"]
    nodes["activation"] = 1.0
    nodes["input"] = 1.0
    nodes["bias"] = 0.0
    nodes["influence"] = rng.pareto(1.5, len(nodes))
    return nodes


def _values(v) -> np.ndarray:
    """A figure's array, as Plotly may store it (a list, or base64 with its dtype)."""
    if isinstance(v, dict):
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
    return np.asarray(v, dtype=float)


def test_no_two_nodes_share_a_place_and_each_stays_in_its_cell():
    nodes = crowded_nodes()
    assert len(nodes) >= 200
    widths = column_widths(nodes, T, N_LAYER)
    centres = np.cumsum(widths) - widths / 2
    x, y = node_xy(nodes, centres, N_LAYER)
    pos, layer = nodes["pos"].to_numpy(), nodes["layer"].to_numpy()
    # apart: in one cell a unit side by side or a stacked row (0.22 of a layer) above or below; the lone
    # embeddings of quiet positions half a unit
    dx = np.abs(x[:, None] - x[None, :])
    dy = np.abs(y[:, None] - y[None, :])
    same_cell = (pos[:, None] == pos[None, :]) & (layer[:, None] == layer[None, :])
    apart = (dx >= np.where(same_cell, 1.0, 0.5) - 1e-9) | (dy >= 0.2)
    np.fill_diagonal(apart, True)
    assert apart.all()
    assert (np.abs(x - centres[pos]) <= widths[pos] / 2 + 1e-9).all()  # inside its position's column
    assert (np.abs(y - layer) <= 0.25).all()  # inside its layer's band
    assert widths[T - 1] == np.max(widths) and widths[T - 1] >= 45 / 3  # the crowded column is the widest
    top = nodes[(pos == T - 1) & (layer == 0)]["influence"].idxmax()
    assert y[top] == pytest.approx(0.22) and abs(x[top] - centres[T - 1]) <= 0.5  # the strongest on top, central


def test_the_figure_draws_every_node_where_node_xy_puts_it_and_names_the_strongest():
    nodes = crowded_nodes(1)
    edges = pd.DataFrame({"source": ["E_0_0"], "target": [f"0_0_{T - 1}"], "weight": [0.5]})
    fig = graph_figure(nodes, edges, [f"t{i}" for i in range(T)], {7: "\n", 9: "dog"}, N_LAYER)
    markers = [t for t in fig.data if t.mode == "markers"]
    drawn = {nid: (a, b) for t in markers for nid, a, b in zip(t.customdata, _values(t.x), _values(t.y))}
    assert sorted(drawn) == sorted(nodes["node_id"])
    places = {(round(a, 6), round(b, 6)) for a, b in drawn.values()}
    assert len(places) == len(nodes)  # no two nodes drawn at the same point
    texts = [a.text for a in fig.layout.annotations if a.yref != "paper"]
    assert "'\\n'" in texts and "dog" in texts  # every logit named, a newline shown as one
    assert len(texts) <= LABELLED + 2
    ticks = _values(fig.layout.xaxis.tickvals)
    assert len(ticks) >= 5 and np.diff(np.sort(ticks)).min() >= 1.6  # position labels do not overprint
    assert f"t{T - 1}" in list(fig.layout.xaxis.ticktext)  # the crowded position is always labelled
