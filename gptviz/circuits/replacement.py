"""The local replacement model of one prompt, and the rows of its graph: each target node's edges.

Every MLP is its transcoder plus an error node (the true mlp.out minus the reconstruction at this
prompt; a layer without a transcoder is all error); attention weights, norm scales, OLMo 1's value
clip and the final soft-cap are frozen (frozen.py). A target's row is its reading vector pushed back
through the frozen layers (their `transpose`) to every point a source writes into, dotted there with
what each source wrote; the frozen layers' constants, met on the way, add up to the target's bias.

Columns (node order, as circuit-tracer's adjacency): features (layer, pos, feature), errors (layer,
pos), embeddings (pos), logits.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import Tensor

from ..model import GPT, Block
from ..names import point
from ..record import Trace
from .frozen import FrozenAttention, FrozenNorm, blocks, freeze_attention, freeze_norm, v_slice


def _w(p: Tensor, device: torch.device) -> Tensor:
    """A transcoder's parameter as float32 on the model's device."""
    return p.detach().to(device=device, dtype=torch.float32)


@dataclass
class MLPNodes:
    """One layer's MLP as nodes: its transcoder's active features and its error."""

    ln_2: FrozenNorm | None  # frozen at what the MLP read
    pos: Tensor  # [n] the active features' positions
    feat: Tensor  # [n] their indices
    act: Tensor  # [n] their activations
    pre: Tensor  # [n] their pre-activations on the real mlp.in (their inputs)
    written: Tensor  # [n, C] what each wrote: activation × decoder row
    error: Tensor  # [T, C] the real mlp.out minus the reconstruction
    W_enc: Tensor | None  # [n, C] their encoder rows (what each reads)
    b_enc: Tensor | None  # [n]
    b_dec: Tensor | None  # [C]
    W_skip: Tensor | None  # [C, C]

    @functools.cached_property
    def bounds(self) -> list[int]:
        """Where each position's features start in position order (and where the last ends): [T + 1]."""
        T = self.error.size(0)
        return torch.searchsorted(self.pos, torch.arange(T + 1, device=self.pos.device)).tolist()


def _mlp_nodes(block: Block, tc, t: Trace, l: int) -> MLPNodes:
    reads = t.tensor(point("resid_pre" if block.parallel else "resid_mid", l)).float()
    ln_2 = freeze_norm(block.ln_2, reads)
    out = t.tensor(point("mlp.out", l)).float()
    dev = out.device
    none = torch.zeros(0, dtype=torch.long, device=dev)
    if tc is None:
        return MLPNodes(ln_2, none, none, out.new_zeros(0), out.new_zeros(0), out.new_zeros(0, out.size(1)), out,
                        None, None, None, None)  # fmt: skip
    mlp_in = t.tensor(point("mlp.in", l)).float()  # what the MLP really read
    x = mlp_in.to(tc.W_enc.device)  # a transcoder may sit elsewhere: its numbers come to the model
    pre = tc.pre(x)  # [T, d_tc]
    acts = tc.act(pre)
    pre, acts = pre.float().to(dev), acts.float().to(dev)
    pos, feat = acts.nonzero(as_tuple=True)
    written = _w(tc.W_dec, dev)[feat] * acts[pos, feat, None]
    skip = getattr(tc, "W_skip", None)
    W_skip = None if skip is None else _w(skip, dev)
    b_dec = _w(tc.b_dec, dev)
    recon = torch.zeros_like(out).index_add_(0, pos, written) + b_dec  # the features' own rows: few per position
    if W_skip is not None:
        recon += mlp_in @ W_skip.T
    return MLPNodes(
        ln_2, pos, feat, acts[pos, feat], pre[pos, feat], written, out - recon, _w(tc.W_enc, dev)[feat],
        _w(tc.b_enc, dev)[feat], b_dec, W_skip,
    )  # fmt: skip


def dots(g: Tensor, x: Tensor, at: Tensor) -> Tensor:
    """g[e] · x[at[e]] for every entry [E]: one product with every position's x, then each entry's."""
    return (g @ x.T).gather(1, at[:, None])[:, 0]


