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
    with pytest.raises(TranscoderError, match="unpack to"):
        gptviz.load_transcoders(tmp_path / "params.npz", layer=0)


# --- training and fidelity ----------------------------------------------------------------------------
DOCS = [list(np.random.default_rng(i).integers(0, 11, size=120)) for i in range(12)]


def test_multi_site_rows_are_the_traced_values_side_by_side():
    from gptviz.features.activations import site_rows
    from gptviz.transcoders.training import sites_of

    model = tiny_model()
    windows = [DOCS[0][:9], DOCS[1][:16]]
    rows = site_rows(model, sites_of([0, 1]), windows)  # [N, 4 × C]: mlp.in, mlp.out of layer 0, then of 1
    assert rows.shape == (25, 4 * 16)
    traces = [gptviz.trace(model, w) for w in windows]
    for i, name in enumerate(["blocks.0.mlp.in", "blocks.0.mlp.out", "blocks.1.mlp.in", "blocks.1.mlp.out"]):
        want = np.concatenate([t[name] for t in traces])
        np.testing.assert_allclose(rows[:, 16 * i : 16 * (i + 1)].numpy(), want, atol=1e-6)


def test_training_learns_and_its_report_is_what_fidelity_measures(tmp_path):
    model = tiny_model()
    seen = []
    few = gptviz.train_transcoders(model, DOCS, width=4, k=8, steps=2, seed=1, lr=5e-3)
    tcs = gptviz.train_transcoders(
        model, DOCS, width=4, k=8, steps=150, out=tmp_path, progress=lambda p: seen.append(p.done), seed=1, lr=5e-3
    )
    assert tcs.layers == [0, 1] and tcs[1].d_tc == 64 and tcs[1].k == 8
    assert seen[-1] == 150
    for l in (0, 1):
        r = tcs[l].report
        assert r.fvu < 0.5 * few[l].report.fvu and r.fvu < 0.5, (l, r.fvu, few[l].report.fvu)
        assert r.l0 <= 8 and 0 <= r.dead <= 1 and r.tokens == 150 * 1024 and r.cpu_seconds > 0
    f = tcs.meta["gptviz_training"]["held_out_fidelity"]
    assert f["top1_agreement"] > few.meta["gptviz_training"]["held_out_fidelity"]["top1_agreement"]
    # written, read back, measured again on the same held-out windows: the same numbers
    back = gptviz.load_transcoders(tmp_path)
    from gptviz.scanning.corpus import read_corpus

    corpus = read_corpus(DOCS, None, 16, 11)
    order = np.random.default_rng(1).permutation(len(corpus.windows))
    held = [corpus.windows[i].ids for i in sorted(order[: len(corpus.windows) // 10])]
    again = back.fidelity(model, held)
    assert again["top1_agreement"] == pytest.approx(f["top1_agreement"])
    assert again["kl"] == pytest.approx(f["kl"], rel=1e-4)
    for l in (0, 1):
        assert again["nmse"][l] == pytest.approx(tcs[l].report.fvu, rel=1e-4)
    assert back.meta["gptviz_training"]["held_out_fidelity"]["kl"] == pytest.approx(f["kl"])
    with pytest.raises(TranscoderError, match="layers must lie"):
        gptviz.train_transcoders(model, DOCS, layers=[2], steps=1)


def test_fidelity_by_hand():
    """The replacement model by hand: every MLP's output replaced by its transcoder on that run's own mlp.in."""
    model = tiny_model()
    tcs = random_set(model, k=6)
    docs = [DOCS[0][:16], DOCS[1][:12]]
    f = tcs.fidelity(model, docs)
    agree = kl = n = 0
    for ids in docs:
        real = gptviz.trace(model, ids)
        # the run: mlp.out of each layer := tc(mlp.in of this run), layer by layer
        held = {}

        def keep(l):
            def fn(x):
                held[l] = x.clone()
                return x

            return fn

        edits = []
        for l in (0, 1):
            edits.append(gptviz.intervene(f"blocks.{l}.mlp.in", keep(l)))
            edits.append(gptviz.intervene(f"blocks.{l}.mlp.out", lambda out, l=l: tcs[l](held[l])[0]))
        rep = gptviz.trace(model, ids, interventions=edits)
        p = torch.log_softmax(real.tensor("logits"), -1)
        q = torch.log_softmax(rep.tensor("logits"), -1)
        kl += float((p.exp() * (p - q)).sum())
        agree += int((p.argmax(-1) == q.argmax(-1)).sum())
        n += len(ids)
    assert f["tokens"] == n
    assert f["top1_agreement"] == pytest.approx(agree / n)
    assert f["kl"] == pytest.approx(kl / n, rel=1e-4)
    assert f["warning"] is None or "agrees with yours" in f["warning"]


def test_cli_trains_and_says_what_a_set_holds(tmp_path):
    import subprocess
    import sys

    model = tiny_model()
    ckpt = gptviz.save(model, tmp_path / "ckpt", tokenizer=gptviz.CharTokenizer([chr(97 + i) for i in range(11)]))
    data = tmp_path / "corpus.txt"
    data.write_text("".join(chr(97 + int(i)) for d in DOCS for i in d))
    out = tmp_path / "tcs"
    cmd = [sys.executable, "-m", "gptviz", "transcoders", "train", "--checkpoint", str(ckpt), "--data", str(data)]
    cmd += ["--width", "2", "--k", "4", "--steps", "20", "--layers", "1", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "layer 1: held-out FVU" in done.stdout and "top-1 agreement" in done.stdout
    assert gptviz.load_transcoders(out).layers == [1]
    info = [sys.executable, "-m", "gptviz", "transcoders", "info", str(out)]
    shown = subprocess.run([*info, "--checkpoint", str(ckpt), "--data", str(data)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "1 transcoders for layers 1" in shown.stdout and f"they fit {ckpt}" in shown.stdout
    assert shown.stdout.count("top-1 agreement") == 2  # as trained, and on --data
    (out / "config.yaml").write_text("model_kind: !!python/object/apply:os.system ['echo hi']\n")
    bad = subprocess.run(info, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "run code" in bad.stderr
