"""Capture: run a forward pass with hooks on every module and record it as a Trace.

Hooks are registered for one call and removed in `finally`. A model shared between threads
(Streamlit serves every browser session from one cached model) sees the hooks of every
concurrent call, so each hook checks that the forward pass it sees belongs to its own call
(a ContextVar holds the current recorder per thread) and ignores the others.

Interventions (gptviz.interventions) act in the same hooks: a forward hook that returns a value
replaces the module's output, so the probe that records a value is also where it is edited, and
only for the call that asked.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import cast

import numpy as np
import torch
from torch import Tensor, nn

from .attention import AttentionSpec, attention_weights
from .errors import ArgumentError, PromptError
from .interventions import EXPLICIT_SITES, Intervention, InterventionError, check, seen_values
from .model import GPT, Block
from .names import ATTENTION_MAPS, contract_names, parse, point
from .probes import Probe, capture_name
from .progress import ProgressFn, Reporter
from .record import Trace

_active: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar("gptviz_recorder", default=None)


def _shapes(values) -> list[tuple[int, ...]]:
    if isinstance(values, Tensor):
        values = (values,)
    return [tuple(v.shape) for v in values if isinstance(v, Tensor)]


@dataclass
class _Recorder:
    tensors: dict[str, Tensor] = field(default_factory=dict)
    shapes: list[dict] = field(default_factory=list)
    _open: list[int] = field(default_factory=list)  # indices of shape rows whose module is still running
    edits: dict[str, list[Intervention]] = field(default_factory=dict)  # contract name -> its edits, in order
    applied: set[str] = field(default_factory=set)
    # layers whose scores, mask and weights are kept as computed (an edit there makes them differ from
    # a rebuild from q and k); the others are rebuilt lazily, as on the plain path
    kept_maps: set[int] = field(default_factory=set)
    hold: set[str] | None = None  # the names to keep (what was asked for and what rebuilds it); None: all
    last_logits: Tensor | None = None  # [V]: the last position's logits as the forward computed them
    reads: set[str] = field(default_factory=set)  # points an edit reads later in the pass (Intervention.reads)

    def pre_hook(self, path: str, module: nn.Module):
        def hook(mod, args):
            if _active.get() is not self:
                return
            self._open.append(len(self.shapes))
            self.shapes.append(
                dict(
                    module=path,
                    type=type(mod).__name__,
                    inputs=_shapes(args),
                    outputs=[],
                    capture=capture_name(path, mod) or "",
                )
            )

        return hook

    def post_hook(self, path: str, module: nn.Module):
        name = capture_name(path, module)
        batched = not isinstance(module, Probe) or module.batched

        def hook(mod, args, output):
            if _active.get() is not self:
                return
            self.shapes[self._open.pop()]["outputs"] = _shapes(output)
            if name is None:
                return None
            edited = None
            for iv in self.edits.get(name, ()):
                edited = iv.apply(output if edited is None else edited, batched)
                self.applied.add(name)
            if name in self.reads:
                cast(dict, seen_values.get())[name] = output if edited is None else edited
            value = (output if edited is None else edited).detach()
            if name == "logits" and name not in self.tensors:  # V floats: what most pages read of the logits
                self.last_logits = value[0, -1].clone()
            if self._keep(name):
                self.tensors[name] = value[0] if batched else value  # batch of one: drop the axis
            return edited  # None leaves the output as it is

        return hook

    def _keep(self, name: str) -> bool:
        if self.hold is not None and name not in self.hold:
            return False
        layer, site = parse(name)
        if site in (*REBUILT, "logits"):  # an edited value is not what a rebuild from its inputs would give
            return name in self.edits
        return site not in (*ATTENTION_MAPS, "attn.mask") or layer in self.kept_maps


@contextlib.contextmanager
def edited(
    model: GPT, edits: Mapping[str, Callable[[Tensor], Tensor | None]], reads: Sequence[str] = ()
) -> Iterator[None]:
    """Within this block, in this thread only, the output of each named point is replaced by
    fn(output) (with its batch axis; a fn that returns None keeps it, as a forward hook does). For
    code that runs parts of the model itself, such as the patching sweep; gptviz.trace(...,
    interventions=) is the public way. reads: points whose values the edits read later in the pass
    (interventions.seen), recorded as each pass goes by."""
    rec = _Recorder()

    def hook_for(fn):
        def hook(mod, args, output):
            return fn(output) if _active.get() is rec else None

        return hook

    def keep_for(name):
        def hook(mod, args, output):
            if _active.get() is rec:
                cast(dict, seen_values.get())[name] = output

        return hook

    handles = []
    token, seen_token = _active.set(rec), seen_values.set({} if reads else seen_values.get())
    try:
        for path, module in model.named_modules():
            name = capture_name(path, module)
            if name is not None and name in reads:
                handles.append(module.register_forward_hook(keep_for(name)))
            if name is not None and name in edits:
                handles.append(module.register_forward_hook(hook_for(edits[name])))
        missing = (set(edits) | set(reads)) - {capture_name(p, m) for p, m in model.named_modules()}
        if missing:
            raise InterventionError(f"the model has no {sorted(missing)[0]}")
        yield
    finally:
        for h in handles:
            h.remove()
        seen_values.reset(seen_token)
        _active.reset(token)


def as_ids(ids: Sequence[int] | Tensor | np.ndarray, device: torch.device) -> Tensor:
    """Token ids as a [1, T] LongTensor on the model's device."""
    if isinstance(ids, Tensor):
        t = ids
    else:
        a = np.asarray(ids)
        if a.size and a.dtype.kind not in "iu":  # 1.5 would become 1, True id 1, a huge int an object
            bad = next((i for i in a.ravel().tolist() if isinstance(i, bool) or not isinstance(i, int)), None)
            shown = repr(bad) if bad is not None else f"values of type {a.dtype}"
            raise PromptError(f"token ids must be integers within the vocabulary, got {shown}")
        try:
            t = torch.as_tensor(a.astype(np.int64))
        except OverflowError:
            raise PromptError("a token id is too large: ids lie within the vocabulary") from None
    if t.dim() != 1:
        raise PromptError(f"trace runs one prompt: give a 1-D list of token ids, got shape {list(t.shape)}")
    return t.to(device=device).unsqueeze(0)


