"""Capture: run a forward pass and record it as a Trace.

The model's probes hand each value to the capture running in their own thread (probes.LISTENER, a
ContextVar), so a model shared between threads (Streamlit serves every browser session from one cached
model) records each call's values for that call only. The final norm and the LM head, which are no
probes, get one forward hook each for the call, removed in `finally`; it too checks whose pass it sees.

Interventions (gptviz.interventions) act at the same points: what the capture hands back replaces the
value, so the point that records a value is also where it is edited, and only for the call that asked.
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

from .errors import ArgumentError, PromptError
from .interventions import EXPLICIT_SITES, Intervention, InterventionError, check, seen_values
from .layout import layout, remembered
from .model import GPT
from .names import ATTENTION_MAPS, contract_names, parse
from .probes import LISTENER, Probe, capture_name
from .progress import ProgressFn, Reporter
from .rebuild import REBUILT, rebuilt, rebuilt_from
from .rebuild import answerable as answerable
from .rebuild import attention_maps as attention_maps
from .record import Trace

_active: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar("gptviz_recorder", default=None)


def _shapes(values) -> list[tuple[int, ...]]:
    if isinstance(values, Tensor):
        values = (values,)
    return [tuple(v.shape) for v in values if isinstance(v, Tensor)]


@dataclass
class _Recorder:
    tensors: dict[str, Tensor] = field(default_factory=dict)
    probes: dict[Probe, str] = field(default_factory=dict)  # each probe of the model -> its contract name
    edits: dict[str, list[Intervention]] = field(default_factory=dict)  # contract name -> its edits, in order
    applied: set[str] = field(default_factory=set)
    # layers whose scores, mask and weights are kept as computed (an edit there makes them differ from
    # a rebuild from q and k); the others are rebuilt lazily, as on the plain path
    kept_maps: set[int] = field(default_factory=set)
    hold: set[str] | None = None  # the names to keep (what was asked for and what rebuilds it); None: all
    last_logits: Tensor | None = None  # [V]: the last position's logits as the forward computed them
    _kept: dict[str, bool] = field(default_factory=dict)  # _keep's answers, fixed for the pass
    reads: set[str] = field(default_factory=set)  # points an edit reads later in the pass (Intervention.reads)
    # probe -> its name where record() would only keep its value as computed, None where it would do
    # nothing; a probe not in it goes through record()
    plan: dict[Probe, str | None] = field(default_factory=dict)

    def listen(self, probe: Probe, output: Tensor) -> Tensor:
        """What a probe of this pass hands on (probes.LISTENER): its value, recorded, or as edited."""
        kept = self.plan.get(probe, "")  # a pass without edits decides each probe once per model: _plan
        if kept:
            self.tensors[kept] = output
            return output
        if kept is None:
            return output
        name = self.probes.get(probe)
        if name is None:  # a probe of another model run inside this pass
            return output
        edited = self.record(name, output, probe.batched)
        return output if edited is None else edited

    def post_hook(self, name: str):
        """The hook of a captured module that is no probe (the final norm, the LM head)."""

        def hook(mod, args, output):
            return self.record(name, output, True) if _active.get() is self else None

        return hook

    def record(self, name: str, output: Tensor, batched: bool) -> Tensor | None:
        """Apply this point's edits and keep the value; the edited value, or None where nothing was edited."""
        edited = None
        for iv in self.edits.get(name, ()):
            edited = iv.apply(output if edited is None else edited, batched)
            self.applied.add(name)
        value = output if edited is None else edited
        if name in self.reads:  # an edit later in the pass reads this value (Intervention.reads)
            cast(dict, seen_values.get())[name] = value
        if name == "logits" and name not in self.tensors:  # V floats: what most pages read of the logits
            self.last_logits = value[0, -1].clone()
        if self._keep(name):
            # as computed, batch axis and all (the Trace drops it when read): a view per value costs a GPU
            # forward's worth of Python over a whole model; the mask alone has none
            self.tensors[name] = value if batched else value[None]
        return edited

    def _keep(self, name: str) -> bool:
        if name not in self._kept:
            self._kept[name] = self._decide(name)
        return self._kept[name]

    def _decide(self, name: str) -> bool:
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
    token, quiet = _active.set(rec), LISTENER.set(None)  # a trace around this block records none of it
    seen_token = seen_values.set({} if reads else seen_values.get())
    try:
        if edits or reads:  # else nothing to hook: two walks of the module tree saved (a narrow model's
            # forward costs about as much Python)
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
        LISTENER.reset(quiet)
        seen_values.reset(seen_token)
        _active.reset(token)


