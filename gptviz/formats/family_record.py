"""What a family's record (families.py) is made of: the record types (Family, its weight Layout and
Tensors, its Refusals), and the rules a record names: how a fused or transposed tensor becomes ours, how
local and global layers are chosen when config.json does not list them, and the fields derived from
config.json. Each rule is a function of config.json's values only, named for what it does."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

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
    checkpoints: str = ""  # the checkpoints people download of this family (docs/checkpoints.md's table)

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
    as its transposed view, which fill_model keeps laid out [in, out] (decoding.in_out_layout: a step of
    decoding reads it faster, and the file's layout needs no transposing copy)."""
    return lambda t: t.t() if t.dim() == 2 else t


# --- layer-type rules, when config.json has no layer_types ------------------------------------------
def whole_number(value: object, key: str, low: int = 1) -> int:
    """A config.json value that must be a whole number, low or more; else a FamilyRefusal."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise FamilyRefusal(f"{key}={shown(value)} must be a whole number, {low} or more")
    return value


def alternate(hf: dict, n: int) -> str:
    """Gemma 2: local, global, local, ..."""
    return "".join("l" if i % 2 == 0 else "g" for i in range(n))


def every_nth_global(key: str, fallback: str = "") -> Callable[[dict, int], str]:
    """Every n-th layer global, the others local, n read from config.json (Gemma 3's sliding_window_pattern)."""

    def rule(hf: dict, n_layer: int) -> str:
        pattern = whole_number(hf.get(key, hf.get(fallback)), key, 1)
        return "".join("g" if (i + 1) % pattern == 0 else "l" for i in range(n_layer))

    return rule


def every_fourth_global(hf: dict, n_layer: int) -> str:
    """OLMo 3: three sliding-window layers, then one global."""
    return "".join("g" if (i + 1) % 4 == 0 else "l" for i in range(n_layer))


def qwen_windows(hf: dict, n: int) -> str:
    """Qwen2/3: a window only with use_sliding_window, on the layers from max_window_layers on."""
    if hf.get("use_sliding_window", False) is not True:
        if hf.get("use_sliding_window", False) not in (False, None):
            raise FamilyRefusal(f"use_sliding_window={shown(hf['use_sliding_window'])} must be true or false")
        return "g" * n
    first = whole_number(hf.get("max_window_layers", n), "max_window_layers", 0)
    return "".join("l" if i >= first else "g" for i in range(n))


def neo_layers(hf: dict, n: int) -> list:
    """GPT-Neo: attention_types [[["global", "local"], 12]], counted before it is expanded. Hugging Face
    computes attention_layers from it, whatever config.json's own attention_layers says."""
    spec = hf.get("attention_types")
    named = 0
    if not isinstance(spec, list) or len(spec) > n:
        raise FamilyRefusal(f"attention_types={shown(spec)} do not name one type for each of {n} layers")
    for entry in spec:
        ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and len(entry[0]) <= n
        if not ok or isinstance(entry[1], bool) or not isinstance(entry[1], int) or entry[1] < 0:
            raise FamilyRefusal(f"attention_types={shown(spec)} must be [[types, count], ...] with counts >= 0")
        named += entry[1] * len(entry[0])
    if named != n:
        raise FamilyRefusal(f"attention_types={shown(spec)} do not name one type for each of {n} layers")
    return [t for kinds, count in spec for _ in range(count) for t in kinds]


# --- derived fields ---------------------------------------------------------------------------------
def _positive(hf: dict, key: str) -> float:
    value = hf.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise FamilyRefusal(f"{key}={shown(value)} must be a number above 0")
    return value


def gemma(hf: dict) -> dict:
    """Gemma: embeddings scaled by sqrt(C) (C checked by GPTConfig when it is not a positive int)."""
    C = hf.get("hidden_size")
    return dict(embed_scale=math.sqrt(C) if isinstance(C, int) and not isinstance(C, bool) and C > 0 else 1.0)


def gemma2(hf: dict) -> dict:
    """Gemma 2/3: q·k scaled by query_pre_attn_scalar^-1/2, not by the head size."""
    return gemma(hf) | dict(attn_scale=_positive(hf, "query_pre_attn_scalar") ** -0.5)


def shown(value: object) -> str:
    """A config.json value as a refusal quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def truthy(value: object, hf: dict) -> bool:
    return bool(value)
