"""Why a head attends where it does: its pre-softmax score of (query, key) split into what each
upstream source writes into q and into k (docs/graphs.md, "The attribution graph").

The residual stream a layer reads is a sum of sources: the embedding, each earlier head's output
(its slice of c_proj; through the frozen post-norm where the model has one), each attention layer's
constant part (c_proj's bias, the post-norm's β), and each MLP's output, or with transcoders each of
its active features (activation × decoder row), its b_dec, its skip and its error. With ln_1, the
q/k norms and OLMo 1's clip frozen at the real run (a clipped entry is a constant of the prompt),
q and k are each a sum of one part per source plus a constant (`bias`); rotary positions turn each
part (a linear map per position). The score is the bilinear scale · q·k (times the soft-cap's
frozen factor cap·tanh(s/cap)/s where the model caps), so it is the sum over every pair of a
q-part and a k-part. Each row here is one source on one side: half of its pairs' terms (the
symmetric split of a product), so the rows add up to the score; df.attrs["terms"] holds every pair.
"""

from __future__ import annotations

from typing import cast

import pandas as pd
import torch
from torch import Tensor, nn

from ..errors import PromptError
from ..model import GPT
from ..names import point
from ..record import Trace
from .frozen import blocks, freeze_norm, frozen, rotated


def _sources(model: GPT, trace: Trace, layer: int, pos: int, transcoders=None) -> tuple[list[str], Tensor]:
    """Names and vectors [S, C] of what resid_pre[layer] at `pos` is the sum of."""
    names, parts = ["embed"], [trace.tensor("embed")[pos : pos + 1].float()]
    for j in range(layer):
        attn = blocks(model)[j].attn
        H, D = attn.n_head, attn.head_dim
        z = trace.tensor(point("attn.z", j))[:, pos].float()  # [H, D]
        W_o = attn.c_proj.weight.detach().float().view(-1, H, D)  # [C, H, D]
        heads = torch.einsum("chd,hd->hc", W_o, z)  # [H, C]: each head's slice of c_proj
        b_o = attn.c_proj.bias.detach().float() if attn.c_proj.bias is not None else torch.zeros_like(heads[0])
        if attn.ln_post is not None:  # frozen post-norm: linear in each head, its β and b_o a constant
            post = frozen(attn.ln_post, (heads.sum(0) + b_o)[None])
            heads, const = post.linear(heads), post(b_o[None])[0]
        else:
            const = b_o
        names += [f"L{j}H{h}" for h in range(H)] + [f"L{j} attn bias"]
        parts += [heads, const[None]]
        out = trace.tensor(point("mlp.out", j))[pos].float()
        tc = transcoders.get(j) if transcoders is not None else None
        if tc is None:
            names.append(f"L{j} MLP")
            parts.append(out[None])
            continue
        x = trace.tensor(point("mlp.in", j))[pos].float().to(tc.W_enc.device)
        f = tc.act(tc.pre(x)).float().to(out.device)
        active = f.nonzero(as_tuple=True)[0]
        written = f[active, None] * tc.W_dec.detach().float().to(out.device)[active]  # [n, C]
        skip = getattr(tc, "W_skip", None)
        extra = [] if skip is None else [(x @ skip.detach().float().T).to(out.device)]
        b_dec = tc.b_dec.detach().float().to(out.device)
        error = out - written.sum(0) - b_dec - sum(extra, torch.zeros_like(out))
        names += [f"L{j} F{int(a)}" for a in active] + [f"L{j} b_dec"] + [f"L{j} skip"] * len(extra) + [f"L{j} error"]
        parts += [written, b_dec[None], *[e[None] for e in extra], error[None]]
    return names, torch.cat(parts)


