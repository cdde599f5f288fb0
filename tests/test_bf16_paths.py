"""gptviz's two bf16 forwards against Hugging Face's two, on tiny random HF models saved in bf16.

The fused path (`model(ids)`, scaled_dot_product_attention) is Hugging Face's SDPA forward; the explicit
path (`model(ids, explicit=True)`) builds the attention weights as a tensor in HF eager's order (q kᵀ
in bf16, times the scale, masked, softmax in float32 rounded to bf16, @ v in bf16). Each equals its
counterpart bit for bit; across the pair they differ by bf16 rounding. And the attention weights a Trace
shows: on the explicit path they are the ones its output was computed from, and HF eager's own."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hf_helpers import hf_random, hf_random_decoder

import gptviz
from gptviz.model import TorchRMSNorm, expand_kv

IDS = torch.randint(0, 150, (1, 40), generator=torch.Generator().manual_seed(0))


def prompt(model) -> torch.Tensor:
    return (IDS % model.config.vocab_size)[:, : model.config.block_size]


def saved(model, root):
    model.to(torch.bfloat16).save_pretrained(root)
    return root


def hf_logits(root, attn: str, ids: torch.Tensor, dtype=torch.bfloat16, **kw):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(root, dtype=dtype, attn_implementation=attn).eval()
    with torch.no_grad():
        return hf(ids, **kw)


@pytest.mark.parametrize(
    "kind",
    [
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma3_text",
        "phi3",
        "gpt_neox",
        "olmo",
        "olmo2",
        "olmo3",
        "gpt2",
        "gpt2-kernel",
        "gpt2-fast",
    ],
)
def test_each_bf16_path_equals_its_hugging_face_counterpart(tmp_path, kind):
    """llama: grouped heads and llama3 rotary; mistral, qwen2, gemma3_text, phi3: sliding windows; qwen3,
    gemma3_text: q / k norms; gemma: (1 + w) norms and GeGLU (torch's tanh GELU kernel); gpt2 with its own
    gelu_new, with gelu_pytorch_tanh and with gelu_fast: in bf16 Hugging Face computes gelu_new and gelu_fast
    as formulas, op by op, which gptviz follows (config.gelu_formula); gpt_neox: a parallel block sums in
    HF's order; olmo, olmo2, olmo3: rotary (and OLMo 2 / 3's RMSNorm scale) in float32, rounded after
    (config.rotary_fp32, norm_fp32_scale). GPT-Neo has no SDPA forward in Hugging Face (its own test below)."""
    if kind.startswith("gpt2"):
        act = {"gpt2": "gelu_new", "gpt2-kernel": "gelu_pytorch_tanh", "gpt2-fast": "gelu_fast"}[kind]
        root = saved(hf_random(seed=1, activation_function=act, n_embd=64), tmp_path)
    else:
        root = saved(hf_random_decoder(kind, seed=3), tmp_path)
    model = gptviz.load(root, dtype="bfloat16").model
    ids = prompt(model)
    eager, sdpa = hf_logits(root, "eager", ids).logits, hf_logits(root, "sdpa", ids).logits
    with torch.no_grad():
        fused, explicit = model(ids), model(ids, explicit=True)
    assert fused.dtype == explicit.dtype == torch.bfloat16
    assert torch.equal(explicit, eager)
    assert torch.equal(fused, sdpa)
    assert not torch.equal(eager, sdpa)  # the two orders do differ here: the equalities above say something


def test_gpt_neox_in_float32_is_hugging_faces_bit_for_bit(tmp_path):
    """A parallel block sums resid_pre + (attn.out + mlp.out), Hugging Face's order: in float32 too each
    path equals its Hugging Face counterpart bit for bit (the old order, (x + attn) + mlp, was 1e-6 off)."""
    hf_random_decoder("gpt_neox", seed=3).save_pretrained(tmp_path)
    model = gptviz.load(tmp_path, dtype="float32").model
    ids = prompt(model)
    eager, sdpa = (hf_logits(tmp_path, attn, ids, dtype=torch.float32).logits for attn in ("eager", "sdpa"))
    with torch.no_grad():
        assert torch.equal(model(ids, explicit=True), eager)
        assert torch.equal(model(ids), sdpa)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_olmos_float32_steps_move_half_precision_only(tmp_path, dtype):
    """OLMo 2 rotates q and k in float32 and scales its RMSNorms in float32, rounding after each (as its
    Hugging Face code does; Llama rounds first): in float32 those steps change nothing, bit for bit."""
    hf_random_decoder("olmo2", seed=3).save_pretrained(tmp_path)
    model = gptviz.load(tmp_path, dtype=dtype).model
    assert model.config.rotary_fp32 and model.config.norm_fp32_scale
    ids = prompt(model)
    with torch.no_grad():
        olmo = model(ids)
        model.config.rotary_fp32 = False  # read by every forward
        for norm in model.modules():
            if isinstance(norm, TorchRMSNorm):
                norm.fp32_scale = False
        llama = model(ids)
    assert torch.equal(olmo, llama) == (dtype == "float32")


def test_gpt_neo_upcasts_its_scores_as_hugging_face_does(tmp_path):
    """GPT-Neo's attention in Hugging Face casts q and k to float32 before q kᵀ and rounds the weights to
    bf16 only after the softmax, and has no SDPA forward: gptviz's GPT-Neo (config.attn_fp32) does the
    same on both its paths, so each equals HF eager bit for bit; its float32 scores are what a trace shows."""
    root = saved(hf_random_decoder("gpt_neo", seed=3), tmp_path)
    model = gptviz.load(root, dtype="bfloat16").model
    assert model.config.attn_fp32
    ids = prompt(model)
    eager = hf_logits(root, "eager", ids).logits
    with torch.no_grad():
        fused, explicit = model(ids), model(ids, explicit=True)
    assert fused.dtype == torch.bfloat16
    assert torch.equal(explicit, eager) and torch.equal(fused, eager)
    trace = gptviz.trace(model, ids[0], names=["blocks.0.attn.scores", "blocks.0.attn.weights"])
    assert trace.tensor("blocks.0.attn.scores").dtype == torch.float32
    assert trace.tensor("blocks.0.attn.weights").dtype == torch.bfloat16
    # without the upcast (q kᵀ in bf16) the forward is not Hugging Face's: the test above says something
    for block in model.transformer.h:
        block.attn.spec = dataclasses.replace(block.attn.spec, upcast=False)
    with torch.no_grad():
        assert not torch.equal(model(ids, explicit=True), eager)


def test_gemma2_runs_its_capped_attention_explicitly_equal_to_eager(tmp_path):
    """Gemma 2 has no SDPA forward in Hugging Face either: its soft-capped attention runs explicitly on
    both of gptviz's paths, each equal to HF eager bit for bit (final soft-cap included)."""
    root = saved(hf_random_decoder("gemma2", seed=3), tmp_path)
    model = gptviz.load(root, dtype="bfloat16").model
    ids = prompt(model)
    eager = hf_logits(root, "eager", ids).logits
    with torch.no_grad():
        assert torch.equal(model(ids), eager) and torch.equal(model(ids, explicit=True), eager)


