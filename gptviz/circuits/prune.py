"""Influence and pruning, as circuit-tracer prunes its graphs (circuit_tracer/graph.py).

A node's influence on the targets is the sum over all paths to them of the products of the
normalised edge weights (each target row's |weights| divided by their sum), the paths starting from
the targets weighted by their probabilities: w·A + w·A² + …, which ends since the graph is acyclic.
Pruning keeps the nodes holding `node_threshold` of the total influence (and every embedding and
logit), then the edges holding `edge_threshold` of the edge influence on what is left, then drops
feature and error nodes left without an outgoing edge (features: or an incoming one) until nothing
changes.
"""

from __future__ import annotations

import torch
from torch import Tensor


def normalised(adj: Tensor) -> Tensor:
    """|adj| with each row divided by its sum (rows that are all zero stay zero)."""
    a = adj.abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def influence(A: Tensor, weights: Tensor, max_steps: int = 10_000) -> Tensor:
    """weights·A + weights·A² + …: every node's influence through paths of any length."""
    step = weights @ A
    total = step.clone()
    for _ in range(max_steps):
        if not step.any():
            return total
        step = step @ A
        total += step
    raise RuntimeError("the influence did not converge: the graph has a cycle")


def node_influence(adj: Tensor, logit_weights: Tensor) -> Tensor:
    return influence(normalised(adj), logit_weights)


def _cutoff(scores: Tensor, share: float) -> Tensor:
    """The score above which the largest scores hold `share` of the total."""
    ordered = torch.sort(scores.flatten(), descending=True).values
    total = ordered.sum()
    if total <= 0:
        return ordered[-1] if ordered.numel() else torch.tensor(0.0)
    cumulative = ordered.cumsum(0) / total
    at = int(torch.searchsorted(cumulative, torch.tensor(share, dtype=cumulative.dtype, device=cumulative.device)))
    return ordered[min(at, ordered.numel() - 1)]


def prune(
    adj: Tensor, logit_weights: Tensor, n_features: int, n_always: int, node_threshold: float, edge_threshold: float
) -> tuple[Tensor, Tensor]:
    """(node mask [N], edge mask [N, N]) of what pruning keeps. The last n_always nodes (embeddings,
    logits) are always kept; the first n_features are features, the rest up to them errors."""
    scores = node_influence(adj, logit_weights)
    keep = scores >= _cutoff(scores, node_threshold)
    keep[-n_always:] = True
    pruned = adj.clone()
    pruned[~keep] = 0
    pruned[:, ~keep] = 0
    A = normalised(pruned)
    edge_scores = A * (influence(A, logit_weights) + logit_weights)[:, None]
    edges = edge_scores >= _cutoff(edge_scores, edge_threshold)
    edges &= pruned != 0
    inner = slice(0, adj.size(0) - n_always)  # features and errors
    while True:
        before = keep.clone()
        edges[~keep] = False
        edges[:, ~keep] = False
        keep[inner] &= edges[:, inner].any(0)  # something reads it
        keep[:n_features] &= edges[:n_features].any(1)  # something feeds a feature
        if torch.equal(before, keep):
            return keep, edges
