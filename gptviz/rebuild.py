"""What a Trace gives without holding it: recipes that rebuild a value from the values it does hold,
with the model's own functions on the forward pass's own shapes, so a rebuilt value is bit-identical to
what the pass computed. The attention scores and weights come from q, k and the mask; each sub-layer's
output, the residual between them and the MLP's neurons from z and resid_pre; the logits from ln_f.
`answerable` says which names a run holding some names can give."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol

import torch
from torch import Tensor, nn

from .attention import AttentionSpec, attention_weights
from .layout import layout, parameters
from .model import GPT, Block
from .names import ATTENTION_MAPS, contract_names, parse, point


class Recorded(Protocol):
    """What a capture recorded (capture._Recorder): its tensors, and the layers whose maps it kept."""

    tensors: dict[str, Tensor]
    kept_maps: set[int]


def attention_maps(rec: Recorded, model: GPT, T: int, wanted: set[str] | None = None) -> dict:
    """Per layer: its mask (T² bools, built each time it is read: at T = 131,072 one mask is 17 GB) and
    the scores and weights as recipes that rebuild them from the captured q and k with the very functions
    of the model's explicit path (the layer's AttentionSpec: scale, soft-cap, window), on the same
    (1, H, T, D) tensors, so they are bit-identical to what that path computes. Every value keeps the
    forward's batch axis of one, as the capture holds them. wanted: only the layers one of whose maps or
    mask is in it (None: every layer)."""
    maps: dict[str, Callable[[], Tensor]] = {}
    for l, block in enumerate(model.transformer.h):
        if l in rec.kept_maps:  # recorded as the edited run computed them
            continue
        names = [point(site, l) for site in (*ATTENTION_MAPS, "attn.mask")]
        if wanted is not None and not wanted.intersection(names):
            continue
        spec: AttentionSpec = block.attn.spec
        maps[point("attn.mask", l)] = partial(_mask, spec, T, model.device)
        if wanted is not None and not wanted.intersection(names[:2]):
            continue
        q, k = rec.tensors[point("attn.q", l)], rec.tensors[point("attn.k", l)]  # (1, H, T, D)
        maps[point("attn.scores", l)] = partial(spec.scores, q, k)
        maps[point("attn.weights", l)] = partial(_weights, spec, q, k, T)
    return maps


def _mask(spec: AttentionSpec, T: int, device: torch.device) -> Tensor:
    return spec.mask(T, device)[None]


def _weights(spec: AttentionSpec, q: Tensor, k: Tensor, T: int) -> Tensor:
    return attention_weights(spec.scores(q, k), spec.mask(T, q.device), q.dtype)


# What each sub-layer adds, the residual after attention, what the MLP reads and its neurons: rebuilt from
# the recorded z and resid_pre with the layer's own modules when asked for (a matmul or a norm each),
# instead of 9·T·C floats held per layer.
REBUILT = ("attn.out", "resid_mid", "mlp.in", "mlp.hidden", "mlp.out")


def _unchanged(params: list[nn.Parameter]) -> Callable[[], None]:
    """A check that these parameters (a module's, layout.parameters) are still as a Trace was recorded with them."""
    versions = [p._version for p in params]  # bumped by every in-place change (a training step, a load)

    def check() -> None:
        if any(p._version != v for p, v in zip(params, versions, strict=True)):
            raise RuntimeError(
                "the model's weights changed after this Trace was recorded, so its sub-layer outputs "
                "cannot be rebuilt from them: trace the prompt again"
            )

    return check


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


def sublayer_outputs(rec: Recorded, model: GPT, wanted: set[str] | None = None) -> dict:
    """Per layer: attn.out, resid_mid, mlp.in, mlp.hidden and mlp.out as recipes that rebuild them from the
    recorded z and resid_pre with the layer's own modules, on the same (1, T, ·) shapes as the forward
    pass, so they are bit-identical to what it computed (eval mode: dropout is the identity). A value
    an intervention edited is kept as recorded instead, and what follows it is rebuilt from it; a
    rebuild refuses once the weights changed."""
    recipes = {}
    holders = layout(model).block_holders
    for l, block in enumerate(model.transformer.h):
        if wanted is not None and not wanted.intersection(point(site, l) for site in REBUILT):
            continue
        check = _unchanged(parameters(holders[l]))
        z, pre = rec.tensors.get(point("attn.z", l)), rec.tensors.get(point("resid_pre", l))
        out, mid, mlp_in, hidden, mlp_out = (point(site, l) for site in REBUILT)
        got = {n: partial(_held, rec.tensors[n]) for n in (out, mid, mlp_in, hidden) if n in rec.tensors}
        if out not in got and z is not None:
            got[out] = recipes[out] = partial(_attn_out, block, z, check)
        if mid not in got and pre is not None and out in got:
            got[mid] = recipes[mid] = partial(_resid_mid, pre, got[out])
        if mlp_in not in got and pre is not None and mid in got:
            got[mlp_in] = recipes[mlp_in] = partial(_mlp_in, block, pre, got[mid], check)
        if hidden not in got and mlp_in in got:
            got[hidden] = recipes[hidden] = partial(_mlp_hidden, block, got[mlp_in], check)
        if mlp_out not in rec.tensors and hidden in got:
            recipes[mlp_out] = partial(_mlp_out, block, got[hidden], check)
    return recipes


@torch.no_grad()
def _logits(head: nn.Module, ln_f: Tensor, check: Callable[[], None]) -> Tensor:
    check()
    return head(ln_f)  # the LM head (and its soft-cap) on the forward's own (1, T, C) shape


def final_logits(rec: Recorded, model: GPT, wanted: set[str] | None = None) -> dict:
    """The logits as a recipe that applies the LM head to the recorded ln_f, on the same (1, T, C)
    shape as the forward pass: bit-identical to what it computed (tied or not, soft-capped or not),
    and T × V floats (half a 1B Trace with a 128k vocabulary) not held. Edited logits are kept."""
    if "logits" in rec.tensors or "ln_f" not in rec.tensors or (wanted is not None and "logits" not in wanted):
        return {}
    check = _unchanged(parameters(layout(model).head_holders))
    return {"logits": partial(_logits, model.lm_head, rec.tensors["ln_f"], check)}


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
