"""Influence and pruning, as circuit-tracer prunes its graphs (circuit_tracer/graph.py), on the rows
of the adjacency that were computed: M [R, N], row r holding the edges into node rows[r].

A node's influence on the targets is the sum over all paths to them of the products of the
normalised edge weights (each row's |weights| divided by their sum), the paths starting from the
targets weighted by their probabilities: w·A + w·A² + …, which ends since the graph is acyclic.
Pruning keeps the nodes holding `node_threshold` of the total influence (and every embedding and
logit), then the edges holding `edge_threshold` of the edge influence on what is left, then drops
feature and error nodes left without an outgoing edge (features: or an incoming one) until nothing
changes.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _influence(a: Tensor, rows_at: Tensor, start: Tensor, max_steps: int = 10_000) -> Tensor:
    """Influence through paths of any length over the columns of a [R, K] (|edge weights|, row r the
    edges into the node that is column rows_at[r], -1 where that node is no column), starting from the
    rows' own weights `start` [R]: w·A + w·A² + … with A = a, each row divided by its sum.

    Only the row nodes pass influence on, so the powers run on A's [R, R] columns of the row nodes,
    then one product with all of A: w·(I + A_rr + A_rr² + …)·A."""
    total_of_row = a.sum(1).clamp(min=1e-10)
    on = rows_at >= 0
    among = a.new_zeros(a.size(0), a.size(0))
    among[:, on] = a[:, rows_at[on]] / total_of_row[:, None]
    carried = start.clone()
    total = carried.clone()
    for _ in range(max_steps):
        carried = carried @ among
        if not carried.any():
            return (total / total_of_row) @ a
        total += carried
    raise RuntimeError("the influence did not converge: the graph has a cycle")


def node_influence(M: Tensor, rows: Tensor, weights: Tensor) -> Tensor:
    """Every node's influence [N] on the targets: M [R, N] the computed rows, row r the edges into
    node rows[r]; weights [N] the targets' (only the rows' nodes pass it on)."""
    return _influence(M.abs(), rows, weights[rows])


def _cutoff(scores: Tensor, share: float) -> Tensor:
    """The score above which the largest scores hold `share` of the total (zeros hold none)."""
    flat = scores.flatten()
    ordered = torch.sort(flat[flat > 0], descending=True).values
    total = ordered.sum()
    if not ordered.numel() or total <= 0:
        return torch.tensor(float("inf"), device=scores.device)
    cumulative = ordered.cumsum(0) / total
    at = int(torch.searchsorted(cumulative, torch.tensor(share, dtype=cumulative.dtype, device=cumulative.device)))
    return ordered[min(at, ordered.numel() - 1)]


def prune(
    M: Tensor,
    rows: Tensor,
    weights: Tensor,
    n_features: int,
    always: Tensor,
    node_threshold: float,
    edge_threshold: float,
    scores: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(node mask [N], the kept edges as row indices into M and source nodes) of what pruning keeps.
    `always` [N] bool: nodes kept whatever their influence (embeddings, logits); the first n_features
    nodes are features. scores: the nodes' influence (node_influence), when the caller has it already.
    After the node threshold everything runs on the kept nodes' columns only."""
    scores = node_influence(M, rows, weights) if scores is None else scores
    keep = (scores >= _cutoff(scores, node_threshold)) | always
    cols = keep.nonzero().squeeze(1)  # [K] the kept nodes
    column = torch.full_like(keep, -1, dtype=torch.long)
    column[cols] = torch.arange(cols.numel(), device=cols.device)
    rows_at = torch.where(keep[rows], column[rows], -1)
    pruned = M[:, cols] * keep[rows, None]  # [R, K]: edges between kept nodes
    a = pruned.abs()
    start = weights[rows]
    passed = _influence(a, rows_at, start)  # [K]
    through = start + torch.where(rows_at >= 0, passed[rows_at.clamp(min=0)], 0.0)
    edge_scores = a / a.sum(1, keepdim=True).clamp(min=1e-10) * through[:, None]
    edges = (edge_scores >= _cutoff(edge_scores, edge_threshold)) & (pruned != 0)
    inner = ~always[cols]  # features and errors
    is_feature = cols < n_features
    kept = torch.ones_like(inner)
    row_kept = rows_at >= 0
    while True:
        before = kept.clone()
        edges[~row_kept] = False
        edges[:, ~kept] = False
        kept &= ~inner | edges.any(0)  # something reads it
        fed = torch.zeros_like(kept)
        fed[rows_at[row_kept]] = edges[row_kept].any(1)
        kept &= ~is_feature | fed  # something feeds a feature
        row_kept = (rows_at >= 0) & kept[rows_at.clamp(min=0)]
        if torch.equal(before, kept):
            keep = torch.zeros_like(keep)
            keep[cols[kept]] = True
            r, k = edges.nonzero(as_tuple=True)
            return keep, r, cols[k]
