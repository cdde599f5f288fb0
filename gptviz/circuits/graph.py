"""Attribution graphs: the local replacement model of one prompt, every edge a direct effect
(docs/architecture.md, "Circuits"; Ameisen et al., "Circuit Tracing", 2025).

Every MLP becomes its transcoder plus an error node (the true mlp.out minus the reconstruction at
this prompt; a layer without a transcoder is all error); attention weights, norm scales, OLMo 1's
value clip and the final logit soft-cap are frozen at the prompt's values (frozen.py). What is left
is affine in the residual stream, so a node's input is exactly the sum of what each upstream node
writes into it along paths that pass through no other node, plus a constant (`bias`: norm and
projection biases, b_dec, b_enc). Each target's row of edges is one gradient pushed back through
the frozen layers (`transpose`), dotted with what every source wrote.

Node order (as circuit-tracer's adjacency): features (layer, pos, feature), errors (layer, pos),
embeddings (pos), logits. The adjacency's rows are targets, its columns sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..capture import as_ids, trace
from ..errors import PromptError
from ..model import GPT
from ..names import point
from ..progress import ProgressFn, Reporter
from .frozen import FrozenNorm, freeze_attention, freeze_norm, v_slice
from .prune import node_influence, prune

NODE_COLUMNS = ["node_id", "kind", "layer", "pos", "feature", "token", "activation", "input", "bias", "influence"]
MAX_NODES = 40_000  # the dense adjacency is N² float32: 6.4 GB at this size


@dataclass
class Graph:
    """An attribution graph: `nodes` and `edges` DataFrames (docs/architecture.md, "Circuits").

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
    n = int(torch.searchsorted(top.values.cumsum(0), torch.tensor(0.95, dtype=torch.float64))) + 1
    return top.indices[: min(n, top.values.numel())].tolist()


def _layer_parts(model: GPT, tcs, t):
    """Per layer: (frozen ln_2, real mlp.in [T, C], features (pos, feat, act, pre-act), error [T, C], tc)."""
    parts = []
    for l, block in enumerate(model.transformer.h):
        pre = t.tensor(point("resid_pre", l)).float()
        mid = t.tensor(point("resid_mid", l)).float()
        reads = pre if block.parallel else mid
        mlp_in = t.tensor(point("mlp.in", l)).float()  # what the MLP really read
        out = t.tensor(point("mlp.out", l)).float()
        ln_2 = freeze_norm(block.ln_2, reads)
        tc = tcs.get(l)
        if tc is None:
            parts.append((ln_2, mlp_in, None, out, None))
            continue
        with torch.no_grad():
            x = mlp_in.to(tc.W_enc.device)  # a transcoder may sit elsewhere: its numbers come to the model
            pre_acts = tc.pre(x)  # [T, d_tc]
            acts = tc.act(pre_acts)
            recon = tc.decode(acts, x).float().to(mlp_in.device)
            pre_acts, acts = pre_acts.float().to(mlp_in.device), acts.float().to(mlp_in.device)
        pos, feat = acts.nonzero(as_tuple=True)
        feats = (pos, feat, acts[pos, feat], pre_acts[pos, feat])
        parts.append((ln_2, mlp_in, feats, out - recon, tc))
    return parts


def _w(p: Tensor, device: torch.device) -> Tensor:
    """A transcoder's parameter as float32 on the model's device."""
    return p.detach().to(device=device, dtype=torch.float32)