def _plan(rec: _Recorder, plans: dict[frozenset[str] | None, dict[Probe, str | None]]) -> dict[Probe, str | None]:
    """What record() decides for each probe of a pass without edits (where nothing is edited, read or
    kept as an edit left it, the decision depends on the names held alone), decided once per model and
    set of names held (layout.Layout.plans): ~180 decisions a pass in a 16-layer model otherwise."""

    def make() -> dict[Probe, str | None]:
        plan = {p: name if rec._decide(name) else None for p, name in rec.probes.items()}
        return {p: name for p, name in plan.items() if p.batched or name is None}  # a kept mask gets its batch axis

    return remembered(plans, None if rec.hold is None else frozenset(rec.hold), make)


def shape_rows(config, dtype: torch.dtype, T: int, explicit: bool = False) -> list[dict]:
    """The shape trace of a pass over T tokens: every module in call order with the shapes of what it
    took and gave, and its contract name. Shapes follow from the config and T alone, so they are read
    off the same pass run on the meta device (no storage, no arithmetic) when a Trace is asked for them,
    and the capture itself hooks no module for them."""
    meta = GPT.empty(config).to(dtype)
    meta.reset_buffers(torch.device("meta"))
    meta.train()  # an eval pass reads the ids' range, a value the meta device does not have; no shape changes
    rows: list[dict] = []
    running: list[int] = []  # rows whose module has not returned yet

    def enter(path: str):
        def hook(mod, args):
            running.append(len(rows))
            capture = capture_name(path, mod) or ""
            rows.append(dict(module=path, type=type(mod).__name__, inputs=_shapes(args), outputs=[], capture=capture))

        return hook

    def leave(mod, args, output):
        rows[running.pop()]["outputs"] = _shapes(output)

    for path, module in meta.named_modules():
        if module is not meta:
            module.register_forward_pre_hook(enter(path))
            module.register_forward_hook(leave)
    token, quiet = _active.set(None), LISTENER.set(None)
    try:
        meta(torch.zeros(1, T, dtype=torch.long, device="meta"), explicit=explicit)
    finally:
        LISTENER.reset(quiet)
        _active.reset(token)
    return rows


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
        plain = not any(c in pattern for c in "*?[")  # a name: no need to match it against every name
        hits = ([pattern] if pattern in every else []) if plain else fnmatch.filter(every, pattern)
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
    id_list = idx.tolist()[0]  # before the pass: read after it, on a GPU it would wait for the pass to end
    edits = check(interventions, model.config.n_layer)
    wanted = None if names is None else select(names, model.config.n_layer)
    rec = _Recorder()
    if wanted is not None:
        rec.hold = {held for name in wanted for held in rebuilt_from(name)}
    for iv in edits:
        rec.edits.setdefault(iv.name, []).append(iv)
        if iv.explicit and iv.layer is not None:  # every explicit site is a layer's
            rec.kept_maps.add(iv.layer)
        if iv.reads is not None:
            rec.reads.add(iv.reads)
    tree = layout(model)
    rec.probes = tree.probes
    if not rec.edits:
        rec.plan = _plan(rec, tree.plans)
    explicit = any(iv.site in EXPLICIT_SITES for iv in edits)
    handles = [
        model.transformer.ln_f.register_forward_hook(rec.post_hook("ln_f")),
        model.lm_head.register_forward_hook(rec.post_hook("logits")),
    ]
    token, listening = _active.set(rec), LISTENER.set(rec.listen)
    seen_token = seen_values.set({})
    try:
        if progress is not None:  # only then: the plain capture has no hook more
            handles.extend(_block_reports(model, rec, progress))
        model(idx, explicit=explicit)
    finally:
        for h in handles:
            h.remove()
        LISTENER.reset(listening)
        seen_values.reset(seen_token)
        _active.reset(token)
    missed = [n for n in rec.edits if n not in rec.applied]
    if missed:  # a point the forward pass never reached: an edit silently ignored would be a lie
        raise InterventionError(f"the forward pass has no {missed[0]}: nothing was edited there")
    specs = [attn.spec for attn in tree.attentions]  # how q, k become weights, as they are now
    lazy = rebuilt(rec, model, idx.size(1), rec.hold, specs)
    tokens = tokenizer.token_strings(id_list) if tokenizer is not None else [str(i) for i in id_list]
    shapes = partial(shape_rows, model.config, model.dtype, idx.size(1), explicit)
    out = Trace(rec.tensors, tokens, np.asarray(id_list, dtype=np.int64), shapes, lazy, names=wanted, batched=True)
    if rec.last_logits is not None and (wanted is None or "logits" in wanted):
        out.keep_row("logits", rec.last_logits)
    out.interventions = edits
    out.attention_specs = specs
    out.config = model.config  # what the pages name: rotary, grouped heads, the MLP's width
    return out