def attention_maps(rec: _Recorder, model: GPT, T: int, wanted: set[str] | None = None) -> dict:
    """Per layer: its mask (kept, T² bools; one tensor shared by the layers of one window) and the
    scores and weights as recipes that rebuild them from the captured q and k with the very functions
    of the model's explicit path (the layer's AttentionSpec: scale, soft-cap, window), on the same
    (1, H, T, D) views, so they are bit-identical to what that path computes. wanted: only the layers
    one of whose maps or mask is in it (None: every layer)."""
    maps, masks = {}, {}
    for l, block in enumerate(model.transformer.h):
        if l in rec.kept_maps:  # recorded as the edited run computed them
            continue
        names = [point(site, l) for site in (*ATTENTION_MAPS, "attn.mask")]
        if wanted is not None and not wanted.intersection(names):
            continue
        spec: AttentionSpec = block.attn.spec
        if spec.window not in masks:
            masks[spec.window] = spec.mask(T, model.device)
        mask = masks[spec.window]
        rec.tensors[point("attn.mask", l)] = mask
        if wanted is not None and not wanted.intersection(names[:2]):
            continue
        q, k = rec.tensors[point("attn.q", l)][None], rec.tensors[point("attn.k", l)][None]  # (1, H, T, D)
        maps[point("attn.scores", l)] = partial(lambda s, q, k: s.scores(q, k)[0], spec, q, k)
        maps[point("attn.weights", l)] = partial(
            lambda s, q, k, m: attention_weights(s.scores(q, k), m, q.dtype)[0], spec, q, k, mask
        )
    return maps


# What each sub-layer adds, the residual after attention, what the MLP reads and its neurons: rebuilt from
# the recorded z and resid_pre with the layer's own modules when asked for (a matmul or a norm each),
# instead of 9·T·C floats held per layer.
REBUILT = ("attn.out", "resid_mid", "mlp.in", "mlp.hidden", "mlp.out")


def _unchanged(module: nn.Module) -> Callable[[], None]:
    """A check that the module's parameters are still the ones a Trace was recorded with."""
    params = list(module.parameters())
    versions = [p._version for p in params]  # bumped by every in-place change (a training step, a load)

    def check() -> None:
        if any(p._version != v for p, v in zip(params, versions, strict=True)):
            raise RuntimeError(
                "the model's weights changed after this Trace was recorded, so its sub-layer outputs "
                "cannot be rebuilt from them: trace the prompt again"
            )

    return check


