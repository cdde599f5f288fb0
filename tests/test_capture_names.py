"""gptviz.trace(..., names=): a Trace answers what was asked for and holds only that and what rebuilds
it; the logits and the attention maps it rebuilds are bit-identical to what the forward computed, on
every family's config (sliding windows, soft-caps, tied heads)."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import tiny_model
from hf_helpers import FAMILIES, PROMPT_LEN, hf_random_decoder

import gptviz
from gptviz.capture import _Recorder, answerable, attention_maps, select
from gptviz.errors import ArgumentError
from gptviz.names import contract_names, forward_order, in_forward_order, point

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def test_names_keep_what_matches_with_the_same_values(model):
    full = gptviz.trace(model, IDS)
    assert full.names == contract_names(2)  # None: every name, as before
    part = gptviz.trace(model, IDS, names=["blocks.*.attn.weights", "blocks.1.mlp.*", "logits"])
    asked = [
        "blocks.0.attn.weights",
        "blocks.1.attn.weights",
        "blocks.1.mlp.in",
        "blocks.1.mlp.hidden",
        "blocks.1.mlp.out",
        "logits",
    ]
    assert part.names == asked
    assert set(part) == set(asked) and "blocks.0.attn.q" not in part
    for name in asked:
        assert torch.equal(part.tensor(name), full.tensor(name)), name
    with pytest.raises(KeyError):
        part["blocks.0.attn.q"]  # held to rebuild the weights, but not asked for
    T, C, V = len(IDS), 16, 11
    # held: q, k, v of both layers (one block each), ln_f, layer 1's resid_pre and z (its resid_mid, the
    # MLP's input, is rebuilt from them) and the last position's logits: not layer 0's residuals or z, nor
    # the logits, nor the mask (built when read)
    assert part.nbytes == 4 * (2 * T * 3 * C + T * C + 2 * T * C + V) < full.nbytes
    only = gptviz.trace(model, IDS, names="blocks.0.resid_post")
    assert only.names == ["blocks.0.resid_post"] and only.nbytes == 4 * len(IDS) * 16
    assert only.n_layer == 2


def test_a_name_that_matches_nothing_is_one_clear_line(model):
    with pytest.raises(ArgumentError, match="'blocks.7.\\*' matches no name of this 2-layer model"):
        gptviz.trace(model, IDS, names=["blocks.7.*"])
    with pytest.raises(ArgumentError, match="strings"):
        gptviz.trace(model, IDS, names=[3])


def test_logits_are_rebuilt_not_held(model):
    t = gptviz.trace(model, IDS)
    assert not t.held("logits")
    with torch.no_grad():
        plain = model(torch.tensor([IDS]))[0]
    assert torch.equal(t.tensor("logits"), plain)
    assert (t.part("logits", -1) == plain[-1].numpy()).all()
    assert (t.part("logits", len(IDS) - 1) == plain[-1].numpy()).all()
    assert (t.part("logits", 2) == plain[2].numpy()).all()
    # an edit of the logits is kept as the edited run computed it
    edited = gptviz.trace(model, IDS, interventions=[gptviz.intervene("logits", lambda x: x * 2)])
    assert edited.held("logits") and torch.equal(edited.tensor("logits"), plain * 2)
    # an edit of ln_f reaches the rebuilt logits as it reached the LM head
    shifted = gptviz.trace(model, IDS, interventions=[gptviz.intervene("ln_f", lambda x: x + 1)])
    with torch.no_grad():
        assert torch.equal(shifted.tensor("logits"), model.lm_head(shifted.tensor("ln_f")[None])[0])
    with torch.no_grad():  # a rebuild after the weights changed would be a different model's logits
        model.lm_head.weight.mul_(2)
    with pytest.raises(RuntimeError, match="weights changed"):
        t.tensor("logits")


@pytest.mark.parametrize("softcap", [0.0, 2.5])
@pytest.mark.parametrize("tied", [True, False])
def test_rebuilt_logits_with_caps_and_tied_heads(softcap, tied):
    model = tiny_model(final_softcap=softcap, tie_weights=tied)
    t = gptviz.trace(model, IDS)
    with torch.no_grad():
        plain = model(torch.tensor([IDS]))[0]
    assert torch.equal(t.tensor("logits"), plain)


def _explicit_maps(model: gptviz.GPT, ids: torch.Tensor) -> gptviz.Trace:
    """A Trace whose every layer ran the explicit attention path and kept its maps as computed."""
    L = model.config.n_layer
    same = [gptviz.intervene(point("attn.weights", l), lambda w: w) for l in range(L)]
    return gptviz.trace(model, ids[0], interventions=same)


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_rebuilt_maps_and_logits_are_bit_identical_in_every_family(tmp_path, kind):
    hf = hf_random_decoder(kind)
    hf.save_pretrained(tmp_path)
    model = gptviz.load(tmp_path).model
    ids = torch.randint(0, 150, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    t = gptviz.trace(model, ids[0])
    seen = {}

    def keep(l):
        def hook(mod, args, out):
            seen[l] = out[0].clone()  # returns None: the output stays as it is

        return hook

    handles = [b.resid_mid.register_forward_hook(keep(l)) for l, b in enumerate(model.transformer.h)]
    with torch.no_grad():
        assert torch.equal(t.tensor("logits"), model(ids)[0])
    for h in handles:
        h.remove()
    assert len(seen) == model.config.n_layer
    for l, value in seen.items():  # rebuilt as resid_pre + attn.out, as the plain forward summed them
        assert not t.held(point("resid_mid", l)) and torch.equal(t.tensor(point("resid_mid", l)), value)
    kept = _explicit_maps(model, ids)
    # from the explicit run's own q and k, with the batch axis of one that a capture holds them with
    rec = _Recorder(tensors={n: kept.tensor(n)[None] for n in kept.names if n.endswith((".attn.q", ".attn.k"))})
    rebuilt = attention_maps(rec, model, PROMPT_LEN)
    for l in range(model.config.n_layer):
        for site in ("attn.scores", "attn.weights"):
            name = point(site, l)
            assert kept.held(name) and not t.held(name)
            assert torch.equal(rebuilt[name]()[0], kept.tensor(name)), name
        mask = point("attn.mask", l)
        assert torch.equal(rebuilt[mask]()[0], kept.tensor(mask)) and not t.held(mask)


@pytest.mark.parametrize(
    "asked",
    [["logits"], ["blocks.*.attn.weights", "blocks.*.attn.mask"], ["blocks.1.resid_mid"], ["blocks.0.mlp.out"]],
)
def test_answerable_names_are_what_the_held_values_give(model, asked):
    """capture.answerable: asking for it holds no more than asking for `asked`, and every name in it is
    answered with the full run's values."""
    full = gptviz.trace(model, IDS)
    wanted = select(asked, 2)
    more = answerable(wanted, 2)
    assert wanted <= more
    part, wider = gptviz.trace(model, IDS, names=asked), gptviz.trace(model, IDS, names=sorted(more))
    assert wider.nbytes == part.nbytes
    for name in more:
        assert torch.equal(wider.tensor(name), full.tensor(name)), name


