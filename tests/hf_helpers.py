"""Hugging Face GPT-2 models with random weights: the reference our capture points, lens and
interventions are checked against (a model we did not write)."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def hf_random(seed: int = 0, **overrides) -> GPT2LMHeadModel:
    """A random GPT2LMHeadModel with random norm gains and biases and larger weights than HF's init,
    so a test cannot pass because a parameter happens to be zero or one."""
    torch.manual_seed(seed)
    cfg = dict(vocab_size=37, n_positions=32, n_layer=3, n_head=4, n_embd=48, bos_token_id=0, eos_token_id=0)
    hf = GPT2LMHeadModel(GPT2Config(**{**cfg, **overrides})).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
            elif ".ln_" in name or "ln_f" in name:
                p.copy_(1.0 + torch.randn_like(p) * 0.1)
            else:
                p.copy_(torch.randn_like(p) * 0.2)
    return hf
