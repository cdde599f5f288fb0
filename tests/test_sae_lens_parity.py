"""gptviz's SAEs against SAELens's own (sae-lens, installed by the test extras): encode and the
reconstruction equal on 1,000 activations for each architecture, in both directions: an SAE that
SAELens saves loads in gptviz, and one gptviz saves (train_sae's writer) loads in SAELens."""

from __future__ import annotations

import pytest
import sae_lens  # in the test extras: absent, this module fails to import (never a silent skip)
import torch
from sae_helpers import random_sae

import gptviz
from gptviz.features import save_sae

ARCHS = ("standard", "topk", "jumprelu")


def _acts(d_in: int = 16, n: int = 1000) -> torch.Tensor:
    return torch.randn(n, d_in, generator=torch.Generator().manual_seed(7)) * 2.0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("norm", ["none", "constant_norm_rescale", "layer_norm"])
def test_gptviz_saved_sae_reads_the_same_in_sae_lens(tmp_path, arch, norm):
    ours = random_sae(arch, normalize_activations=norm, apply_b_dec_to_input=arch != "jumprelu")
    save_sae(ours, tmp_path)
    theirs = sae_lens.SAE.load_from_disk(str(tmp_path))
    assert theirs.cfg.architecture() == arch and theirs.cfg.metadata.hook_name == "blocks.1.hook_resid_post"
    x = _acts()
    with torch.no_grad():
        assert (ours.encode(x) - theirs.encode(x)).abs().max() <= 1e-5
        assert (ours.reconstruct(x) - theirs.decode(theirs.encode(x))).abs().max() <= 1e-5


def _lens_sae(arch: str, tmp_path):
    """An SAE made and saved by SAELens itself, every parameter random."""
    kinds = {
        "standard": (sae_lens.StandardSAEConfig, sae_lens.StandardSAE),
        "topk": (sae_lens.TopKSAEConfig, sae_lens.TopKSAE),
        "jumprelu": (sae_lens.JumpReLUSAEConfig, sae_lens.JumpReLUSAE),
    }
    config, model = kinds[arch]
    cfg = config(d_in=16, d_sae=40, **({"k": 5} if arch == "topk" else {}))
    cfg.metadata.hook_name = "blocks.0.hook_mlp_out"
    sae = model(cfg)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    sae.save_model(str(tmp_path))
    return sae


@pytest.mark.parametrize("arch", ARCHS)
def test_sae_lens_saved_sae_encodes_the_same_in_gptviz(tmp_path, arch):
    theirs = _lens_sae(arch, tmp_path)
    ours = gptviz.load_sae(tmp_path)
    assert (ours.site, ours.architecture, ours.d_sae) == ("blocks.0.mlp.out", arch, 40)
    x = _acts()
    with torch.no_grad():
        want = theirs.encode(x)
        assert (want != 0).any()
        assert (ours.encode(x) - want).abs().max() <= 1e-5
        assert (ours.decode(want) - theirs.decode(want)).abs().max() <= 1e-5


def test_the_shipped_sae_trained_by_gptviz_reads_the_same_in_sae_lens():
    """The SAE `python -m gptviz sae train` made for shakespeare-char, on 1,000 of the model's own
    activations at its site."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "checkpoints" / "shakespeare-char"
    folder = root / "saes" / "l2-resid-post-topk-8x"
    bundle = gptviz.load(root)
    ours = gptviz.load_sae(folder, model=bundle.model)
    theirs = sae_lens.SAE.load_from_disk(str(folder))
    text = (Path(__file__).resolve().parents[1] / "samples" / "shakespeare" / "hamlet.txt").read_text()[:4000]
    ids = bundle.tokenizer.encode(text)
    x = torch.cat([gptviz.trace(bundle.model, ids[i : i + 100]).tensor(ours.site) for i in range(0, 1000, 100)])
    assert x.shape == (1000, 192)
    with torch.no_grad():
        f = theirs.encode(x)
        assert (f != 0).sum(-1).float().mean() == 32
        assert (ours.encode(x) - f).abs().max() <= 1e-5
        assert (ours.reconstruct(x) - theirs.decode(f)).abs().max() <= 1e-5
