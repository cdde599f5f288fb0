"""Transcoders (docs/architecture.md, "Circuits"): the equations against numbers by hand, edits of
features that keep the error term, the files circuit-tracer and Gemma Scope 2 write, and training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.interventions import InterventionError
from gptviz.transcoders import Transcoder, TranscoderError, TranscoderSet

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def random_set(model, d_tc: int = 48, activation: str = "topk", k: int | None = 6, seed: int = 0) -> TranscoderSet:
    g = torch.Generator().manual_seed(seed)
    C = model.config.n_embd
    tcs = []
    for l in range(model.config.n_layer):
        tc = Transcoder(C, d_tc, l, activation, k=k)
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        tcs.append(tc.requires_grad_(False))
    return TranscoderSet(tcs)


def test_encode_and_decode_by_hand():
    tc = Transcoder(2, 3, 0, "relu")
    with torch.no_grad():
        tc.W_enc.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))  # [d_tc, d_model]
        tc.b_enc.copy_(torch.tensor([0.0, -1.0, -10.0]))
        tc.W_dec.copy_(torch.tensor([[2.0, 0.0], [0.0, 3.0], [5.0, 5.0]]))
        tc.b_dec.copy_(torch.tensor([0.5, 0.5]))
    f = tc.encode(np.array([[2.0, 3.0]], dtype=np.float32))
    np.testing.assert_array_equal(f, [[2.0, 2.0, 0.0]])  # pre = [2, 2, -5], relu
    np.testing.assert_array_equal(tc.decode(f), [[4.5, 6.5]])
    top = Transcoder(2, 3, 0, "topk", k=1)
    top.load_state_dict(tc.state_dict())
    np.testing.assert_array_equal(top.encode(np.array([[2.0, 3.5]], dtype=np.float32)), [[0.0, 2.5, 0.0]])
    jump = Transcoder(2, 3, 0, "jumprelu")
    jump.load_state_dict({**tc.state_dict(), "threshold": torch.tensor([2.5, 1.0, 0.0])})
    np.testing.assert_array_equal(jump.encode(np.array([[2.0, 3.0]], dtype=np.float32)), [[0.0, 2.0, 0.0]])
    with pytest.raises(TranscoderError, match="k in"):
        Transcoder(2, 3, 0, "topk")


def test_editing_nothing_changes_nothing_and_an_edit_keeps_the_error():
    model = tiny_model()
    tcs = random_set(model)
    plain = gptviz.trace(model, IDS)
    f = tcs[1].encode(plain.tensor("blocks.1.mlp.in"))  # [T, d_tc]
    fired = int(f[4].nonzero()[0])
    never = int((f == 0).all(0).nonzero()[0])  # a feature that fires nowhere in this prompt: zeroing it edits nothing
    nothing = gptviz.trace(model, IDS, interventions=[gptviz.edit_features(tcs[1], [never])])
    np.testing.assert_array_equal(nothing["logits"], plain["logits"])
    np.testing.assert_array_equal(nothing["blocks.1.mlp.out"], plain["blocks.1.mlp.out"])
    edit = gptviz.edit_features(tcs[1], [fired], how="zero", positions=[4])
    assert edit.name == "blocks.1.mlp.out" and edit.reads == "blocks.1.mlp.in"
    out = gptviz.trace(model, IDS, interventions=[edit])
    want = plain.tensor("blocks.1.mlp.out").clone()
    want[4] -= f[4, fired] * tcs[1].W_dec[fired]  # the error term kept: only the feature's write is gone
    torch.testing.assert_close(out.tensor("blocks.1.mlp.out"), want, atol=1e-6, rtol=1e-6)
    assert not np.allclose(out["logits"][4], plain["logits"][4])
    np.testing.assert_array_equal(out["logits"][:4], plain["logits"][:4])
    clamp = gptviz.trace(model, IDS, interventions=[gptviz.edit_features(tcs[0], [0], how=2.5)])
    f0 = tcs[0].encode(plain.tensor("blocks.0.mlp.in"))
    want0 = plain.tensor("blocks.0.mlp.out") + (2.5 - f0[:, :1]) * tcs[0].W_dec[0]
    torch.testing.assert_close(clamp.tensor("blocks.0.mlp.out"), want0, atol=1e-5, rtol=1e-5)
    with pytest.raises(InterventionError, match="48 features"):
        gptviz.edit_features(tcs[0], [48])


def test_an_edit_reaches_generation_as_it_reaches_a_trace():
    model = tiny_model()
    tcs = random_set(model)
    edit = gptviz.edit_features(tcs[0], [1, 2, 3], how=1.5)
    gen = gptviz.generate(model, IDS[:4], max_new_tokens=3, temperature=0, interventions=[edit])
    full = gptviz.trace(model, gen.ids[:-1], interventions=[edit])
    assert gen.ids[-3:] == [int(i) for i in full["logits"][-3:].argmax(-1)]


# --- files ------------------------------------------------------------------------------------------
def test_save_and_load_circuit_tracers_layout(tmp_path):
    import yaml
    from safetensors import safe_open

    model = tiny_model()
    tcs = random_set(model, k=5)
    gptviz.transcoders.save_transcoders(tcs, tmp_path / "tcs")
    cfg = yaml.safe_load((tmp_path / "tcs" / "config.yaml").read_text())
    assert cfg["model_kind"] == "transcoder_set"
    assert (cfg["feature_input_hook"], cfg["feature_output_hook"]) == ("mlp.hook_in", "hook_mlp_out")
    assert (cfg["activation"], cfg["k"]) == ("topk", 5)
    assert cfg["transcoders"] == ["layer_0.safetensors", "layer_1.safetensors"]
    with safe_open(str(tmp_path / "tcs" / "layer_1.safetensors"), "pt") as f:
        assert {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()} == {  # noqa: SIM118
            "W_enc": (48, 16), "W_dec": (48, 16), "b_enc": (48,), "b_dec": (16,),
        }  # fmt: skip
    back = gptviz.load_transcoders(tmp_path / "tcs")
    assert back.layers == [0, 1] and back[1].k == 5 and back[1].activation == "topk"
    x = torch.randn(7, 16)
    for l in (0, 1):
        assert torch.equal(back[l](x)[0], tcs[l](x)[0])


def _gemma_scope_2(path, d_model=16, d_tc=24, seed=0, npz=False, skip=True):
    """A Gemma Scope 2 transcoder file: lowercase names, w_enc [d_model, d_tc], a threshold, an affine skip."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    arrays = {
        "w_enc": rng.normal(size=(d_model, d_tc)).astype(np.float32),
        "w_dec": rng.normal(size=(d_tc, d_model)).astype(np.float32),
        "b_enc": rng.normal(size=d_tc).astype(np.float32),
        "b_dec": rng.normal(size=d_model).astype(np.float32),
        "threshold": np.abs(rng.normal(size=d_tc)).astype(np.float32),
    }
    if skip:
        arrays["affine_skip_connection"] = rng.normal(size=(d_model, d_model)).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    if npz:
        np.savez(path, **arrays)
    else:
        save_file(arrays, str(path))
    return arrays


