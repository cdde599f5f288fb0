"""config.json -> GPTConfig for every Hugging Face family, read through its record (families.py).

A config is a file a stranger wrote, and a value of the right type can still mean nothing: a rope
factor of 0 divides by zero, `head_dim: 32.5` is no head size, `num_key_value_heads: 0` is not "one
per query head". So every rotary, scale, factor, fraction, window and head field is checked for
type first and range second (positive where it divides), before any arithmetic on it. The older
layout (rope_theta, rope_scaling, partial_rotary_factor at the top level) and transformers 5's
rope_parameters are read alike: a top-level key fills what rope_parameters leaves out, as Hugging
Face's config classes do, and is refused when the two disagree, never dropped. A key no record
reads, and that is not one of the keys that never change the forward pass, is named in the notes.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..config import DERIVED, OFF_AT_ZERO, GPTConfig
from ..errors import CheckpointError, ConfigError, summarise
from ..limits import MAX_CONFIG
from .families import FAMILIES
from .family_record import Family, FamilyRefusal, shown, whole_number

KNOWN = tuple(FAMILIES)  # gpt2 first: the order messages name them in
DECODERS = tuple(k for k in KNOWN if k != "gpt2")
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
# the tanh GELUs Hugging Face computes as a formula (in half precision gptviz then follows it op by op)
GELU_FORMULAS = {"gelu_new": "gelu_new", "gelu_fast": "gelu_fast"}
# keys that never change what the model computes at inference: token ids, dropouts, initialisation,
# bookkeeping. Any other key no record reads is named in the load report.
INERT = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "id2label",
        "label2id",
        "problem_type",
        "finetuning_task",
        "tokenizer_class",
        "prefix",
        "task_specific_params",
        "initializer_range",
        "initializer_factor",
        "use_cache",
        "return_dict",
        "output_attentions",
        "output_hidden_states",
        "is_encoder_decoder",
        "is_decoder",
        "chunk_size_feed_forward",
        "attention_dropout",
        "hidden_dropout",
        "classifier_dropout",
        "embed_dropout",
        "resid_dropout",
        "embd_pdrop",
        "attn_pdrop",
        "resid_pdrop",
        "summary_type",
        "summary_use_proj",
        "summary_activation",
        "summary_proj_to_labels",
        "summary_first_dropout",
        "reorder_and_upcast_attn",  # numerics of GPT-2's float16 training only
        "pretraining_tp",  # splits Llama's matmuls, the same sums
        "gradient_checkpointing",
        "card",  # gptviz's own, written by save_hf_llama
    }
)


def refuse_model_type(kind: object, source: Path) -> CheckpointError:
    """One sentence for a model type gptviz does not load, naming it and the ones it does."""
    if not kind:
        return CheckpointError(f"{source}: no model_type; not a Hugging Face model config")
    if kind in MOE:
        return CheckpointError(
            f"{source}: model_type {shown(kind)} is a mixture-of-experts model, which gptviz does not implement; "
            f"it loads the dense decoders {', '.join(KNOWN)}"
        )
    return CheckpointError(f"{source}: model_type {shown(kind)} is not one gptviz loads; it loads {', '.join(KNOWN)}")


def _number(value: object, key: str, *, above: float | None = 0.0, at_most: float | None = None) -> float:
    """A finite number (not a bool) above `above` (None: any) and at most `at_most`, or one sentence."""
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (above is None or value > above)
        and (at_most is None or value <= at_most)
    ):
        return value
    bounds = f"above {above:g}" if above is not None else "finite"
    bounds += f" and at most {at_most:g}" if at_most is not None else ""
    raise FamilyRefusal(f"{key}={shown(value)} must be a number {bounds}")


# --- rotary: rope_parameters (transformers 5) or rope_theta / rope_scaling (4.x) ---------------------
def _rope_dicts(hf: dict, given: set[str], family: Family) -> tuple[dict, dict | None]:
    """The global and (with two rotary bases) local rope parameters, the top-level keys folded in.
    Hugging Face reads rope_scaling over rope_parameters when both are given: both are read here, and
    refused unless they say the same."""
    params, scaling = hf.get("rope_parameters"), hf.get("rope_scaling")
    if params is not None and not isinstance(params, dict):
        raise FamilyRefusal(f"rope_parameters={shown(params)} must be an object (rope_type, rope_theta, ...)")
    if scaling is not None and not isinstance(scaling, dict):
        raise FamilyRefusal(f"rope_scaling={shown(scaling)} must be an object or null")
    read = _fold(scaling or params or {}, hf, given, family)
    if scaling and params is not None and _fold(params, hf, given, family) != read:
        raise FamilyRefusal("rope_parameters and rope_scaling are both given and disagree; keep one of them")
    return read


def _fold(source: dict, hf: dict, given: set[str], family: Family) -> tuple[dict, dict | None]:
    nested = "full_attention" in source or "sliding_attention" in source
    for name in ("full_attention", "sliding_attention"):
        if nested and source.get(name) is not None and not isinstance(source.get(name), dict):
            raise FamilyRefusal(f"rope_parameters.{name}={shown(source[name])} must be an object")
    glob = dict(source.get("full_attention") or {}) if nested else dict(source)
    local = dict(source.get("sliding_attention") or {}) if nested else None
    if local is None and family.local_rope:
        local = {"rope_type": "default"}
    glob.setdefault("rope_type", glob.pop("type", "default"))
    # a top-level key fills what the parameters leave out, as Hugging Face's config classes do
    for key in ("rope_theta", "partial_rotary_factor"):
        if key in given and key in glob and glob[key] != hf[key]:
            raise FamilyRefusal(
                f"{key}={shown(hf[key])} at the top level disagrees with {shown(glob[key])} in the rope "
                "parameters; keep one of them"
            )
        if key in hf:
            glob.setdefault(key, hf[key])
            if local is not None and key != "rope_theta":
                local.setdefault(key, hf[key])
    if local is not None:
        local.setdefault("rope_theta", hf.get(family.local_rope or "rope_theta", glob.get("rope_theta", 10000.0)))
    return glob, local


# Sane ranges, well around every checkpoint in use: a base of 10,000 (Llama 2, Gemma's local layers) to
# 10^8 (million-token models); a scaling factor of 1 to 64. A base of 1 or less does not decrease the
# frequencies and 1e-300 makes them infinite (every activation NaN); a factor of 1e-300 does the same.
THETA = dict(above=1.0, at_most=1e12)
FACTOR = dict(above=1e-3, at_most=1e4)


def read_rope(hf: dict, given: set[str], family: Family) -> dict:
    """The GPTConfig rotary fields, each checked for type and range."""
    glob, local = _rope_dicts(hf, given, family)
    rope_type = glob["rope_type"] or "default"
    if not isinstance(rope_type, str) or rope_type not in ROPE_TYPES:
        raise FamilyRefusal(
            f"rope scaling {shown(rope_type)} is not implemented in gptviz (it knows {', '.join(ROPE_TYPES)})"
        )
    fraction = glob.get("partial_rotary_factor", 1.0)
    out = dict(
        rope_theta=_number(glob.get("rope_theta", 10000.0), "rope_theta", **THETA),
        rotary_fraction=1.0 if fraction is None else _number(fraction, "partial_rotary_factor", at_most=1.0),
        rope_scaling=ROPE_TYPES[rope_type],
    )
    if rope_type in ("linear", "llama3"):  # factor divides the frequencies (positions): 0 would make every value NaN
        out["rope_factor"] = _number(glob.get("factor", 1.0), "rope factor", **FACTOR)
    if rope_type == "llama3":
        out |= dict(
            rope_low_freq=_number(glob.get("low_freq_factor", 1.0), "low_freq_factor", **FACTOR),
            rope_high_freq=_number(glob.get("high_freq_factor", 4.0), "high_freq_factor", **FACTOR),
            # as Hugging Face: the context the model was trained on, else its configured context
            rope_original_max=whole_number(
                glob.get(
                    "original_max_position_embeddings",
                    hf.get("original_max_position_embeddings", hf.get("max_position_embeddings", 0)),
                ),
                "original_max_position_embeddings",
            ),
        )
        if out["rope_high_freq"] <= out["rope_low_freq"]:  # the smoothing divides by their difference
            raise FamilyRefusal(
                f"high_freq_factor={shown(out['rope_high_freq'])} must be above low_freq_factor="
                f"{shown(out['rope_low_freq'])}: llama3 scaling divides by their difference"
            )
    if local is not None:
        if (local.get("rope_type") or "default") != "default":
            raise FamilyRefusal(f"rope scaling {shown(local.get('rope_type'))} on the local layers is not implemented")
        if local.get("partial_rotary_factor", fraction) != fraction:
            raise FamilyRefusal("the local layers rotate another share of each head than the global ones")
        out["rope_local_theta"] = _number(local.get("rope_theta"), "the local layers' rope_theta", **THETA)
    return out


# --- local and global layers --------------------------------------------------------------------------
LETTERS = {"full_attention": "g", "global": "g", "sliding_attention": "l", "local": "l"}


def _bounded_layers(n_layer) -> bool:
    """Whether a per-layer list may be built for n_layer: else GPTConfig refuses the count itself, and
    no loop of 10**10 layers runs first."""
    return isinstance(n_layer, int) and not isinstance(n_layer, bool) and 0 < n_layer <= MAX_CONFIG["n_layer"]


def layer_types(hf: dict, family: Family, n_layer: int) -> str:
    """One letter per layer, g global or l local, from layer_types or the family's own rule."""
    types = hf.get("layer_types")
    if types is not None and not isinstance(types, list):
        raise FamilyRefusal(f"layer_types={shown(types)} must be a list with one attention type per layer")
    if not types and family.layers is not None:
        types = family.layers(hf, n_layer)
    if isinstance(types, str):
        return types
    if not types:
        return ""  # every layer local when there is a window (Mistral, Phi-3)
    if len(types) != n_layer:
        raise FamilyRefusal(f"layer types name {len(types)} layers but the model has {n_layer}")
    bad = [t for t in types if not isinstance(t, str) or t not in LETTERS]
    if bad:
        raise FamilyRefusal(f"attention layer type {shown(bad[0])} is not implemented in gptviz")
    return "".join(LETTERS[t] for t in types)


