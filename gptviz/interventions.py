"""Interventions: name a contract point and say what to put there (docs/architecture.md, "Asking why and what if").

    gptviz.trace(model, ids, interventions=[
        gptviz.ablate("blocks.3.attn.z", heads=[5]),                     # zero head 5 of layer 3
        gptviz.ablate("blocks.1.mlp.out", how="mean"),                   # mean over the prompt's positions
        gptviz.patch("blocks.2.resid_pre", clean_trace, positions=[4]),  # copy from another run
        gptviz.intervene("blocks.0.attn.weights", fn),                   # any function of the value
    ])

An intervention is a small frozen object; it edits nothing by itself. gptviz.trace applies it in
the forward hook of the probe that records the value, so everything downstream is computed from
the edited value and the Trace records what the model really read.

Axes: `heads=` selects along the head axis of attn.q/k/v/z/scores/weights; `positions=` along the
token axis (the query axis of scores, mask and weights). Neither means the whole value.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .errors import GptvizError
from .names import parse
from .record import Trace

HEAD_SITES = ("attn.q", "attn.k", "attn.v", "attn.z", "attn.scores", "attn.weights")
EXPLICIT_SITES = ("attn.scores", "attn.mask", "attn.weights")  # exist as tensors on the explicit path only
HOWS = ("zero", "mean")

# The values of the points that this thread's forward pass has passed and that an edit reads (its
# `reads`: a transcoder's edit of mlp.out reads mlp.in), name -> value with its batch axis. Set by
# gptviz.trace and capture.edited around the pass; None outside one.
seen_values: contextvars.ContextVar[dict[str, Tensor] | None] = contextvars.ContextVar("gptviz_seen", default=None)


def seen(name: str) -> Tensor:
    """The value at `name` earlier in this thread's forward pass (an edit's `reads`)."""
    got = seen_values.get()
    if got is None or name not in got:
        raise InterventionError(f"{name} was not recorded in this forward pass: run edits that read it in gptviz.trace")
    return got[name]


class InterventionError(GptvizError, ValueError):
    """An intervention names a point, head or position that the run does not have, or a bad edit."""


def _axes(site: str) -> tuple[int | None, int]:
    """(head axis, token axis) of a value as the Trace holds it (no batch axis)."""
    if site in HEAD_SITES:
        return 0, 1  # [H, T, D] or [H, T, T]: tokens are the queries
    return None, 0  # [T, C], [T, V], and the mask [T, T] by its query rows


def _ints(values: Sequence[int] | int | None, what: str) -> tuple[int, ...] | None:
    if values is None:
        return None
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        values = [values]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InterventionError(f"{what} must be integers, got {v!r}")
        out.append(int(v))
    if not out:
        raise InterventionError(f"{what}= is empty: leave it out to mean all of them")
    return tuple(out)


@dataclass(frozen=True)
class Intervention:
    """The common part: which point, and which heads and positions of it (None = all)."""

    name: str
    heads: tuple[int, ...] | None = None
    positions: tuple[int, ...] | None = None

    def __post_init__(self):
        try:
            layer, site = parse(self.name)
        except KeyError as e:
            raise InterventionError(e.args[0]) from None
        if site in ("tokens", "token_ids"):
            raise InterventionError(f"{self.name!r} is not a value of the forward pass")
        object.__setattr__(self, "heads", _ints(self.heads, "heads"))
        object.__setattr__(self, "positions", _ints(self.positions, "positions"))
        if self.heads is not None and site not in HEAD_SITES:
            raise InterventionError(f"{self.name} has no head axis: heads= applies to {', '.join(HEAD_SITES)}")
        if self.heads is not None and min(self.heads) < 0:
            raise InterventionError(f"head numbers start at 0, got {min(self.heads)}")

    @property
    def layer(self) -> int | None:
        return parse(self.name)[0]

    @property
    def site(self) -> str:
        return parse(self.name)[1]

    @property
    def reads(self) -> str | None:
        """Another point, earlier in the same forward pass, whose value this edit needs (seen())."""
        return None

    @property
    def explicit(self) -> bool:
        """Whether the run needs the explicit attention path for this edit to exist."""
        return self.site in EXPLICIT_SITES

    @property
    def pointwise(self) -> bool:
        """Whether each token's new value depends on that token's value alone (a zero, a number, an
        added vector), so a step of generation with a KV cache can apply it to the new token only.
        A mean over the prompt, a patch or a function of the whole value is not."""
        return False

    def describe(self) -> str:
        parts = [self.name]
        if self.heads is not None:
            parts.append(f"heads {', '.join(map(str, self.heads))}")
        if self.positions is not None:
            parts.append(f"positions {', '.join(map(str, self.positions))}")
        return " ".join(parts)

    # --- applied inside the probe's forward hook --------------------------------------------
    def selection(self, value: Tensor, batched: bool) -> Tensor:
        """Bool mask, broadcastable to value, True where this intervention writes."""
        head_axis, tok_axis = _axes(self.site)
        off = 1 if batched else 0
        shape = [1] * value.dim()
        sel = torch.ones(shape, dtype=torch.bool, device=value.device)
        for axis, chosen, what in ((head_axis, self.heads, "head"), (tok_axis, self.positions, "position")):
            if axis is None or chosen is None:
                continue
            n = value.size(axis + off)
            bad = [i for i in chosen if not -n <= i < n]
            if bad:
                raise InterventionError(f"{self.name} has {n} {what}s (0 … {n - 1}); there is no {what} {bad[0]}")
            pick = torch.zeros(n, dtype=torch.bool, device=value.device)
            pick[[i % n for i in chosen]] = True
            s = [1] * value.dim()
            s[axis + off] = n
            sel = sel & pick.view(s)
        return sel

    def replacement(self, value: Tensor, batched: bool) -> Tensor:
        raise NotImplementedError

    def apply(self, value: Tensor, batched: bool) -> Tensor:
        """The edited value: a new tensor; what is not selected keeps its exact value."""
        new = self.replacement(value, batched)
        return torch.where(self.selection(value, batched), new.to(dtype=value.dtype, device=value.device), value)


@dataclass(frozen=True)
class Ablation(Intervention):
    """Replace the selection by zero, by its mean over the prompt's positions, or by a number."""

    how: str | float = "zero"

    def __post_init__(self):
        super().__post_init__()
        how = self.how
        if isinstance(how, str):
            if how not in HOWS:
                raise InterventionError(f"how must be 'zero', 'mean' or a number, got {how!r}")
        elif isinstance(how, bool) or not isinstance(how, (int, float, np.integer, np.floating)):
            raise InterventionError(f"how must be 'zero', 'mean' or a number, got {how!r}")
        elif not np.isfinite(how):
            raise InterventionError(f"how must be a finite number, got {how}")
        if self.site == "attn.mask" and how == "mean":
            raise InterventionError("the mask is True/False: ablate it with 'zero' (False) or 1 (True)")

    @property
    def pointwise(self) -> bool:
        return self.how != "mean"

    def replacement(self, value: Tensor, batched: bool) -> Tensor:
        if self.how == "zero":
            return torch.zeros((), dtype=value.dtype, device=value.device)
        if self.how == "mean":  # over every position of this prompt, then written where selected
            _, tok_axis = _axes(self.site)
            return value.mean(dim=tok_axis + (1 if batched else 0), keepdim=True)
        return torch.tensor(float(self.how), device=value.device)

    def describe(self) -> str:
        how = self.how if isinstance(self.how, str) else f"= {self.how:g}"
        return f"ablate {super().describe()} ({how})"


