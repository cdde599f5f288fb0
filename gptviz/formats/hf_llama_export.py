"""Write a model of the Llama shape as a Hugging Face Llama directory: the folder that
`transformers.LlamaForCausalLM.from_pretrained(folder)` reads, and that gptviz loads back through
its Hugging Face decoder loader (hf_decoders.py), so one folder proves both directions.

No transformers import: the config.json is written by hand, in the form transformers v5 writes
(`rope_parameters`) with the v4 keys (`rope_theta`, `rope_scaling`) beside it, so either reads it.
The weights take Hugging Face's names: our fused c_attn is split back into q_proj, k_proj, v_proj,
c_gate / c_fc / c_proj become gate_proj / up_proj / down_proj. A tied LM head is not written, as
Hugging Face's own save leaves it out (tie_word_embeddings says to share the embedding).
gptviz's model card goes into config.json under "card" (Hugging Face keeps unknown keys as plain
attributes), where the checkpoint list reads the preset prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..config import GPTConfig
from ..errors import ConfigError
from ..model import GPT
from ..tokenizers import BPETokenizer, Tokenizer

SPECIAL = "<|endoftext|>"  # the one special token a trained BPE gets for Hugging Face: BOS, EOS and pad


def llama_refusals(config: GPTConfig) -> list[str]:
    """What keeps this config from being a Hugging Face Llama, one phrase each; [] when nothing does."""
    c = config
    checks = [
        (c.pos_encoding == "rotary", f"pos_encoding={c.pos_encoding!r} (Llama: rotary)"),
        (c.norm == "rmsnorm" and c.norm_affine and not c.norm_plus_one, "its norms (Llama: RMSNorm × w)"),
        (c.mlp_gated and c.activation == "silu", "its MLP (Llama: SwiGLU, gated with silu)"),
        (c.pre_norm and not c.post_norm and c.qk_norm == "none", "norms after sub-layers or on q/k"),
        (not c.parallel, "a parallel block"),
        (not c.sliding_window, "a sliding window"),
        (not (c.attn_scale or c.attn_softcap or c.final_softcap or c.qkv_clip), "a scale, soft-cap or clip"),
        (c.embed_scale == 1.0, "an embedding scale"),
        (c.rotary_fraction == 1.0 and not c.rotary_interleaved and not c.rope_local_theta, "partial rotary"),
        (not c.bias or c.qkv_bias == c.out_bias, "biases on some attention projections only"),
    ]
    return [why for ok, why in checks if not ok]


def refusal(config: GPTConfig) -> str:
    """The one sentence for a config that is no Llama ("" when it is one)."""
    problems = llama_refusals(config)
    return f"this model is not a Llama, so it has no Hugging Face Llama form: {'; '.join(problems)}" if problems else ""


def hf_llama_config(config: GPTConfig, tokenizer: Tokenizer | None = None, card: dict | None = None) -> dict:
    """The config.json of a Hugging Face Llama with this shape (ConfigError if it is not one)."""
    if refusal(config):
        raise ConfigError(refusal(config))
    c = config
    rope = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling != "none":
        rope |= {"rope_type": c.rope_scaling, "factor": c.rope_factor}
    if c.rope_scaling == "llama3":
        rope |= {
            "low_freq_factor": c.rope_low_freq,
            "high_freq_factor": c.rope_high_freq,
            "original_max_position_embeddings": c.rope_original_max,
        }
    special = tokenizer.tok.token_to_id(SPECIAL) if isinstance(tokenizer, BPETokenizer) else None
    out = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.n_embd,
        "intermediate_size": c.mlp_dim,
        "num_hidden_layers": c.n_layer,
        "num_attention_heads": c.n_head,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": c.block_size,
        "rms_norm_eps": c.norm_eps,
        "tie_word_embeddings": c.tie_weights,
        "attention_bias": c.bias and c.qkv_bias,
        "mlp_bias": c.bias and c.mlp_bias,
        "attention_dropout": 0.0,
        "rope_parameters": rope,
        "rope_theta": c.rope_theta,  # transformers 4.x reads these two; v5 reads rope_parameters
        "rope_scaling": None if c.rope_scaling == "none" else {k: v for k, v in rope.items() if k != "rope_theta"},
        "bos_token_id": special,
        "eos_token_id": special,
        "pad_token_id": None,
        "dtype": "float32",
        "torch_dtype": "float32",
        "use_cache": True,
    }
    if card:
        out["card"] = card
    return out


def hf_llama_state(model: GPT) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face Llama's names (contiguous copies, float32)."""
    c = model.config
    H, Hkv, D = c.n_head, c.kv_heads, c.head_dim
    ours = model.state_dict()
    state: dict[str, torch.Tensor] = {"model.embed_tokens.weight": ours["transformer.wte.weight"]}

    def linear(theirs: str, key: str, part: slice = slice(None)) -> None:
        for p in ("weight", "bias"):
            if f"{key}.{p}" in ours:
                state[f"{theirs}.{p}"] = ours[f"{key}.{p}"][part]

    for i in range(c.n_layer):
        o, t = f"transformer.h.{i}", f"model.layers.{i}"
        q, k = slice(0, H * D), slice(H * D, (H + Hkv) * D)
        v = slice((H + Hkv) * D, (H + 2 * Hkv) * D)
        for name, part in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
            linear(f"{t}.self_attn.{name}", f"{o}.attn.c_attn", part)
        linear(f"{t}.self_attn.o_proj", f"{o}.attn.c_proj")
        linear(f"{t}.mlp.gate_proj", f"{o}.mlp.c_gate")
        linear(f"{t}.mlp.up_proj", f"{o}.mlp.c_fc")
        linear(f"{t}.mlp.down_proj", f"{o}.mlp.c_proj")
        state[f"{t}.input_layernorm.weight"] = ours[f"{o}.ln_1.weight"]
        state[f"{t}.post_attention_layernorm.weight"] = ours[f"{o}.ln_2.weight"]
    state["model.norm.weight"] = ours["transformer.ln_f.weight"]
    if not c.tie_weights:
        state["lm_head.weight"] = ours["lm_head.weight"]
    # safetensors refuses tensors that share memory: each one its own contiguous float32 copy
    return {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in state.items()}