def test_gelu_formula_is_kept_and_float32_runs_the_kernel(tmp_path):
    """A GPT-2 import remembers gelu_new through a gptviz save; in float32 its GELU is torch's kernel, so
    float32 numbers are what they were before half precision learned the formula."""
    bundle = gptviz.load(saved(hf_random(seed=1, n_embd=64), tmp_path / "hf"), dtype="float32")
    assert (bundle.model.config.activation, bundle.model.config.gelu_formula) == ("gelu_tanh", "gelu_new")
    again = gptviz.load(gptviz.save(bundle.model, tmp_path / "native"), dtype="float32").model
    assert again.config.gelu_formula == "gelu_new"
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 3
    act = again.transformer.h[0].mlp.act
    assert torch.equal(act(x), torch.nn.functional.gelu(x, approximate="tanh"))
    half = x.bfloat16()
    assert not torch.equal(act(half), torch.nn.functional.gelu(half, approximate="tanh"))


def test_trace_weights_are_the_ones_the_output_used(tmp_path):
    """Traced inside gptviz.explicit_attention(), every layer's attn.weights are what z was computed
    from (weights @ v == z, bit for bit) and equal HF eager's returned attentions; a plain trace runs the
    fused kernel, whose z is within a bf16 rounding of weights @ v (on the CPU it rounds exp(s - max) to
    bf16 and divides by the float32 row sum after the product with v)."""
    root = saved(hf_random_decoder("llama", seed=3), tmp_path)
    model = gptviz.load(root, dtype="bfloat16").model
    hf = hf_logits(root, "eager", IDS, output_attentions=True)
    names = ["blocks.*.attn.weights", "blocks.*.attn.v", "blocks.*.attn.z", "logits"]
    with gptviz.explicit_attention():
        explicit = gptviz.trace(model, IDS[0], names=names)
    fused = gptviz.trace(model, IDS[0], names=names)
    assert torch.equal(explicit.tensor("logits"), hf.logits[0])
    for layer, want in enumerate(hf.attentions):
        for tr, exact in ((explicit, True), (fused, False)):
            w, v, z = (tr.tensor(f"blocks.{layer}.attn.{s}") for s in ("weights", "v", "z"))
            used = (w[None] @ expand_kv(v[None], w.size(0)))[0]
            if exact:
                assert torch.equal(w, want[0]) and torch.equal(used, z), layer
            else:
                ulp = torch.finfo(torch.bfloat16).eps * z.float().abs().max()
                assert (used.float() - z.float()).abs().max() <= 2 * ulp, layer
    # layer 0 reads the same q and k on both paths: the fused trace shows HF eager's weights there too
    assert torch.equal(fused.tensor("blocks.0.attn.weights"), hf.attentions[0][0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("formula", ["gelu_new", "gelu_fast"])
def test_the_gelu_formula_is_hugging_faces_in_each_half_precision(formula, dtype):
    """The GELU alone, against transformers' own activation, bit for bit, out to values where float16's
    x³ (past 40) and x² (past 256) overflow: Hugging Face's formula then gives x or 0, never NaN. (A whole
    float16 GPT-2 forward is not Hugging Face's to the bit on the CPU: the MLP's first product, its Conv1D
    against gptviz's Linear, sums in another order; docs/architecture.md.)"""
    from transformers.activations import ACT2FN

    from gptviz.model import FormulaGELU

    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4096, generator=g) * 4, torch.linspace(-300, 300, 601)]).to(dtype)
    ours, theirs = FormulaGELU(formula)(x), ACT2FN[formula](x)
    assert ours.dtype == dtype and torch.equal(ours, theirs)
    assert not ours.isnan().any() and ours[-1] == x[-1] and ours[-601] == 0