def _side(model: GPT, trace: Trace, layer: int, pos: int, which: str, head: int, vectors: Tensor):
    """Each source's part of q (or k) at `pos` for `head` [S, D], and the constant part [D]."""
    block = blocks(model)[layer]
    attn = block.attn
    H, Hkv, D = attn.n_head, attn.n_kv_head, attn.head_dim
    pre = trace.tensor(point("resid_pre", layer))[pos : pos + 1].float()
    ln_1 = freeze_norm(block.ln_1, pre)
    x_lin = vectors if ln_1 is None else ln_1.linear(vectors)  # [S, C]
    x0 = torch.zeros_like(pre[0]) if ln_1 is None else ln_1.constant(pre[0])
    rows = slice(0, H * D) if which == "q" else slice(H * D, (H + Hkv) * D)
    W = attn.c_attn.weight.detach().float()[rows]
    b = attn.c_attn.bias.detach().float()[rows] if attn.c_attn.bias is not None else 0.0
    real = (x_lin.sum(0) + x0) @ W.T + b  # the real projection (before any clip and norm)
    parts, const = x_lin @ W.T, x0 @ W.T + b  # [S, n·D], [n·D]
    if attn.clip:  # a clipped entry is ±clip whatever the sources: a constant of the prompt
        keep = real.abs() <= attn.clip
        parts, const = parts * keep, torch.where(keep, const, real.clamp(-attn.clip, attn.clip))
        real = real.clamp(-attn.clip, attn.clip)
    norm = cast(nn.Module, getattr(attn, f"{which}_norm", None))  # read only where qk_norm says there is one
    if attn.qk_norm == "all":
        fixed = frozen(norm, real[None])
        parts, const = fixed.linear(parts), fixed(const[None])[0]
    n = H if which == "q" else Hkv
    h = head if which == "q" else head // (H // Hkv)
    parts, const, real = parts.view(-1, n, D)[:, h], const.view(n, D)[h], real.view(n, D)[h]
    if attn.qk_norm == "head":
        fixed = frozen(norm, real[None])
        parts, const = fixed.linear(parts), fixed(const[None])[0]
    T = trace.n_tokens
    turn = parts.new_zeros(parts.size(0) + 1, T, D)
    turn[:, pos] = torch.cat([parts, const[None]])
    turned = rotated(attn, turn[:, None], T)[:, 0, pos]  # [S + 1, D]: rotary is linear at each position
    return turned[:-1], turned[-1]


@torch.no_grad()
def attention_attribution(
    model: GPT, trace: Trace, layer: int, head: int, query: int, key: int, transcoders=None
) -> pd.DataFrame:
    """The pre-softmax score of (query, key) in `head` of `layer` (trace's attn.scores, soft-capped
    where the model caps) split into what each upstream source writes into q and k, norms frozen.
    Columns `source, side ("query" | "key"), position, score`; the scores add up to the real one
    (df.attrs["score"]); df.attrs["terms"] has one row per (query source, key source) pair."""
    cfg = model.config
    T = trace.n_tokens
    if not 0 <= layer < cfg.n_layer or not 0 <= head < cfg.n_head:
        raise PromptError(f"layer {layer}, head {head}: the model has {cfg.n_layer} layers of {cfg.n_head} heads")
    if not (0 <= key <= query < T):
        raise PromptError(f"query {query} and key {key} must satisfy 0 <= key <= query < {T} (a causal model)")
    q_names, q_vec = _sources(model, trace, layer, query, transcoders)
    k_names, k_vec = _sources(model, trace, layer, key, transcoders)
    q_parts, q0 = _side(model, trace, layer, query, "q", head, q_vec)
    k_parts, k0 = _side(model, trace, layer, key, "k", head, k_vec)
    q_all = torch.cat([q_parts, q0[None]])  # [S_q + 1, D], the constant last
    k_all = torch.cat([k_parts, k0[None]])
    spec = blocks(model)[layer].attn.spec
    raw = spec.scale * float(q_all.sum(0) @ k_all.sum(0))
    factor = spec.softcap * torch.tanh(torch.tensor(raw / spec.softcap)).item() / raw if spec.softcap and raw else 1.0
    terms = spec.scale * factor * (q_all @ k_all.T)  # [S_q + 1, S_k + 1]
    q_labels, k_labels = [*q_names, "bias"], [*k_names, "bias"]
    rows = [(n, "query", query, v) for n, v in zip(q_labels, (terms.sum(1) / 2).tolist())]
    rows += [(n, "key", key, v) for n, v in zip(k_labels, (terms.sum(0) / 2).tolist())]
    df = pd.DataFrame(rows, columns=["source", "side", "position", "score"])
    pairs = pd.DataFrame(
        {
            "query_source": [n for n in q_labels for _ in k_labels],
            "key_source": k_labels * len(q_labels),
            "score": terms.flatten().tolist(),
        }
    )
    df.attrs.update(
        score=float(trace.part(point("attn.scores", layer), (head, query, key))),
        terms=pairs,
        q=q_all.sum(0).cpu().numpy(),  # the parts' sums: the real q and k (after norms and rotary)
        k=k_all.sum(0).cpu().numpy(),
    )
    return df
