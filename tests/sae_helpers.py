"""Hand-made SAEs for the tests: random weights of any architecture, on a tiny model's site."""

from __future__ import annotations

import torch

from gptviz.features import SAE, SAEConfig


def random_sae(
    arch: str = "topk", d_in: int = 16, d_sae: int = 48, site: str = "blocks.1.resid_post", seed: int = 0, **cfg
) -> SAE:
    """An SAE with every parameter random (b_dec, b_enc and threshold too, so none can pass by being 0)."""
    g = torch.Generator().manual_seed(seed)
    k = cfg.pop("k", 6 if arch == "topk" else None)
    sae = SAE(SAEConfig(arch, d_in, d_sae, site, k=k, **cfg))
    with torch.no_grad():
        for name, p in sae.named_parameters():
            scale = 0.05 if name == "threshold" else 0.3
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return sae.requires_grad_(False)
