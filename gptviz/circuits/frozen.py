"""The local replacement model's linear pieces: every norm and every attention layer frozen at the
values one prompt gave them, so what is left is an affine map of the residual stream.

A frozen norm keeps the real run's scale 1/σ at each position (and, for LayerNorm, its centring,
which is linear): x -> γ ⊙ centre(x) / σ + β. A frozen attention layer keeps its weights (the
softmax of the real q·k), its norms' scales and, in OLMo 1, which values its clip held at ±clip:
x -> post(c_proj(A · clip_mask ⊙ (ln_1(x) W_vᵀ + b_v))). Each is split into its linear part (what
an edge carries) and its value at x = 0 (a bias, what no edge carries); `transpose` maps a
gradient back through the linear part, which is how every edge of the graph is computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch
from torch import Tensor, nn

from ..model import GPT, Block, CausalSelfAttention, RMSNorm, rotate


@dataclass
class FrozenNorm:
    """x [..., T, C] -> γ ⊙ centre(x) / σ[t] + β, σ frozen per position."""

    inv_sigma: Tensor  # [T, 1]
    gamma: Tensor  # [C]
    beta: Tensor | None  # [C]
    centre: bool

    def linear(self, x: Tensor) -> Tensor:
        if self.centre:
            x = x - x.mean(-1, keepdim=True)
        return x * (self.inv_sigma * self.gamma)

    def transpose(self, g: Tensor) -> Tensor:
        g = g * (self.inv_sigma * self.gamma)  # [T, C] once, then one pass over g
        return g - g.mean(-1, keepdim=True) if self.centre else g

    def transpose_at(self, g: Tensor, pos: Tensor) -> Tensor:
        """transpose of rows g [E, C], row e at position pos[e]."""
        g = g * self.scale_at(pos) * self.gamma
        return g - g.mean(-1, keepdim=True) if self.centre else g

    def scale_at(self, pos: Tensor) -> Tensor:
        """1/σ at positions pos [E]: [E, 1]."""
        return (
            self.inv_sigma.index_select(0, pos) if self.inv_sigma.size(0) > 1 else self.inv_sigma.expand(pos.numel(), 1)
        )

    def fold_after(self, W: Tensor) -> Tensor:
        """W' [n, C] with transpose(x @ W) = (x @ W') · 1/σ: γ and the centring folded into W [n, C]."""
        W = W * self.gamma
        return W - W.mean(-1, keepdim=True) if self.centre else W

    def fold_before(self, W: Tensor) -> Tensor:
        """W' [C, n] with transpose(g) @ W = (g @ W') · 1/σ."""
        W = W - W.mean(0, keepdim=True) if self.centre else W
        return self.gamma[:, None] * W

    def constant(self, like: Tensor) -> Tensor:
        return torch.zeros_like(like) if self.beta is None else self.beta.expand_as(like)

    def __call__(self, x: Tensor) -> Tensor:
        return self.linear(x) + self.constant(x)


def blocks(model: GPT) -> list[Block]:
    """The model's blocks, typed."""
    return [cast(Block, b) for b in cast(nn.ModuleList, model.transformer.h)]


def frozen(norm: nn.Module, x: Tensor) -> FrozenNorm:
    """freeze_norm of a norm that is never an identity (the final norm, a q/k norm)."""
    out = freeze_norm(norm, x)
    assert out is not None, "an identity has no scale to freeze"
    return out


def freeze_norm(norm: nn.Module, x: Tensor) -> FrozenNorm | None:
    """The norm frozen at its real input x [T, C] (float32); None for an identity (OLMo 2's missing pre-norm)."""
    if isinstance(norm, nn.Identity):
        return None
    x = x.float()
    C = x.size(-1)
    eps = getattr(norm, "eps", None)
    eps = float(eps) if isinstance(eps, (int, float)) else torch.finfo(torch.float32).eps
    weight = cast(Tensor | None, getattr(norm, "weight", None))
    gamma = torch.ones(C, device=x.device) if weight is None else weight.detach().float()
    if isinstance(norm, (nn.RMSNorm, RMSNorm)):
        sigma = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        if getattr(norm, "plus_one", False):
            gamma = 1.0 + gamma
        return FrozenNorm(1.0 / sigma, gamma, None, centre=False)
    sigma = (x.var(-1, correction=0, keepdim=True) + eps).sqrt()
    bias = cast(Tensor | None, getattr(norm, "bias", None))
    return FrozenNorm(1.0 / sigma, gamma, None if bias is None else bias.detach().float(), centre=True)


def _norm_t(norm: FrozenNorm | None, g: Tensor) -> Tensor:
    return g if norm is None else norm.transpose(g)


def _norm_lin(norm: FrozenNorm | None, x: Tensor) -> Tensor:
    return x if norm is None else norm.linear(x)


