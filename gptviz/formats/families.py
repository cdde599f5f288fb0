"""One record per Hugging Face family: everything gptviz knows about a `model_type` in one place.

A record says how config.json's keys become GPTConfig's fields (renamed, fixed, defaulted as Hugging
Face's own config class defaults them, derived), which keys it reads and which values it refuses,
how local and global layers are chosen when config.json does not list them, and where the family
keeps each weight (and how fused or transposed tensors become ours). The readers in hf_config.py
and hf_decoders.py hold no branch on a family's name: a new dense family is one record here and one
row in tests/hf_helpers.py's FAMILIES.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from ..config import GPTConfig

Fuse = Callable[[GPTConfig], Callable[..., torch.Tensor]]


class FamilyRefusal(Exception):
    """A value of config.json that gptviz does not read as Hugging Face does: one sentence."""


def frozen(d: Mapping | None = None, **more) -> Mapping:
    return MappingProxyType({**(d or {}), **more})


@dataclass(frozen=True)
class Refusal:
    """A config.json value refused: `bad(value, config)` says whether it is, `why` says why."""

    key: str
    bad: Callable[[object, dict], bool]
    why: str | Callable[[object, dict], str]

    def sentence(self, value: object, hf: dict) -> str:
        return self.why(value, hf) if callable(self.why) else self.why


@dataclass(frozen=True)
class Tensor:
    """One of our tensors (weight and bias) from the family's: several are stacked (q, k, v), a fuse
    rule regroups, splits or transposes (on the weight only unless bias_too)."""

    ours: str
    theirs: tuple[str, ...]
    fuse: Fuse | None = None
    bias_too: bool = True


@dataclass(frozen=True)
class Layout:
    """Where a family keeps its weights. `outer`: embeddings, final norm, head (several entries for
    one of ours: the first the file holds wins); `block`: each layer's, under `layer`.format(i=...)."""

    prefix: str  # the base model's prefix, which a file saved from the bare model leaves out
    layer: str
    outer: tuple[Tensor, ...]
    block: tuple[Tensor, ...]


@dataclass(frozen=True)
class Family:
    """Everything about one Hugging Face model_type."""

    model_type: str
    note: str  # for the model card
    names: Mapping[str, str | None]  # GPTConfig field -> the config.json key it is read from
    layout: Layout
    fixed: Mapping[str, object] = field(default_factory=frozen)  # GPTConfig fields this family always has
    defaults: Mapping[str, object] = field(default_factory=frozen)  # Hugging Face's values for keys left out
    aliases: Mapping[str, str] = field(default_factory=frozen)  # older spellings: alias -> key
    activation: tuple[str, ...] = ("hidden_act",)  # keys naming the activation, the first set one wins
    activation_aliases: Mapping[str, str] = field(default_factory=frozen)
    rotary: bool = True  # reads rope_parameters / rope_scaling / rope_theta / partial_rotary_factor
    local_rope: str = ""  # the key of the local layers' own rotary base (per layer-type rope_parameters)
    window: str = "sliding_window"  # the key of the sliding window ("" = none)
    layers: Callable[[dict, int], str | list] | None = (
        None  # g/l per layer (or their names) when config.json lists none
    )
    layer_keys: tuple[str, ...] = ()  # the keys `layers` reads
    derive: Callable[[dict], dict] | None = None  # fields computed from config.json (Gemma's scales)
    derive_keys: tuple[str, ...] = ()  # the keys `derive` reads
    refuses: tuple[Refusal, ...] = ()
    message_names: Mapping[str, str] = field(default_factory=frozen)  # GPTConfig field -> name in messages

    @property
    def reads(self) -> frozenset[str]:
        """Every config.json key this family reads (or refuses on sight)."""
        keys = {k for k in self.names.values() if k} | set(self.defaults) | set(self.aliases)
        keys |= set(self.activation) | set(self.layer_keys) | set(self.derive_keys) | {r.key for r in self.refuses}
        if self.rotary:
            keys |= set(ROPE_KEYS) | ({self.local_rope} if self.local_rope else set())
        if self.window:
            keys |= {self.window, "layer_types"}
        if "block_size" not in self.names:
            keys.add("max_position_embeddings")
        return frozenset(keys)


ROPE_KEYS = (
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "partial_rotary_factor",
    "original_max_position_embeddings",
)


