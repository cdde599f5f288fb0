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


def normalised(M: Tensor) -> Tensor:
    """|M| with each row divided by its sum (rows that are all zero stay zero)."""
    a = M.abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def influence(A: Tensor, rows: Tensor, weights: Tensor, max_steps: int = 10_000) -> Tensor:
    """weights·A + weights·A² + … over every node [N]: its influence through paths of any length.
    A [R, N] normalised rows of the nodes `rows` [R]; weights [N] (only the rows' nodes pass it on)."""
    step = weights[rows] @ A
    total = step.clone()
    for _ in range(max_steps):
        carried = step[rows]
        if not carried.any():
            return total
        step = carried @ A
        total += step
    raise RuntimeError("the influence did not converge: the graph has a cycle")


def node_influence(M: Tensor, rows: Tensor, weights: Tensor) -> Tensor:
    return influence(normalised(M), rows, weights)


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
) -> tuple[Tensor, Tensor]:
    """(node mask [N], edge mask [R, N]) of what pruning keeps. `always` [N] bool: nodes kept whatever
    their influence (embeddings, logits); the first n_features nodes are features. scores: the nodes'
    influence (node_influence), when the caller has it already."""
    scores = node_influence(M, rows, weights) if scores is None else scores
    keep = (scores >= _cutoff(scores, node_threshold)) | always
    pruned = M.clone()
    pruned[~keep[rows]] = 0
    pruned[:, ~keep] = 0
    A = normalised(pruned)
    edge_scores = A * (influence(A, rows, weights) + weights)[rows, None]
    edges = (edge_scores >= _cutoff(edge_scores, edge_threshold)) & (pruned != 0)
    inner = ~always  # features and errors
    while True:
        before = keep.clone()
        edges[~keep[rows]] = False
        edges[:, ~keep] = False
        keep &= ~inner | edges.any(0)  # something reads it
        fed = torch.zeros_like(keep)
        fed[rows] = edges.any(1)
        keep[:n_features] &= fed[:n_features]  # something feeds a feature
        if torch.equal(before, keep):
            return keep, edges
