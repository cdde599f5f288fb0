"""What a Trace gives without holding it: recipes that rebuild a value from the values it does hold,
with the model's own functions on the forward pass's own shapes, so a rebuilt value is bit-identical to
what the pass computed. The attention scores and weights come from q, k and the mask; each sub-layer's
output, the residual between them and the MLP's neurons from z and resid_pre; the logits from ln_f.
`answerable` says which names a run holding some names can give."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from .attention import AttentionSpec, attention_weights
from .layout import layout, remembered
from .model import GPT, Block
from .names import ATTENTION_MAPS, contract_names, parse, point


class Recorded(Protocol):
    """What a capture recorded (capture._Recorder): its tensors, and the layers whose maps it kept."""

    tensors: dict[str, Tensor]
    kept_maps: set[int]


# What rebuilds a name: a function and its arguments, each one of
#   ("tensor", name)  the value held under that name
#   ("get", name)     a function giving that name's value: held, or rebuilt in turn
#   ("check", l)      a check that layer l's weights (l = -1: the LM head's) are as at the capture (_Versions)
#   ("spec", l)       layer l's AttentionSpec as it was at the capture
#   ("T", None), ("device", None), ("value", anything): the pass's length and device, a module
# What a pass holds decides the table alone, so a model's tables are made once per set of names held
# (layout.Layout.tables), and a trace makes only the recipes asked for: a 16-layer model has ~130.
Arg = tuple[str, Any]
Entries = dict[str, tuple[Callable[..., Tensor], tuple[Arg, ...]]]


@dataclass(frozen=True)
class Table:
    """What rebuilds each name (Entries), and the layers whose weights those recipes check (-1: the LM head's)."""

    entries: Entries
    checked: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        layers = {key for _, args in self.entries.values() for kind, key in args if kind == "check"}
        object.__setattr__(self, "checked", tuple(sorted(layers)))


class Recipes(Mapping[str, Callable[[], Tensor]]):
    """name -> a function of no arguments that rebuilds its value, made from a Table when asked for."""

    def __init__(self, table: Table, tensors: dict[str, Tensor], model: GPT, T: int, specs: list | None = None):
        self._table, self._tensors, self._T, self._device = table.entries, tensors, T, model.device
        lay = layout(model)
        self._specs = specs if specs is not None else [attn.spec for attn in lay.attentions]
        # the versions of the weights the recipes read, taken now, at the capture
        self._versions = _Versions({l: lay.head_holders if l == -1 else lay.block_holders[l] for l in table.checked})

    def __getitem__(self, name: str) -> Callable[[], Tensor]:
        fn, args = self._table[name]
        return partial(fn, *(self._arg(kind, key) for kind, key in args))

    def _arg(self, kind: str, key: Any) -> object:
        if kind == "tensor":
            return self._tensors[key]
        if kind == "get":
            return partial(_held, self._tensors[key]) if key in self._tensors else self[key]
        if kind == "check":
            return partial(self._versions.check, key)
        if kind == "spec":
            return self._specs[key]
        if kind == "T":
            return self._T
        return self._device if kind == "device" else key

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, name: object) -> bool:
        return name in self._table


def attention_maps(rec: Recorded, model: GPT, T: int, wanted: set[str] | None = None) -> Recipes:
    """Per layer: its mask (T² bools, built each time it is read: at T = 131,072 one mask is 17 GB) and
    the scores and weights as recipes that rebuild them from the captured q and k with the very functions
    of the model's explicit path (the layer's AttentionSpec: scale, soft-cap, window), on the same
    (1, H, T, D) tensors, so they are bit-identical to what that path computes. Every value keeps the
    forward's batch axis of one, as the capture holds them. wanted: only the layers one of whose maps or
    mask is in it (None: every layer)."""
    table = Table(_maps_table(set(rec.tensors), rec.kept_maps, model.config.n_layer, wanted))
    return Recipes(table, rec.tensors, model, T)