class _Layout:
    """Column indices of every node in the adjacency (circuit-tracer's order)."""

    def __init__(self, n_feats: list[int], L: int, T: int, n_logits: int):
        self.feat_start = np.concatenate([[0], np.cumsum(n_feats)])  # layer l's features: [start[l], start[l+1])
        self.n_feat = int(self.feat_start[-1])
        self.err = self.n_feat  # error (l, p) at err + l·T + p
        self.emb = self.err + L * T
        self.logit = self.emb + T
        self.n = self.logit + n_logits


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
    batch_size: int | None = None,
) -> Graph:
    """The attribution graph of prompt `ids` under transcoders `tcs` (a TranscoderSet), pruned to the
    nodes and edges carrying `node_threshold` / `edge_threshold` of the influence on the target logits
    (default: the top logits reaching 95 % of the probability, at most 10) unless prune=False.
    progress: a gptviz.Progress per batch of target nodes (raise gptviz.Cancelled to stop)."""
    for name, v in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise PromptError(f"{name} must be a number in [0, 1], got {v!r}")
    if hasattr(tcs, "check_fits"):
        tcs.check_fits(model)
    model.eval()
    idx = as_ids(ids, model.device)
    t = trace(model, idx[0], tokenizer)
    cfg = model.config
    L, T, C = cfg.n_layer, t.n_tokens, cfg.n_embd
    dev = model.device
    vs = v_slice(model)
    blocks = list(model.transformer.h)
    attn = [
        freeze_attention(
            b, t.tensor(point("resid_pre", l)), t.tensor(point("attn.weights", l)), t.tensor(point("attn.z", l)), vs
        )
        for l, b in enumerate(blocks)
    ]
    parts = _layer_parts(model, tcs, t)
    embed = t.tensor("embed").float()  # [T, C]
    real_logits = t.tensor("logits")[-1].float()  # [V]
    V = real_logits.numel()
    chosen = _targets(real_logits, targets, V)
    lay = _Layout([0 if p[2] is None else p[2][0].numel() for p in parts], L, T, len(chosen))
    if lay.n > MAX_NODES:
        raise PromptError(
            f"the graph would have {lay.n:,} nodes (above {MAX_NODES:,}): use a shorter prompt or sparser transcoders"
        )

    # --- each target: the gradient it starts from (at its reading point), its own constant, its input ---
    ln_f = freeze_norm(model.transformer.ln_f, t.tensor(point("resid_post", L - 1))[-1:])
    W_U = model.lm_head.weight.detach().float()
    z = W_U @ ln_f(t.tensor(point("resid_post", L - 1))[-1:].float())[0]  # [V]: logits before any soft-cap
    cap = cfg.final_softcap
    scale = torch.where(z != 0, cap * torch.tanh(z / cap) / z, torch.ones_like(z)) if cap else torch.ones_like(z)
    mean_dir = (scale @ W_U) / V  # [C]: what the mean logit reads
    logit_dirs = scale[chosen, None] * W_U[chosen] - mean_dir  # [n, C]
    probs = torch.softmax(real_logits.double(), -1)[chosen].float()

    adj = torch.zeros(lay.n, lay.n, dtype=torch.float32, device=dev)
    bias = torch.zeros(lay.n, dtype=torch.float64, device=dev)
    B = batch_size or max(1, 2**23 // (T * C))
    jobs = []  # (target layer, rows, reading vectors [n, C], positions, own constants)
    for l, (ln_2, _, feats, _, tc) in enumerate(parts):
        if feats is None or not feats[0].numel():
            continue
        pos, feat = feats[0], feats[1]
        W_enc = _w(tc.W_enc, dev)[feat]  # [n, C]
        const = _w(tc.b_enc, dev)[feat] + (0 if ln_2 is None or ln_2.beta is None else W_enc @ ln_2.beta)
        rows = torch.arange(lay.feat_start[l], lay.feat_start[l + 1], device=dev)
        jobs.append((l, rows, W_enc, pos, const, ln_2))
    logit_const = logit_dirs @ ln_f.beta if ln_f.beta is not None else torch.zeros(len(chosen), device=dev)
    logit_rows = torch.arange(lay.logit, lay.n, device=dev)
    jobs.append((L, logit_rows, logit_dirs, torch.full((len(chosen),), T - 1, device=dev), logit_const, ln_f))

    reporter = Reporter(progress, "target nodes", sum(j[1].numel() for j in jobs))
    reporter.start()
    for l, rows, dirs, pos, const, norm in jobs:
        for s in range(0, rows.numel(), B):
            sl = slice(s, s + B)
            g = torch.zeros(rows[sl].numel(), T, C, device=dev)
            g[torch.arange(g.size(0), device=dev), pos[sl]] = dirs[sl]
            if isinstance(norm, FrozenNorm):
                g = norm.transpose(g)  # the norm frozen at the row's own position: rows elsewhere stay 0
            bias[rows[sl]] = const[sl].double() + _backward(g, l, blocks, attn, parts, embed, lay, adj, rows[sl])
            reporter.tick(rows[sl].numel())

    # --- the nodes' table ---
    token_ids = t.token_ids.tolist()
    nodes = _nodes_table(parts, lay, token_ids, chosen, embed, L, T)
    inputs = nodes["input"].to_numpy().copy()
    feature_pre = [p[2][3] for p in parts if p[2] is not None]
    if feature_pre:
        inputs[: lay.n_feat] = torch.cat(feature_pre).double().cpu().numpy()
    inputs[lay.logit :] = (real_logits.double()[chosen] - real_logits.double().mean()).cpu().numpy()
    nodes["input"] = inputs
    b = bias.cpu().numpy()
    sources_only = slice(lay.n_feat, lay.logit)
    b[sources_only] = inputs[sources_only]  # errors and embeddings: nothing flows in, their value is their own
    nodes["bias"] = b

    logit_weights = torch.zeros(lay.n, device=dev)
    logit_weights[lay.logit :] = probs
    influence = node_influence(adj, logit_weights)
    nodes["influence"] = (influence + logit_weights).cpu().numpy()
    order = torch.sort(influence, descending=True)
    cumulative = torch.zeros_like(influence)
    cumulative[order.indices] = order.values.cumsum(0) / order.values.sum().clamp(min=1e-30)
    info = dict(nodes_before=lay.n, edges_before=int((adj != 0).sum()), targets=chosen)
    if prune:
        keep_nodes, keep_edges = _prune(adj, logit_weights, lay, T, node_threshold, edge_threshold)
    else:
        keep_nodes, keep_edges = torch.ones(lay.n, dtype=torch.bool, device=dev), adj != 0
    dst, src = keep_edges.nonzero(as_tuple=True)
    ids_ = nodes["node_id"].to_numpy()
    edges = pd.DataFrame(
        {
            "source": ids_[src.cpu().numpy()],
            "target": ids_[dst.cpu().numpy()],
            "weight": adj[dst, src].cpu().numpy().astype(np.float64),
        }
    )
    kept = nodes[keep_nodes.cpu().numpy()].reset_index(drop=True)
    info.update(nodes_after=len(kept), edges_after=len(edges))
    strings = list(t.tokens)
    out_tokens = tokenizer.token_strings(chosen) if tokenizer is not None else [str(v) for v in chosen]
    return Graph(
        kept,
        edges,
        strings,
        L,
        "".join(strings),
        node_threshold,
        edge_threshold,
        info,
        probs=dict(zip(chosen, probs.tolist())),
        logit_tokens=dict(zip(chosen, out_tokens)),
        cumulative=dict(zip(ids_, cumulative.cpu().tolist())),
    )


def _backward(g: Tensor, l: int, blocks, attn, parts, embed: Tensor, lay: _Layout, adj: Tensor, rows: Tensor) -> Tensor:
    """Push the targets' gradients g [B, T, C] (at layer l's reading point: mid[l] in a sequential
    block, pre[l] in a parallel one, pre[L] for logits) down to the embedding, writing each source's
    edge into adj[rows] and returning each target's constant (float64 [B])."""
    L = len(blocks)
    const = torch.zeros(g.size(0), dtype=torch.float64, device=g.device)

    def through_attention(g: Tensor, j: int) -> Tensor:
        nonlocal const
        const += (g * attn[j].constant).sum((1, 2)).double()
        return g + attn[j].transpose(g)

    if l < L and not blocks[l].parallel:
        g = through_attention(g, l)  # mid[l] -> pre[l]
    for j in range(l - 1, -1, -1):  # g is at pre[j + 1] = resid_post[j]: MLP j's nodes write here
        ln_2, _, feats, error, tc = parts[j]
        cols = slice(lay.err + j * len(error), lay.err + (j + 1) * len(error))
        adj[rows, cols] = (g * error).sum(-1)
        if feats is not None:
            _feature_edges(g, feats, tc, adj, rows, int(lay.feat_start[j]))
            const += (g.sum(1) @ _w(tc.b_dec, g.device)).double()
            skip = getattr(tc, "W_skip", None)
            g_in = None
            if skip is not None:  # a linear path through the MLP: x_in W_skipᵀ
                g_in = g @ _w(skip, g.device)
                if ln_2 is not None and ln_2.beta is not None:
                    const += (g_in.sum(1) @ ln_2.beta).double()
                g_in = g_in if ln_2 is None else ln_2.transpose(g_in)
        else:
            g_in = None
        if blocks[j].parallel:
            g_next = through_attention(g, j)
            g = g_next if g_in is None else g_next + g_in
        else:
            g = g if g_in is None else g + g_in  # at mid[j]
            g = through_attention(g, j)
    adj[rows, lay.emb : lay.emb + embed.size(0)] = (g * embed).sum(-1)
    return const


def _feature_edges(g: Tensor, feats, tc, adj: Tensor, rows: Tensor, start: int) -> None:
    """adj[rows, feature columns] = g at each feature's position · activation · its decoder row."""
    pos, feat, act, _ = feats
    W = _w(tc.W_dec, g.device)[feat] * act[:, None]  # [n, C]: what each feature wrote
    for p in pos.unique().tolist():
        which = (pos == p).nonzero(as_tuple=True)[0]
        adj[rows[:, None], start + which[None, :]] = g[:, p] @ W[which].T


def _nodes_table(parts, lay: _Layout, token_ids: list[int], chosen: list[int], embed: Tensor, L: int, T: int):
    rows = []
    for l, (_, _, feats, _, _) in enumerate(parts):
        if feats is None:
            continue
        for p, f, a in zip(feats[0].tolist(), feats[1].tolist(), feats[2].tolist()):
            rows.append((f"{l}_{f}_{p}", "feature", l, p, f, token_ids[p], a, np.nan))
    for l, (_, _, _, error, _) in enumerate(parts):
        norms = error.norm(dim=-1).tolist()
        rows += [(f"{l}_-1_{p}", "error", l, p, -1, token_ids[p], np.nan, norms[p]) for p in range(T)]
    norms = embed.norm(dim=-1).tolist()
    rows += [(f"E_{token_ids[p]}_{p}", "embedding", -1, p, -1, token_ids[p], np.nan, norms[p]) for p in range(T)]
    rows += [(f"{L + 1}_{v}_{T - 1}", "logit", L, T - 1, v, v, np.nan, np.nan) for v in chosen]
    df = pd.DataFrame(rows, columns=NODE_COLUMNS[:8])
    df["bias"] = 0.0
    df["influence"] = 0.0
    return df


def _prune(adj, logit_weights, lay: _Layout, T: int, node_threshold: float, edge_threshold: float):
    return prune(
        adj,
        logit_weights,
        n_features=lay.n_feat,
        n_always=T + (lay.n - lay.logit),
        node_threshold=node_threshold,
        edge_threshold=edge_threshold,
    )
