"""Attention's arithmetic and its implementations, chosen from one table.

AttentionSpec says how one layer turns q and k into weights (scale, soft-cap, window, upcast); the
functions below it are what every rebuild (capture, head scores, scans) shares with the forward pass.
ATTENTION_FUNCTIONS holds the two ways a layer runs, as Hugging Face's ALL_ATTENTION_FUNCTIONS does:
"explicit" builds the scores, mask and weights as tensors (their probes see them); "fused" runs torch's
scaled_dot_product_attention. Which one runs: `implementation`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .decoding import StaticPosition
from .precision import HALF

# Whether attention computes its weights as a tensor (probes on scores, mask and weights see
# them) or runs the fused kernel. Per thread and per call, never a module attribute: Streamlit
# serves every session from one shared model.
_explicit: contextvars.ContextVar[bool] = contextvars.ContextVar("gptviz_explicit_attention", default=False)


@contextlib.contextmanager
def explicit_attention(on: bool = True) -> Iterator[None]:
    """Within this block, attention in this thread builds its scores and weights explicitly."""
    token = _explicit.set(on)
    try:
        yield
    finally:
        _explicit.reset(token)


@dataclass(frozen=True)
class AttentionSpec:
    """What turns one layer's q and k into its attention weights: the scale, the soft-cap and the
    window. The forward pass and every rebuild (capture, head scores) use these same functions."""

    scale: float  # multiplies q·k: 1/√D unless the model says otherwise
    softcap: float = 0.0  # scores -> cap * tanh(scores / cap); 0: no cap
    window: int = 0  # a query reads only its last `window` keys (itself included); 0: every earlier key
    # in bf16 / fp16, q kᵀ in float32 (GPT-Neo: Hugging Face's attention casts q and k up "to avoid
    # overflow"); the scores stay float32 into the softmax, the weights are rounded after it
    upcast: bool = False

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """What the softmax reads, before the mask: (..., H, T, D), (..., H_kv, S, D) -> (..., H, T, S)."""
        if self.upcast and q.dtype in HALF:
            q, k = q.float(), k.float()
        return attention_scores(q, k, self.scale, self.softcap)

    def explicit_only(self, dtype: torch.dtype) -> bool:
        """Whether attention in this dtype runs only explicitly: a soft-cap the fused kernel cannot apply,
        or scores upcast in half precision (Hugging Face has no fused forward for either to equal)."""
        return bool(self.softcap) or (self.upcast and dtype in HALF)

    def mask(self, T: int, device: torch.device | str = "cpu", offset: int | StaticPosition = 0) -> Tensor:
        return causal_mask(T, device, offset, self.window)

    def masks_nothing(self, T: int, offset: int | StaticPosition) -> bool:
        """Whether mask(T, offset) is all True: one new token after `offset` reads every key its window holds
        (never on a static cache, whose empty slots are masked)."""
        return isinstance(offset, int) and T == 1 and (not self.window or self.window > offset)


# torch >= 2.5 lets the fused kernel read each key/value head for its group of query heads itself
# (enable_gqa): on the CPU that spares copying k and v H / H_kv times, bit-for-bit the same result.
SDPA_GQA = torch.torch_version.TorchVersion(torch.__version__) >= (2, 5)


def expand_kv(k: Tensor, n_head: int) -> Tensor:
    """Grouped-query attention: (..., H_kv, S, D) -> (..., H, S, D), query head h reading KV head h // (H / H_kv)."""
    groups = n_head // k.size(-3)
    return k if groups == 1 else k.repeat_interleave(groups, dim=-3)


