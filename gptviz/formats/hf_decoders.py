"""Hugging Face decoder directories of every common family: Llama, Mistral, Qwen2/3, Gemma 1/2/3,
GPT-NeoX (Pythia), GPT-Neo, Phi-3, OLMo 1/2 (SmolLM, TinyLlama, TinyStories ... as people download
them). Nothing is ever downloaded.

Two maps per family: config.json -> GPTConfig, and Hugging Face's weight names -> ours. Separate
q/k/v (and gate/up) projections are stacked into our fused c_attn (c_fc, c_gate); GPT-NeoX's fused
qkv interleaves q, k and v per head and is regrouped; Phi-3's fused qkv and gate_up are split
where they need to be. Every such step is a function of the source tensors that runs first on
"meta" tensors (shapes only) so the whole model's shapes are checked against the config, from the
safetensors headers, before any weight is read or anything allocated.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..config import GPTConfig
from ..errors import CheckpointError, ConfigError, summarise
from ..limits import MAX_CONFIG, MAX_TOKENIZER_BYTES
from ..tokenizers import BPETokenizer
from .bundle import Bundle, LoadReport, check_shapes, compute_dtype, fill_model, finish
from .hf_llama_export import save_hf_llama  # noqa: F401 (the other direction, also importable from here)
from .safe import check_file, read_json
from .weights import Weights

DECODERS = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gpt_neox",
    "gpt_neo",
    "phi3",
    "olmo",
    "olmo2",
)
KNOWN = ("gpt2", *DECODERS)
# mixture-of-experts families: named as such, so nobody reads "unknown" as "not yet tried"
MOE = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "olmoe",
    "phimoe",
    "deepseek_v2",
    "deepseek_v3",
    "dbrx",
    "jamba",
    "granitemoe",
    "gpt_oss",
    "llama4",
    "llama4_text",
)
ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3"}
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}
# buffers some transformers versions saved beside the weights: masks and rotary tables, never weights
BUFFERS = re.compile(
    r".*\.(attn\.bias|attn\.masked_bias|attention\.bias|attention\.masked_bias|inv_freq|rotary_emb\..*)$"
)
SAFETENSORS, PT_BIN = "model.safetensors", "pytorch_model.bin"
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def refuse_model_type(kind: object, source: Path) -> CheckpointError:
    """One sentence for a model type gptviz does not load, naming it and the ones it does."""
    if not kind:
        return CheckpointError(f"{source}: no model_type; not a Hugging Face model config")
    if kind in MOE:
        return CheckpointError(
            f"{source}: model_type {_shown(kind)} is a mixture-of-experts model, which gptviz does not implement; "
            f"it loads the dense decoders {', '.join(KNOWN)}"
        )
    return CheckpointError(f"{source}: model_type {_shown(kind)} is not one gptviz loads; it loads {', '.join(KNOWN)}")


# --- config.json -> GPTConfig ------------------------------------------------------------------
# What Hugging Face's config classes (transformers 5) give a key that config.json leaves out, where
# it differs from the fallback below: a hand-written or older config then computes what HF computes.
HF_DEFAULTS = {
    "mistral": {"sliding_window": 4096},
    "qwen2": {"sliding_window": 4096, "max_window_layers": 28},
    "qwen3": {"sliding_window": 4096, "max_window_layers": 28},
    "gemma2": {"query_pre_attn_scalar": 256, "sliding_window": 4096},
    "gemma3_text": {"query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_pattern": 6},
    "phi3": {"rms_norm_eps": 1e-5},
    "olmo2": {"rms_norm_eps": 1e-5},
}
ROPE_THETA = {"gemma3_text": 1_000_000.0}  # the global layers' base when none is given; else 10,000
LOCAL_ROPE_THETA = 10_000.0  # Gemma 3's local layers, when none is given
ROTARY_FRACTION = {"gpt_neox": 0.25}  # rotary_pct when none is given; else the whole head


class _Refuse(Exception):
    """A feature of the config that gptviz does not implement: one sentence."""


def _rope(hf: dict, kind: str) -> dict:
    """The GPTConfig rotary fields from rope_parameters (transformers v5) or the older rope_theta /
    rope_scaling / partial_rotary_factor (and GPT-NeoX's rotary_pct / rotary_emb_base)."""
    params = hf.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise _Refuse(f"rope_parameters={_shown(params)} must be an object (rope_type, rope_theta, ...)")
    if hf.get("rope_scaling") is not None and not isinstance(hf["rope_scaling"], dict):
        raise _Refuse(f"rope_scaling={_shown(hf['rope_scaling'])} must be an object or null")
    local = None
    if isinstance(params, dict) and "full_attention" in params:  # Gemma 3: one set per layer type
        local, params = params.get("sliding_attention"), params["full_attention"]
    if not isinstance(params, dict):
        params = dict(hf.get("rope_scaling") or {})
        params.setdefault("rope_theta", hf.get("rope_theta", hf.get("rotary_emb_base", ROPE_THETA.get(kind, 10000.0))))
        fraction = hf.get("partial_rotary_factor", hf.get("rotary_pct"))
        if fraction is not None:
            params.setdefault("partial_rotary_factor", fraction)
        if kind == "gemma3_text":
            local = {"rope_type": "default", "rope_theta": hf.get("rope_local_base_freq", LOCAL_ROPE_THETA)}
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type not in ROPE_TYPES:
        raise _Refuse(
            f"rope scaling {_shown(rope_type)} is not implemented in gptviz (it knows {', '.join(ROPE_TYPES)})"
        )
    out = dict(
        rope_theta=params.get("rope_theta", ROPE_THETA.get(kind, 10000.0)),
        rotary_fraction=params.get("partial_rotary_factor", ROTARY_FRACTION.get(kind, 1.0)) or 1.0,
        rope_scaling=ROPE_TYPES[rope_type],
    )
    if rope_type in ("linear", "llama3"):
        out["rope_factor"] = params.get("factor", 1.0)
    if rope_type == "llama3":
        out |= dict(
            rope_low_freq=params.get("low_freq_factor", 1.0),
            rope_high_freq=params.get("high_freq_factor", 4.0),
            # as Hugging Face: the context the model was trained on, else its configured context
            rope_original_max=params.get("original_max_position_embeddings", hf.get("max_position_embeddings", 0)),
        )
    if isinstance(local, dict):
        if (local.get("rope_type") or "default") != "default":
            raise _Refuse(f"rope scaling {_shown(local.get('rope_type'))} on the local layers is not implemented")
        out["rope_local_theta"] = local.get("rope_theta", LOCAL_ROPE_THETA)
    return out


def _bounded_layers(n_layer) -> bool:
    """Whether a per-layer list may be built for n_layer: else GPTConfig refuses the count itself, and
    no loop of 10**10 layers runs first."""
    return isinstance(n_layer, int) and not isinstance(n_layer, bool) and 0 < n_layer <= MAX_CONFIG["n_layer"]


def _layer_types(hf: dict, kind: str, n_layer: int) -> str:
    """One letter per layer, g global or l local, from layer_types or each family's own rule."""
    types = hf.get("layer_types")
    if types is not None and not isinstance(types, list):
        raise _Refuse(f"layer_types={_shown(types)} must be a list with one attention type per layer")
    if kind == "gpt_neo":
        types = hf.get("attention_layers")
        if not isinstance(types, list):  # attention_types: [[["global", "local"], 12]], counted before expanded
            spec = hf.get("attention_types", [])
            if sum(n * len(kinds) for kinds, n in spec) != n_layer:
                raise _Refuse(f"attention_types={_shown(spec)} do not name one type for each of {n_layer} layers")
            types = [t for kinds, n in spec for _ in range(n) for t in kinds]
    if isinstance(types, list) and types:
        if len(types) != n_layer:
            raise _Refuse(f"layer types name {len(types)} layers but the model has {n_layer}")
        letters = {"full_attention": "g", "global": "g", "sliding_attention": "l", "local": "l"}
        bad = [t for t in types if t not in letters]
        if bad:
            raise _Refuse(f"attention layer type {_shown(bad[0])} is not implemented in gptviz")
        return "".join(letters[t] for t in types)
    if kind == "gemma2":
        return "".join("l" if i % 2 == 0 else "g" for i in range(n_layer))
    if kind == "gemma3_text":
        pattern = hf.get("sliding_window_pattern", hf.get("_sliding_window_pattern", 6))
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise _Refuse(f"sliding_window_pattern={_shown(pattern)} must be a whole number of layers, 1 or more")
        return "".join("g" if (i + 1) % pattern == 0 else "l" for i in range(n_layer))
    if kind in ("qwen2", "qwen3"):
        if not hf.get("use_sliding_window", False):
            return "g" * n_layer
        first = hf.get("max_window_layers", n_layer)
        return "".join("l" if i >= first else "g" for i in range(n_layer))
    return ""  # every layer local when there is a window (Mistral, Phi-3)


def _common(hf: dict, kind: str) -> dict:
    """The fields every Llama-style family spells the same way."""
    C, H = hf.get("hidden_size"), hf.get("num_attention_heads")
    if kind == "gemma":  # Hugging Face reads hidden_act, and takes its legacy "gelu" as the tanh form
        act = hf.get("hidden_act", "gelu_pytorch_tanh")
        act = "gelu_pytorch_tanh" if act == "gelu" else act
    else:
        act = hf.get("hidden_activation") or hf.get("hidden_act", "silu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise _Refuse(f"activation {_shown(act)} is not implemented in gptviz ({', '.join(ACTIVATIONS)})")
    head = hf.get("head_dim")
    n_layer = hf.get("num_hidden_layers")
    out = dict(
        vocab_size=hf.get("vocab_size"),
        n_layer=n_layer,
        n_head=H,
        n_embd=C,
        n_kv_head=hf.get("num_key_value_heads") or H,
        head_size=head if isinstance(head, int) and head and (not isinstance(C, int) or not H or head * H != C) else 0,
        n_inner=hf.get("intermediate_size"),
        mlp_gated=True,
        activation=ACTIVATIONS[act],
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        bias=True,
        qkv_bias=bool(hf.get("attention_bias", False)),
        out_bias=bool(hf.get("attention_bias", False)),
        mlp_bias=bool(hf.get("mlp_bias", False)),
        tie_weights=hf.get("tie_word_embeddings", kind.startswith("gemma")),
        pos_encoding="rotary",
    )
    window = hf.get("sliding_window")
    if window and _bounded_layers(n_layer):
        types = _layer_types(hf, kind, n_layer)
        if "l" in types or not types:
            out |= dict(sliding_window=window, layer_types=types)
    return out | _rope(hf, kind)


def _family(hf: dict, kind: str) -> dict:
    """GPTConfig fields for one model type (checked by GPTConfig itself afterwards)."""
    if hf.get("num_local_experts") or hf.get("num_experts"):
        raise _Refuse("it is a mixture-of-experts model (num_experts), which gptviz does not implement")
    if kind == "gemma3_text" and hf.get("use_bidirectional_attention"):
        raise _Refuse("it uses bidirectional attention (use_bidirectional_attention), which gptviz does not implement")
    if kind == "gpt_neo":
        act = hf.get("activation_function", "gelu_new")
        if act not in ACTIVATIONS:
            raise _Refuse(f"activation {_shown(act)} is not implemented in gptviz ({', '.join(ACTIVATIONS)})")
        n_layer = hf.get("num_layers")
        return dict(
            vocab_size=hf.get("vocab_size"),
            block_size=hf.get("max_position_embeddings"),
            n_layer=n_layer,
            n_head=hf.get("num_heads"),
            n_embd=hf.get("hidden_size"),
            n_inner=hf.get("intermediate_size") or 0,
            activation=ACTIVATIONS[act],
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            qkv_bias=False,  # GPT-Neo's q, k, v have no bias; its out_proj and MLP do
            tie_weights=hf.get("tie_word_embeddings", True),
            attn_scale=1.0,  # GPT-Neo does not scale q·k
            sliding_window=hf.get("window_size", 256),
            layer_types=_layer_types(hf, kind, n_layer) if _bounded_layers(n_layer) else "",
        )
    if kind == "gpt_neox":
        act = hf.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise _Refuse(f"activation {_shown(act)} is not implemented in gptviz ({', '.join(ACTIVATIONS)})")
        return dict(
            vocab_size=hf.get("vocab_size"),
            n_layer=hf.get("num_hidden_layers"),
            n_head=hf.get("num_attention_heads"),
            n_embd=hf.get("hidden_size"),
            n_inner=hf.get("intermediate_size"),
            activation=ACTIVATIONS[act],
            norm_eps=hf.get("layer_norm_eps", 1e-5),
            qkv_bias=bool(hf.get("attention_bias", True)),
            out_bias=bool(hf.get("attention_bias", True)),
            tie_weights=hf.get("tie_word_embeddings", False),
            parallel=bool(hf.get("use_parallel_residual", True)),
            pos_encoding="rotary",
        ) | _rope(hf, kind)
    out = _common(hf, kind)
    if kind == "qwen2":
        out |= dict(qkv_bias=True, out_bias=False)  # Qwen2: biases on q, k, v only
    elif kind == "qwen3":
        out |= dict(qk_norm="head")
    elif kind in ("gemma", "gemma2", "gemma3_text"):
        C = hf.get("hidden_size")
        out |= dict(norm_plus_one=True, embed_scale=math.sqrt(C) if isinstance(C, int) and C > 0 else 1.0)
        if kind != "gemma":
            scalar = hf.get("query_pre_attn_scalar")
            out |= dict(
                post_norm=True,
                attn_scale=scalar**-0.5 if isinstance(scalar, (int, float)) and scalar > 0 else 0.0,
                attn_softcap=hf.get("attn_logit_softcapping") or 0.0,
                final_softcap=hf.get("final_logit_softcapping") or 0.0,
            )
        if kind == "gemma3_text":
            out |= dict(qk_norm="head")
    elif kind == "olmo":
        out |= dict(norm="layernorm", norm_affine=False, norm_eps=1e-5, qkv_clip=hf.get("clip_qkv") or 0.0)
    elif kind == "olmo2":
        out |= dict(pre_norm=False, post_norm=True, qk_norm="all")
    return out


def config_from_hf_decoder(hf: dict, source: Path) -> tuple[GPTConfig, list[str]]:
    """The GPTConfig of a decoder's config.json, and notes for the load report."""
    kind = hf.get("model_type")
    if kind not in DECODERS:
        raise refuse_model_type(kind, source)
    hf = {**HF_DEFAULTS.get(kind, {}), **hf}
    notes = []
    try:
        fields = _family(hf, kind)
    except _Refuse as e:
        raise CheckpointError(f"{source}: {e}") from None
    except (TypeError, AttributeError, ValueError) as e:  # a field of the wrong type where we read it
        raise CheckpointError(f"{source}: the config does not describe a valid model ({e})") from None
    if "block_size" not in fields:  # rotary: the context is a bound, no weights depend on it
        n_pos = hf.get("max_position_embeddings", 2048)
        if isinstance(n_pos, int) and n_pos > MAX_CONFIG["block_size"]:
            notes.append(f"max_position_embeddings={n_pos:,} is read as gptviz's limit {MAX_CONFIG['block_size']:,}")
            n_pos = MAX_CONFIG["block_size"]
        fields["block_size"] = n_pos
    try:
        config = GPTConfig(dropout=0.0, **fields)
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{source}: the config does not describe a valid model ({e})") from None
    return config, notes


# --- weight names: Hugging Face -> ours ---------------------------------------------------------
@dataclass(frozen=True)
class Part:
    """One of our tensors, made from Hugging Face tensors by fn (cat, split, regroup)."""

    sources: tuple[str, ...]
    fn: Callable[..., torch.Tensor]


def _one(t: torch.Tensor) -> torch.Tensor:
    return t


def _cat(*ts: torch.Tensor) -> torch.Tensor:
    return torch.cat(ts, dim=0)


def _half(i: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Phi-3's gate_up_proj stacks gate then up: take half i."""
    return lambda t: t.chunk(2, dim=0)[i]


def _neox_qkv(H: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """GPT-NeoX's query_key_value holds, per head, its q, k and v rows: regroup as all q, all k, all v."""

    def fn(t: torch.Tensor) -> torch.Tensor:
        rest = t.shape[1:]
        return t.reshape(H, 3, -1, *rest).transpose(0, 1).reshape(t.shape)

    return fn


def weight_map(config: GPTConfig, kind: str, keys: set[str]) -> dict[str, Part]:
    """Our state-dict key -> how to build it from the file's keys (after their prefix is settled)."""
    parts: dict[str, Part] = {}

    def add(ours: str, *theirs: str, fn: Callable[..., torch.Tensor] = _one) -> None:
        parts[ours] = Part(tuple(theirs), fn if len(theirs) == 1 or fn is not _one else _cat)

    def linear(ours: str, *theirs: str, fn: Callable[..., torch.Tensor] = _one) -> None:
        add(f"{ours}.weight", *(f"{t}.weight" for t in theirs), fn=fn)
        if all(f"{t}.bias" in keys for t in theirs):
            add(f"{ours}.bias", *(f"{t}.bias" for t in theirs), fn=fn)

    def norm(ours: str, theirs: str) -> None:
        for p in ("weight", "bias"):
            if f"{theirs}.{p}" in keys:
                add(f"{ours}.{p}", f"{theirs}.{p}")

    L = config.n_layer
    if kind == "gpt_neo":
        add("transformer.wte.weight", "transformer.wte.weight")
        add("transformer.wpe.weight", "transformer.wpe.weight")
        for i in range(L):
            o, t = f"transformer.h.{i}", f"transformer.h.{i}"
            norm(f"{o}.ln_1", f"{t}.ln_1")
            norm(f"{o}.ln_2", f"{t}.ln_2")
            a = f"{t}.attn.attention"
            linear(f"{o}.attn.c_attn", f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj")
            linear(f"{o}.attn.c_proj", f"{a}.out_proj")
            linear(f"{o}.mlp.c_fc", f"{t}.mlp.c_fc")
            linear(f"{o}.mlp.c_proj", f"{t}.mlp.c_proj")
        norm("transformer.ln_f", "transformer.ln_f")
        add("lm_head.weight", "lm_head.weight")
        return parts
    if kind == "gpt_neox":
        add("transformer.wte.weight", "gpt_neox.embed_in.weight")
        for i in range(L):
            o, t = f"transformer.h.{i}", f"gpt_neox.layers.{i}"
            norm(f"{o}.ln_1", f"{t}.input_layernorm")
            norm(f"{o}.ln_2", f"{t}.post_attention_layernorm")
            linear(f"{o}.attn.c_attn", f"{t}.attention.query_key_value", fn=_neox_qkv(config.n_head))
            linear(f"{o}.attn.c_proj", f"{t}.attention.dense")
            linear(f"{o}.mlp.c_fc", f"{t}.mlp.dense_h_to_4h")
            linear(f"{o}.mlp.c_proj", f"{t}.mlp.dense_4h_to_h")
        norm("transformer.ln_f", "gpt_neox.final_layer_norm")
        add("lm_head.weight", "embed_out.weight" if "embed_out.weight" in keys else "lm_head.weight")  # v5 renames it
        return parts
    add("transformer.wte.weight", "model.embed_tokens.weight")
    for i in range(L):
        o, t = f"transformer.h.{i}", f"model.layers.{i}"
        a, m = f"{t}.self_attn", f"{t}.mlp"
        if kind == "phi3":
            linear(f"{o}.attn.c_attn", f"{a}.qkv_proj")
            linear(f"{o}.mlp.c_gate", f"{m}.gate_up_proj", fn=_half(0))
            linear(f"{o}.mlp.c_fc", f"{m}.gate_up_proj", fn=_half(1))
        else:
            linear(f"{o}.attn.c_attn", f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj")
            linear(f"{o}.mlp.c_gate", f"{m}.gate_proj")
            linear(f"{o}.mlp.c_fc", f"{m}.up_proj")
        linear(f"{o}.attn.c_proj", f"{a}.o_proj")
        linear(f"{o}.mlp.c_proj", f"{m}.down_proj")
        norm(f"{o}.attn.q_norm", f"{a}.q_norm")
        norm(f"{o}.attn.k_norm", f"{a}.k_norm")
        if kind in ("gemma2", "gemma3_text"):
            norm(f"{o}.ln_1", f"{t}.input_layernorm")
            norm(f"{o}.attn.ln_post", f"{t}.post_attention_layernorm")
            norm(f"{o}.ln_2", f"{t}.pre_feedforward_layernorm")
            norm(f"{o}.mlp.ln_post", f"{t}.post_feedforward_layernorm")
        elif kind == "olmo2":
            norm(f"{o}.attn.ln_post", f"{t}.post_attention_layernorm")
            norm(f"{o}.mlp.ln_post", f"{t}.post_feedforward_layernorm")
        else:
            norm(f"{o}.ln_1", f"{t}.input_layernorm")
            norm(f"{o}.ln_2", f"{t}.post_attention_layernorm")
    norm("transformer.ln_f", "model.norm")
    add("lm_head.weight", "lm_head.weight")
    return parts


def canonical_names(keys: set[str], kind: str) -> dict[str, str]:
    """The file's keys as the ForCausalLM model spells them -> the file's own spelling. A file saved
    from the bare model (LlamaModel, GPTNeoXModel) lacks the `model.` (`gpt_neox.`, `transformer.`)
    prefix."""
    prefix = {"gpt_neox": "gpt_neox.", "gpt_neo": "transformer."}.get(kind, "model.")
    heads = ("lm_head.", "embed_out.")
    out = {}
    for k in keys:
        out[k if k.startswith((prefix, *heads)) else prefix + k] = k
    return out


# --- the files: single, sharded, safetensors or torch -------------------------------------------
def weight_files(path: Path) -> list[Path]:
    """The weight files of a directory: model.safetensors, pytorch_model.bin, or the shards an index
    names (each a plain file name in this folder, no path leading elsewhere)."""
    for name in (SAFETENSORS, PT_BIN):
        if (path / name).exists():
            return [path / name]
    for index_name in INDEXES:
        index = path / index_name
        if not index.exists():
            continue
        weight_map_ = read_json(index, "weights index").get("weight_map")
        if not isinstance(weight_map_, dict) or not weight_map_:
            raise CheckpointError(f"{index}: no 'weight_map' object naming the shard of each tensor")
        names = sorted(set(weight_map_.values()) if all(isinstance(v, str) for v in weight_map_.values()) else [])
        if not names:
            raise CheckpointError(f"{index}: the weight_map must name a shard file for each tensor")
        files = []
        for name in names:
            if Path(name).name != name or name in (".", "..") or "\\" in name:
                raise CheckpointError(f"{index}: shard {_shown(name)} is not a file name in this folder")
            file = path / name
            if not file.is_file():
                raise CheckpointError(f"{file}: file not found; {index.name} names it as a shard")
            files.append(file)
        return files
    raise CheckpointError(f"{path}: no {SAFETENSORS}, {PT_BIN} or sharded weights index beside config.json")


def used_sources(parts: dict[str, Part]) -> set[str]:
    return {s for part in parts.values() for s in part.sources}


def fill_order(parts: dict[str, Part], weights: Weights) -> Iterator[tuple[str, Callable[[], torch.Tensor]]]:
    """Our keys and how to make each from the file's tensors, for fill_model. A tensor that feeds two
    of ours (Phi-3's gate_up_proj: gate and up) is read once and let go after its last use."""
    left = Counter(s for part in parts.values() for s in part.sources)
    read: dict[str, torch.Tensor] = {}

    def take(name: str) -> torch.Tensor:
        if name not in read:
            read[name] = weights.get(name)
        left[name] -= 1
        return read[name] if left[name] else read.pop(name)

    for ours, part in parts.items():
        yield ours, lambda part=part: part.fn(*(take(s) for s in part.sources))


def plan(config: GPTConfig, kind: str, weights: Weights, source: Path, report: LoadReport) -> dict[str, Part]:
    """The map from the file's names to ours, checked against the config by shape alone (meta tensors)."""
    keys = {k for k in weights.shapes if not BUFFERS.match(k)}
    names = canonical_names(keys, kind)
    parts, used = {}, set()
    for ours, part in weight_map(config, kind, set(names)).items():
        if all(s in names for s in part.sources):
            parts[ours] = Part(tuple(names[s] for s in part.sources), part.fn)
            used.update(parts[ours].sources)
    shapes = {}
    for ours, part in parts.items():
        try:
            meta = part.fn(*(torch.empty(weights.shapes[s], device="meta") for s in part.sources))
        except RuntimeError as e:  # sources that cannot be stacked: their shapes disagree
            raise CheckpointError(
                f"{source}: {', '.join(part.sources)} cannot form {ours} ({str(e).splitlines()[0][:120]}); "
                "the config does not describe these weights"
            ) from None
        shapes[ours] = tuple(meta.shape)
    check_shapes(config, shapes, report, source)
    extra = sorted(set(shapes) - set(config.state_shapes()))
    if extra:  # a bias the config says is not there would be dropped, and the model silently wrong
        raise CheckpointError(
            f"{source}: the weights hold {summarise(extra, 'tensors')} that the config does not describe "
            "(e.g. a bias where config.json says there is none)"
        )
    report.unexpected = sorted(keys - used)
    return parts


# --- the tokenizer ------------------------------------------------------------------------------
def decoder_tokenizer(path: Path, vocab_size: int) -> tuple[BPETokenizer | None, str]:
    """tokenizer.json through the `tokenizers` library, its post-processor (a BOS) included."""
    file = path / "tokenizer.json"
    if not file.exists():
        return None, "no tokenizer: the directory has no tokenizer.json, so text input is off; give token ids"
    check_file(file, MAX_TOKENIZER_BYTES, "tokenizer file")
    tokenizer = BPETokenizer.from_file(file, special_tokens=True)
    if tokenizer.vocab_size > vocab_size:
        raise CheckpointError(
            f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model only {vocab_size} ids"
        )
    return tokenizer, ""


FAMILY_NOTES = {
    "llama": "Llama: rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention",
    "mistral": "Mistral: Llama's shape with a sliding attention window",
    "qwen2": "Qwen2: Llama's shape with biases on q, k and v",
    "qwen3": "Qwen3: Llama's shape with an RMSNorm on each head's q and k",
    "gemma": "Gemma: RMSNorm scaled by 1 + w, GeGLU MLP, embeddings scaled by sqrt(C)",
    "gemma2": "Gemma 2: post-norms, soft-capped scores and logits, local and global layers in turn",
    "gemma3_text": "Gemma 3: post-norms, q/k norms, five local layers to one global, two rotary bases",
    "gpt_neox": "GPT-NeoX (Pythia): parallel attention and MLP, rotary on part of each head",
    "gpt_neo": "GPT-Neo: learned positions, unscaled q·k, local and global layers in turn",
    "phi3": "Phi-3: Llama's shape with fused qkv and gate_up projections",
    "olmo": "OLMo: LayerNorm without learned scale or bias, optional q/k/v clipping",
    "olmo2": "OLMo 2: norms after the sub-layers only, RMSNorm over all of q and k",
}


def load_hf_decoder(path: Path, device: torch.device, dtype: str = "auto") -> Bundle:
    cfg_file = path / "config.json"
    hf = read_json(cfg_file)
    kind = hf.get("model_type")
    config, notes = config_from_hf_decoder(hf, cfg_file)
    report = LoadReport(path=str(path), format=f"hf-{kind}")
    report.warnings.extend(notes)
    files = weight_files(path)
    weights = Weights(files)
    source = files[0] if len(files) == 1 else path
    if config.tie_weights and any(k.endswith(("lm_head.weight", "embed_out.weight")) for k in weights.shapes):
        # Hugging Face keeps a head the file holds apart from the embedding, tie_word_embeddings or not
        config = replace(config, tie_weights=False)
        report.warnings.append("the weights hold their own lm_head although tie_word_embeddings is set: read untied")
    parts = plan(config, kind, weights, source, report)
    report.format = f"hf-{kind} ({files[0].name if len(files) == 1 else f'{len(files)} shards'})"
    tokenizer, note = decoder_tokenizer(path, config.vocab_size)
    dtype_ = compute_dtype(weights.floating_dtypes(used_sources(parts)), dtype, config, device, report)
    model = fill_model(config, fill_order(parts, weights), dtype_, device, report, source)
    report.reshaped = sorted(k for k, p in parts.items() if len(p.sources) > 1 or p.fn is not _one)
    if tokenizer is not None:
        report.tokenizer = tokenizer.kind
    else:
        report.warnings.append(note)
    # a card gptviz wrote beside Hugging Face's keys (formats/hf_llama_export.py): how it was made, its prompt
    written = hf.get("card") if isinstance(hf.get("card"), dict) else {}
    card = {**written, "source": f"Hugging Face {kind} directory", "family": FAMILY_NOTES[kind]}
    if isinstance(hf.get("_name_or_path"), str) and hf["_name_or_path"]:
        card["name_or_path"] = hf["_name_or_path"][:200]
    if report.unexpected:
        report.warnings.append(f"ignored {summarise(report.unexpected, 'tensors')}")
    return Bundle(finish(model, report, device), tokenizer, report, card)
