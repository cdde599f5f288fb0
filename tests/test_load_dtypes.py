"""Compute dtypes (gptviz.load(dtype=...)) through every format, and the fill that loads them.

Each format is written twice from the same weights (rounded to the half dtype first, so both hold
the same numbers): once stored in float32, once in bf16 / fp16. Loaded in float32 the two must be
bit-for-bit the same model (an upcast is exact), and loaded in the half dtype every parameter must be
the stored tensor itself. The bf16 forward is checked against Hugging Face's own bf16 forward."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import tiny_model
from hf_helpers import hf_random_decoder
from test_in_memory import in_memory
from untrusted_helpers import NANO_ARGS, hf

import gptviz
from gptviz import devices
from gptviz.formats.bundle import in_out_copy
from gptviz.formats.hf_decoders import CONV1D
from gptviz.model import is_block_linear

HALF = [torch.bfloat16, torch.float16]
ROTARY = dict(pos_encoding="rotary", norm="rmsnorm", activation="silu", mlp_gated=True, bias=False, n_kv_head=1)


def rounded(model, dtype):
    """model with every weight rounded to dtype (kept float32): both stored forms hold these numbers."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).float())
    return model


def native_dir(root, dtype, to=None, **config):
    model = rounded(tiny_model(**config), to or dtype)
    return gptviz.save(model.to(dtype), root)


def nanogpt_dir(root, dtype, to=None):
    model = rounded(tiny_model(), to or dtype)  # NANO_ARGS' shape: learned positions, LayerNorm, tied
    root.mkdir(parents=True)
    state = {f"_orig_mod.{k}": v.to(dtype) for k, v in model.state_dict().items()}
    torch.save({"model": state, "model_args": dict(NANO_ARGS), "iter_num": 1}, root / "ckpt.pt")
    return root


def gpt2_dir(root, dtype, to=None, weights="safetensors"):
    model = rounded(tiny_model(activation="gelu"), to or dtype)
    state = {k: (v.t().contiguous() if k.endswith(CONV1D) else v).to(dtype) for k, v in model.state_dict().items()}
    state.pop("lm_head.weight")  # tied: save_pretrained leaves it out
    return hf(root, weights=weights, state=state)


def llama_dir(root, dtype, to=None, how="single"):
    model = hf_random_decoder("llama", seed=3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(to or dtype).float())
    model = model.to(dtype)
    if how == "bin":
        model.config.save_pretrained(root)
        torch.save(model.state_dict(), root / "pytorch_model.bin")
    else:
        model.save_pretrained(root, max_shard_size="20KB" if how == "sharded" else "5GB")
    return root


# each writes the same weights, rounded to `to`, stored in `dtype`
FORMATS = {
    "native": native_dir,
    "native-rotary": lambda root, dtype, to: native_dir(root, dtype, to, **ROTARY),
    "native-sinusoidal": lambda root, dtype, to: native_dir(root, dtype, to, pos_encoding="sinusoidal"),
    "nanogpt": nanogpt_dir,
    "hf-gpt2": gpt2_dir,
    "hf-gpt2-bin": lambda root, dtype, to: gpt2_dir(root, dtype, to, "bin"),
    "hf-llama": llama_dir,
    "hf-llama-sharded": lambda root, dtype, to: llama_dir(root, dtype, to, "sharded"),
    "hf-llama-bin": lambda root, dtype, to: llama_dir(root, dtype, to, "bin"),
    "upload-native": lambda root, dtype, to: in_memory(native_dir(root, dtype, to)),
    "upload-llama": lambda root, dtype, to: in_memory(llama_dir(root, dtype, to)),
}


def params(model) -> dict[str, torch.Tensor]:
    return dict(model.named_parameters())


