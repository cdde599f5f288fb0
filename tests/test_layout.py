"""gptviz.layout: what a capture reads off a model's module tree once. A trace after the tree changed
(a probe or a parameter swapped in) must see the new tree; one after an unrelated registration must not
read it again; and the per-model plan of what each probe keeps must not leak between sets of names."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from torch import nn

import gptviz
from gptviz.capture import rebuilt_from, select
from gptviz.layout import layout
from gptviz.probes import Probe

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def test_the_layout_is_read_once_and_again_after_a_registration_in_the_model():
    model = tiny_model()
    first = layout(model)
    assert layout(model) is first
    nn.ModuleList(list(model.transformer.h))[:1]  # new containers register the blocks: not this model's tree
    tiny_model(seed=1)  # another model built
    assert layout(model) is first
    model.transformer.h[1].attn.q = Probe()  # the tree changed
    assert layout(model) is not first


def test_a_probe_swapped_in_after_a_trace_is_recorded():
    model = tiny_model()
    before = gptviz.trace(model, IDS)
    model.transformer.h[1].attn.q = Probe()  # a read layout would know the old probe only
    after = gptviz.trace(model, IDS)
    assert after.names == before.names
    assert torch.equal(after.tensor("blocks.1.attn.q"), before.tensor("blocks.1.attn.q"))


@pytest.mark.parametrize("swap", ["assigned", "unregistered"])
def test_a_parameter_swapped_in_is_the_one_a_rebuild_checks(swap):
    """Assigned, torch registers it; put in the module's dict (as module._apply may), nothing is told:
    the rebuild's check reads the parameters from their modules at each trace, so it sees it either way."""
    model = tiny_model()
    gptviz.trace(model, IDS)  # the layout is read
    fc = model.transformer.h[0].mlp.c_fc
    new = nn.Parameter(fc.weight.detach().clone())
    if swap == "assigned":
        fc.weight = new
    else:
        fc._parameters["weight"] = new
    t = gptviz.trace(model, IDS)
    with torch.no_grad():
        expected = model.transformer.h[0].mlp.neurons(t.tensor("blocks.0.mlp.in")[None])[0]
    assert torch.equal(t.tensor("blocks.0.mlp.hidden"), expected)
    with torch.no_grad():
        new.mul_(2.0)
    with pytest.raises(RuntimeError, match="weights changed"):
        t.tensor("blocks.0.mlp.hidden")


def test_each_set_of_names_holds_its_own_values_whatever_was_traced_before():
    """A pass without edits keeps what a plan made per model and set of names says: traced in turns,
    each Trace holds exactly what rebuilds its names, with the full run's values."""
    model = tiny_model(n_layer=3)
    asked = [["logits"], None, ["blocks.1.attn.weights"], ["blocks.*.mlp.out", "embed"], ["logits"], None]
    full = gptviz.trace(model, IDS)
    for names in asked:
        t = gptviz.trace(model, IDS, names=names)
        wanted = set(full.names) if names is None else select(names, 3)
        assert set(t.names) == wanted
        held = {n for n in full.names if t.held(n)}
        if names is not None:
            assert held == {h for n in wanted for h in rebuilt_from(n)} & (set(full.names) - _rebuilt(full))
        for n in t.names:
            assert torch.equal(t.tensor(n), full.tensor(n)), n


def _rebuilt(full: gptviz.Trace) -> set[str]:
    """The names a full Trace rebuilds instead of holding (attention maps and masks, sub-layer outputs, logits)."""
    return {n for n in full.names if not full.held(n)}


def test_an_edited_pass_after_plain_ones_records_its_edit():
    model = tiny_model()
    gptviz.trace(model, IDS)  # the plan of a plain pass is made
    edited = gptviz.trace(model, IDS, interventions=[gptviz.ablate("blocks.0.mlp.out")])
    assert edited.held("blocks.0.mlp.out") and not edited["blocks.0.mlp.out"].any()
    plain = gptviz.trace(model, IDS)
    assert not plain.held("blocks.0.mlp.out") and plain["blocks.0.mlp.out"].any()
