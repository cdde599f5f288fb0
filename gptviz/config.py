"""GPTConfig: every variant of the model family, chosen by fields (docs/architecture.md, "The model family").

A config often comes from a file a stranger wrote (config.json, nanoGPT's model_args), so every
field is type-checked and held to the bounds in limits.py when the config is made, before any
model is built: a string is not a boolean, and 1e9 is not a vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from .errors import ConfigError
from .limits import MAX_CONFIG, MAX_DERIVED, MAX_PARAMS, MAX_POSITION_TABLE

CHOICES = {
    "pos_encoding": ("learned", "sinusoidal", "rotary", "none"),
    "norm": ("layernorm", "rmsnorm"),
    "activation": ("gelu", "gelu_tanh", "relu", "silu"),
    "rope_scaling": ("none", "linear", "llama3"),
    "qk_norm": ("none", "head", "all"),
    "gelu_formula": ("kernel", "gelu_new", "gelu_fast"),
}
SIZES = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")
# GPT-2's own fields (docs/architecture.md, "The model family"): a model card always shows them
CLASSIC = (*SIZES, "dropout", "bias", "pos_encoding", "norm", "activation", "tie_weights", "norm_eps")
# sizes where 0 means "derived": n_kv_head = n_head, head_size = C / H, n_inner = 4C
DERIVED = ("n_kv_head", "head_size", "n_inner", "sliding_window", "rope_original_max")
FLAGS = (
    "bias",
    "tie_weights",
    "qkv_bias",
    "out_bias",
    "mlp_bias",
    "mlp_gated",
    "norm_plus_one",
    "norm_affine",
    "pre_norm",
    "post_norm",
    "parallel",
    "rotary_interleaved",
    "attn_fp32",
    "rotary_fp32",
    "norm_fp32_scale",
)
# non-negative numbers where 0 means "off" (or "the usual": attn_scale 0 is 1/sqrt(D), rope_local_theta 0 is rope_theta)
OFF_AT_ZERO = ("attn_softcap", "final_softcap", "attn_scale", "qkv_clip", "rope_local_theta")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: object) -> str:
    """A field's value for a message, cut short: a config may hold a 10 MB string."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass
