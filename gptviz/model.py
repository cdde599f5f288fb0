"""The GPT model family: one decoder-only transformer, every variant chosen by GPTConfig.

Read top to bottom: norms -> positions (sin/cos, rotary) -> attention (its AttentionSpec: scale,
soft-cap, window) -> the KV cache -> attention -> MLP -> Block -> GPT. Submodule names equal GPT-2
checkpoint keys (transformer.wte, transformer.h.0.attn.c_attn, ...), so importing GPT-2 weights is
a name-for-name copy; the other families (Llama, Qwen, Gemma, NeoX, ...) are the same modules with
their config fields set, and formats/hf_decoders.py maps their weight names onto these. Probes
(gptviz.probes) mark every point the Trace contract names; nothing in here knows about capture.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import GPTConfig
from .errors import PromptError
from .probes import Probe

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


HALF = (torch.bfloat16, torch.float16)

# What every layer of the forward pass running in this thread would build alike, built once: the rotary
# cos and sin tables, (local, start, T, dtype, device) -> (cos, sin), and the causal masks, ("mask", T,
# offset, window, device) -> mask. None outside GPT.forward (a layer run on its own builds its own).
_shared: contextvars.ContextVar[dict | None] = contextvars.ContextVar("gptviz_shared", default=None)


def once_per_pass(key: tuple, build: Callable[[], Any], share: bool = True) -> Any:
    """build(), or what it gave earlier in this forward pass under the same key (see _shared); built
    afresh when not `share` or outside a forward pass."""
    memo = _shared.get() if share else None
    if memo is None:
        return build()
    if key not in memo:
        memo[key] = build()
    return memo[key]


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) * w, computed in float32; Gemma scales by (1 + w) instead of w.
    In half precision Llama-style (w, not 1 + w) rounds the normalised x to its dtype before the scale,
    as Hugging Face's LlamaRMSNorm does; Gemma's scales in float32 then rounds, as its own does."""

    def __init__(self, width: int, eps: float, affine: bool = True, plus_one: bool = False):
        super().__init__()
        self.eps, self.plus_one = eps, plus_one
        self.weight = nn.Parameter(torch.zeros(width) if plus_one else torch.ones(width)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is None:
            return h.to(x.dtype)
        if self.plus_one:
            return (h * (1.0 + self.weight.float())).to(x.dtype)
        if x.dtype in HALF:
            return self.weight * h.to(x.dtype)
        return (h * self.weight.float()).to(x.dtype)


class TorchRMSNorm(nn.RMSNorm):
    """torch's RMSNorm (what float32 checkpoints always ran), in half precision computed as Hugging
    Face's LlamaRMSNorm computes it: mean(x²) in float32, rounded to x's dtype, then times w; or, with
    fp32_scale (OLMo 2 / 3's RMSNorm), times w in float32, rounded after."""

    def __init__(self, width: int, eps: float, fp32_scale: bool = False):
        super().__init__(width, eps=eps)
        self.fp32_scale = fp32_scale

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype not in HALF:
            return super().forward(x)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., C) float32
        if self.fp32_scale:
            return (self.weight.float() * h).to(x.dtype)
        return self.weight * h.to(x.dtype)


def make_norm(config: GPTConfig, width: int | None = None) -> nn.Module:
    width = width or config.n_embd
    if config.norm == "rmsnorm":
        if config.norm_affine and not config.norm_plus_one:
            return TorchRMSNorm(width, config.norm_eps, config.norm_fp32_scale)  # torch's own in float32, as before
        return RMSNorm(width, config.norm_eps, config.norm_affine, config.norm_plus_one)
    return nn.LayerNorm(
        width, eps=config.norm_eps, elementwise_affine=config.norm_affine, bias=config.bias and config.norm_affine
    )


