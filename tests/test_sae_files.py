"""SAEs on disk: SAELens's format and Gemma Scope's, read as untrusted files; the equations of
encode / decode checked against NumPy on hand-made weights."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from conftest import tiny_model
from sae_helpers import random_sae
from safetensors.torch import save_file

import gptviz
from gptviz.features import SAEError, contract_site, hook_name, save_sae


def test_hook_names_map_to_contract_sites_and_back():
    pairs = {
        "blocks.2.hook_resid_post": "blocks.2.resid_post",
        "blocks.0.hook_resid_pre": "blocks.0.resid_pre",
        "blocks.3.hook_resid_mid": "blocks.3.resid_mid",
        "blocks.1.hook_mlp_out": "blocks.1.mlp.out",
        "blocks.1.hook_attn_out": "blocks.1.attn.out",
        "blocks.4.mlp.hook_post": "blocks.4.mlp.hidden",
        "blocks.5.attn.hook_z": "blocks.5.attn.z",
    }
    for hook, site in pairs.items():
        assert contract_site(hook) == site
        assert contract_site(site) == site  # a contract name is taken as it is
        assert hook_name(site) == hook
    with pytest.raises(SAEError, match="not a point gptviz knows"):
        contract_site("blocks.2.hook_nonsense")
    with pytest.raises(SAEError, match="map"):
        contract_site("blocks.0.attn.weights")


def _np(sae, name):
    return getattr(sae, name).detach().double().numpy()


def test_encode_decode_follow_the_equations():
    x = np.random.default_rng(0).normal(size=(50, 16))
    for arch in ("standard", "topk", "jumprelu"):
        for apply in (True, False):
            sae = random_sae(arch, apply_b_dec_to_input=apply)
            x_in = x - _np(sae, "b_dec") if apply else x
            pre = x_in @ _np(sae, "W_enc") + _np(sae, "b_enc")
            if arch == "standard":
                want = np.maximum(pre, 0)
            elif arch == "jumprelu":
                want = np.maximum(pre, 0) * (pre > _np(sae, "threshold"))
            else:
                want = np.zeros_like(pre)
                top = np.argsort(-pre, axis=-1)[:, : sae.k]
                np.put_along_axis(want, top, np.maximum(np.take_along_axis(pre, top, -1), 0), -1)
            f = sae.encode(x.astype(np.float32))
            assert isinstance(f, np.ndarray) and f.shape == (50, 48)
            np.testing.assert_allclose(f, want, atol=1e-5)
            np.testing.assert_allclose(sae.decode(f), f @ _np(sae, "W_dec") + _np(sae, "b_dec"), atol=1e-5)
    assert (random_sae("topk", k=6).encode(torch.randn(7, 16)) != 0).sum(-1).max() <= 6


def test_saved_sae_loads_back_identically(tmp_path):
    for arch in ("standard", "topk", "jumprelu"):
        sae = random_sae(arch, normalize_activations="constant_norm_rescale")
        save_sae(sae, tmp_path / arch)
        cfg = json.loads((tmp_path / arch / "cfg.json").read_text())
        assert cfg["metadata"]["hook_name"] == "blocks.1.hook_resid_post" and cfg["architecture"] == arch
        back = gptviz.load_sae(tmp_path / arch)
        assert (back.site, back.d_in, back.d_sae, back.architecture) == ("blocks.1.resid_post", 16, 48, arch)
        x = torch.randn(30, 16)
        assert torch.equal(back.encode(x), sae.encode(x))
        assert torch.equal(back.reconstruct(x), sae.reconstruct(x))


def _gemma_params(sae) -> dict[str, np.ndarray]:
    return {n: getattr(sae, n).detach().numpy() for n in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")}


def test_gemma_scope_npz_and_safetensors(tmp_path):
    """Gemma Scope's jumprelu: no b_dec subtracted from the input; the site read from the path."""
    sae = random_sae("jumprelu", apply_b_dec_to_input=False)
    folder = tmp_path / "gemma-scope-2b-pt-res" / "layer_1" / "width_16k" / "average_l0_10"
    folder.mkdir(parents=True)
    np.savez(folder / "params.npz", **_gemma_params(sae))
    x = np.random.default_rng(1).normal(size=(20, 16)).astype(np.float32)
    p = _gemma_params(sae)
    pre = x.astype(np.float64) @ p["W_enc"] + p["b_enc"]
    want = np.maximum(pre, 0) * (pre > p["threshold"])
    for path in (folder, folder / "params.npz"):
        got = gptviz.load_sae(path)
        assert got.site == "blocks.1.resid_post" and got.architecture == "jumprelu"
        np.testing.assert_allclose(got.encode(x), want, atol=1e-5)
    mlp = tmp_path / "gemma-scope-2b-pt-mlp" / "layer_0"
    mlp.mkdir(parents=True)
    save_file({k: torch.from_numpy(v) for k, v in p.items()}, str(mlp / "params.safetensors"))
    assert gptviz.load_sae(mlp).site == "blocks.0.mlp.out"
    bare = tmp_path / "bare"
    bare.mkdir()
    np.savez(bare / "params.npz", **p)
    with pytest.raises(SAEError, match="give site="):
        gptviz.load_sae(bare)
    assert gptviz.load_sae(bare, site="blocks.0.resid_pre").site == "blocks.0.resid_pre"