class GPTConfig:
    vocab_size: int = 65  # 65: the character set of Shakespeare's plays
    block_size: int = 256  # longest context the model can read
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128  # C, the width of the residual stream; D = C / H per head
    dropout: float = 0.0  # only active in train mode
    bias: bool = True  # biases in Linear and LayerNorm, as GPT-2
    pos_encoding: str = "learned"  # learned (GPT-2) | sinusoidal (fixed sin/cos)
    norm: str = "layernorm"  # layernorm (GPT-2) | rmsnorm
    activation: str = "gelu"  # gelu (exact) | gelu_tanh (GPT-2's gelu_new) | relu
    tie_weights: bool = True  # lm_head shares the token embedding, as GPT-2
    norm_eps: float = 1e-5
    # --- every common decoder family (docs/architecture.md); GPT-2's value is each default ---
    n_kv_head: int = (
        0  # H_kv, key/value heads (grouped-query attention: Llama 2/3, Mistral, Qwen, Gemma); 0 = n_head (GPT-2)
    )
    head_size: int = 0  # D when it is not C / H (Gemma, Qwen3, Mistral Nemo); 0 = C / H (GPT-2)
    n_inner: int = 0  # F, the MLP's width (every Llama-style family sets it); 0 = 4C (GPT-2)
    mlp_gated: bool = (
        False  # down(act(gate(x)) * up(x)): SwiGLU (Llama, Mistral, Qwen, Phi-3, OLMo), GeGLU (Gemma); GPT-2: no
    )
    qkv_bias: bool = True  # biases on q, k, v (with `bias`): Qwen2 has them, GPT-Neo not; GPT-2: yes
    out_bias: bool = (
        True  # bias on the attention output projection (with `bias`): GPT-Neo/NeoX yes, Qwen2 no; GPT-2: yes
    )
    mlp_bias: bool = True  # biases in the MLP (with `bias`): GPT-Neo/NeoX yes, Qwen2 no; GPT-2: yes
    norm_plus_one: bool = False  # RMSNorm scales by (1 + w) (Gemma 1/2/3); GPT-2: no
    norm_affine: bool = True  # the norms have a learned scale (and bias); OLMo 1's LayerNorm has neither; GPT-2: yes
    pre_norm: bool = True  # norm before each sub-layer (every family but OLMo 2); GPT-2: yes
    post_norm: bool = False  # norm on each sub-layer's output before the residual add (Gemma 2/3, OLMo 2); GPT-2: no
    qk_norm: str = "none"  # RMSNorm on q and k: per head (Qwen3, Gemma 3) | all heads at once (OLMo 2); GPT-2: none
    parallel: bool = False  # attention and MLP both read resid_pre (GPT-NeoX/Pythia, GPT-J); GPT-2: no
    rope_theta: float = 10000.0  # rotary base (pos_encoding=rotary: Llama, Qwen, Gemma, NeoX, Phi-3, OLMo)
    rotary_fraction: float = 1.0  # share of each head's D that rotates (NeoX/Pythia 0.25, Phi-4-mini 0.75)
    rotary_interleaved: bool = False  # rotate pairs (0,1),(2,3)... (GPT-J) instead of halves (Llama, NeoX)
    rope_scaling: str = "none"  # none | linear (Gemma 3 global layers) | llama3 (Llama 3.1/3.2)
    rope_factor: float = 1.0  # the scaling factor of linear and llama3
    rope_low_freq: float = 1.0  # llama3's low_freq_factor
    rope_high_freq: float = 4.0  # llama3's high_freq_factor
    rope_original_max: int = 0  # llama3's original_max_position_embeddings
    rope_local_theta: float = 0.0  # rotary base of the local layers when it differs (Gemma 3: 10,000); 0 = rope_theta
    sliding_window: int = (
        0  # W: a local layer's query reads only its last W keys (Mistral, Gemma 2/3, GPT-Neo, Qwen2); 0 = none
    )
    layer_types: str = (
        ""  # one letter per layer, g global or l local (Gemma 2 "lglg..", GPT-Neo "glgl.."); "" = all local when W > 0
    )
    attn_scale: float = 0.0  # multiplies q.k: GPT-Neo 1 (none), Gemma query_pre_attn_scalar^-0.5; 0 = 1/sqrt(D) (GPT-2)
    attn_softcap: float = 0.0  # scores become cap * tanh(scores / cap) (Gemma 2); 0 = no cap (GPT-2)
    final_softcap: float = 0.0  # the same on the logits (Gemma 2); 0 = no cap (GPT-2)
    attn_fp32: bool = False  # in bf16 / fp16 q kᵀ and the softmax in float32 (GPT-Neo, as HF); GPT-2: no
    rotary_fp32: bool = False  # in bf16 / fp16 q and k rotated in float32, rounded after (OLMo 1/2/3, as HF); GPT-2: no
    norm_fp32_scale: bool = False  # in bf16 / fp16 RMSNorm multiplies by w in float32, rounded after (OLMo 2/3); no
    qkv_clip: float = 0.0  # q, k, v clamped to [-clip, clip] (OLMo 1 clip_qkv); 0 = none (GPT-2)
    embed_scale: float = 1.0  # token embeddings multiplied by this (Gemma: sqrt(C)); GPT-2: 1
    eos_token_id: tuple[int, ...] = ()  # generation stops at these (config.json / generation_config.json); () = none
    # how gelu_tanh is computed in bf16 / fp16, where the ways differ: torch's one kernel (Gemma's
    # gelu_pytorch_tanh) | gelu_new (GPT-2, GPT-J, Phi) or gelu_fast, Hugging Face's formulas, each step
    # rounded to the dtype as Hugging Face rounds it. float32 always runs the kernel (equal to rounding)
    gelu_formula: str = "kernel"

    def __post_init__(self):
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise ConfigError(f"{name}={_shown(value)}: choose one of {', '.join(allowed)}")
        for name in (*SIZES, *DERIVED):
            value = getattr(self, name)
            low = 1 if name in SIZES else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                what = "a positive integer" if low else "a whole number >= 0 (0: derived or off)"
                raise ConfigError(f"{name}={_shown(value)}: must be {what}")
            top = MAX_CONFIG[name] if name in SIZES else MAX_DERIVED[name]
            if value > top:
                raise ConfigError(f"{name}={value:,} is above gptviz's limit of {top:,} (gptviz/limits.py)")
        for name in FLAGS:
            value = getattr(self, name)
            if not isinstance(value, bool):  # bool("no") is True: a string must not pass as a flag
                raise ConfigError(f"{name}={_shown(value)}: must be true or false")
        if not _is_number(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={_shown(self.dropout)}: must be in [0, 1)")
        if not _is_number(self.norm_eps) or not 0.0 <= self.norm_eps <= 1.0:
            raise ConfigError(f"norm_eps={_shown(self.norm_eps)}: must be a number in [0, 1], e.g. 1e-5")
        for name in (*OFF_AT_ZERO, "rope_factor", "rope_low_freq", "rope_high_freq", "embed_scale", "rope_theta"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value <= 1e9:
                raise ConfigError(f"{name}={_shown(value)}: must be a number >= 0")
        if not self.rope_theta > 0 or not self.embed_scale > 0:
            raise ConfigError("rope_theta and embed_scale must be above 0")
        if not _is_number(self.rotary_fraction) or not 0.0 < self.rotary_fraction <= 1.0:
            raise ConfigError(f"rotary_fraction={_shown(self.rotary_fraction)}: must be in (0, 1]")
        if not self.head_size and self.n_embd % self.n_head:
            raise ConfigError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.n_head % self.kv_heads:
            raise ConfigError(f"n_head={self.n_head} is not a multiple of n_kv_head={self.n_kv_head}")
        if self.pos_encoding == "sinusoidal" and self.n_embd % 2:
            raise ConfigError(f"sinusoidal positions need an even n_embd, got {self.n_embd}")
        if self.pos_encoding == "sinusoidal" and self.block_size * self.n_embd > MAX_POSITION_TABLE:
            raise ConfigError(
                f"sinusoidal positions: a table of block_size x n_embd = {self.block_size * self.n_embd:,} values "
                f"is above gptviz's limit of {MAX_POSITION_TABLE:,} (gptviz/limits.py)"
            )
        if self.pos_encoding == "rotary" and (self.rotary_dim < 2 or self.rotary_dim % 2):
            raise ConfigError(
                f"rotary positions turn pairs of dimensions: head size {self.head_dim} x rotary_fraction "
                f"{self.rotary_fraction} = {self.rotary_dim} must be even and at least 2"
            )
        if self.rope_scaling == "llama3" and (not self.rope_original_max or self.rope_high_freq <= self.rope_low_freq):
            raise ConfigError("llama3 rope scaling needs rope_original_max > 0 and rope_high_freq > rope_low_freq")
        if not isinstance(self.layer_types, str) or (
            self.layer_types and (len(self.layer_types) != self.n_layer or set(self.layer_types) - {"g", "l"})
        ):
            raise ConfigError(
                f"layer_types={_shown(self.layer_types)}: one letter per layer ({self.n_layer}), g global or l local"
            )
        n = self.num_params()
        if n > MAX_PARAMS:
            raise ConfigError(
                f"the config describes {n:,} parameters, above gptviz's limit of {MAX_PARAMS:,} (gptviz/limits.py)"
            )
        eos = self.eos_token_id
        eos = [eos] if isinstance(eos, int) and not isinstance(eos, bool) else eos
        if not isinstance(eos, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.vocab_size for i in eos
        ):
            raise ConfigError(f"eos_token_id={_shown(self.eos_token_id)}: must be token ids within the vocabulary")
        self.eos_token_id = tuple(eos)

    @property
    def head_dim(self) -> int:
        """D, each head's size."""
        return self.head_size or self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        """H_kv, the key/value heads: query head h reads KV head h // (H / H_kv)."""
        return self.n_kv_head or self.n_head

    @property
    def mlp_dim(self) -> int:
        """F, the MLP's width: the input of its down projection."""
        return self.n_inner or 4 * self.n_embd

    @property
    def rotary_dim(self) -> int:
        """How many of each head's D dimensions rotate (the first ones), as Hugging Face rounds it."""
        return int(self.head_dim * self.rotary_fraction)

    def is_local(self, layer: int) -> bool:
        """Whether this layer attends through the sliding window."""
        if not self.sliding_window:
            return False
        return not self.layer_types or self.layer_types[layer] == "l"

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every key of GPT(self).state_dict() and its shape, worked out without building the model,
        so a checkpoint's tensors can be checked against its config before anything is allocated."""
        C, V, D, F = self.n_embd, self.vocab_size, self.head_dim, self.mlp_dim
        H, Hkv = self.n_head, self.kv_heads

        def linear(prefix: str, n_out: int, n_in: int, bias: bool) -> dict[str, tuple[int, ...]]:
            out = {f"{prefix}.weight": (n_out, n_in)}
            if self.bias and bias:
                out[f"{prefix}.bias"] = (n_out,)
            return out

        def norm(prefix: str, width: int = C) -> dict[str, tuple[int, ...]]:
            if not self.norm_affine:
                return {}
            keys = ("weight", "bias") if self.norm == "layernorm" and self.bias else ("weight",)
            return {f"{prefix}.{k}": (width,) for k in keys}

        shapes: dict[str, tuple[int, ...]] = {"transformer.wte.weight": (V, C)}
        for i in range(self.n_layer):
            p = f"transformer.h.{i}"
            if self.pre_norm:
                shapes |= norm(f"{p}.ln_1") | norm(f"{p}.ln_2")
            shapes |= linear(f"{p}.attn.c_attn", (H + 2 * Hkv) * D, C, self.qkv_bias)
            if self.qk_norm != "none":
                shapes |= norm(f"{p}.attn.q_norm", D if self.qk_norm == "head" else H * D)
                shapes |= norm(f"{p}.attn.k_norm", D if self.qk_norm == "head" else Hkv * D)
            shapes |= linear(f"{p}.attn.c_proj", C, H * D, self.out_bias)
            if self.post_norm:
                shapes |= norm(f"{p}.attn.ln_post") | norm(f"{p}.mlp.ln_post")
            shapes |= linear(f"{p}.mlp.c_fc", F, C, self.mlp_bias)
            if self.mlp_gated:
                shapes |= linear(f"{p}.mlp.c_gate", F, C, self.mlp_bias)
            shapes |= linear(f"{p}.mlp.c_proj", C, F, self.mlp_bias)
        shapes |= norm("transformer.ln_f")
        if self.pos_encoding == "learned":
            shapes["transformer.wpe.weight"] = (self.block_size, C)
        shapes["lm_head.weight"] = (V, C)
        return shapes

    def num_params(self) -> int:
        """Parameters GPT(self) will hold (a tied head counted once), known before it is built."""
        n = sum(math.prod(s) for s in self.state_shapes().values())
        return n - (self.vocab_size * self.n_embd if self.tie_weights else 0)

    def to_dict(self) -> dict:
        return asdict(self)

    def card_dict(self) -> dict:
        """The fields a model card shows: GPT-2's own, and of the others only those this model sets."""
        base = GPTConfig.__dataclass_fields__
        return {k: v for k, v in self.to_dict().items() if k in CLASSIC or v != base[k].default}

    def special(self) -> list[str]:
        """What sets this model apart from GPT-2, one phrase each, for the model card."""
        out = []
        D, H, Hkv = self.head_dim, self.n_head, self.kv_heads
        if self.pos_encoding == "rotary":
            part = f" on {self.rotary_dim} of D = {D}" if self.rotary_dim != D else ""
            scaled = f", {self.rope_scaling} scaling x{self.rope_factor:g}" if self.rope_scaling != "none" else ""
            out.append(f"rotary positions (theta {self.rope_theta:g}{part}{scaled})")
        if Hkv != H:
            out.append(f"grouped-query attention: {H} query heads share {Hkv} key/value heads")
        if self.head_size and self.head_size * H != self.n_embd:
            out.append(f"head size D = {D}, not C / H")
        if self.mlp_gated:
            act = {"silu": "SwiGLU", "gelu_tanh": "GeGLU", "gelu": "GeGLU"}.get(self.activation, "gated")
            out.append(f"{act} MLP of width F = {self.mlp_dim}")
        if self.norm == "rmsnorm":
            out.append("RMSNorm" + (" scaled by 1 + w" if self.norm_plus_one else ""))
        if not self.norm_affine:
            out.append("norms without a learned scale")
        if self.post_norm:
            out.append("norms after the sub-layers" + ("" if self.pre_norm else " only"))
        if self.qk_norm != "none":
            out.append(f"q/k norms ({'per head' if self.qk_norm == 'head' else 'over all heads'})")
        if self.parallel:
            out.append("attention and MLP in parallel (both read resid_pre)")
        if self.sliding_window:
            local = self.layer_types.count("l") if self.layer_types else self.n_layer
            out.append(f"sliding window of {self.sliding_window} keys in {local} of {self.n_layer} layers")
        if self.attn_scale:
            out.append("no attention scale" if self.attn_scale == 1.0 else f"attention scale {self.attn_scale:.4g}")
        if self.attn_softcap or self.final_softcap:
            out.append(f"soft-caps: scores {self.attn_softcap:g}, logits {self.final_softcap:g} (0 = none)")
        if self.embed_scale != 1.0:
            out.append(f"embeddings scaled by {self.embed_scale:.4g}")
        if self.qkv_clip:
            out.append(f"q, k, v clipped to +-{self.qkv_clip:g}")
        return out

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"expected a JSON object of config fields, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(d) - known))
        if unknown:
            raise ConfigError(f"unknown config field(s): {', '.join(unknown[:5])}")
        return cls(**d)
