"""Each head's own weights, as TransformerLens names them: one layer's fused c_attn and c_proj read as
W_Q, W_K, W_V [heads, C, D] and W_O [H, D, C], and the two circuits a head is read by (Elhage et al.,
"A Mathematical Framework for Transformer Circuits"): QK = W_Q W_Kᵀ [C, C], the bilinear form of a
query's and a key's residual that the scores are (before the scale, any rotary, q/k norm or bias), and
OV = W_V W_O [C, C], what the head writes to the residual stream for each residual it reads. Views of
the model's own parameters (no copy), detached; a key/value head serves H / H_kv query heads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from torch import Tensor

from ..checks import whole
from ..model import GPT, CausalSelfAttention


@dataclass(frozen=True)
class HeadWeights:
    """One layer's attention weights per head. x @ W_Q[h] + b_Q[h] is head h's query from the residual x
    after ln_1 (before any q norm and rotary); z[h] @ W_O[h], summed over heads, plus b_O is attn.out
    before any post-norm."""

    W_Q: Tensor  # [H, C, D]
    W_K: Tensor  # [H_kv, C, D]
    W_V: Tensor  # [H_kv, C, D]
    W_O: Tensor  # [H, D, C]
    b_Q: Tensor | None  # [H, D]
    b_K: Tensor | None  # [H_kv, D]
    b_V: Tensor | None  # [H_kv, D]
    b_O: Tensor | None  # [C]

    def kv_head(self, head: int) -> int:
        """The key/value head query head `head` reads (grouped-query attention)."""
        return head // (self.W_Q.size(0) // self.W_K.size(0))


def head_weights(model: GPT, layer: int) -> HeadWeights:
    """Layer `layer`'s attention weights per head (views of c_attn and c_proj)."""
    layer = whole(layer, "layer", 0, model.config.n_layer - 1)
    attn = cast(CausalSelfAttention, model.get_submodule(f"transformer.h.{layer}.attn"))
    H, Hkv, D = attn.n_head, attn.n_kv_head, attn.head_dim
    w = attn.c_attn.weight.detach()  # [(H + 2 H_kv) D, C]: q, k, v rows side by side
    C = w.size(1)
    q, k, v = w.split([H * D, Hkv * D, Hkv * D], dim=0)
    b = attn.c_attn.bias.detach() if attn.c_attn.bias is not None else None
    bq, bk, bv = b.split([H * D, Hkv * D, Hkv * D]) if b is not None else (None, None, None)
    o = attn.c_proj.weight.detach()  # [C, H D]
    return HeadWeights(
        W_Q=q.view(H, D, C).transpose(1, 2),
        W_K=k.view(Hkv, D, C).transpose(1, 2),
        W_V=v.view(Hkv, D, C).transpose(1, 2),
        W_O=o.view(C, H, D).permute(1, 2, 0),
        b_Q=None if bq is None else bq.view(H, D),
        b_K=None if bk is None else bk.view(Hkv, D),
        b_V=None if bv is None else bv.view(Hkv, D),
        b_O=None if attn.c_proj.bias is None else attn.c_proj.bias.detach(),
    )


def qk_circuit(model: GPT, layer: int, head: int) -> Tensor:
    """W_Q W_Kᵀ of one head, [C, C]: x_i QK x_jᵀ is query i's score on key j before the scale (with no
    bias, rotary or q/k norm between)."""
    w = head_weights(model, layer)
    head = whole(head, "head", 0, w.W_Q.size(0) - 1)
    return w.W_Q[head] @ w.W_K[w.kv_head(head)].T


def ov_circuit(model: GPT, layer: int, head: int) -> Tensor:
    """W_V W_O of one head, [C, C]: what the head adds to the residual stream (before c_proj's bias and
    any post-norm) per unit of attention on a key whose residual after ln_1 is x: x OV."""
    w = head_weights(model, layer)
    head = whole(head, "head", 0, w.W_Q.size(0) - 1)
    return w.W_V[w.kv_head(head)] @ w.W_O[head]