def _maps_table(held: AbstractSet[str], kept_maps: set[int], n_layer: int, wanted: set[str] | None) -> Entries:
    table: Entries = {}
    for l in range(n_layer):
        if l in kept_maps:  # recorded as the edited run computed them
            continue
        scores, weights, mask = (point(site, l) for site in (*ATTENTION_MAPS, "attn.mask"))
        if wanted is not None and not wanted.intersection((scores, weights, mask)):
            continue
        table[mask] = (_mask, (("spec", l), ("T", None), ("device", None)))
        if wanted is not None and not wanted.intersection((scores, weights)):
            continue
        q, k = ("tensor", point("attn.q", l)), ("tensor", point("attn.k", l))  # (1, H, T, D)
        if q[1] not in held or k[1] not in held:
            raise KeyError(f"{q[1]} and {k[1]} rebuild the attention maps of layer {l}: the capture holds them")
        table[scores] = (_scores, (("spec", l), q, k))
        table[weights] = (_weights, (("spec", l), q, k, ("T", None)))
    return table


def _mask(spec: AttentionSpec, T: int, device: torch.device) -> Tensor:
    return spec.mask(T, device)[None]


def _scores(spec: AttentionSpec, q: Tensor, k: Tensor) -> Tensor:
    return spec.scores(q, k)


def _weights(spec: AttentionSpec, q: Tensor, k: Tensor, T: int) -> Tensor:
    return attention_weights(spec.scores(q, k), spec.mask(T, q.device), q.dtype)


# What each sub-layer adds, the residual after attention, what the MLP reads and its neurons: rebuilt from
# the recorded z and resid_pre with the layer's own modules when asked for (a matmul or a norm each),
# instead of 9·T·C floats held per layer.
REBUILT = ("attn.out", "resid_mid", "mlp.in", "mlp.hidden", "mlp.out")


class _Versions:
    """The versions of the parameters some modules hold, per layer, taken at a capture (torch bumps a
    tensor's version at every in-place change: a training step, a load). Read from the modules then, so
    a parameter swapped in since the layout was read is the one checked."""

    def __init__(self, holders: dict[int, list[nn.Module]]):
        self._params: list[nn.Parameter | None] = []
        self._spans: dict[int, tuple[int, int]] = {}
        for l, modules in holders.items():  # one loop: a capture takes them for every layer
            start = len(self._params)
            for m in modules:
                self._params.extend(m._parameters.values())
            self._spans[l] = (start, len(self._params))
        self._versions = [None if p is None else p._version for p in self._params]

    def check(self, layer: int) -> None:
        """Raise once a parameter of this layer (-1: the LM head) changed since the capture."""
        a, b = self._spans[layer]
        if any(p is not None and p._version != v for p, v in zip(self._params[a:b], self._versions[a:b], strict=True)):
            raise RuntimeError(
                "the model's weights changed after this Trace was recorded, so its sub-layer outputs "
                "cannot be rebuilt from them: trace the prompt again"
            )


@torch.no_grad()
def _attn_out(block: Block, z: Tensor, check: Callable[[], None]) -> Tensor:
    check()
    return block.attn.project(z)  # merge, c_proj, post-norm: as the forward does


@torch.no_grad()
def _resid_mid(resid_pre: Tensor, attn_out: Callable[[], Tensor]) -> Tensor:
    return resid_pre + attn_out()  # the forward's own sum, element by element


@torch.no_grad()
def _mlp_in(block: Block, resid_pre: Tensor, resid_mid: Callable[[], Tensor], check) -> Tensor:
    check()
    return block.mlp_input(resid_pre, resid_mid())


@torch.no_grad()
def _mlp_hidden(block: Block, mlp_in: Callable[[], Tensor], check) -> Tensor:
    check()
    return block.mlp.neurons(mlp_in())


@torch.no_grad()
def _mlp_out(block: Block, hidden: Callable[[], Tensor], check: Callable[[], None]) -> Tensor:
    check()
    return block.mlp.project(hidden())


def _held(t: Tensor) -> Tensor:
    return t


