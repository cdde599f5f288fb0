"""What a capture reads off a model's module tree, read once per model: each probe's contract name and
the modules of each block that hold parameters (whose versions a rebuild checks). Walking the tree costs
Python per module (~0.2 ms for a 16-layer model's 456), paid on every trace before.

A layout is read again once its model's tree may have changed: torch calls a global hook whenever a
module registers a submodule or a parameter (an assignment `block.attn.q = Probe()`, `lm_head.weight =
Parameter(...)`, `add_module`, `load_state_dict(assign=True)`); one made by a module of a model whose
layout was read bumps `_changes`, and a layout read under another count is read again. Registrations
elsewhere (Hugging Face slices its ModuleList of layers into a new one on every forward) change nothing.
The parameters themselves are read from their modules on every trace, so one replaced without a
registration (`module._apply` may) is still the one checked. (A module deleted leaves a stale entry
that is never reached: a probe no forward calls, parameters nothing changes.)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.nn.modules.module import (
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)

from .model import GPT, CausalSelfAttention
from .probes import Probe, capture_name

_changes = 0  # registrations seen on modules of models whose layout was read
_read: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # every module of those models


def _registered(module: nn.Module, name: str, value: object) -> None:
    global _changes
    if module in _read:
        _changes += 1  # returns None: the registration goes on unchanged


register_module_module_registration_hook(_registered)
register_module_parameter_registration_hook(_registered)


@dataclass(frozen=True)
class Layout:
    """A model's probes and the modules that hold its parameters, as a capture and its rebuilds read them."""

    probes: dict[Probe, str]  # each probe -> its contract name
    block_holders: list[list[nn.Module]]  # per block, it and each submodule of it that holds a parameter
    head_holders: list[nn.Module]  # the LM head (its weight, tied or not)
    attentions: list[CausalSelfAttention]  # each block's attention, whose spec a capture reads as it is then
    # what record() decides for a pass without edits, per set of names held (None: all), made when
    # first asked for (capture._plan): probe -> its name where the value is kept as computed, None where not
    plans: dict[frozenset[str] | None, dict[Probe, str | None]]
    # what rebuilds each name a Trace does not hold, per what a pass held (rebuild.rebuilt), made when first asked for
    tables: dict[tuple, Any]


def remembered(store: dict[Any, Any], key: object, make: Callable[[], Any]) -> Any:
    """store[key], made by make() the first time; the store (a Layout's plans or tables) is emptied past
    32 keys: a dashboard asks for a few sets of names again and again, a script may ask for many."""
    if key not in store:
        if len(store) >= 32:
            store.clear()
        store[key] = make()
    return store[key]


def _holders(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if m._parameters]


_LAYOUTS: weakref.WeakKeyDictionary[GPT, tuple[int, Layout]] = weakref.WeakKeyDictionary()


def layout(model: GPT) -> Layout:
    """The model's Layout, read off its module tree the first time and again after a registration in it."""
    known = _LAYOUTS.get(model)
    if known is not None and known[0] == _changes:
        return known[1]
    seen = _changes
    modules = dict(model.named_modules())
    _read.update(modules.values())
    probes = {m: name for p, m in modules.items() if isinstance(m, Probe) and (name := capture_name(p, m))}
    blocks = [_holders(block) for block in model.transformer.h]
    attentions = [block.attn for block in model.transformer.h]
    found = Layout(probes, blocks, _holders(model.lm_head), attentions, {}, {})
    _LAYOUTS[model] = (seen, found)
    return found
