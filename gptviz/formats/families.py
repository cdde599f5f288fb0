"""One record per Hugging Face family: everything gptviz knows about a `model_type` in one place.

A record says how config.json's keys become GPTConfig's fields (renamed, fixed, defaulted as Hugging
Face's own config class defaults them, derived), which keys it reads and which values it refuses,
how local and global layers are chosen when config.json does not list them, and where the family
keeps each weight (and how fused or transposed tensors become ours). The readers in hf_config.py
and hf_decoders.py hold no branch on a family's name: a new dense family is one record here and one
row in tests/hf_helpers.py's FAMILIES.
"""

from __future__ import annotations

from typing import Any

from .family_record import (
    Family,
    Fuse,
    Layout,
    Refusal,
    Tensor,
    alternate,
    conv1d,
    every_fourth_global,
    every_nth_global,
    frozen,
    gemma,
    gemma2,
    half,
    neo_layers,
    neox_qkv,
    qwen_windows,
    shown,
    truthy,
)

# --- the records --------------------------------------------------------------------------------------
LLAMA_NAMES = frozen(
    vocab_size="vocab_size",
    n_layer="num_hidden_layers",
    n_head="num_attention_heads",
    n_embd="hidden_size",
    n_kv_head="num_key_value_heads",
    head_size="head_dim",
    n_inner="intermediate_size",
    norm_eps="rms_norm_eps",
    qkv_bias="attention_bias",
    out_bias="attention_bias",
    mlp_bias="mlp_bias",
    tie_weights="tie_word_embeddings",
)
LLAMA_FIXED = frozen(mlp_gated=True, norm="rmsnorm", bias=True, pos_encoding="rotary")
LLAMA_DEFAULTS = frozen(
    rms_norm_eps=1e-6, attention_bias=False, mlp_bias=False, tie_word_embeddings=False, hidden_act="silu"
)
MOE = Refusal(
    "num_local_experts", truthy, "it is a mixture-of-experts model (num_experts), which gptviz does not implement"
)
MOE_2 = Refusal("num_experts", truthy, MOE.why)


def _linear(ours: str, *theirs: str, fuse: Fuse | None = None) -> Tensor:
    return Tensor(ours, theirs, fuse)