@dataclass
class FrozenAttention:
    """One attention layer frozen at the prompt: linear part `linear(x)` and `transpose(g)` on
    [B, T, C]; `constant` [T, C] its output at x = 0."""

    ln_1: FrozenNorm | None
    W_v: Tensor  # [H_kv·D, C]
    keep_v: Tensor | None  # [T, H_kv·D] bool: where a clip left v as computed (OLMo 1), else None
    weights: Tensor  # [H, T, T]: the real attention weights
    W_o: Tensor  # [C, H·D]
    post: FrozenNorm | None
    constant: Tensor  # [T, C]
    n_kv: int
    W_o_read: Tensor = field(init=False)  # W_o with the post-norm's γ and centring folded in
    W_v_read: Tensor = field(init=False)  # W_v with ln_1's

    def __post_init__(self) -> None:
        self.W_o_read = self.W_o if self.post is None else self.post.fold_before(self.W_o)
        self.W_v_read = self.W_v if self.ln_1 is None else self.ln_1.fold_after(self.W_v)

    def _heads(self, v: Tensor) -> Tensor:
        """[B, T, H_kv·D] values -> [B, T, H·D] head outputs, the frozen weights mixing positions."""
        B, T, _ = v.shape
        H = self.weights.size(0)
        v = v.view(B, T, self.n_kv, -1).repeat_interleave(H // self.n_kv, dim=2)  # [B, T(k), H, D]
        return torch.einsum("hqk,bkhd->bqhd", self.weights, v).reshape(B, T, -1)

    def linear(self, x: Tensor) -> Tensor:
        v = _norm_lin(self.ln_1, x) @ self.W_v.T  # [B, T, H_kv·D]
        if self.keep_v is not None:
            v = v * self.keep_v
        return _norm_lin(self.post, self._heads(v) @ self.W_o.T)

    def transpose(self, g: Tensor) -> Tensor:
        B, T, _ = g.shape
        H = self.weights.size(0)
        gz = (_norm_t(self.post, g) @ self.W_o).view(B, T, H, -1)  # [B, T(q), H, D]
        gv = torch.einsum("hqk,bqhd->bkhd", self.weights, gz)  # [B, T(k), H, D]
        gv = gv.view(B, T, self.n_kv, H // self.n_kv, -1).sum(3).reshape(B, T, -1)  # [B, T, H_kv·D]
        if self.keep_v is not None:
            gv = gv * self.keep_v
        return _norm_t(self.ln_1, gv @ self.W_v)

    def transpose_ragged(self, g: Tensor, row: Tensor, pos: Tensor, scratch: Tensor, n: int) -> Tensor:
        """transpose of a ragged batch of n rows: g [E, C] holds row row[e]'s gradient at position
        pos[e], every other position zero, so the projections multiply no padding. Only the mixing over
        positions runs padded, in scratch [H, P, B >= n, D] (zero where the rows hold no position), each
        group of query heads sharing a value head contracted with its weights in one product."""
        H, kv, P = self.weights.size(0), self.n_kv, scratch.size(1)
        gz = g @ self.W_o_read  # [E, H·D]
        if self.post is not None:
            gz *= self.post.scale_at(pos)
        D, B = gz.size(1) // H, scratch.size(2)
        flat = pos * B + row  # each entry's (position, row) in scratch
        scratch.view(H, -1, D).index_copy_(1, flat, gz.view(-1, H, D).transpose(0, 1))
        z = scratch[:, :, :n].reshape(kv, -1, n * D)  # [kv, (h, q), (row, d)]: a view
        w = self.weights[:, :P, :P].reshape(kv, H // kv, P, P).permute(0, 3, 1, 2).reshape(kv, P, -1)  # [kv, k, (h, q)]
        mixed = torch.bmm(w, z).view(kv, P * n, D)  # [kv, (k, row), d]
        gv = mixed.index_select(1, pos * n + row).transpose(0, 1).reshape(-1, kv * D)  # [E, H_kv·D]
        if self.keep_v is not None:
            gv = gv * self.keep_v.index_select(0, pos)
        out = gv @ self.W_v_read
        return out if self.ln_1 is None else out.mul_(self.ln_1.scale_at(pos))


def v_slice(model: GPT) -> slice:
    cfg = model.config
    HD, KD = cfg.n_head * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    return slice(HD + KD, HD + 2 * KD)


def _bias(linear: nn.Linear, rows: slice | None = None) -> Tensor | float:
    """The Linear's bias (its rows `rows`) in float32, or 0.0 where it has none."""
    if linear.bias is None:
        return 0.0
    b = linear.bias.detach().float()
    return b if rows is None else b[rows]


@torch.no_grad()
def freeze_attention(block: Block, pre: Tensor, weights: Tensor, z: Tensor, vs: slice) -> FrozenAttention:
    """Block's attention frozen at the real resid_pre [T, C], weights [H, T, T] and head outputs z [H, T, D]."""
    attn: CausalSelfAttention = block.attn
    ln_1 = freeze_norm(block.ln_1, pre)
    x_hat = pre.float() if ln_1 is None else ln_1(pre.float())
    W_v = attn.c_attn.weight.detach().float()[vs]
    b_v = _bias(attn.c_attn, vs)
    v_real = x_hat @ W_v.T + b_v  # [T, H_kv·D]
    keep = None
    v0 = (torch.zeros_like(x_hat) if ln_1 is None else ln_1.constant(x_hat)) @ W_v.T
    v0 = v0 + b_v  # [T, H_kv·D]: the values at x = 0
    if attn.clip:  # a clipped value is a constant of the prompt (±clip), the rest pass linearly
        keep = v_real.abs() <= attn.clip
        v0 = torch.where(keep, v0, v_real.clamp(-attn.clip, attn.clip))
    W_o = attn.c_proj.weight.detach().float()
    y_real = z.float().transpose(0, 1).reshape(z.size(1), -1) @ W_o.T + _bias(attn.c_proj)  # [T, C]
    post = freeze_norm(attn.ln_post, y_real) if attn.ln_post is not None else None
    frozen = FrozenAttention(ln_1, W_v, keep, weights.float(), W_o, post, torch.empty(0), attn.n_kv_head)
    y0 = frozen._heads(v0[None])[0] @ W_o.T + _bias(attn.c_proj)
    frozen.constant = y0 if post is None else post(y0)
    return frozen


def rotated(attn: CausalSelfAttention, x: Tensor, T: int) -> Tensor:
    """Rotary positions applied to per-head vectors x [..., H, T, D] (a linear map per position)."""
    if not attn.rotary:
        return x
    cos, sin = attn.rotation(0, T)
    return rotate(x, cos.to(x.dtype), sin.to(x.dtype), attn.interleaved)