# --- the whole config ---------------------------------------------------------------------------------
def _fields(hf: dict, given: set[str], family: Family) -> dict:
    """GPTConfig fields from config.json (Hugging Face's defaults folded in), before GPTConfig checks them."""
    for refusal in family.refuses:
        if refusal.bad(hf.get(refusal.key), hf):
            raise FamilyRefusal(refusal.sentence(hf.get(refusal.key), hf))
    act_key = next((k for k in family.activation if k in given), family.activation[0])
    act = hf.get(act_key)
    act = family.activation_aliases.get(act, act) if isinstance(act, str) else act
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise FamilyRefusal(
            f"activation {shown(act)} is not implemented in gptviz ({', '.join(ACTIVATIONS)}); "
            f"this {act_key} is not supported"
        )
    out: dict = {"activation": ACTIVATIONS[act]}
    if act in GELU_FORMULAS:
        out["gelu_formula"] = GELU_FORMULAS[act]
    for ours, key in family.names.items():
        if not key:
            continue
        value = hf.get(key)
        if value is None and ours in (*DERIVED, *OFF_AT_ZERO):
            continue  # null: derived (n_kv_head = n_head ...) or off
        out[ours] = value
    H, C = out.get("n_head"), out.get("n_embd")
    if "n_kv_head" in out and isinstance(out["n_kv_head"], int) and not isinstance(out["n_kv_head"], bool):
        whole_number(out["n_kv_head"], str(family.names["n_kv_head"]))  # 0 is no head at all, not "one per query head"
    if "head_size" in out:
        head = whole_number(out["head_size"], str(family.names["head_size"]))  # 32.5: no head size, not truncated
        if isinstance(C, int) and isinstance(H, int) and H and head * H == C:
            out["head_size"] = 0  # C / H: derived
    out |= dict(family.fixed)
    if family.rotary:
        out |= read_rope(hf, given, family)
    window = hf.get(family.window) if family.window else None
    if window and _bounded_layers(out.get("n_layer")):
        types = layer_types(hf, family, out["n_layer"])
        if "l" in types or not types:
            out |= dict(sliding_window=window, layer_types=types)
    if family.derive is not None:
        out |= family.derive(hf)
    return out