@torch.no_grad()
def _attn_out(block: nn.Module, z: Tensor, check: Callable[[], None]) -> Tensor:
    check()
    return block.attn.project(z[None])[0]  # merge, c_proj, post-norm: as the forward does


@torch.no_grad()
def _resid_mid(resid_pre: Tensor, attn_out: Callable[[], Tensor]) -> Tensor:
    return resid_pre + attn_out()  # the forward's own sum, element by element


@torch.no_grad()
def _mlp_in(block: Block, resid_pre: Tensor, resid_mid: Callable[[], Tensor], check) -> Tensor:
    check()
    return block.mlp_input(resid_pre[None], resid_mid()[None])[0]


@torch.no_grad()
def _mlp_hidden(block: nn.Module, mlp_in: Callable[[], Tensor], check) -> Tensor:
    check()
    return block.mlp.neurons(mlp_in()[None])[0]


@torch.no_grad()
def _mlp_out(block: nn.Module, hidden: Callable[[], Tensor], check: Callable[[], None]) -> Tensor:
    check()
    return block.mlp.project(hidden()[None])[0]


def _held(t: Tensor) -> Tensor:
    return t


def sublayer_outputs(rec: _Recorder, model: GPT, wanted: set[str] | None = None) -> dict:
    """Per layer: attn.out, resid_mid, mlp.in, mlp.hidden and mlp.out as recipes that rebuild them from the
    recorded z and resid_pre with the layer's own modules, on the same (1, T, ·) shapes as the forward
    pass, so they are bit-identical to what it computed (eval mode: dropout is the identity). A value
    an intervention edited is kept as recorded instead, and what follows it is rebuilt from it; a
    rebuild refuses once the weights changed."""
    recipes = {}
    for l, block in enumerate(model.transformer.h):
        if wanted is not None and not wanted.intersection(point(site, l) for site in REBUILT):
            continue
        check = _unchanged(block)
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
    return head(ln_f[None])[0]  # the LM head (and its soft-cap) on the forward's own (1, T, C) shape


def final_logits(rec: _Recorder, model: GPT, wanted: set[str] | None = None) -> dict:
    """The logits as a recipe that applies the LM head to the recorded ln_f, on the same (1, T, C)
    shape as the forward pass: bit-identical to what it computed (tied or not, soft-capped or not),
    and T × V floats (half a 1B Trace with a 128k vocabulary) not held. Edited logits are kept."""
    if "logits" in rec.tensors or "ln_f" not in rec.tensors or (wanted is not None and "logits" not in wanted):
        return {}
    return {"logits": partial(_logits, model.lm_head, rec.tensors["ln_f"], _unchanged(model.lm_head))}


def _rebuilt_from(name: str) -> tuple[str, ...]:
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
        return (name, at("resid_pre"), *_rebuilt_from(at("attn.out")))
    if site == "mlp.in":
        return (name, *_rebuilt_from(at("resid_mid")))
    if site in ("mlp.hidden", "mlp.out"):
        return (name, at("mlp.in"), at("mlp.hidden"), *_rebuilt_from(at("resid_mid")))
    return (name,)


def answerable(names: set[str], n_layer: int) -> set[str]:
    """Every contract name that a Trace asked for `names` can give from what it holds: the names, and
    any other whose rebuild needs only those (asked for the attention weights, it holds q, k and the
    mask, which also give the scores). A caller that caches runs asks for this set, so a run answers
    every later question that it holds the values for."""
    held = {h for name in names for h in _rebuilt_from(name)}
    given: set[str] = set()
    for name in contract_names(n_layer):  # forward order: what a rebuild needs comes before it
        needs = set(_rebuilt_from(name)) - {name}  # what rebuilds it; nothing: it must be held itself
        if (held | given).issuperset(needs) if needs else name in held:
            given.add(name)
    return given


def select(patterns: str | Sequence[str], n_layer: int) -> set[str]:
    """The contract names of an n_layer model that match any of `patterns` (names, or globs such as
    "blocks.*.attn.weights", "blocks.3.*"). Raises ArgumentError for a pattern that matches none."""
    if isinstance(patterns, str):
        patterns = [patterns]
    every = contract_names(n_layer)
    chosen: set[str] = set()
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise ArgumentError(f"names are contract names or patterns (strings), got {pattern!r}")
        hits = fnmatch.filter(every, pattern)
        if not hits:
            raise ArgumentError(
                f"{pattern!r} matches no name of this {n_layer}-layer model; names look like "
                "'embed', 'blocks.0.attn.q', 'blocks.*.attn.weights', 'logits'"
            )
        chosen.update(hits)
    return chosen


