"""How positions enter the model: the fixed sin/cos table added to the embeddings, or rotary positions
turning q and k inside attention. Rotary variants (how a family scales the rotation speeds) are a small
registry, ROPE_SCALINGS, keyed by GPTConfig.rope_scaling, as Hugging Face keeps its rope_type functions."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .config import GPTConfig


def sinusoidal_positions(block_size: int, n_embd: int) -> Tensor:
    """The fixed sin/cos table of 'Attention Is All You Need': even columns sin, odd cos."""
    pos = torch.arange(block_size, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    freq = torch.exp(torch.arange(0, n_embd, 2, dtype=torch.float64) * (-math.log(10000.0) / n_embd))
    table = torch.zeros(block_size, n_embd, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table.float()  # (T, C)


def _linear(inv_freq: Tensor, config: GPTConfig) -> Tensor:
    """Positions divided by the factor (Gemma 3's global layers)."""
    return inv_freq / config.rope_factor


def _llama3(inv_freq: Tensor, config: GPTConfig) -> Tensor:
    """Slow pairs slowed by the factor, fast ones kept, a blend between (Llama 3.1 / 3.2)."""
    factor, old = config.rope_factor, config.rope_original_max
    low_wavelen, high_wavelen = old / config.rope_low_freq, old / config.rope_high_freq
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - config.rope_low_freq) / (config.rope_high_freq - config.rope_low_freq)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, blended, scaled)


# GPTConfig.rope_scaling -> how it changes the plain rotation speeds (R/2,)
ROPE_SCALINGS: dict[str, Callable[[Tensor, GPTConfig], Tensor]] = {
    "none": lambda inv_freq, config: inv_freq,
    "linear": _linear,
    "llama3": _llama3,
}


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
    return ROPE_SCALINGS[config.rope_scaling](inv_freq, config)


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