def test_answerable_gives_the_scores_from_the_weights_and_the_logits_from_ln_f():
    assert answerable({"blocks.0.attn.weights", "blocks.0.attn.mask"}, 1) == {
        "blocks.0.attn.q",
        "blocks.0.attn.k",
        "blocks.0.attn.mask",
        "blocks.0.attn.scores",
        "blocks.0.attn.weights",
    }
    assert answerable({"logits"}, 1) == {"logits", "ln_f"}
    assert answerable({"blocks.0.resid_mid"}, 1) == {  # from resid_pre and z, as the Trace rebuilds them
        "blocks.0.resid_pre",
        "blocks.0.attn.z",
        "blocks.0.attn.out",
        "blocks.0.resid_mid",
        "blocks.0.mlp.in",
        "blocks.0.mlp.hidden",
        "blocks.0.mlp.out",  # through mlp.in and mlp.hidden, each rebuilt in turn
    }


def test_in_forward_order_sorts_as_the_forward_order_key():
    """A Trace's names come out in forward order, seen before or not (a layer number the model never had)."""
    names = contract_names(12) + ["blocks.123456.attn.q", "blocks.99.mlp.out"]
    shuffled = names[:]
    random.Random(0).shuffle(shuffled)
    assert in_forward_order(shuffled) == sorted(shuffled, key=forward_order)
    assert in_forward_order(shuffled) == sorted(shuffled, key=forward_order)  # now every key is remembered
    assert in_forward_order(["logits", "blocks.10.resid_pre", "blocks.9.resid_post", "embed"]) == [
        "embed",
        "blocks.9.resid_post",
        "blocks.10.resid_pre",
        "logits",
    ]