def sinusoidal_positions(block_size: int, n_embd: int) -> Tensor:
    """The fixed sin/cos table of 'Attention Is All You Need': even columns sin, odd cos."""
    pos = torch.arange(block_size, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    freq = torch.exp(torch.arange(0, n_embd, 2, dtype=torch.float64) * (-math.log(10000.0) / n_embd))
    table = torch.zeros(block_size, n_embd, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table.float()  # (T, C)


def rotary_frequencies(config: GPTConfig, local: bool) -> Tensor:
    """The rotation speed of each pair of rotating dimensions, (R/2,), with the config's scaling."""
    R = config.rotary_dim
    theta = config.rope_local_theta if local and config.rope_local_theta else config.rope_theta
    # on the CPU whatever the default device: on the meta device (GPT.empty) torch runs arange through its
    # Python reference, which imports its compiler stack (72 MB of a 1B model's load peak)
    steps = torch.arange(0, R, 2, dtype=torch.int64, device="cpu")
    inv_freq = 1.0 / (theta ** (steps.float() / R))  # (R/2,)
    if local and config.rope_local_theta:  # Gemma 3: the local layers keep the plain rotation
        return inv_freq
    if config.rope_scaling == "linear":  # positions divided by the factor
        return inv_freq / config.rope_factor
    if config.rope_scaling == "llama3":  # slow pairs slowed by the factor, fast ones kept, a blend between
        factor, old = config.rope_factor, config.rope_original_max
        low_wavelen, high_wavelen = old / config.rope_low_freq, old / config.rope_high_freq
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - config.rope_low_freq) / (config.rope_high_freq - config.rope_low_freq)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, blended, scaled)
    return inv_freq