class Replacement:
    """The replacement model of `model` under `tcs` at the prompt `t` (a Trace)."""

    def __init__(self, model: GPT, tcs, t: Trace):
        self.blocks = blocks(model)
        self.L, self.T = len(self.blocks), t.n_tokens
        vs = v_slice(model)
        self.attn: list[FrozenAttention] = [
            freeze_attention(
                b, t.tensor(point("resid_pre", l)), t.tensor(point("attn.weights", l)), t.tensor(point("attn.z", l)), vs
            )
            for l, b in enumerate(self.blocks)
        ]
        self.mlps = [_mlp_nodes(b, tcs.get(l), t, l) for l, b in enumerate(self.blocks)]
        self.embed = t.tensor("embed").float()  # [T, C]
        counts = [m.pos.numel() for m in self.mlps]
        self.feat_start = np.concatenate([[0], np.cumsum(counts)]).astype(int)  # layer l: [start[l], start[l+1])
        self.n_feat = int(self.feat_start[-1])
        self.err = self.n_feat  # error (l, p) at err + l·T + p
        self.emb = self.err + self.L * self.T
        self.logit = self.emb + self.T

    def feature_targets(self, nodes: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Feature nodes [n] as targets, in descending height: (the nodes, their heights, their reading
        vectors through their frozen ln_2 (transposed) [n, C], positions [n], own constants [n])."""
        layer = torch.searchsorted(torch.as_tensor(self.feat_start[1:], device=nodes.device), nodes, right=True)
        parts = []
        for l in layer.unique().flip(0).tolist():
            m, sel = self.mlps[l], nodes[layer == l]
            assert m.W_enc is not None and m.b_enc is not None, f"layer {l} has no transcoder: its MLP is all error"
            which = sel - int(self.feat_start[l])
            W, pos, own = m.W_enc[which], m.pos[which], m.b_enc[which]
            if m.ln_2 is not None:
                own = own if m.ln_2.beta is None else own + W @ m.ln_2.beta
                W = m.ln_2.transpose_at(W, pos)
            parts.append((sel, torch.full_like(sel, self.height(l)), W, pos, own))
        return cast(tuple[Tensor, Tensor, Tensor, Tensor, Tensor], tuple(torch.cat(x) for x in zip(*parts)))

    def height(self, l: int) -> int:
        """Where layer l's features read (l = L: the logits, at the final norm's input), as a height in
        the residual stream: pre[l] is 2l, mid[l] is 2l + 1."""
        return 2 * l if l == self.L or self.blocks[l].parallel else 2 * l + 1

    def rows(self, height: Tensor, dirs: Tensor, pos: Tensor, own: Tensor, out: Tensor) -> Tensor:
        """Edges into targets that read `dirs` [B, C] (already through their frozen norm, transposed) at
        position `pos` [B] of the point `height` [B] (`height`, in descending order), written into
        out [B, N]; returns their biases (float64 [B]).

        One pass down the layers for the whole batch: a row joins when the pass reaches its reading
        point, so the rows present at any layer are a prefix. A row at position p holds p + 1 positions
        (a causal model: nothing after p reaches it), stored ragged, entry e being row[e]'s position
        at[e], so no product multiplies the zeros a padded [B, T, C] would hold."""
        B, C = dirs.shape
        dev, L = dirs.device, self.L
        lengths = pos + 1
        off = torch.zeros(B + 1, dtype=torch.long, device=dev)
        off[1:] = lengths.cumsum(0)
        row = torch.repeat_interleave(torch.arange(B, device=dev), lengths)
        at = torch.arange(row.numel(), device=dev) - off[row]
        g = dirs.new_zeros(row.numel(), C)
        g[off[1:] - 1] = dirs  # each row's own position is its last entry
        const = own.double().clone()
        below, ends = [-h for h in height.tolist()], off.tolist()
        reach = (pos.cummax(0).values + 1).tolist()  # the positions the first n rows span: reach[n - 1]

        def prefix(h: int) -> tuple[int, int]:
            """The rows reading at height h or above, and their entries."""
            n = bisect_right(below, -h)
            return n, ends[n]

        def add(e: int, v: Tensor) -> None:  # per-entry constants [e] into their rows' biases
            const.index_add_(0, row[:e], v.double())

        scratch: dict[tuple[int, ...], Tensor] = {}

        def padded(*shape: int) -> Tensor:
            """A zero buffer kept for the whole pass, P and B among `shape`: each layer writes the same
            entries (the rows present hold the same positions), so what a row does not hold stays zero."""
            if shape not in scratch:
                scratch[shape] = dirs.new_zeros(shape)
            return scratch[shape]

        def through_attention(j: int, n: int, e: int) -> Tensor:
            attn = self.attn[j]
            add(e, dots(g[:e], attn.constant, at[:e]))
            H = attn.weights.size(0)
            return attn.transpose_ragged(g[:e], row[:e], at[:e], padded(H, reach[-1], B, attn.W_o.size(1) // H), n)

        for j in range(L - 1, -1, -1):  # g is at pre[j + 1] = post[j]: MLP j's nodes write here
            n, e = prefix(2 * j + 2)
            g_in = None
            if n:
                g_in = self._mlp_edges(j, g[:e], row[:e], at[:e], padded(reach[-1], B, C)[:, :n], out, add)
            if self.blocks[j].parallel:
                if n:
                    g_next = g[:e] + through_attention(j, n, e)
                    g[:e] = g_next if g_in is None else g_next + g_in
            else:
                if g_in is not None:
                    g[:e] += g_in  # at mid[j]
                n, e = prefix(2 * j + 1)
                if n:
                    g[:e] += through_attention(j, n, e)
        out[row, self.emb + at] = dots(g, self.embed, at)
        return const

    def _mlp_edges(self, j, g, row, at, padded, out, add) -> Tensor | None:
        """MLP j's edges (error and features) from the entries g [e, C] at post[j] (padded [P, n, C]:
        zero where the rows hold no position), its b_dec into the biases; returns the gradient its skip
        path (W_skip) carries to the MLP's input point, if any."""
        m, T = self.mlps[j], self.T
        P, n = padded.shape[:2]
        padded[at, row] = g
        errors = torch.bmm(padded, m.error[:P, :, None])[..., 0]  # [P, n]: one product a position
        out[row, self.err + j * T + at] = errors[at, row]
        if m.pos.numel():
            start, bounds = int(self.feat_start[j]), m.bounds
            for p in range(min(P, T)):  # features are in position order: position p's are columns a:b
                a, b = bounds[p], bounds[p + 1]
                if b > a:
                    out[:n, start + a : start + b] = padded[p] @ m.written[a:b].T
        if m.b_dec is not None:
            add(g.size(0), g @ m.b_dec)
        if m.W_skip is None:
            return None
        g_in = g @ m.W_skip  # a linear path through the MLP: x_in W_skipᵀ, x_in = ln_2(...)
        if m.ln_2 is None:
            return g_in
        if m.ln_2.beta is not None:
            add(g.size(0), g_in @ m.ln_2.beta)
        return m.ln_2.transpose_at(g_in, at)