_ATTN = (
    _linear("attn.c_attn", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    _linear("attn.c_proj", "self_attn.o_proj"),
    _linear("attn.q_norm", "self_attn.q_norm"),
    _linear("attn.k_norm", "self_attn.k_norm"),
)
_MLP = (
    _linear("mlp.c_gate", "mlp.gate_proj"),
    _linear("mlp.c_fc", "mlp.up_proj"),
    _linear("mlp.c_proj", "mlp.down_proj"),
)
_PRE_NORMS = (_linear("ln_1", "input_layernorm"), _linear("ln_2", "post_attention_layernorm"))
_POST_NORMS = (
    _linear("attn.ln_post", "post_attention_layernorm"),
    _linear("mlp.ln_post", "post_feedforward_layernorm"),
)
_SANDWICH = (
    _linear("ln_1", "input_layernorm"),
    _linear("attn.ln_post", "post_attention_layernorm"),
    _linear("ln_2", "pre_feedforward_layernorm"),
    _linear("mlp.ln_post", "post_feedforward_layernorm"),
)
_LLAMA_OUTER = (
    _linear("transformer.wte", "model.embed_tokens"),
    _linear("transformer.ln_f", "model.norm"),
    _linear("lm_head", "lm_head"),
)
LLAMA_LAYOUT = Layout("model.", "model.layers.{i}", _LLAMA_OUTER, _ATTN + _MLP + _PRE_NORMS)


# GPT-2's own names (and GPT-Neo's, which kept them): embeddings, positions, final norm, head, block norms
_GPT2_OUTER = tuple(
    _linear(name, name) for name in ("transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head")
)
_GPT2_NORMS = (_linear("ln_1", "ln_1"), _linear("ln_2", "ln_2"))


def llama_like(model_type: str, note: str, **over: Any) -> Family:
    """A family of Llama's shape: its names, layout and defaults, with the differences given."""
    base: dict[str, Any] = dict(
        names=LLAMA_NAMES, layout=LLAMA_LAYOUT, fixed=LLAMA_FIXED, defaults=LLAMA_DEFAULTS, refuses=(MOE, MOE_2)
    )
    for key in ("names", "fixed", "defaults"):
        if key in over:
            over[key] = frozen(base[key], **over[key])
    return Family(model_type, note, **(base | over))


GPT2 = Family(
    "gpt2",
    "GPT-2: learned positions, LayerNorm, GELU MLP (gelu_new), Conv1D weights stored [in, out]",
    checkpoints="GPT-2, DistilGPT2",
    names=frozen(
        vocab_size="vocab_size",
        block_size="n_positions",
        n_layer="n_layer",
        n_head="n_head",
        n_embd="n_embd",
        norm_eps="layer_norm_epsilon",
        tie_weights="tie_word_embeddings",
    ),
    aliases=frozen(n_ctx="n_positions"),
    defaults=frozen(
        vocab_size=50257,
        n_positions=1024,
        n_layer=12,
        n_head=12,
        n_embd=768,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        activation_function="gelu_new",
        scale_attn_weights=True,
        scale_attn_by_inverse_layer_idx=False,
        add_cross_attention=False,
    ),
    activation=("activation_function",),
    rotary=False,
    window="",
    refuses=(
        Refusal(
            "scale_attn_weights",
            lambda v, hf: v is not True,
            "attention scaling other than 1/sqrt(D) is not supported",
        ),
        Refusal(
            "scale_attn_by_inverse_layer_idx",
            lambda v, hf: v not in (False, None),
            "attention scaling other than 1/sqrt(D) is not supported",
        ),
        Refusal(
            "add_cross_attention",
            lambda v, hf: v not in (False, None),
            "cross-attention is not part of a decoder-only GPT",
        ),
        Refusal(
            "n_inner",
            lambda v, hf: v is not None and (not isinstance(hf.get("n_embd"), int) or v != 4 * hf["n_embd"]),
            lambda v, hf: f"n_inner={shown(v)} but gptviz reads GPT-2's MLP as 4 * n_embd wide",
        ),
    ),
    layout=Layout(
        "transformer.",
        "transformer.h.{i}",
        _GPT2_OUTER,
        (
            *_GPT2_NORMS,
            Tensor("attn.c_attn", ("attn.c_attn",), conv1d, bias_too=False),
            Tensor("attn.c_proj", ("attn.c_proj",), conv1d, bias_too=False),
            Tensor("mlp.c_fc", ("mlp.c_fc",), conv1d, bias_too=False),
            Tensor("mlp.c_proj", ("mlp.c_proj",), conv1d, bias_too=False),
        ),
    ),
    message_names=frozen(block_size="n_positions", norm_eps="layer_norm_epsilon", tie_weights="tie_word_embeddings"),
)

GPT_NEO = Family(
    "gpt_neo",
    "GPT-Neo: learned positions, unscaled q·k, local and global layers in turn",
    checkpoints="GPT-Neo, TinyStories",
    names=frozen(
        vocab_size="vocab_size",
        block_size="max_position_embeddings",
        n_layer="num_layers",
        n_head="num_heads",
        n_embd="hidden_size",
        n_inner="intermediate_size",
        norm_eps="layer_norm_epsilon",
        tie_weights="tie_word_embeddings",
    ),
    # q, k, v without bias (out_proj and MLP have one); q·k unscaled, and in float32 in bf16 / fp16 as HF's
    fixed=frozen(qkv_bias=False, attn_scale=1.0, attn_fp32=True),
    defaults=frozen(
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        window_size=256,
        attention_types=[[["global", "local"], 12]],
    ),
    activation=("activation_function",),
    rotary=False,
    window="window_size",
    refuses=(
        Refusal(  # transformers masks every key of a local layer then, and attends to all of them alike
            "window_size",
            lambda v, hf: isinstance(v, bool) or not isinstance(v, int) or v < 1,
            lambda v, hf: (
                f"window_size={shown(v)} must be a whole number, 1 or more: a local layer reads its last "
                "window_size keys, and 0 would read none"
            ),
        ),
    ),
    layers=neo_layers,
    layer_keys=("attention_types", "attention_layers"),  # attention_layers: derived by Hugging Face, not read
    layout=Layout(
        "transformer.",
        "transformer.h.{i}",
        _GPT2_OUTER,
        (
            *_GPT2_NORMS,
            _linear("attn.c_attn", "attn.attention.q_proj", "attn.attention.k_proj", "attn.attention.v_proj"),
            _linear("attn.c_proj", "attn.attention.out_proj"),
            _linear("mlp.c_fc", "mlp.c_fc"),
            _linear("mlp.c_proj", "mlp.c_proj"),
        ),
    ),
)

GPT_NEOX = Family(
    "gpt_neox",
    "GPT-NeoX (Pythia): fused per-head qkv, parallel attention and MLP, rotary on part of each head",
    checkpoints="Pythia, GPT-NeoX",
    names=frozen(
        vocab_size="vocab_size",
        n_layer="num_hidden_layers",
        n_head="num_attention_heads",
        n_embd="hidden_size",
        n_inner="intermediate_size",
        norm_eps="layer_norm_eps",
        qkv_bias="attention_bias",
        out_bias="attention_bias",
        tie_weights="tie_word_embeddings",
        parallel="use_parallel_residual",
    ),
    fixed=frozen(pos_encoding="rotary"),
    defaults=frozen(
        hidden_act="gelu",
        layer_norm_eps=1e-5,
        attention_bias=True,
        tie_word_embeddings=False,
        use_parallel_residual=True,
        partial_rotary_factor=0.25,
    ),
    aliases=frozen(rotary_pct="partial_rotary_factor", rotary_emb_base="rope_theta"),
    window="",
    layout=Layout(
        "gpt_neox.",
        "gpt_neox.layers.{i}",
        (
            _linear("transformer.wte", "gpt_neox.embed_in"),
            _linear("transformer.ln_f", "gpt_neox.final_layer_norm"),
            _linear("lm_head", "embed_out"),  # transformers 5 renames it lm_head
            _linear("lm_head", "lm_head"),
        ),
        (
            _linear("ln_1", "input_layernorm"),
            _linear("ln_2", "post_attention_layernorm"),
            _linear("attn.c_attn", "attention.query_key_value", fuse=neox_qkv),
            _linear("attn.c_proj", "attention.dense"),
            _linear("mlp.c_fc", "mlp.dense_h_to_4h"),
            _linear("mlp.c_proj", "mlp.dense_4h_to_h"),
        ),
    ),
)

BIDIRECTIONAL = Refusal(
    "use_bidirectional_attention",
    truthy,
    "it uses bidirectional attention (use_bidirectional_attention), which gptviz does not implement",
)
_GEMMA2_NAMES = dict(attn_softcap="attn_logit_softcapping", final_softcap="final_logit_softcapping")
_GEMMA2_LAYOUT = Layout("model.", "model.layers.{i}", _LLAMA_OUTER, _ATTN + _MLP + _SANDWICH)

FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        GPT2,
        llama_like(
            "llama",
            "Llama: rotary positions (plain, linear or llama3 scaling), RMSNorm, SwiGLU MLP, grouped-query "
            "attention, optional biases",
            checkpoints="SmolLM / SmolLM2, TinyLlama, Llama 2 / 3.x, gptviz's own `checkpoints/shakespeare-llama`",
        ),
        llama_like(
            "mistral",
            "Mistral: Llama's shape with a sliding attention window on every layer",
            defaults=dict(sliding_window=4096),
            checkpoints="Mistral 7B",
        ),
        llama_like(
            "qwen2",
            "Qwen2: Llama's shape with biases on q, k and v; use_sliding_window on the layers from max_window_layers",
            checkpoints="Qwen1.5 / Qwen2 / Qwen2.5",
            names=dict(qkv_bias=None, out_bias=None),
            fixed=dict(qkv_bias=True, out_bias=False),  # biases on q, k, v only
            defaults=dict(sliding_window=4096, max_window_layers=28),
            layers=qwen_windows,
            layer_keys=("use_sliding_window", "max_window_layers"),
        ),
        llama_like(
            "qwen3",
            "Qwen3: Llama's shape with an RMSNorm on each head's q and k, a head size of its own",
            checkpoints="Qwen3 (dense)",
            fixed=dict(qk_norm="head"),
            defaults=dict(sliding_window=4096, max_window_layers=28),
            layers=qwen_windows,
            layer_keys=("use_sliding_window", "max_window_layers"),
        ),
        llama_like(
            "gemma",
            "Gemma: RMSNorm scaled by 1 + w, GeGLU MLP, embeddings scaled by sqrt(C)",
            checkpoints="Gemma",
            fixed=dict(norm_plus_one=True),
            defaults=dict(tie_word_embeddings=True, hidden_act="gelu_pytorch_tanh"),
            activation_aliases=frozen(gelu="gelu_pytorch_tanh"),  # as Hugging Face reads Gemma's legacy "gelu"
            derive=gemma,
            refuses=(MOE, MOE_2, BIDIRECTIONAL),
        ),
        llama_like(
            "gemma2",
            "Gemma 2: post-norms, query_pre_attn_scalar, soft-capped scores and logits, local and global layers "
            "in turn",
            checkpoints="Gemma 2",
            names=_GEMMA2_NAMES,
            fixed=dict(norm_plus_one=True, post_norm=True),
            defaults=dict(
                tie_word_embeddings=True,
                hidden_activation="gelu_pytorch_tanh",
                query_pre_attn_scalar=256,
                sliding_window=4096,
            ),
            activation=("hidden_activation", "hidden_act"),
            derive=gemma2,
            refuses=(MOE, MOE_2, BIDIRECTIONAL),
            derive_keys=("query_pre_attn_scalar",),
            layers=alternate,
            layout=_GEMMA2_LAYOUT,
        ),
        llama_like(
            "gemma3_text",
            "Gemma 3: post-norms, q/k norms, five local layers to one global, a rotary base per layer kind "
            "(linear scaling on the global ones)",
            checkpoints="Gemma 3 (text-only, e.g. 270M, 1B)",
            names=_GEMMA2_NAMES,
            fixed=dict(norm_plus_one=True, post_norm=True, qk_norm="head"),
            defaults=dict(
                tie_word_embeddings=True,
                hidden_activation="gelu_pytorch_tanh",
                query_pre_attn_scalar=256,
                sliding_window=4096,
                sliding_window_pattern=6,
                rope_theta=1_000_000.0,
                rope_local_base_freq=10_000.0,
            ),
            activation=("hidden_activation", "hidden_act"),
            local_rope="rope_local_base_freq",
            derive=gemma2,
            refuses=(MOE, MOE_2, BIDIRECTIONAL),
            derive_keys=("query_pre_attn_scalar",),
            layers=every_nth_global("sliding_window_pattern", "_sliding_window_pattern"),
            layer_keys=("sliding_window_pattern", "_sliding_window_pattern"),
            layout=_GEMMA2_LAYOUT,
        ),
        GPT_NEOX,
        GPT_NEO,
        llama_like(
            "phi3",
            "Phi-3: Llama's shape with fused qkv and gate_up projections, partial rotary, a sliding window",
            checkpoints="Phi-3 / Phi-3.5 mini (4k), Phi-4-mini",
            defaults=dict(rms_norm_eps=1e-5),
            layout=Layout(
                "model.",
                "model.layers.{i}",
                _LLAMA_OUTER,
                (
                    _linear("attn.c_attn", "self_attn.qkv_proj"),
                    _linear("attn.c_proj", "self_attn.o_proj"),
                    _linear("mlp.c_gate", "mlp.gate_up_proj", fuse=half(0)),
                    _linear("mlp.c_fc", "mlp.gate_up_proj", fuse=half(1)),
                    _linear("mlp.c_proj", "mlp.down_proj"),
                    *_PRE_NORMS,
                ),
            ),
        ),
        llama_like(
            "olmo",
            "OLMo: LayerNorm without learned scale or bias, optional q/k/v clipping (clip_qkv)",
            checkpoints="OLMo 1 (`-hf`)",
            names=dict(norm_eps=None, qkv_clip="clip_qkv"),
            fixed=dict(norm="layernorm", norm_affine=False, norm_eps=1e-5, rotary_fp32=True),
        ),
        llama_like(
            "olmo2",
            "OLMo 2: norms after the sub-layers only, RMSNorm over all of q and k",
            checkpoints="OLMo 2",
            fixed=dict(pre_norm=False, post_norm=True, qk_norm="all", rotary_fp32=True, norm_fp32_scale=True),
            defaults=dict(rms_norm_eps=1e-5),
            layout=Layout("model.", "model.layers.{i}", _LLAMA_OUTER, _ATTN + _MLP + _POST_NORMS),
        ),
        llama_like(
            "olmo3",
            "OLMo 3: OLMo 2 with three sliding-window layers to one global, a rotary base per layer kind",
            checkpoints="OLMo 3",
            fixed=dict(pre_norm=False, post_norm=True, qk_norm="all", rotary_fp32=True, norm_fp32_scale=True),
            defaults=dict(rms_norm_eps=1e-5, sliding_window=4096, rope_theta=500_000.0),
            local_rope="rope_theta",
            layers=every_fourth_global,
            layout=Layout("model.", "model.layers.{i}", _LLAMA_OUTER, _ATTN + _MLP + _POST_NORMS),
        ),
    )
}


def markdown_table() -> str:
    """docs/checkpoints.md's family table, one row per record: its model_type, the checkpoints people
    download, and what gptviz implements for it (the record's note, as the model card shows it)."""
    rows = ["| `model_type` | checkpoints people download | what gptviz implements for it |", "|---|---|---|"]
    for family in FAMILIES.values():
        rows.append(f"| `{family.model_type}` | {family.checkpoints} | {family.note} |")
    return "\n".join(rows)