@dataclass(frozen=True, eq=False)
class Patch(Intervention):
    """Copy the selection from another run's Trace (same model, same prompt length). Compared by
    identity: two patches from different runs are never the same edit."""

    source: Trace | None = field(default=None, repr=False)

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.source, Trace):
            raise InterventionError(f"patch needs a source Trace to copy {self.name} from")
        if self.name not in self.source:
            raise InterventionError(f"the source Trace has no {self.name}")

    def replacement(self, value: Tensor, batched: bool) -> Tensor:
        src = self.source.tensor(self.name)
        want = tuple(value.shape[1:] if batched else value.shape)
        if tuple(src.shape) != want:
            raise InterventionError(
                f"cannot patch {self.name}: the source run has shape {list(src.shape)}, this run {list(want)} "
                "(patch between prompts of the same length)"
            )
        return src.unsqueeze(0) if batched else src

    def describe(self) -> str:
        return f"patch {super().describe()} from another run"


@dataclass(frozen=True)
class Intervene(Intervention):
    """Any function of the value: fn gets it as the Trace holds it (a tensor, no batch axis) and
    returns the value to use in its place, of the same shape."""

    fn: Callable[[Tensor], Tensor] | None = None

    def __post_init__(self):
        super().__post_init__()
        if not callable(self.fn):
            raise InterventionError(f"intervene needs a function of the value, got {self.fn!r}")

    def _one(self, value: Tensor) -> Tensor:
        out = self.fn(value.clone())  # the function may edit its argument in place: not the model's tensor
        if isinstance(out, np.ndarray):
            out = torch.from_numpy(out)
        if not isinstance(out, Tensor):
            raise InterventionError(f"the function for {self.name} returned {type(out).__name__}, not a tensor")
        if tuple(out.shape) != tuple(value.shape):
            raise InterventionError(
                f"the function for {self.name} returned shape {list(out.shape)}; the value has {list(value.shape)}"
            )
        return out.to(dtype=value.dtype, device=value.device)

    def replacement(self, value: Tensor, batched: bool) -> Tensor:
        if not batched:
            return self._one(value)
        return torch.stack([self._one(row) for row in value])

    def describe(self) -> str:
        fn = getattr(self.fn, "__name__", type(self.fn).__name__)
        return f"intervene {super().describe()} with {fn}"


def ablate(
    name: str, heads: Sequence[int] | None = None, positions: Sequence[int] | None = None, how: str | float = "zero"
) -> Ablation:
    """Replace (part of) a contract point by zero, its mean over the prompt's positions, or a number.

    Ablating a head is done on attn.z, before c_proj mixes the heads."""
    return Ablation(name, heads, positions, how)


def patch(
    name: str, source: Trace, heads: Sequence[int] | None = None, positions: Sequence[int] | None = None
) -> Patch:
    """Copy (part of) a contract point from another run's Trace (same model, same prompt length)."""
    return Patch(name, heads, positions, source)


def intervene(name: str, fn: Callable[[Tensor], Tensor]) -> Intervene:
    """Replace a contract point by fn(value): value as the Trace holds it, a tensor of the same shape back."""
    return Intervene(name, None, None, fn)


def check(interventions: Sequence[Intervention], n_layer: int) -> tuple[Intervention, ...]:
    """The interventions as a tuple, each naming a point this model has."""
    out = (interventions,) if isinstance(interventions, Intervention) else tuple(interventions)
    for iv in out:
        if not isinstance(iv, Intervention):
            raise InterventionError(
                "interventions are made with gptviz.ablate, patch, intervene, steer or edit_features, "
                f"got {type(iv).__name__}"
            )
        if iv.layer is not None and iv.layer >= n_layer:
            raise InterventionError(f"{iv.name}: the model has {n_layer} layers (0 … {n_layer - 1})")
    return out
