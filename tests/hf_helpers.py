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


# --- every decoder family (gptviz/formats/hf_decoders.py): tiny configs that engage each feature ---
# Prompts of PROMPT_LEN tokens are longer than every sliding window here, and the soft-caps are small,
# so windows and caps change the numbers.
PROMPT_LEN = 12
_SMALL = dict(vocab_size=150, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)
_LLAMA = dict(_SMALL, num_key_value_heads=2, intermediate_size=80, tie_word_embeddings=False)
FAMILIES: dict[str, dict] = {
    # Llama 3 rotary scaling, biases everywhere, grouped-query attention
    "llama": dict(
        _LLAMA,
        attention_bias=True,
        mlp_bias=True,
        rope_parameters=dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=16,
        ),
    ),
    "mistral": dict(_LLAMA, sliding_window=5, head_dim=16),
    "qwen2": dict(_LLAMA, use_sliding_window=True, sliding_window=4, max_window_layers=1),
    "qwen3": dict(_LLAMA, head_dim=16, tie_word_embeddings=True),
    "gemma": dict(_LLAMA, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True),
    "gemma2": dict(
        _LLAMA,
        head_dim=16,
        sliding_window=4,
        query_pre_attn_scalar=20,
        attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0,
    ),
    "gemma3_text": dict(
        _LLAMA,
        head_dim=16,
        sliding_window=4,
        query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": dict(rope_type="default", rope_theta=10000.0),
            "full_attention": dict(rope_type="linear", factor=4.0, rope_theta=100000.0),
        },
    ),
    "gpt_neox": dict(
        _SMALL,
        hidden_size=64,
        intermediate_size=96,
        use_parallel_residual=True,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25),
    ),
    "gpt_neo": dict(
        vocab_size=150,
        hidden_size=48,
        num_layers=2,
        num_heads=4,
        max_position_embeddings=64,
        attention_types=[[["global", "local"], 1]],
        window_size=4,
        bos_token_id=0,
        eos_token_id=0,
    ),
    "phi3": dict(
        _LLAMA,
        sliding_window=5,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5),
    ),
    "olmo": dict(_LLAMA, clip_qkv=0.5, pad_token_id=0),
    "olmo2": dict(_LLAMA, pad_token_id=0),
    # four layers: three sliding-window layers then a global one (HF's rule), two rotary bases, linear on the global
    "olmo3": dict(
        _LLAMA,
        num_hidden_layers=4,
        sliding_window=4,
        pad_token_id=0,
        eos_token_id=0,
        rope_parameters={
            "sliding_attention": dict(rope_type="default", rope_theta=10000.0),
            "full_attention": dict(rope_type="linear", factor=2.0, rope_theta=500000.0),
        },
    ),
}


def hf_random_decoder(kind: str, seed: int = 0, **overrides):
    """A random Hugging Face causal LM of model_type `kind`, eager attention, float32, with every norm
    weight and bias re-randomised (the default init leaves them at 1 (Gemma: 0) and 0)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.for_model(kind, **{**FAMILIES[kind], **overrides})
    hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
            elif "norm" in name or ".ln_" in name:
                p.add_(torch.randn_like(p) * 0.2)
            else:
                p.copy_(torch.randn_like(p) * 0.15)
    return hf