def tokenizer_config(tokenizer: BPETokenizer, block_size: int) -> dict:
    """tokenizer_config.json, so transformers' AutoTokenizer also reads the folder's tokenizer.json."""
    special = SPECIAL if tokenizer.tok.token_to_id(SPECIAL) is not None else None
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": special,
        "eos_token": special,
        "add_bos_token": False,
        "model_max_length": block_size,
        "clean_up_tokenization_spaces": False,
    }


def save_hf_llama(model: GPT, path: str | Path, tokenizer: Tokenizer | None = None, card: dict | None = None) -> Path:
    """Write model (of the Llama shape) as a Hugging Face Llama directory: config.json (with gptviz's
    card), model.safetensors, generation_config.json and, for a BPE, tokenizer.json +
    tokenizer_config.json. ConfigError if the model is not of the Llama shape or the tokenizer cannot
    be written as tokenizer.json."""
    if tokenizer is not None and not isinstance(tokenizer, BPETokenizer):
        raise ConfigError(
            "a Hugging Face directory carries its tokenizer as tokenizer.json: use a BPE tokenizer (--tokenizer bpe)"
        )
    config = hf_llama_config(model.config, tokenizer, card)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file(hf_llama_state(model), str(path / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save(path)
        text = json.dumps(tokenizer_config(tokenizer, model.config.block_size), indent=2)
        (path / "tokenizer_config.json").write_text(text + "\n")
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    (path / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    # config.json last: a folder with it is a checkpoint, so a reader never sees one without weights
    (path / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return path
