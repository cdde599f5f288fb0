"""Shared test helpers: random-weight models of any shape, built in memory."""

from __future__ import annotations

import itertools

import pytest
import torch

import gptviz

VARIANTS = [
    dict(pos_encoding=p, norm=n, activation=a, bias=b, tie_weights=t)
    for p, n, a, b, t in itertools.product(
        ("learned", "sinusoidal"), ("layernorm", "rmsnorm"), ("gelu", "gelu_tanh", "relu"), (True, False), (True, False)
    )
]


def variant_id(v: dict) -> str:
    return "-".join(str(x) for x in v.values())


def tiny_model(seed: int = 0, **overrides) -> gptviz.GPT:
    """A small random-weight GPT in eval mode. Biases and norm gains are randomised too, so a test
    cannot pass because a parameter happens to be zero or one."""
    torch.manual_seed(seed)
    cfg = dict(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)
    model = gptviz.GPT(gptviz.GPTConfig(**{**cfg, **overrides})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name or "ln_f" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("weight") else 0.0))
    return model


@pytest.fixture
def model():
    return tiny_model()
