"""Heads across a corpus, as HeadVis shows them: every head's metrics over the whole corpus, and its
windows sampled by interval of any per-window score.

Everything here reads a Scan's tables (head_windows, head_attention, windows): no model runs, and
nothing holds an attention map. The maps of the few windows a page or an export shows are rebuilt
from the model (gptviz.scanning.headvis).

The six metrics are those of Neuronpedia's HeadVis pipeline (utils/neuronpedia-utils/
neuronpedia_utils/headvis/compute-head-metrics.py), pooled over every token of the corpus:
self_attention_score and pattern_entropy per query position, prev_token_score per position that has
a previous one, qk_distance (and its variance) per position weighted by attention, induction_score
per query whose token came before (weights under 0.01 left out).
"""

from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

from ..analysis.heads import SCORES
from .reduce import EXTRAS

HEADVIS_METRICS = (
    "self_attention_score",
    "prev_token_score",
    "pattern_entropy",
    "qk_distance",
    "qk_distance_variance",
    "induction_score",
)
# what a head's windows can be ranked by: the scan's per-window scores, and HeadVis's activation
RANKINGS = ("max_attention", *SCORES)


class NoHeadData(ValueError):
    """The scan lacks the table a question needs (a scan written before it was kept)."""


def _need(table: pd.DataFrame, name: str) -> pd.DataFrame:
    if table is None or len(table) == 0:
        raise NoHeadData(f"this scan has no {name} table; scan again with this gptviz to get it")
    return table


def head_metrics(scan) -> pd.DataFrame:
    """layer, head and HEADVIS_METRICS, one row per head, pooled over every window of the scan."""
    hw = _need(scan.head_windows, "head_windows")
    ha = _need(scan.head_attention, "head_attention")
    n = scan.windows.set_index("window")["n_tokens"]
    df = hw.merge(ha, on=["window", "layer", "head"])
    df["n"] = df["window"].map(n).astype(np.float64)
    # the per-window scores are means over the window; times its tokens they are the sums HeadVis pools
    df["self_sum"] = df["self"] * df["n"]
    df["entropy_sum"] = df["entropy"] * df["n"]
    df["prev_sum"] = df["previous_token"] * df["n"]  # previous_token is a share of the map's mass, n
    df["prev_n"] = df["n"] - 1
    g = df.groupby(["layer", "head"], as_index=False)[
        ["n", "prev_n", "self_sum", "entropy_sum", "prev_sum", *EXTRAS[1:], "induction_queries"]
    ].sum()
    qk = g["qk_distance_sum"] / g["n"]
    out = pd.DataFrame({"layer": g["layer"], "head": g["head"]})
    out["self_attention_score"] = g["self_sum"] / g["n"]
    out["prev_token_score"] = g["prev_sum"] / g["prev_n"]
    out["pattern_entropy"] = g["entropy_sum"] / g["n"]
    out["qk_distance"] = qk
    out["qk_distance_variance"] = g["qk_distance_sq_sum"] / g["n"] - qk**2
    iq = g["induction_queries"].astype(np.float64)
    out["induction_score"] = np.where(iq > 0, g["induction_sum"] / iq.where(iq > 0, 1), np.nan)
    return out


def window_values(scan, layer: int, head: int, by: str = "max_attention") -> pd.DataFrame:
    """window, value: one head's `by` (one of RANKINGS) in every window of the scan."""
    if by not in RANKINGS:
        raise ValueError(f"unknown ranking {by!r}; choose one of {', '.join(RANKINGS)}")
    table = _need(scan.head_attention if by == "max_attention" else scan.head_windows, by)
    rows = table[(table["layer"] == layer) & (table["head"] == head)]
    return pd.DataFrame({"window": rows["window"].to_numpy(), "value": rows[by].to_numpy(np.float64)})


def boundaries(values: np.ndarray, n_intervals: int) -> list[float]:
    """Equal-frequency interval boundaries of values, as HeadVis computes them from its warm-up
    (here from every window): the value at rank round(i·n / n_intervals) for i = 1 .. n_intervals-1."""
    ordered = np.sort(values)
    n = len(ordered)
    return [float(ordered[min(int(round(i * n / n_intervals)), n - 1)]) for i in range(1, n_intervals)] if n else []


def head_samples(
    scan,
    layer: int,
    head: int,
    by: str = "max_attention",
    n_intervals: int = 10,
    per_interval: int = 3,
    top: int = 10,
    seed: int = 0,
) -> pd.DataFrame:
    """window, interval, value: one head's windows sampled as HeadVis does. Windows are put in
    n_intervals intervals of equal frequency by `by` (interval 1 the lowest); the highest keeps its
    `top` largest (ties: the earlier window), every other a uniform random sample of per_interval
    (seeded per head, so the same scan gives the same sample). Ordered highest interval first, then by value."""
    vals = window_values(scan, layer, head, by)
    v = vals["value"].to_numpy()
    edges = boundaries(v, n_intervals)
    bucket = np.array([min(bisect.bisect_right(edges, x), n_intervals - 1) for x in v], dtype=np.int64)
    rng = np.random.default_rng(seed + 31 * (1000 * layer + 100 * head))
    keep = []
    for b in range(n_intervals):
        rows = np.flatnonzero(bucket == b)
        if b == n_intervals - 1:
            order = np.lexsort((vals["window"].to_numpy()[rows], -v[rows]))
            chosen = rows[order[:top]]
        else:
            chosen = rng.choice(rows, size=min(per_interval, len(rows)), replace=False) if len(rows) else rows
        keep += [(int(vals["window"].iat[i]), b + 1, float(v[i])) for i in chosen]
    out = pd.DataFrame(keep, columns=["window", "interval", "value"])
    return out.sort_values(["interval", "value"], ascending=False, ignore_index=True)


def top_windows(scan, layer: int, head: int, by: str = "max_attention", n: int = 10) -> pd.DataFrame:
    """window, value: one head's n windows of largest `by` (ties: the earlier window)."""
    vals = window_values(scan, layer, head, by)
    return vals.sort_values(["value", "window"], ascending=[False, True], ignore_index=True).head(n)