@pytest.mark.parametrize("dtype", HALF, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_loads_each_stored_dtype_in_each_compute_dtype(tmp_path, fmt, dtype):
    name = str(dtype).removeprefix("torch.")
    full = FORMATS[fmt](tmp_path / "f32", torch.float32, dtype)
    half = FORMATS[fmt](tmp_path / "half", dtype, dtype)
    exact = gptviz.load(half, dtype="float32")
    as_stored = gptviz.load(half, dtype=name)
    assert exact.report.stored_dtype == name and exact.report.dtype == "float32"
    assert as_stored.report.dtype == name and as_stored.model.dtype == dtype
    assert not exact.report.warnings or all(name not in w for w in exact.report.warnings)
    assert any("exact" in n for n in exact.report.notes)
    a, b = params(exact.model), params(as_stored.model)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == torch.float32 and torch.equal(a[k].to(dtype), b[k]) and torch.equal(b[k].float(), a[k]), k
    # the same numbers stored in float32: the same model, bit for bit
    reference = gptviz.load(full)
    assert reference.report.stored_dtype == "float32" and not reference.report.notes
    for k, v in params(reference.model).items():
        assert torch.equal(v, a[k]), k
    config = exact.model.config
    ids = torch.randint(
        0, config.vocab_size, (1, min(12, config.block_size)), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        want, got = exact.model(ids), as_stored.model(ids)
    assert got.dtype == dtype and torch.isfinite(got).all()
    assert (got.float() - want).abs().max() < 0.1 * want.abs().max()  # half precision, not another model
    if exact.model.config.tie_weights:
        assert exact.model.lm_head.weight is exact.model.transformer.wte.weight


def test_buffers_are_computed_after_the_meta_build(tmp_path):
    """A model built on the meta device has no rotary or sin/cos table until reset_buffers: a load
    must give the same tables (and logits) as a model built the ordinary way."""
    for i, config in enumerate(
        [
            dict(
                ROTARY,
                rope_scaling="llama3",
                rope_factor=8.0,
                rope_original_max=8,
                rope_low_freq=1.0,
                rope_high_freq=4.0,
            ),
            dict(pos_encoding="sinusoidal"),
        ]
    ):
        model = tiny_model(**config)
        loaded = gptviz.load(gptviz.save(model, tmp_path / str(i))).model
        for (name, want), (_, got) in zip(model.named_buffers(), loaded.named_buffers()):
            assert not got.is_meta and torch.equal(want, got), name
        ids = torch.arange(10).unsqueeze(0) % model.config.vocab_size
        with torch.no_grad():
            assert torch.equal(model.eval()(ids), loaded(ids))


def test_bf16_forward_matches_hugging_face_bf16(tmp_path):
    """The same bf16 weights through Hugging Face's bf16 eager forward and gptviz's bf16 forward:
    two bf16 kernels, so close, not equal; float32 stays exact."""
    from transformers import AutoModelForCausalLM

    llama_dir(tmp_path, torch.bfloat16)
    ids = torch.randint(0, 150, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for dtype, bound in ((torch.bfloat16, 0.1), (torch.float32, 1e-4)):
            hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype, attn_implementation="eager").eval()
            ours = gptviz.load(tmp_path, dtype=str(dtype)[6:]).model
            want = hf(ids).logits
            for explicit in (False, True):  # the fused kernel, and the weights built as a tensor
                got = ours(ids, explicit=explicit)
                assert got.dtype == dtype
                agree = (got.argmax(-1) == want.argmax(-1)).float().mean()
                diff = (got.float() - want.float()).abs().max()
                assert diff < bound and agree >= (0.95 if dtype == torch.bfloat16 else 1.0), (
                    dtype,
                    explicit,
                    diff,
                    agree,
                )


def test_in_out_copy_converts_and_lays_out_any_shape():
    """The fill's blocked copy: the same values, upcast, laid out [in, out], whatever the row count (a
    last block shorter than the others, fewer rows than a block, blocks large enough for torch's tiled
    transpose) and from a non-contiguous source."""
    g = torch.Generator().manual_seed(0)
    for shape in ((300, 70), (37, 5), (16, 3), (3, 40), (1, 7)):
        value = torch.randn(shape, generator=g).to(torch.bfloat16)
        for source in (value, value.t().contiguous().t()):
            for rows in (4, 256):
                t = in_out_copy(source, torch.float32, rows)
                assert t.shape == value.shape and t.dtype == torch.float32
                assert t.t().is_contiguous() and (t.is_contiguous() is (1 in shape)), shape
                assert torch.equal(t, value.float()), (shape, rows)


def test_a_bf16_llama_computed_in_float32_lays_its_block_weights_in_out(tmp_path):
    """A float32 load of a bf16 Llama (what the Hub ships) writes each block Linear weight laid out
    [in, out] as it converts it (model.in_out_layout: a step of decoding reads it faster); a float32
    file keeps its tensors as read, and a bf16 load the stored tensors. The numbers do not move: the
    same values as the float32 file's, the same logits over a prompt and each decoding step's within
    float32 rounding, and the same greedy ids as Hugging Face's generate."""
    from transformers import AutoModelForCausalLM

    half = llama_dir(tmp_path / "bf16", torch.bfloat16)
    full = llama_dir(tmp_path / "f32", torch.float32, torch.bfloat16)
    laid, plain = gptviz.load(half, dtype="float32").model, gptviz.load(full).model
    as_stored = gptviz.load(half, dtype="bfloat16").model
    block = [n for n, _ in laid.named_parameters() if is_block_linear(n)]
    assert len(block) == 5 * laid.config.n_layer  # c_attn, c_proj, c_gate, c_fc, mlp.c_proj
    for name in block:
        a, b, c = laid.get_parameter(name), plain.get_parameter(name), as_stored.get_parameter(name)
        assert a.t().is_contiguous() and not a.is_contiguous(), name
        assert b.is_contiguous() and c.is_contiguous(), name
        assert torch.equal(a, b), name
    ids = torch.randint(0, 150, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for explicit in (False, True):
            # bit for bit on this project's CPU (MKL packs either layout for the same kernel); another BLAS
            # may round differently, a wrong or misplaced weight would be far off
            torch.testing.assert_close(laid(ids, explicit=explicit), plain(ids, explicit=explicit), rtol=0, atol=1e-5)
        hf = AutoModelForCausalLM.from_pretrained(half, dtype=torch.float32, attn_implementation="sdpa").eval()
        want = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=10,
            min_new_tokens=10,
            do_sample=False,
            pad_token_id=0,
        )[0].tolist()
    got, ref = (gptviz.generate(m, ids[0].tolist(), 10, temperature=0, stop_at_eos=False) for m in (laid, plain))
    assert got.ids == ref.ids == want
    for a, b in zip(got.steps, ref.steps):
        assert abs(a.prob - b.prob) < 1e-5 and a.top[0][0] == b.top[0][0]
        torch.testing.assert_close(torch.tensor(a.attention), torch.tensor(b.attention), atol=1e-5, rtol=1e-4)
    again = gptviz.load(gptviz.save(laid, tmp_path / "native")).model  # a native save writes the values
    for name in block:
        assert torch.equal(again.get_parameter(name), laid.get_parameter(name)), name


def test_auto_keeps_float32_unless_it_does_not_fit(tmp_path, monkeypatch):
    folder = llama_dir(tmp_path, torch.bfloat16)
    bundle = gptviz.load(folder)  # a small model fits any machine: exact float32
    assert bundle.report.dtype == "float32"
    n = sum(p.numel() for p in bundle.model.parameters())
    free = int(4.5 * n)  # float32 fits (4 bytes a weight) but without auto's headroom (1.25 x)
    monkeypatch.setattr(devices, "free_memory", lambda device: free)
    bundle = gptviz.load(folder)
    assert bundle.report.dtype == "bfloat16" and bundle.model.dtype == torch.bfloat16
    assert any("computed in bfloat16" in n and "MB free" in n for n in bundle.report.notes)
    assert not any("float" in w for w in bundle.report.warnings)
    assert gptviz.load(folder, dtype="float32").report.dtype == "float32"  # asked for, and it fits: kept


def test_a_model_that_fits_in_no_dtype_is_refused_before_it_is_built(tmp_path, monkeypatch):
    folder = llama_dir(tmp_path, torch.bfloat16)
    n = sum(p.numel() for p in gptviz.load(folder).model.parameters())
    monkeypatch.setattr(devices, "free_memory", lambda device: n)  # half of what bf16 takes
    built = []
    monkeypatch.setattr(gptviz.GPT, "empty", classmethod(lambda cls, *a, **k: built.append(1)))
    for dtype in ("auto", "bfloat16", "float32"):
        with pytest.raises(gptviz.DeviceError, match=r"weights take .* MB in (bfloat16|float32) and cpu has .* free"):
            gptviz.load(folder, dtype=dtype)
    assert built == []  # said before the model was built


def test_a_float32_file_computed_in_half_says_it_was_rounded(tmp_path):
    bundle = gptviz.load(native_dir(tmp_path, torch.float32), dtype="float16")
    assert bundle.report.stored_dtype == "float32" and bundle.report.dtype == "float16"
    assert any("rounded" in n for n in bundle.report.notes) and not bundle.report.warnings


@pytest.mark.parametrize("bad", ["float64", "bf16", 3, "int8"])
def test_a_dtype_gptviz_does_not_compute_in_is_one_sentence(tmp_path, bad):
    with pytest.raises(gptviz.GptvizError, match="is not one gptviz computes in; use auto, float32"):
        gptviz.load(native_dir(tmp_path, torch.float32), dtype=bad)


def test_nan_in_a_half_weight_is_found_in_the_one_pass(tmp_path):
    model = tiny_model()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[3, 2] = float("nan")
    bundle = gptviz.load(gptviz.save(model.to(torch.bfloat16), tmp_path), dtype="float32")
    (warning,) = bundle.report.warnings
    assert warning.startswith("NaN or Inf in weights") and "transformer.h.1.mlp.c_fc.weight" in warning


def test_cli_dtype(tmp_path, capsys):
    from gptviz.cli import main

    folder = native_dir(tmp_path, torch.bfloat16)
    main(["info", "--checkpoint", str(folder), "--dtype", "bfloat16", "--token-ids", "1,2,3"])
    out = capsys.readouterr().out
    assert "bfloat16" in out


PEAK = textwrap.dedent(
    """
    import json, sys
    import gptviz
    def kb(field):
        return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1])
    gptviz.load(sys.argv[2], dtype=sys.argv[3])  # a tiny one first: what a first load imports is not the model
    before = kb("VmRSS:")
    bundle = gptviz.load(sys.argv[1], dtype=sys.argv[3])
    print(json.dumps({"grew_mb": (kb("VmHWM:") - before) / 1024}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_load_peaks_at_the_model_plus_one_tensor(tmp_path, dtype):
    """bf16 shards loaded in float32 (or bf16): the process grows by the model in its compute dtype and
    about one tensor, not by the file, a float32 copy of it and a randomly initialised model besides."""
    from gptviz.bench.load import SHAPES, write_checkpoint

    config = gptviz.GPTConfig(**{**SHAPES["tiny"], "n_layer": 8, "n_embd": 512, "n_inner": 2048, "n_head": 8})
    write_checkpoint(config, tmp_path / "model")
    write_checkpoint(gptviz.GPTConfig(**SHAPES["tiny"]), tmp_path / "tiny")
    model_mb = (4 if dtype == "float32" else 2) * gptviz.GPT.empty(config).num_params() / 2**20
    p = subprocess.run(
        [sys.executable, "-c", PEAK, str(tmp_path / "model"), str(tmp_path / "tiny"), dtype],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    grew = json.loads(p.stdout)["grew_mb"]
    assert grew < 1.25 * model_mb + 20, f"grew {grew:.0f} MB for a {model_mb:.0f} MB model"


def test_a_float16_weight_whose_sum_overflows_is_not_called_infinite(tmp_path):
    """The one-pass check sums each weight; a float16 sum of large finite values overflows to inf, and
    then every value is looked at: no warning for a weight that is all finite."""
    model = tiny_model()
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight.fill_(60000.0)
    bundle = gptviz.load(gptviz.save(model.to(torch.float16), tmp_path), dtype="float16")
    assert not torch.isfinite(bundle.model.transformer.h[0].mlp.c_fc.weight.sum())  # the sum did overflow
    assert not bundle.report.warnings