@pytest.mark.parametrize("npz", [False, True])
def test_gemma_scope_2_transcoders_compute_what_their_equations_say(tmp_path, npz):
    name = "params.npz" if npz else "params.safetensors"
    a = _gemma_scope_2(tmp_path / "layer_3" / name, npz=npz)
    tcs = gptviz.load_transcoders(tmp_path / "layer_3")
    tc = tcs[3]
    assert tc.activation == "jumprelu" and tc.d_tc == 24 and tc.W_skip is not None
    x = np.random.default_rng(1).normal(size=(5, 16)).astype(np.float32)
    pre = x @ a["w_enc"] + a["b_enc"]  # Gemma Scope's own equations, in NumPy
    f = pre * (pre > a["threshold"])
    want = f @ a["w_dec"] + a["b_dec"] + x @ a["affine_skip_connection"]
    np.testing.assert_allclose(tc.encode(x), f, rtol=1e-5, atol=1e-5)
    got = tc(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(TranscoderError, match="give layer="):
        _gemma_scope_2(tmp_path / "g" / "params.safetensors")
        gptviz.load_transcoders(tmp_path / "g" / "params.safetensors")
    assert gptviz.load_transcoders(tmp_path / "g" / "params.safetensors", layer=1).layers == [1]


def test_a_config_listing_gemma_scope_files_by_layer(tmp_path):
    for l in (0, 1):
        _gemma_scope_2(tmp_path / f"layer_{l}.safetensors", seed=l, skip=False)
    (tmp_path / "config.yaml").write_text(
        "model_kind: transcoder_set\nfeature_input_hook: ln2.hook_normalized\nfeature_output_hook: hook_mlp_out\n"
        "transcoders:\n  - {id: a, layer: 1, filepath: layer_1.safetensors}\n"
        "  - {id: b, layer: 0, filepath: layer_0.safetensors}\n"
    )
    tcs = gptviz.load_transcoders(tmp_path)
    assert tcs.layers == [0, 1] and tcs[0].W_skip is None
    tcs.check_fits(tiny_model())
    with pytest.raises(TranscoderError, match="3 layers|2 layers"):
        gptviz.TranscoderSet([Transcoder(16, 4, 5, "relu")]).check_fits(tiny_model())
    with pytest.raises(TranscoderError, match="another model"):
        tcs.check_fits(tiny_model(n_embd=32))


BAD_CONFIGS = {
    "not YAML": ("transcoders: [\n  unclosed", "not YAML"),
    "code": ("model_kind: !!python/object/apply:os.system ['true']\n", "run code"),
    "a custom tag": ("model_kind: !thing transcoder_set\n", "build"),
    "aliases": ("a: &x [1, 2]\nb: [*x, *x]\n", "aliases"),
    "a list": ("- 1\n- 2\n", "mapping"),
    "a hook of no point": (
        "feature_input_hook: hook_resid_pre\ntranscoders: [layer_0.safetensors]\n",
        "names no point",
    ),
    "a hub path": ("transcoders: ['hf://google/x/layer_0.safetensors']\n", "hub"),
    "outside": ("transcoders: ['../secret.safetensors']\n", "outside"),
    "a cross-layer kind": ("model_kind: cross_layer_transcoder\n", "per-layer"),
    "topk without k": ("activation: topk\ntranscoders: [layer_0.safetensors]\n", "whole number k"),
    "missing file": ("transcoders: [layer_7.safetensors]\n", "no such file"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_config_is_one_line(tmp_path, case):
    text, match = BAD_CONFIGS[case]
    gptviz.transcoders.save_transcoders(random_set(tiny_model()), tmp_path)
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(TranscoderError, match=match) as e:
        gptviz.load_transcoders(tmp_path)
    assert "\n" not in str(e.value)


def _layer_file(path, **arrays):
    from safetensors.torch import save_file

    base = {"W_enc": torch.zeros(8, 4), "W_dec": torch.zeros(8, 4), "b_enc": torch.zeros(8), "b_dec": torch.zeros(4)}
    save_file({k: v for k, v in {**base, **arrays}.items() if v is not None}, str(path))


BAD_FILES = {
    "a wrong shape": (dict(W_dec=torch.zeros(8, 5)), "W_dec has shape \\[8, 5\\]"),
    "a transposed encoder": (dict(W_enc=torch.zeros(4, 8)), "W_enc has shape \\[4, 8\\]"),
    "NaN weights": (dict(W_dec=torch.full((8, 4), float("nan"))), "NaN"),
    "integers": (dict(b_dec=torch.zeros(4, dtype=torch.int64)), "not floating-point"),
    "no decoder": (dict(W_dec=None), "has no W_dec"),
    "no bias": (dict(b_enc=None), "no 1-D b_enc"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_layer_file_is_one_line(tmp_path, case):
    arrays, match = BAD_FILES[case]
    _layer_file(tmp_path / "layer_0.safetensors", **arrays)
    with pytest.raises(TranscoderError, match=match) as e:
        gptviz.load_transcoders(tmp_path)
    assert "\n" not in str(e.value)


def test_a_decompression_bomb_is_refused_before_it_is_unpacked(tmp_path):
    import zipfile

    d_model, d_tc = 64, 1 << 16  # claims 2 × 16 MB of weights; holds a few KB of zeros
    arrays = {
        "w_enc": np.zeros((d_model, d_tc), np.float32),
        "w_dec": np.zeros((d_tc, d_model), np.float32),
        "b_enc": np.zeros(d_tc, np.float32),
        "b_dec": np.zeros(d_model, np.float32),
        "threshold": np.zeros(d_tc, np.float32),
        "extra": np.zeros((1 << 26,), np.float32),  # 256 MB of zeros the shapes do not need
    }
    with zipfile.ZipFile(tmp_path / "params.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, a in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, a)
    assert (tmp_path / "params.npz").stat().st_size < 2_000_000
    with pytest.raises(TranscoderError, match="unpacks to"):
        gptviz.load_transcoders(tmp_path / "params.npz", layer=0)
