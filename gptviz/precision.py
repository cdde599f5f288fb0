"""How each family rounds in half precision: the one place that says so.

In float32 every family computes alike. In bf16 / fp16 each Hugging Face family rounds at its own
points, and a forward pass equals Hugging Face's only where it rounds at the same ones. Those points
are config fields (set by each family's record, formats/families.py), read here and nowhere else:

- RMSNorm: x normalised in float32, rounded to x's dtype, then times w (Hugging Face's LlamaRMSNorm);
  `norm_fp32_scale` (OLMo 2 / 3): times w in float32, rounded after; Gemma's (1 + w): in float32, rounded after.
- rotary: cos and sin rounded to q's dtype, then q and k turned (Llama and most);
  `rotary_fp32` (OLMo 1 / 2 / 3): q and k turned in float32, rounded after (rotation_dtype).
- attention scores: q kᵀ in q's dtype, the softmax in float32, the weights rounded after it;
  `attn_fp32` (GPT-Neo): q kᵀ in float32 too (attention.AttentionSpec.upcast; explicit path only).
- the tanh GELU: torch's kernel (Gemma's gelu_pytorch_tanh); `gelu_formula` gelu_new (GPT-2, GPT-J, Phi)
  or gelu_fast: Hugging Face's formula op by op, each op rounded to the dtype (FormulaGELU).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .config import GPTConfig

HALF = (torch.bfloat16, torch.float16)


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


def rotation_dtype(config: GPTConfig, dtype: torch.dtype) -> torch.dtype:
    """The dtype q and k are turned in: float32 where the family rotates in float32 (OLMo), else q's own
    (Hugging Face's Llama rounds cos and sin to q's dtype first)."""
    return torch.float32 if config.rotary_fp32 else dtype


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
    """The MLP's activation; the tanh GELU as the family's formula rounds it where it names one."""
    if config.activation == "gelu_tanh" and config.gelu_formula != "kernel":
        return FormulaGELU(config.gelu_formula)
    return ACTIVATIONS[config.activation]()
