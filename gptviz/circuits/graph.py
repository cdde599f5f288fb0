"""Attribution graphs: the local replacement model of one prompt, every edge a direct effect
(docs/graphs.md, "The attribution graph"; Ameisen et al., "Circuit Tracing", 2025).

Every MLP becomes its transcoder plus an error node (the true mlp.out minus the reconstruction at
this prompt; a layer without a transcoder is all error); attention weights, norm scales, OLMo 1's
value clip and the final logit soft-cap are frozen at the prompt's values (frozen.py). What is left
is affine in the residual stream, so a node's input is exactly the sum of what each upstream node
writes into it along paths that pass through no other node, plus a constant (`bias`: norm and
projection biases, b_dec, b_enc). Each target's row of edges is one gradient pushed back through
the frozen layers (`transpose`), dotted with what every source wrote.

The rows computed are the logits' and every feature's, or with `max_feature_nodes` (pruned graphs
only) the most influential features', visited in order of their influence so far, as circuit-tracer
visits them: a feature whose row was not computed has no incoming edges, so pruning drops it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from ..capture import as_ids, trace
from ..errors import PromptError
from ..model import GPT
from ..names import point
from ..progress import ProgressFn, Reporter
from .frozen import frozen
from .prune import node_influence, prune
from .replacement import Replacement

NODE_COLUMNS = ["node_id", "kind", "layer", "pos", "feature", "token", "activation", "input", "bias", "influence"]
MAX_ADJACENCY = 2**30  # bytes of computed rows (float32) at most: 1 GiB


@dataclass
class Graph:
    """An attribution graph: `nodes` and `edges` DataFrames (docs/graphs.md, "The attribution graph").

    nodes: node_id, kind ("embedding" | "feature" | "error" | "logit"), layer (-1 for embeddings, n_layer
    for logits), pos, feature (the feature's index; the token id for a logit), token (the prompt's token
    id at pos; the output token's id for a logit), activation (a feature's), input (the node's real
    value: a feature's pre-activation, a logit minus the mean logit; for embedding and error nodes,
    which have no incoming edges, the norm of what they write), bias (what no edge carries), influence
    (on the target logits, circuit-tracer's measure; a logit's own is its probability).
    edges: source, target, weight (node ids). Pruned, the nodes and edges kept; `bias` and `input` stay
    the unpruned graph's, so only the unpruned graph sums exactly."""

    nodes: pd.DataFrame
    edges: pd.DataFrame
    tokens: list[str]
    n_layer: int
    prompt: str = ""
    node_threshold: float = 0.8
    edge_threshold: float = 0.98
    info: dict = field(default_factory=dict)  # sizes before pruning, the targets
    probs: dict[int, float] = field(default_factory=dict)  # each target token's probability
    logit_tokens: dict[int, str] = field(default_factory=dict)  # each target token as text
    cumulative: dict[str, float] = field(default_factory=dict)  # circuit-tracer's cumulative influence score

    def to_json(self, path: str | Path, slug: str = "gptviz-graph", scan: str = "gptviz") -> Path:
        """circuit-tracer's graph JSON (metadata, qParams, nodes, links), which its viewer and
        Neuronpedia's open."""
        from .export import write_json

        return write_json(self, path, slug, scan)


def _targets(logits: Tensor, targets: Sequence[int] | None, V: int) -> list[int]:
    """The given token ids, or the top logits reaching 95 % of the probability, at most 10."""
    if targets is not None:
        out = [int(t) for t in targets]
        bad = [t for t in out if not 0 <= t < V]
        if bad or not out:
            raise PromptError(f"targets are token ids in [0, {V - 1}]; got {list(targets)!r}")
        return list(dict.fromkeys(out))
    probs = torch.softmax(logits.double(), -1)
    top = torch.topk(probs, min(10, V))
    n = (
        int(torch.searchsorted(top.values.cumsum(0), torch.tensor(0.95, dtype=torch.float64, device=top.values.device)))
        + 1
    )
    return top.indices[: min(n, top.values.numel())].tolist()