def rotate(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """Rotary positions: turn each pair of x's first R dimensions by its angle; the rest pass.
    x: (B, H, T, D); cos, sin: (T, R). Pairs are the two halves (Llama, NeoX) or neighbours (GPT-J)."""
    R = cos.size(-1)
    x_rot, x_pass = x[..., :R], x[..., R:]
    if interleaved:
        pairs = x_rot.unflatten(-1, (R // 2, 2))
        turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    else:
        turned = torch.cat((-x_rot[..., R // 2 :], x_rot[..., : R // 2]), dim=-1)
    rotated = x_rot * cos + turned * sin
    return rotated if x.size(-1) == R else torch.cat((rotated, x_pass), dim=-1)  # no copy when every pair turns


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

    def mask(self, T: int, device: torch.device | str = "cpu", offset: int = 0) -> Tensor:
        return causal_mask(T, device, offset, self.window)

    def masks_nothing(self, T: int, offset: int) -> bool:
        """Whether mask(T, offset) is all True: one new token after `offset` reads every key its window holds."""
        return T == 1 and (not self.window or self.window > offset)


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


def causal_mask(T: int, device: torch.device | str = "cpu", offset: int = 0, window: int = 0) -> Tensor:
    """(T, offset + T) bools, True where query i (at position offset + i) may read key j (j <= offset + i,
    and with a window W only its last W keys: j > offset + i - W).
    offset: tokens already in a KV cache. Built per call: T² bytes, where a per-layer buffer of
    block_size² would be held by every layer for the model's lifetime."""
    mask = torch.ones(T, offset + T, dtype=torch.bool, device=device).tril_(offset)
    return mask.triu_(offset - window + 1) if window else mask


def attention_weights(scores: Tensor, mask: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Softmax over the keys each query may read (mask True); the others get exactly 0. Computed in
    float32 whatever the scores' dtype (as Hugging Face's eager attention), returned in `dtype` (q's and
    v's: float32 scores of an upcast spec are rounded here), by default the scores'."""
    weights = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1, dtype=torch.float32)
    return weights.to(dtype or scores.dtype)


class LayerCache:
    """One layer's keys and values of the tokens run so far, (B, H_kv, t, D) each, in buffers that grow
    by doubling (or hold `capacity` tokens from the start): a step writes only its own token's k and v,
    where concatenating would copy every earlier one again. Keys are kept after rotary: a key's
    rotation depends on its own position only."""

    def __init__(self, capacity: int = 0) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._n = 0
        self._capacity = capacity

    def __len__(self) -> int:
        return self._n

    @property
    def k(self) -> Tensor | None:
        return None if self._k is None else self._k[:, :, : self._n]

    @property
    def v(self) -> Tensor | None:
        return None if self._v is None else self._v[:, :, : self._n]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new tokens' keys and values (B, H_kv, T, D); return every key and value so far."""
        n, T = self._n, k.size(2)
        if self._k is None or n + T > self._k.size(2):
            size = max(self._capacity, 2 * (n + T))
            grown_k, grown_v = k.new_empty(*k.shape[:2], size, k.size(3)), v.new_empty(*v.shape[:2], size, v.size(3))
            if n:
                grown_k[:, :, :n], grown_v[:, :, :n] = self._k[:, :, :n], self._v[:, :, :n]
            self._k, self._v = grown_k, grown_v
        self._k[:, :, n : n + T], self._v[:, :, n : n + T] = k, v
        self._n = n + T
        return self.k, self.v


class KVCache:
    """The keys and values of every layer for the tokens already run: an input of the forward pass
    (`model(idx, cache=cache)`), which appends the new tokens' k, v and attends over all of them,
    so a step of generation runs only the new token. One cache per sequence (and per thread).
    capacity: the tokens it will hold at most, when known (its buffers are then allocated once)."""

    def __init__(self, n_layer: int, capacity: int = 0) -> None:
        self.layers = [LayerCache(capacity) for _ in range(n_layer)]

    def __len__(self) -> int:
        """Tokens held: the position the next token will take."""
        return len(self.layers[0])


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        C, H, Hkv, D = config.n_embd, config.n_head, config.kv_heads, config.head_dim
        self.n_head, self.n_kv_head, self.head_dim = H, Hkv, D
        self.c_attn = nn.Linear(C, (H + 2 * Hkv) * D, bias=config.bias and config.qkv_bias)  # q, k, v side by side
        self.qk_norm = config.qk_norm
        if config.qk_norm != "none":  # per head (Qwen3, Gemma 3) or over all heads at once (OLMo 2)
            self.q_norm = make_norm(config, D if config.qk_norm == "head" else H * D)
            self.k_norm = make_norm(config, D if config.qk_norm == "head" else Hkv * D)
        self.c_proj = nn.Linear(H * D, C, bias=config.bias and config.out_bias)
        self.ln_post = make_norm(config) if config.post_norm else None  # Gemma 2/3, OLMo 2
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        local = config.is_local(layer)
        self.spec = AttentionSpec(
            scale=config.attn_scale or 1.0 / math.sqrt(D),
            softcap=config.attn_softcap,
            window=config.sliding_window if local else 0,
            upcast=config.attn_fp32,
        )
        self.clip = config.qkv_clip
        self.rotary = config.pos_encoding == "rotary"
        self.interleaved = config.rotary_interleaved
        self.config, self.local = config, local
        if self.rotary:
            self.register_buffer("inv_freq", rotary_frequencies(config, local), persistent=False)
        self.q, self.k, self.v = Probe(), Probe(), Probe()
        self.scores, self.weights = Probe(), Probe()
        self.mask = Probe(batched=False)
        self.z, self.out = Probe(), Probe()  # each head's output before the merge; what the sub-layer adds

    def reset_buffers(self, device: torch.device) -> None:
        """Compute the rotary table again on device (after a build on the meta device)."""
        if self.rotary:
            self.inv_freq = rotary_frequencies(self.config, self.local).to(device)

    def rotation_in(self, start: int, T: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """rotation(start, T) rounded to dtype, computed once per forward pass for every layer alike (its
        frequencies depend on the config and whether the layer is local only): 30 layers of SmolLM2 would
        otherwise each build the same tables at every step of decoding."""

        def build() -> tuple[Tensor, Tensor]:
            cos, sin = self.rotation(start, T)
            return cos.to(dtype), sin.to(dtype)

        return once_per_pass((self.local, start, T, dtype, self.inv_freq.device), build)

    def mask_in(self, T: int, device: torch.device, offset: int) -> Tensor:
        """spec.mask(T, device, offset), built once per forward pass for the layers with this window; a
        fresh one where the mask probe is hooked (capture, an edit), which may keep or change it."""
        hooked = bool(self.mask._forward_hooks or self.mask._forward_pre_hooks)
        key = ("mask", T, offset, self.spec.window, device)
        return once_per_pass(key, lambda: self.spec.mask(T, device, offset), share=not hooked)

    def rotation(self, start: int, T: int) -> tuple[Tensor, Tensor]:
        """cos and sin (T, R) of positions start..start+T-1, as Hugging Face computes them (in float32,
        whatever the model's dtype; the caller rounds them to q's dtype, as Hugging Face does)."""
        pos = torch.arange(start, start + T, device=self.inv_freq.device, dtype=torch.float32)
        angles = pos[:, None] * self.inv_freq.float()[None, :]  # (T, R/2)
        angles = angles.repeat_interleave(2, dim=-1) if self.interleaved else torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def project(self, z: Tensor) -> Tensor:
        """What the sub-layer adds to the residual stream from each head's output z (B, H, T, D):
        heads merged, c_proj, then the post-norm where the model has one."""
        B, H, T, D = z.shape
        y = z.transpose(1, 2).contiguous().view(B, T, H * D)  # merge heads: (B, T, H·D)
        y = self.resid_dropout(self.c_proj(y))  # (B, T, C)
        return y if self.ln_post is None else self.ln_post(y)

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        B, T, C = x.size()
        H, Hkv, D = self.n_head, self.n_kv_head, self.head_dim
        P = len(cache) if cache is not None else 0  # tokens before these: the queries' position offset
        q, k, v = self.c_attn(x).split([H * D, Hkv * D, Hkv * D], dim=2)
        if self.clip:  # OLMo 1
            q, k, v = q.clamp(-self.clip, self.clip), k.clamp(-self.clip, self.clip), v.clamp(-self.clip, self.clip)
        if self.qk_norm == "all":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, H_kv, T, D)
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary:
            if self.config.rotary_fp32:  # OLMo: q and k turned in float32, rounded after (a no-op in float32)
                cos, sin = self.rotation_in(P, T, torch.float32)  # (T, R)
                q = rotate(q, cos, sin, self.interleaved).to(q.dtype)
                k = rotate(k, cos, sin, self.interleaved).to(k.dtype)
            else:  # as Hugging Face's Llama: cos and sin rounded to q's dtype first
                cos, sin = self.rotation_in(P, T, q.dtype)  # (T, R)
                q, k = rotate(q, cos, sin, self.interleaved), rotate(k, cos, sin, self.interleaved)
        q, k = self.q(q), self.k(k)
        v = v.view(B, T, Hkv, D).transpose(1, 2)  # (B, H_kv, T, D)
        if self.rotary or self.qk_norm != "none":  # q and k are new tensors: a view would keep c_attn's whole
            v = v.contiguous()  # output alive in a Trace (H + 2 H_kv heads' worth) for H_kv heads of values
        v = self.v(v)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, P + T, D)
        spec = self.spec
        if _explicit.get() or spec.explicit_only(q.dtype):  # the attention weights exist as a tensor only here
            scores = self.scores(spec.scores(q, k))  # (B, H, T, P + T)
            built = self.mask_in(T, x.device, P)
            mask = self.mask(built)  # (T, P + T)
            if mask is built and spec.masks_nothing(T, P):  # nothing to mask (an edited mask, a new tensor,
                # is applied): the same softmax, bit for bit
                weights = self.weights(F.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype))
            else:
                weights = self.weights(attention_weights(scores, mask, v.dtype))  # (B, H, T, P + T)
            y = grouped_matmul(self.attn_dropout(weights), v)  # (B, H, T, D)
        else:
            p = self.attn_dropout.p if self.training else 0.0
            if P == 0 and not spec.window:  # is_causal aligns the mask top-left: right only without a cache
                masking = dict(is_causal=True)
            elif spec.masks_nothing(T, P):  # one new token reads every key
                masking = dict(attn_mask=None)
            else:
                masking = dict(attn_mask=spec.mask(T, x.device, P))
            # on a GPU, enable_gqa with a mask falls back to the slow kernel: there the copies are cheaper
            if Hkv != H and SDPA_GQA and (x.device.type == "cpu" or masking.get("attn_mask") is None):
                masking["enable_gqa"] = True
            else:
                k, v = expand_kv(k, H), expand_kv(v, H)
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, scale=spec.scale, **masking)  # (B, H, T, D)
        y = self.z(y)  # heads still separate: where a head can be read or ablated on its own
        return self.out(self.project(y))


class FormulaGELU(nn.GELU):
    """The tanh GELU as a Hugging Face formula computes it: in bf16 / fp16 op by op, each op rounded to the
    dtype (GPT-2's gelu_new, or gelu_fast), so a half-precision forward equals Hugging Face's; in float32
    torch's kernel, as before (the formula and the kernel agree there to float32 rounding)."""

    def __init__(self, formula: str):
        super().__init__(approximate="tanh")
        self.formula = formula

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype not in HALF:
            return super().forward(x)
        if self.formula == "gelu_fast":
            return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": lambda: nn.ReLU(),
    "silu": lambda: nn.SiLU(),
}


def activation(config: GPTConfig) -> nn.Module:
    if config.activation == "gelu_tanh" and config.gelu_formula != "kernel":
        return FormulaGELU(config.gelu_formula)
    return ACTIVATIONS[config.activation]()


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        C, F_, bias = config.n_embd, config.mlp_dim, config.bias and config.mlp_bias
        self.c_fc = nn.Linear(C, F_, bias=bias)  # up
        self.c_gate = nn.Linear(C, F_, bias=bias) if config.mlp_gated else None  # SwiGLU / GeGLU's gate
        self.act = activation(config)
        self.c_proj = nn.Linear(F_, C, bias=bias)  # down
        self.ln_post = make_norm(config) if config.post_norm else None  # Gemma 2/3, OLMo 2
        self.dropout = nn.Dropout(config.dropout)
        # what the MLP reads (`in` is a keyword, so registered by name: the point is blocks.{l}.mlp.in);
        # the down projection's input (the neurons); what the sub-layer adds
        self.add_module("in", Probe())
        self.hidden, self.out = Probe(), Probe()

    def neurons(self, x: Tensor) -> Tensor:
        """The down projection's input: act(c_fc(x)), or act(gate(x)) * up(x) in a gated MLP. (B, T, F)."""
        if self.c_gate is None:
            return self.act(self.c_fc(x))
        return self.act(self.c_gate(x)) * self.c_fc(x)

    def project(self, h: Tensor) -> Tensor:
        """What the sub-layer adds to the residual stream from its neurons: down, then any post-norm."""
        y = self.dropout(self.c_proj(h))  # (B, T, C)
        return y if self.ln_post is None else self.ln_post(y)

    def forward(self, x: Tensor) -> Tensor:
        x = self._modules["in"](x)
        return self.out(self.project(self.hidden(self.neurons(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        pre = config.pre_norm  # OLMo 2 has none: its norms sit after the sub-layers
        self.ln_1 = make_norm(config) if pre else nn.Identity()
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = make_norm(config) if pre else nn.Identity()
        self.mlp = MLP(config)
        self.parallel = config.parallel
        self.resid_pre, self.resid_mid, self.resid_post = Probe(), Probe(), Probe()

    def mlp_input(self, resid_pre: Tensor, resid_mid: Tensor) -> Tensor:
        """What the MLP reads: ln_2 of resid_mid, or of resid_pre in a parallel block (GPT-NeoX)."""
        return self.ln_2(resid_pre if self.parallel else resid_mid)

    def residual_out(self, resid_pre: Tensor, attn_out: Tensor | None, resid_mid: Tensor, mlp_out: Tensor) -> Tensor:
        """resid_post: resid_mid + mlp.out, or in a parallel block resid_pre + (attn.out + mlp.out), Hugging
        Face's order for GPT-NeoX ((mlp + attn) + x), which differs from (x + attn) + mlp by a rounding.
        attn_out is read only in a parallel block; None there sums resid_mid + mlp.out (an edited resid_mid)."""
        if self.parallel and attn_out is not None:
            return resid_pre + (attn_out + mlp_out)
        return resid_mid + mlp_out

    def forward(self, x: Tensor, cache: LayerCache | None = None) -> Tensor:
        pre = self.resid_pre(x)
        attn = self.attn(self.ln_1(pre), cache)
        added = pre + attn
        mid = self.resid_mid(added)
        mlp = self.mlp(self.mlp_input(pre, mid))
        # an edited resid_mid (an intervention, steering) carries on, as in a sequential block, in a parallel one too
        return self.resid_post(self.residual_out(pre, attn if mid is added else None, mid, mlp))


def in_out_layout(weight: Tensor) -> Tensor:
    """A Linear's weight, still [out, in] as nn.Linear reads it, with its values laid out in memory as
    [in, out]: the transpose of a contiguous [in, out] tensor. F.linear(x, w) then calls addmm with wᵀ,
    that contiguous matrix, as Hugging Face's Conv1D does; on the CPU in float32 a one-row product (a
    step of decoding) reads it faster (GPT-2 small's 12 blocks: 22.6 ms a token against 25.1 ms), and
    the prompt's T-row products take the same time. GPT-2's files store these weights [in, out], so its
    import keeps them so at no cost (formats/families.py conv1d); the other families' files store [out, in],
    and their block weights are laid out so where the load converts them anyway (formats/bundle.py
    fill_model: a bf16 / fp16 file computed in float32 on the CPU)."""
    return weight.t().contiguous().t()


# The Linear weights of a block (after "transformer.h.<i>."): the products a step of decoding runs per layer.
BLOCK_LINEARS = (
    "attn.c_attn.weight",
    "attn.c_proj.weight",
    "mlp.c_fc.weight",
    "mlp.c_gate.weight",
    "mlp.c_proj.weight",
)


def is_block_linear(name: str) -> bool:
    """Whether a parameter name is one of a block's Linear weights (BLOCK_LINEARS)."""
    return name.startswith("transformer.h.") and name.endswith(BLOCK_LINEARS)


# A [C, V] copy of an LM head's weight, with the weight it copies, while one_row_head() runs in this thread.
_head_t: contextvars.ContextVar[tuple[Tensor, Tensor] | None] = contextvars.ContextVar("gptviz_head_t", default=None)
_HEAD_COPIES = threading.Lock()  # guards LMHead._shared and _users: one copy for every thread decoding at once


class LMHead(nn.Linear):
    """The unembedding, then the final soft-cap where the model has one (Gemma 2): the logits."""

    def __init__(self, n_embd: int, vocab_size: int, softcap: float = 0.0):
        super().__init__(n_embd, vocab_size, bias=False)
        self.softcap = softcap
        self._shared: tuple[Tensor, int, Tensor] | None = None  # (weight, its version, the [C, V] copy)
        self._users = 0

    def forward(self, x: Tensor) -> Tensor:
        copy = _head_t.get()
        # the same product x Wᵀ, read from W stored [C, V] when one_row_head holds a copy of this weight
        logits = x @ copy[1] if copy is not None and copy[0] is self.weight else super().forward(x)
        return torch.tanh(logits / self.softcap) * self.softcap if self.softcap else logits

    @contextlib.contextmanager
    def one_row_head(self) -> Iterator[None]:
        """Within this block, in this thread, the head multiplies by a [C, V] copy of its weight (made
        here, dropped on leaving). On the CPU in float32 a one-row product reads W that way 1.6x as fast
        as from the [V, C] weight (GPT-2's head: 5.6 ms against 9.1 ms of CPU time): what a step of
        decoding does, once per token. Equal to the plain head within float32 rounding; in bf16 and
        fp16 that layout is slower, so decoding asks for it in float32 only (generation._decoding_head).

        Blocks open at once (a class of 30 pressing Generate: 154 MB each for GPT-2) share one copy, made
        again if the weight was edited in place since (its version moved), dropped when the last leaves."""
        w = self.weight
        with _HEAD_COPIES:
            held = self._shared
            if held is None or held[0] is not w or held[1] != w._version:
                held = self._shared = (w, w._version, w.detach().t().contiguous())
            self._users += 1
        token = _head_t.set((w, held[2]))
        try:
            yield
        finally:
            _head_t.reset(token)
            with _HEAD_COPIES:
                self._users -= 1
                if not self._users:
                    self._shared = None


class GPT(nn.Module):
    """A GPT-style decoder. `model(idx)` maps [B, T] token ids to [B, T, V] logits."""

    def __init__(self, config: GPTConfig, init: bool = True):
        super().__init__()
        self.config = config

        def embedding(n: int) -> nn.Embedding:  # without init, no normal_: on the meta device torch runs it
            # through its Python reference, which imports its compiler stack (72 MB of a 1B model's load peak)
            return (
                nn.Embedding(n, config.n_embd)
                if init
                else nn.Embedding(n, config.n_embd, _weight=torch.empty(n, config.n_embd))
            )

        self.transformer = nn.ModuleDict(
            dict(
                wte=embedding(config.vocab_size),
                drop=nn.Dropout(config.dropout),
                embed=Probe(),
                h=nn.ModuleList([Block(config, l) for l in range(config.n_layer)]),
                ln_f=make_norm(config),
            )
        )
        if config.pos_encoding == "learned":
            self.transformer.wpe = embedding(config.block_size)
        elif config.pos_encoding == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_positions(config.block_size, config.n_embd), persistent=False)
        self.lm_head = LMHead(config.n_embd, config.vocab_size, config.final_softcap)
        if init:
            self.apply(self._init_weights)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):  # GPT-2: scale residual projections by depth
                    nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        if config.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight

    @staticmethod
    def _init_weights(module: nn.Module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def device(self) -> torch.device:
        return self.transformer.wte.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes in (its weights')."""
        return self.transformer.wte.weight.dtype

    @classmethod
    def empty(cls, config: GPTConfig) -> GPT:
        """The model's structure with no storage behind it (the meta device): nothing allocated or
        initialised. A loader fills every parameter (formats/bundle.py fill), then reset_buffers."""
        with torch.device("meta"):
            return cls(config, init=False)

    def reset_buffers(self, device: torch.device) -> None:
        """Compute the buffers (rotary tables, the sin/cos position table) on device: after a build on
        the meta device they have no values."""
        for module in self.modules():
            if isinstance(module, CausalSelfAttention):
                module.reset_buffers(device)
        if self.config.pos_encoding == "sinusoidal":
            self.sinusoid = sinusoidal_positions(self.config.block_size, self.config.n_embd).to(device)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights counted once

    def check_ids(self, idx: Tensor, past: int = 0) -> None:
        """Raise PromptError, with the reason, for input the model cannot run (the ids' range is
        checked in eval mode only). past: tokens already in the KV cache."""
        if idx.dim() != 2:
            raise PromptError(f"expected token ids of shape [B, T], got {list(idx.shape)}")
        if idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise PromptError(f"token ids must be integers, got {idx.dtype}")
        T = idx.size(1)
        if T == 0:
            raise PromptError("the prompt is empty: give at least one token")
        if past and self.config.block_size < past + T:
            raise PromptError(
                f"the cache holds {past} tokens and {T} more were given, but the model reads at most "
                f"block_size={self.config.block_size}"
            )
        if self.config.block_size < T:
            raise PromptError(
                f"the prompt has {T} tokens but the model reads at most block_size={self.config.block_size}; "
                f"keep the last {self.config.block_size}"
            )
        if self.training:  # reading the ids' range syncs a GPU: not on every training step
            return
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= self.config.vocab_size:
            bad = lo if lo < 0 else hi
            raise PromptError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size - 1}]")

    def forward(self, idx: Tensor, explicit: bool = False, cache: KVCache | None = None) -> Tensor:
        """Logits at every position of idx. explicit=True builds the attention weights as a tensor (see
        explicit_attention); the default runs fused scaled_dot_product_attention. cache: the keys and
        values of the tokens before idx (KVCache), which this call extends by idx's; idx then starts at
        position len(cache)."""
        past = len(cache) if cache is not None else 0
        self.check_ids(idx, past)
        token = _shared.set({})
        try:
            with explicit_attention() if explicit else contextlib.nullcontext():
                return self._logits(idx, cache, past)
        finally:
            _shared.reset(token)

    def _logits(self, idx: Tensor, cache: KVCache | None = None, past: int = 0) -> Tensor:
        B, T = idx.size()
        x = self.transformer.wte(idx)  # (B, T, C)
        if self.config.embed_scale != 1.0:  # Gemma: sqrt(C), rounded to the model's dtype as Hugging Face rounds it
            x = x * torch.tensor(self.config.embed_scale, dtype=x.dtype, device=x.device)
        if self.config.pos_encoding == "learned":
            x = x + self.transformer.wpe(torch.arange(past, past + T, device=idx.device))  # (T, C)
        elif self.config.pos_encoding == "sinusoidal":
            x = x + self.sinusoid[past : past + T].to(x.dtype)  # (T, C); rotary positions act inside attention
        x = self.transformer.embed(self.transformer.drop(x))
        for l, block in enumerate(self.transformer.h):
            x = block(x) if cache is None else block(x, cache.layers[l])
        return self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