def _block_reports(model: GPT, rec: _Recorder, progress: ProgressFn) -> list:
    """A hook after each block that reports it done (for this call's pass only, as every hook here)."""
    blocks = list(cast(nn.ModuleList, model.transformer.h))  # GPT builds h as a ModuleList
    reporter = Reporter(progress, "blocks", total=len(blocks))

    def hook(mod, args, output):
        if _active.get() is rec:
            reporter.tick()

    reporter.start()
    return [block.register_forward_hook(hook) for block in blocks]


@torch.no_grad()
def trace(
    model: GPT,
    ids: Sequence[int] | Tensor | np.ndarray,
    tokenizer=None,
    interventions: Sequence[Intervention] = (),
    names: str | Sequence[str] | None = None,
    progress: ProgressFn | None = None,
) -> Trace:
    """Run `model` on one prompt with capture and return its Trace.

    ids: a list of token ids or a 1-D LongTensor. tokenizer: names the tokens; without one the
    token strings are the ids themselves. interventions: edits made with gptviz.ablate, patch or
    intervene, applied in order where they name the same point; the Trace records the edited
    values and lists them as `trace.interventions`. A source Trace of a patch is only read.

    Without interventions the forward pass is the plain one (fused attention), so the logits are
    bit-identical to `model(ids[None])`: the hooks only read. Attention scores and weights, which
    grow as L·H·T², are not stored: the Trace rebuilds a layer's maps from its q and k when they
    are asked for. An edit of scores, mask or weights runs the explicit attention path (where they
    exist as tensors), and that layer's maps are kept as computed. The logits are rebuilt from ln_f by
    the LM head the same way (the last position's are kept: V floats that most readers want).

    names: contract names or glob patterns ("blocks.*.attn.weights", "blocks.3.*", "logits"): the
    Trace answers only those, and holds only them and what rebuilds them. None: every name.

    progress: called with 0 of n_layer "blocks" before the pass and after each block; a Cancelled it
    raises stops the pass (the hooks are removed) and no Trace is returned.
    """
    idx = as_ids(ids, model.device)
    edits = check(interventions, model.config.n_layer)
    wanted = None if names is None else select(names, model.config.n_layer)
    rec = _Recorder()
    if wanted is not None:
        rec.hold = {held for name in wanted for held in _rebuilt_from(name)}
    for iv in edits:
        rec.edits.setdefault(iv.name, []).append(iv)
        if iv.explicit:
            rec.kept_maps.add(iv.layer)
        if iv.reads is not None:
            rec.reads.add(iv.reads)
    handles = []
    token, seen_token = _active.set(rec), seen_values.set({})
    try:
        for path, module in model.named_modules():
            if module is model:
                continue
            handles.append(module.register_forward_pre_hook(rec.pre_hook(path, module)))
            handles.append(module.register_forward_hook(rec.post_hook(path, module)))
        if progress is not None:  # only then: the plain capture has no hook more
            handles.extend(_block_reports(model, rec, progress))
        model(idx, explicit=any(iv.site in EXPLICIT_SITES for iv in edits))
    finally:
        for h in handles:
            h.remove()
        seen_values.reset(seen_token)
        _active.reset(token)
    missed = [n for n in rec.edits if n not in rec.applied]
    if missed:  # a point the forward pass never reached: an edit silently ignored would be a lie
        raise InterventionError(f"the forward pass has no {missed[0]}: nothing was edited there")
    hold = rec.hold
    lazy = {
        **attention_maps(rec, model, idx.size(1), hold),
        **sublayer_outputs(rec, model, hold),
        **final_logits(rec, model, hold),
    }
    id_list = idx[0].tolist()
    tokens = tokenizer.token_strings(id_list) if tokenizer is not None else [str(i) for i in id_list]
    out = Trace(rec.tensors, tokens, np.asarray(id_list, dtype=np.int64), rec.shapes, lazy, names=wanted)
    if rec.last_logits is not None and (wanted is None or "logits" in wanted):
        out.keep_row("logits", rec.last_logits)
    out.interventions = edits
    out.attention_specs = [block.attn.spec for block in model.transformer.h]  # how q, k become weights
    out.config = model.config  # what the pages name: rotary, grouped heads, the MLP's width
    return out