def _one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_hostile_files_get_one_line(tmp_path):
    sae = random_sae("topk")
    good = save_sae(sae, tmp_path / "good")
    cfg = json.loads((good / "cfg.json").read_text())

    def variant(name: str, **change) -> os.PathLike:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "cfg.json").write_text(json.dumps({**cfg, **change}))
        (folder / "sae_weights.safetensors").write_bytes((good / "sae_weights.safetensors").read_bytes())
        return folder

    with pytest.raises(SAEError) as e:  # the cfg claims a width the tensors do not have
        gptviz.load_sae(variant("wide", d_sae=64))
    assert "W_enc has shape [16, 48]" in _one_line(e)
    with pytest.raises(SAEError) as e:
        gptviz.load_sae(variant("huge", d_in=10**9))
    assert "d_in" in _one_line(e)
    with pytest.raises(SAEError) as e:
        gptviz.load_sae(variant("arch", architecture="gated"))
    assert "architecture 'gated'" in _one_line(e)
    with pytest.raises(SAEError) as e:
        gptviz.load_sae(variant("k", k=0))
    assert "'k'" in _one_line(e)
    big = variant("big")  # a sparse file of 10 GB: refused by its size, nothing read
    with open(big / "sae_weights.safetensors", "r+b") as f:
        f.truncate(10 * 10**9)
    with pytest.raises(SAEError) as e:
        gptviz.load_sae(big)
    assert "too large" in _one_line(e)
    cut = variant("cut")
    data = (good / "sae_weights.safetensors").read_bytes()
    (cut / "sae_weights.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(SAEError) as e:
        gptviz.load_sae(cut)
    _one_line(e)
    nan = tmp_path / "nan"
    broken = random_sae("topk")
    with torch.no_grad():
        broken.W_dec[0, 0] = float("nan")
    save_sae(broken, nan)
    with pytest.raises(SAEError, match="NaN"):
        gptviz.load_sae(nan)
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    np.savez(pickled / "params.npz", W_enc=np.array([object()] * 4, dtype=object).reshape(2, 2))
    with pytest.raises(SAEError) as e:
        gptviz.load_sae(pickled, site="blocks.0.resid_post")
    assert "objects" in _one_line(e)
    with pytest.raises(SAEError, match="no such"):
        gptviz.load_sae(tmp_path / "missing")


def test_sae_is_checked_against_the_model(tmp_path):
    model = tiny_model()  # C = 16, two layers, MLP width 64, two heads of 8
    save_sae(random_sae("topk", d_in=16), tmp_path / "fits")
    assert gptviz.load_sae(tmp_path / "fits", model=model).site == "blocks.1.resid_post"
    save_sae(random_sae("topk", d_in=32), tmp_path / "wide")
    with pytest.raises(SAEError) as e:
        gptviz.load_sae(tmp_path / "wide", model=model)
    assert "d_in=32" in _one_line(e) and "16 wide" in str(e.value)
    save_sae(random_sae("topk", site="blocks.7.resid_post"), tmp_path / "deep")
    with pytest.raises(SAEError, match="2 layers"):
        gptviz.load_sae(tmp_path / "deep", model=model)
    save_sae(random_sae("topk", d_in=64, site="blocks.0.mlp.hidden"), tmp_path / "neurons")
    assert gptviz.load_sae(tmp_path / "neurons", model=model).d_in == 64