def _sublayer_table(held: AbstractSet[str], model: GPT, wanted: set[str] | None) -> Entries:
    """Per layer: attn.out, resid_mid, mlp.in, mlp.hidden and mlp.out rebuilt from the recorded z and
    resid_pre with the layer's own modules, on the same (1, T, ·) shapes as the forward pass, so they are
    bit-identical to what it computed (eval mode: dropout is the identity). A value an intervention
    edited is held as recorded instead, and what follows it is rebuilt from it; a rebuild refuses once
    the weights changed."""
    table: Entries = {}
    for l, block in enumerate(model.transformer.h):
        if wanted is not None and not wanted.intersection(point(site, l) for site in REBUILT):
            continue
        b, check = ("value", block), ("check", l)
        z, pre = ("tensor", point("attn.z", l)), ("tensor", point("resid_pre", l))
        out, mid, mlp_in, hidden, mlp_out = (point(site, l) for site in REBUILT)
        got = {n for n in (out, mid, mlp_in, hidden) if n in held}  # what a later recipe may read
        if out not in got and z[1] in held:
            table[out] = (_attn_out, (b, z, check))
            got.add(out)
        if mid not in got and pre[1] in held and out in got:
            table[mid] = (_resid_mid, (pre, ("get", out)))
            got.add(mid)
        if mlp_in not in got and pre[1] in held and mid in got:
            table[mlp_in] = (_mlp_in, (b, pre, ("get", mid), check))
            got.add(mlp_in)
        if hidden not in got and mlp_in in got:
            table[hidden] = (_mlp_hidden, (b, ("get", mlp_in), check))
            got.add(hidden)
        if mlp_out not in held and hidden in got:
            table[mlp_out] = (_mlp_out, (b, ("get", hidden), check))
    return table


@torch.no_grad()
def _logits(head: nn.Module, ln_f: Tensor, check: Callable[[], None]) -> Tensor:
    check()
    return head(ln_f)  # the LM head (and its soft-cap) on the forward's own (1, T, C) shape


def _logits_table(held: AbstractSet[str], model: GPT, wanted: set[str] | None) -> Entries:
    """The logits by the LM head applied to the recorded ln_f, on the same (1, T, C) shape as the forward
    pass: bit-identical to what it computed (tied or not, soft-capped or not), and T × V floats (half a
    1B Trace with a 128k vocabulary) not held. Edited logits are held."""
    if "logits" in held or "ln_f" not in held or (wanted is not None and "logits" not in wanted):
        return {}
    return {"logits": (_logits, (("value", model.lm_head), ("tensor", "ln_f"), ("check", -1)))}


def rebuilt(rec: Recorded, model: GPT, T: int, wanted: set[str] | None, specs: list) -> Recipes:
    """Every recipe of a capture (the attention maps, the sub-layer outputs and the logits), from the
    model's table for what it holds (made the first time a pass holds these names). specs: each
    layer's AttentionSpec at the capture."""
    held = frozenset(rec.tensors)
    key = (held, frozenset(rec.kept_maps), None if wanted is None else frozenset(wanted))

    def make() -> Table:
        return Table(
            {
                **_maps_table(held, rec.kept_maps, model.config.n_layer, wanted),
                **_sublayer_table(held, model, wanted),
                **_logits_table(held, model, wanted),
            }
        )

    return Recipes(remembered(layout(model).tables, key, make), rec.tensors, model, T, specs)


def rebuilt_from(name: str) -> tuple[str, ...]:
    """The names a Trace holds to give `name` (itself, and what rebuilds it when it is not held)."""
    layer, site = parse(name)
    at = partial(point, layer=layer)
    if site == "logits":
        return (name, "ln_f")
    if site in ATTENTION_MAPS:
        return (name, at("attn.q"), at("attn.k"), at("attn.mask"))
    if site == "attn.out":
        return (name, at("attn.z"))
    if site == "resid_mid":
        return (name, at("resid_pre"), *rebuilt_from(at("attn.out")))
    if site == "mlp.in":
        return (name, *rebuilt_from(at("resid_mid")))
    if site in ("mlp.hidden", "mlp.out"):
        return (name, at("mlp.in"), at("mlp.hidden"), *rebuilt_from(at("resid_mid")))
    return (name,)


def answerable(names: set[str], n_layer: int) -> set[str]:
    """Every contract name that a Trace asked for `names` can give from what it holds: the names, and
    any other whose rebuild needs only those (asked for the attention weights, it holds q, k and the
    mask, which also give the scores). A caller that caches runs asks for this set, so a run answers
    every later question that it holds the values for."""
    held = {h for name in names for h in rebuilt_from(name)}
    given: set[str] = set()
    for name in contract_names(n_layer):  # forward order: what a rebuild needs comes before it
        needs = set(rebuilt_from(name)) - {name}  # what rebuilds it; nothing: it must be held itself
        if (held | given).issuperset(needs) if needs else name in held:
            given.add(name)
    return given