@torch.no_grad()
def attribution_graph(
    model: GPT,
    tcs,
    ids,
    targets: Sequence[int] | None = None,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    prune: bool = True,
    progress: ProgressFn | None = None,
    *,
    tokenizer=None,
    max_feature_nodes: int | None = None,
    batch_size: int | None = None,
) -> Graph:
    """The attribution graph of prompt `ids` under transcoders `tcs` (a TranscoderSet), pruned to the
    nodes and edges carrying `node_threshold` / `edge_threshold` of the influence on the target logits
    (default: the top logits reaching 95 % of the probability, at most 10) unless prune=False.
    max_feature_nodes: with prune, compute the incoming edges of at most this many features, the
    most influential first (None: all; prune=False always computes all). progress: a gptviz.Progress
    per batch of target nodes (raise gptviz.Cancelled to stop). tokenizer: names the tokens."""
    for name, v in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise PromptError(f"{name} must be a number in [0, 1], got {v!r}")
    if max_feature_nodes is not None and (
        isinstance(max_feature_nodes, bool) or not isinstance(max_feature_nodes, int) or max_feature_nodes < 0
    ):
        raise PromptError(f"max_feature_nodes must be a whole number >= 0 or None, got {max_feature_nodes!r}")
    if hasattr(tcs, "check_fits"):
        tcs.check_fits(model)
    model.eval()
    clock = time.perf_counter()
    t = trace(model, as_ids(ids, model.device)[0], tokenizer)
    cfg = model.config
    L, T = cfg.n_layer, t.n_tokens
    dev = model.device
    rep = Replacement(model, tcs, t)
    real_logits = torch.tensor(t.part("logits", -1), dtype=torch.float64, device=dev)  # [V]
    V = real_logits.numel()
    chosen = _targets(real_logits, targets, V)
    N = rep.logit + len(chosen)
    budget = rep.n_feat if not prune or max_feature_nodes is None else min(max_feature_nodes, rep.n_feat)
    R = budget + len(chosen)
    if R * N * 4 > MAX_ADJACENCY:
        raise PromptError(
            f"the graph's {R:,} x {N:,} edges would take {R * N * 4 / 2**30:.1f} GiB: use a shorter prompt, "
            "sparser transcoders, or prune with max_feature_nodes"
        )
    M = torch.zeros(R, N, device=dev)
    row_nodes = torch.full((R,), -1, dtype=torch.long, device=dev)
    bias = torch.zeros(N, dtype=torch.float64, device=dev)
    B = batch_size or max(1, 2**23 // (T * cfg.n_embd))
    used = 0
    reporter = Reporter(progress, "target nodes", R)
    reporter.start()

    def compute(nodes: Tensor, heights: Tensor, dirs: Tensor, pos: Tensor, own: Tensor) -> None:
        nonlocal used
        for s in range(0, nodes.numel(), B):
            n = nodes[s : s + B].numel()
            rows = slice(used, used + n)
            bias[nodes[s : s + B]] = rep.rows(
                heights[s : s + B], dirs[s : s + B], pos[s : s + B], own[s : s + B], M[rows]
            )
            row_nodes[rows] = nodes[s : s + B]
            used += n
            reporter.tick(n)

    # the logits: what the final norm reads at the last position, minus what the mean logit reads
    last = t.tensor(point("resid_post", L - 1))[-1:].float()
    ln_f = frozen(cast(nn.Module, model.transformer.ln_f), last)
    W_U = model.lm_head.weight.detach().float()
    z = W_U @ ln_f(last)[0]  # [V]: the logits before any soft-cap
    cap = cfg.final_softcap  # frozen as each logit's own factor cap·tanh(z/cap)/z
    scale = torch.where(z != 0, cap * torch.tanh(z / cap) / z, torch.ones_like(z)) if cap else torch.ones_like(z)
    dirs = scale[chosen, None] * W_U[chosen] - (scale @ W_U) / V  # [n, C]
    own = dirs @ ln_f.beta if ln_f.beta is not None else dirs.new_zeros(len(chosen))
    logit_nodes = torch.arange(rep.logit, N, device=dev)
    at = torch.full((len(chosen),), T - 1, device=dev)
    setup = time.perf_counter() - clock
    compute(logit_nodes, torch.full_like(logit_nodes, rep.height(L)), ln_f.transpose_at(dirs, at), at, own)

    probs = torch.softmax(real_logits, -1)[chosen].float()
    weights = torch.zeros(N, device=dev)
    weights[rep.logit :] = probs
    if budget == rep.n_feat:  # every feature, the highest first
        for s in range(rep.n_feat, 0, -B):
            compute(*rep.feature_targets(torch.arange(max(0, s - B), s, device=dev)))
    visited = torch.zeros(N, dtype=torch.bool, device=dev)
    while used < R:  # the most influential features so far, a batch at a time
        infl = node_influence(M[:used], row_nodes[:used], weights)[: rep.n_feat]
        infl[visited[: rep.n_feat]] = -1
        top = torch.topk(infl, min(B, R - used))
        chosen_nodes = top.indices[top.values > 0]
        if not chosen_nodes.numel():
            break
        visited[chosen_nodes] = True
        compute(*rep.feature_targets(chosen_nodes))
    M, row_nodes = M[:used], row_nodes[:used]
    rows_s = time.perf_counter() - clock - setup
    g = _assemble(rep, t, M, row_nodes, bias, weights, chosen, probs, real_logits, prune,
                  node_threshold, edge_threshold, tokenizer)  # fmt: skip
    g.info.update(seconds_setup=setup, seconds_rows=rows_s, seconds_prune=time.perf_counter() - clock - setup - rows_s)
    return g


def _assemble(rep, t, M, row_nodes, bias, weights, chosen, probs, real_logits, prune_, node_threshold,
              edge_threshold, tokenizer) -> Graph:  # fmt: skip
    """The Graph: its nodes' table (inputs from the real run), influence, pruning, its edges."""
    token_ids = t.token_ids.tolist()
    nodes = _nodes_table(rep, token_ids, chosen)
    N = len(nodes)
    inputs = nodes["input"].to_numpy().copy()
    if rep.n_feat:
        inputs[: rep.n_feat] = torch.cat([m.pre for m in rep.mlps]).double().cpu().numpy()
    inputs[rep.logit :] = (real_logits[chosen] - real_logits.mean()).cpu().numpy()
    nodes["input"] = inputs
    b = bias.cpu().numpy()
    b[rep.n_feat : rep.logit] = inputs[rep.n_feat : rep.logit]  # errors, embeddings: nothing flows in
    computed = np.zeros(N, dtype=bool)
    computed[row_nodes.cpu().numpy()] = True
    b[: rep.n_feat][~computed[: rep.n_feat]] = np.nan  # a feature whose row was not computed
    nodes["bias"] = b
    influence = node_influence(M, row_nodes, weights)
    nodes["influence"] = (influence + weights).cpu().numpy()
    order = torch.sort(influence, descending=True)
    cumulative = torch.zeros_like(influence)
    cumulative[order.indices] = order.values.cumsum(0) / order.values.sum().clamp(min=1e-30)
    info = dict(nodes_before=N, edges_before=int((M != 0).sum()), rows=len(row_nodes), targets=chosen)
    if prune_:
        always = torch.zeros(N, dtype=torch.bool, device=M.device)
        always[rep.emb :] = True
        keep, r, src = prune(M, row_nodes, weights, rep.n_feat, always, node_threshold, edge_threshold, influence)
    else:
        keep = torch.ones(N, dtype=torch.bool, device=M.device)
        r, src = (M != 0).nonzero(as_tuple=True)
    ids = nodes["node_id"].to_numpy()
    edges = pd.DataFrame(
        {
            "source": ids[src.cpu().numpy()],
            "target": ids[row_nodes[r].cpu().numpy()],
            "weight": M[r, src].cpu().numpy().astype(np.float64),
        }
    )
    kept = nodes[keep.cpu().numpy()].reset_index(drop=True)
    info.update(nodes_after=len(kept), edges_after=len(edges))
    strings = list(t.tokens)
    out_tokens = tokenizer.token_strings(chosen) if tokenizer is not None else [str(v) for v in chosen]
    return Graph(
        kept,
        edges,
        strings,
        rep.L,
        "".join(strings),
        node_threshold,
        edge_threshold,
        info,
        probs=dict(zip(chosen, probs.tolist())),
        logit_tokens=dict(zip(chosen, out_tokens)),
        cumulative=dict(zip(ids, cumulative.cpu().tolist())),
    )


def _nodes_table(rep: Replacement, token_ids: list[int], chosen: list[int]) -> pd.DataFrame:
    """The nodes in column order: features (layer, pos, feature), errors (layer, pos), embeddings, logits."""
    T, L = rep.T, rep.L
    tok = np.asarray(token_ids, dtype=np.int64)
    layer = np.repeat(np.arange(L), np.diff(rep.feat_start))
    pos = torch.cat([m.pos for m in rep.mlps]).cpu().numpy()
    feat = torch.cat([m.feat for m in rep.mlps]).cpu().numpy()
    act = torch.cat([m.act for m in rep.mlps]).double().cpu().numpy()
    every = np.arange(T)
    norms = torch.stack([m.error.norm(dim=-1) for m in rep.mlps]).double().cpu().numpy().ravel()  # [L·T]
    n_logit = len(chosen)
    nan = np.full(L * T + T + n_logit, np.nan)
    ids = [f"{l}_{f}_{p}" for l, f, p in zip(layer.tolist(), feat.tolist(), pos.tolist())]
    ids += [f"{l}_-1_{p}" for l in range(L) for p in range(T)]
    ids += [f"E_{token_ids[p]}_{p}" for p in range(T)]
    ids += [f"{L + 1}_{v}_{T - 1}" for v in chosen]
    df = pd.DataFrame(
        {
            "node_id": ids,
            "kind": ["feature"] * len(feat) + ["error"] * (L * T) + ["embedding"] * T + ["logit"] * n_logit,
            "layer": np.concatenate([layer, np.repeat(np.arange(L), T), np.full(T, -1), np.full(n_logit, L)]),
            "pos": np.concatenate([pos, np.tile(every, L), every, np.full(n_logit, T - 1)]),
            "feature": np.concatenate([feat, np.full(L * T + T, -1), np.asarray(chosen, dtype=np.int64)]),
            "token": np.concatenate([tok[pos], np.tile(tok, L), tok, np.asarray(chosen, dtype=np.int64)]),
            "activation": np.concatenate([act, nan]),
            "input": np.concatenate(
                [
                    np.full(len(feat), np.nan),
                    norms,
                    rep.embed.norm(dim=-1).double().cpu().numpy(),
                    np.full(n_logit, np.nan),
                ]
            ),  # fmt: skip
        }
    )
    df["bias"] = 0.0
    df["influence"] = 0.0
    return df
