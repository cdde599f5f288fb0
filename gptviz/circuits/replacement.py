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

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..model import GPT, Block
from ..names import point
from ..record import Trace
from .frozen import FrozenAttention, FrozenNorm, blocks, freeze_attention, freeze_norm, upto, v_slice


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

    @property
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
    recon = tc.decode(acts, x).float().to(dev)
    pre, acts = pre.float().to(dev), acts.float().to(dev)
    pos, feat = acts.nonzero(as_tuple=True)
    W_dec = _w(tc.W_dec, dev)
    skip = getattr(tc, "W_skip", None)
    return MLPNodes(
        ln_2, pos, feat, acts[pos, feat], pre[pos, feat], W_dec[feat] * acts[pos, feat, None], out - recon,
        _w(tc.W_enc, dev)[feat], _w(tc.b_enc, dev)[feat], _w(tc.b_dec, dev), None if skip is None else _w(skip, dev),
    )  # fmt: skip


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

    def feature_targets(self, l: int) -> tuple[Tensor, Tensor, Tensor]:
        """Layer l's features as targets: (reading vectors [n, C], positions [n], own constants [n])."""
        m = self.mlps[l]
        assert m.W_enc is not None and m.b_enc is not None, f"layer {l} has no transcoder: its MLP is all error"
        const = m.b_enc if m.ln_2 is None or m.ln_2.beta is None else m.b_enc + m.W_enc @ m.ln_2.beta
        return m.W_enc, m.pos, const

    def rows(self, l: int, dirs: Tensor, pos: Tensor, own: Tensor, norm: FrozenNorm | None, out: Tensor) -> Tensor:
        """Edges into targets that read `dirs` [B, C] through `norm` at positions `pos` of layer l's
        reading point (mid[l] in a sequential block, pre[l] in a parallel one; l = L: the final norm's
        input), written into out [B, N]; returns their biases (float64 [B])."""
        P = int(pos.max()) + 1  # a causal model: nothing after the last target's position matters
        g = dirs.new_zeros(dirs.size(0), P, dirs.size(1))
        g[torch.arange(g.size(0), device=g.device), pos] = dirs
        reads = upto(norm, P)
        if reads is not None:
            g = reads.transpose(g)  # frozen at each row's own position; other positions stay 0
        const = own.double().clone()
        L, T = self.L, self.T

        def through_attention(g: Tensor, j: int) -> Tensor:
            attn = self.attn[j].upto(P)
            const.add_((g.flatten(1) @ attn.constant.flatten()).double())
            return g + attn.transpose(g)

        if l < L and not self.blocks[l].parallel:
            g = through_attention(g, l)  # mid[l] -> pre[l]
        for j in range(l - 1, -1, -1):  # g is at pre[j + 1] = resid_post[j]: MLP j's nodes write here
            m = self.mlps[j]
            out[:, self.err + j * T : self.err + j * T + P] = torch.einsum("bpc,pc->bp", g, m.error[:P])
            start, bounds = int(self.feat_start[j]), m.bounds
            for p in range(P):  # features are in position order: position p's are columns a:b
                a, b = bounds[p], bounds[p + 1]
                if b > a:
                    out[:, start + a : start + b] = g[:, p] @ m.written[a:b].T
            g_in = None
            if m.b_dec is not None:
                const.add_((g.sum(1) @ m.b_dec).double())
            if m.W_skip is not None:  # a linear path through the MLP: x_in W_skipᵀ, x_in = ln_2(...)
                g_in = g @ m.W_skip
                if m.ln_2 is not None and m.ln_2.beta is not None:
                    const.add_((g_in.sum(1) @ m.ln_2.beta).double())
                g_in = g_in if m.ln_2 is None else m.ln_2.upto(P).transpose(g_in)
            if self.blocks[j].parallel:
                g_next = through_attention(g, j)
                g = g_next if g_in is None else g_next + g_in
            else:
                g = g if g_in is None else g + g_in  # at mid[j]
                g = through_attention(g, j)
        out[:, self.emb : self.emb + P] = torch.einsum("bpc,pc->bp", g, self.embed[:P])
        return const