# --- fusing rules: a family's tensor -> ours -----------------------------------------------------
def half(i: int) -> Fuse:
    """Phi-3's gate_up_proj stacks gate then up: take half i."""

    def rule(config: GPTConfig) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda t: t.chunk(2, dim=0)[i]

    return rule


def neox_qkv(config: GPTConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    """GPT-NeoX's query_key_value holds, per head, its q, k and v rows: regroup as all q, all k, all v."""
    H = config.n_head

    def fn(t: torch.Tensor) -> torch.Tensor:
        rest = t.shape[1:]
        return t.reshape(H, 3, -1, *rest).transpose(0, 1).reshape(t.shape)  # [H, 3, D, ...] -> [3, H, D, ...]

    return fn


def conv1d(config: GPTConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    """GPT-2's Conv1D stores its weight [in, out], the transpose of nn.Linear's [out, in]: handed over
    as its transposed view, which fill_model keeps laid out [in, out] (model.in_out_layout: a step of
    decoding reads it faster, and the file's layout needs no transposing copy)."""
    return lambda t: t.t() if t.dim() == 2 else t


# --- layer-type rules, when config.json has no layer_types ------------------------------------------
def _whole(value: object, key: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise FamilyRefusal(f"{key}={_shown(value)} must be a whole number, {low} or more")
    return value


def alternate(hf: dict, n: int) -> str:
    """Gemma 2: local, global, local, ..."""
    return "".join("l" if i % 2 == 0 else "g" for i in range(n))


def every_nth_global(key: str, fallback: str = "") -> Callable[[dict, int], str]:
    """Every n-th layer global, the others local, n read from config.json (Gemma 3's sliding_window_pattern)."""

    def rule(hf: dict, n_layer: int) -> str:
        pattern = _whole(hf.get(key, hf.get(fallback)), key, 1)
        return "".join("g" if (i + 1) % pattern == 0 else "l" for i in range(n_layer))

    return rule


def every_fourth_global(hf: dict, n_layer: int) -> str:
    """OLMo 3: three sliding-window layers, then one global."""
    return "".join("g" if (i + 1) % 4 == 0 else "l" for i in range(n_layer))


def qwen_windows(hf: dict, n: int) -> str:
    """Qwen2/3: a window only with use_sliding_window, on the layers from max_window_layers on."""
    if hf.get("use_sliding_window", False) is not True:
        if hf.get("use_sliding_window", False) not in (False, None):
            raise FamilyRefusal(f"use_sliding_window={_shown(hf['use_sliding_window'])} must be true or false")
        return "g" * n
    first = _whole(hf.get("max_window_layers", n), "max_window_layers", 0)
    return "".join("l" if i >= first else "g" for i in range(n))


def neo_layers(hf: dict, n: int) -> list:
    """GPT-Neo: attention_types [[["global", "local"], 12]], counted before it is expanded. Hugging Face
    computes attention_layers from it, whatever config.json's own attention_layers says."""
    spec = hf.get("attention_types")
    named = 0
    if not isinstance(spec, list) or len(spec) > n:
        raise FamilyRefusal(f"attention_types={_shown(spec)} do not name one type for each of {n} layers")
    for entry in spec:
        ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and len(entry[0]) <= n
        if not ok or isinstance(entry[1], bool) or not isinstance(entry[1], int) or entry[1] < 0:
            raise FamilyRefusal(f"attention_types={_shown(spec)} must be [[types, count], ...] with counts >= 0")
        named += entry[1] * len(entry[0])
    if named != n:
        raise FamilyRefusal(f"attention_types={_shown(spec)} do not name one type for each of {n} layers")
    return [t for kinds, count in spec for _ in range(count) for t in kinds]


# --- derived fields ---------------------------------------------------------------------------------
def _positive(hf: dict, key: str) -> float:
    value = hf.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise FamilyRefusal(f"{key}={_shown(value)} must be a number above 0")
    return value


def gemma(hf: dict) -> dict:
    """Gemma: embeddings scaled by sqrt(C) (C checked by GPTConfig when it is not a positive int)."""
    C = hf.get("hidden_size")
    return dict(embed_scale=math.sqrt(C) if isinstance(C, int) and not isinstance(C, bool) and C > 0 else 1.0)


def gemma2(hf: dict) -> dict:
    """Gemma 2/3: q·k scaled by query_pre_attn_scalar^-1/2, not by the head size."""
    return gemma(hf) | dict(attn_scale=_positive(hf, "query_pre_attn_scalar") ** -0.5)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _truthy(value: object, hf: dict) -> bool:
    return bool(value)


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
    "num_local_experts", _truthy, "it is a mixture-of-experts model (num_experts), which gptviz does not implement"
)
MOE_2 = Refusal("num_experts", _truthy, MOE.why)


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
    "GPT-2: learned positions, LayerNorm, GELU MLP, Conv1D weights stored [in, out]",
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
            lambda v, hf: f"n_inner={_shown(v)} but gptviz reads GPT-2's MLP as 4 * n_embd wide",
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
                f"window_size={_shown(v)} must be a whole number, 1 or more: a local layer reads its last "
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
    "GPT-NeoX (Pythia): parallel attention and MLP, rotary on part of each head",
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
    _truthy,
    "it uses bidirectional attention (use_bidirectional_attention), which gptviz does not implement",
)
_GEMMA2_NAMES = dict(attn_softcap="attn_logit_softcapping", final_softcap="final_logit_softcapping")
_GEMMA2_LAYOUT = Layout("model.", "model.layers.{i}", _LLAMA_OUTER, _ATTN + _MLP + _SANDWICH)

FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        GPT2,
        llama_like("llama", "Llama: rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention"),
        llama_like(
            "mistral", "Mistral: Llama's shape with a sliding attention window", defaults=dict(sliding_window=4096)
        ),
        llama_like(
            "qwen2",
            "Qwen2: Llama's shape with biases on q, k and v",
            names=dict(qkv_bias=None, out_bias=None),
            fixed=dict(qkv_bias=True, out_bias=False),  # biases on q, k, v only
            defaults=dict(sliding_window=4096, max_window_layers=28),
            layers=qwen_windows,
            layer_keys=("use_sliding_window", "max_window_layers"),
        ),
        llama_like(
            "qwen3",
            "Qwen3: Llama's shape with an RMSNorm on each head's q and k",
            fixed=dict(qk_norm="head"),
            defaults=dict(sliding_window=4096, max_window_layers=28),
            layers=qwen_windows,
            layer_keys=("use_sliding_window", "max_window_layers"),
        ),
        llama_like(
            "gemma",
            "Gemma: RMSNorm scaled by 1 + w, GeGLU MLP, embeddings scaled by sqrt(C)",
            fixed=dict(norm_plus_one=True),
            defaults=dict(tie_word_embeddings=True, hidden_act="gelu_pytorch_tanh"),
            activation_aliases=frozen(gelu="gelu_pytorch_tanh"),  # as Hugging Face reads Gemma's legacy "gelu"
            derive=gemma,
            refuses=(MOE, MOE_2, BIDIRECTIONAL),
        ),
        llama_like(
            "gemma2",
            "Gemma 2: post-norms, soft-capped scores and logits, local and global layers in turn",
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
            "Gemma 3: post-norms, q/k norms, five local layers to one global, two rotary bases",
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
            "Phi-3: Llama's shape with fused qkv and gate_up projections",
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
            "OLMo: LayerNorm without learned scale or bias, optional q/k/v clipping",
            names=dict(norm_eps=None, qkv_clip="clip_qkv"),
            fixed=dict(norm="layernorm", norm_affine=False, norm_eps=1e-5, rotary_fp32=True),
        ),
        llama_like(
            "olmo2",
            "OLMo 2: norms after the sub-layers only, RMSNorm over all of q and k",
            fixed=dict(pre_norm=False, post_norm=True, qk_norm="all", rotary_fp32=True, norm_fp32_scale=True),
            defaults=dict(rms_norm_eps=1e-5),
            layout=Layout("model.", "model.layers.{i}", _LLAMA_OUTER, _ATTN + _MLP + _POST_NORMS),
        ),
        llama_like(
            "olmo3",
            "OLMo 3: OLMo 2 with three sliding-window layers to one global, two rotary bases",
            fixed=dict(pre_norm=False, post_norm=True, qk_norm="all", rotary_fp32=True, norm_fp32_scale=True),
            defaults=dict(rms_norm_eps=1e-5, sliding_window=4096, rope_theta=500_000.0),
            local_rope="rope_theta",
            layers=every_fourth_global,
            layout=Layout("model.", "model.layers.{i}", _LLAMA_OUTER, _ATTN + _MLP + _POST_NORMS),
        ),
    )
}