def grouped_matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b with b's heads shared by groups of a's: (..., H, T, X), (..., H_kv, X, Y) -> (..., H, T, Y),
    head h reading b's head h // (H / H_kv), as a @ expand_kv(b) but without copying b H / H_kv times.
    The heads of one group are consecutive, so they stack into one product of G·T rows per key/value head."""
    H, T, Hkv = a.size(-3), a.size(-2), b.size(-3)
    groups = H // Hkv
    if groups == 1:
        return a @ b
    lead = a.shape[:-3]
    out = a.reshape(*lead, Hkv, groups * T, a.size(-1)) @ b  # (..., H_kv, G·T, Y)
    return out.view(*lead, H, T, b.size(-1))


def attention_scores(q: Tensor, k: Tensor, scale: float | None = None, softcap: float = 0.0) -> Tensor:
    """q kᵀ × scale (1/√D by default) for every query and key, soft-capped where the model caps, before
    the mask: (..., H, T, D), (..., H_kv, S, D) -> (..., H, T, S)."""
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    s = grouped_matmul(q, k.transpose(-2, -1))
    if scale != 1.0:
        s = s * scale
    return torch.tanh(s / softcap) * softcap if softcap else s


def causal_mask(
    T: int, device: torch.device | str = "cpu", offset: int | StaticPosition = 0, window: int = 0
) -> Tensor:
    """(T, offset + T) bools, True where query i (at position offset + i) may read key j (j <= offset + i,
    and with a window W only its last W keys: j > offset + i - W).
    offset: tokens already in a KV cache. Built per call: T² bytes, where a per-layer buffer of
    block_size² would be held by every layer for the model's lifetime. A StaticPosition offset gives
    (T, its keys) bools from the position on the device, with no value read back."""
    if isinstance(offset, StaticPosition):
        i, j = offset.positions(T)[:, None], torch.arange(offset.keys, device=device)[None, :]
        return (j <= i) & (j > i - window) if window else j <= i
    mask = torch.ones(T, offset + T, dtype=torch.bool, device=device).tril_(offset)
    return mask.triu_(offset - window + 1) if window else mask


def attention_weights(scores: Tensor, mask: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Softmax over the keys each query may read (mask True); the others get exactly 0. Computed in
    float32 whatever the scores' dtype (as Hugging Face's eager attention), returned in `dtype` (q's and
    v's: float32 scores of an upcast spec are rounded here), by default the scores'."""
    weights = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1, dtype=torch.float32)
    return weights.to(dtype or scores.dtype)


def explicit(attn: Any, q: Tensor, k: Tensor, v: Tensor, past: int | StaticPosition) -> Tensor:
    """Attention with its scores, mask and weights built as tensors, each through its probe on `attn`
    (a CausalSelfAttention): (B, H, T, D), (B, H_kv, P + T, D) x 2 -> (B, H, T, D)."""
    T, spec = q.size(2), attn.spec
    scores = attn.scores(spec.scores(q, k))  # (B, H, T, P + T)
    built = attn.mask_in(T, q.device, past)
    mask = attn.mask(built)  # (T, P + T)
    if mask is built and spec.masks_nothing(T, past):  # nothing to mask (an edited mask, a new tensor,
        # is applied): the same softmax, bit for bit
        weights = attn.weights(F.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype))
    else:
        weights = attn.weights(attention_weights(scores, mask, v.dtype))  # (B, H, T, P + T)
    return grouped_matmul(attn.attn_dropout(weights), v)


def fused(attn: Any, q: Tensor, k: Tensor, v: Tensor, past: int | StaticPosition) -> Tensor:
    """torch's scaled_dot_product_attention, masked as the spec says; no weights exist as a tensor."""
    T, H, spec = q.size(2), q.size(1), attn.spec
    p = attn.attn_dropout.p if attn.training else 0.0
    if past == 0 and not spec.window:  # is_causal aligns the mask top-left: right only without a cache
        masking: dict[str, Any] = dict(is_causal=True)
    elif spec.masks_nothing(T, past):  # one new token reads every key
        masking = dict(attn_mask=None)
    else:
        masking = dict(attn_mask=spec.mask(T, q.device, past))
    # on a GPU, enable_gqa with a mask falls back to the slow kernel: there the copies are cheaper
    if k.size(1) != H and SDPA_GQA and (q.device.type == "cpu" or masking.get("attn_mask") is None):
        masking["enable_gqa"] = True
    else:
        k, v = expand_kv(k, H), expand_kv(v, H)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=p, scale=spec.scale, **masking)


# name -> attention(attn, q, k, v, past) -> (B, H, T, D)
ATTENTION_FUNCTIONS: dict[str, Callable[..., Tensor]] = {"explicit": explicit, "fused": fused}


def implementation(spec: AttentionSpec, dtype: torch.dtype) -> str:
    """Which ATTENTION_FUNCTIONS entry a layer runs: explicit where asked (explicit_attention) or where
    the spec cannot run fused in this dtype, else fused."""
    return "explicit" if _explicit.get() or spec.explicit_only(dtype) else "fused"