def unread_keys(given: set[str], family: Family) -> list[str]:
    """config.json keys this family does not read and that may change the forward pass."""
    return sorted(k for k in given if k not in family.reads and k not in INERT)


def config_from_hf_decoder(hf: dict, source: Path) -> tuple[GPTConfig, list[str]]:
    """The GPTConfig of a Hugging Face config.json, and notes for the load report."""
    kind = hf.get("model_type")
    if not isinstance(kind, str) or kind not in FAMILIES:
        raise refuse_model_type(kind, source)
    family = FAMILIES[kind]
    given = set(hf)
    hf = dict(hf)
    for alias, key in family.aliases.items():  # older spellings (rotary_pct, n_ctx)
        if alias in hf and key not in hf:
            hf[key] = hf[alias]
            given.add(key)
    hf = {**family.defaults, **hf}
    notes = []
    try:
        fields = _fields(hf, given, family)
    except FamilyRefusal as e:
        raise CheckpointError(f"{source}: {e}") from None
    except (TypeError, AttributeError, ValueError, OverflowError) as e:  # a field of the wrong type where we read it
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
        message = str(e)
        for ours, theirs in family.message_names.items():
            message = message.replace(f"{ours}=", f"{theirs}=")
        raise CheckpointError(f"{source}: the config does not describe a valid model ({message})") from None
    unread = unread_keys(given, family)
    if unread:
        notes.append(f"config.json keys gptviz does not read for {kind}: {summarise(unread, 'keys', show=8)}")
    return config, notes
