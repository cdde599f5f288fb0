"""Interventions (gptviz.ablate, patch, intervene): checked against Hugging Face's GPT-2 edited
through its own hooks at the same place, and for what an edit must and must not change."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from conftest import tiny_model
from hf_helpers import hf_random

import gptviz
from gptviz.interventions import InterventionError

transformers = pytest.importorskip("transformers")

transformers.logging.set_verbosity_error()
CLEAN = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
CORRUPT = [3, 1, 4, 1, 7, 9, 2, 6, 5, 3, 5]  # one token changed, at position 4
P = gptviz.point
CLOSE = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(hf, ours): the same random weights, ours loaded from HF's own saved files."""
    hf = hf_random()
    path = tmp_path_factory.mktemp("hf")
    hf.save_pretrained(path)
    return hf, gptviz.load(path).model


def hf_logits(hf, ids, pre_hooks=()) -> torch.Tensor:
    """HF's logits [T, V] with forward pre-hooks (module, fn(args) -> args) in place for this run."""
    handles = [m.register_forward_pre_hook(fn) for m, fn in pre_hooks]
    try:
        with torch.no_grad():
            return hf(torch.tensor([ids])).logits[0]
    finally:
        for h in handles:
            h.remove()


def head_edit(hf, layer, edit):
    """A pre-hook on c_proj's input (the heads merged, [B, T, H·D]) that edits it per head: [B, H, T, D]."""
    H = hf.config.n_head

    def hook(mod, args):
        x = args[0]
        B, T, C = x.shape
        z = x.view(B, T, H, C // H).transpose(1, 2)
        z = edit(z.clone())
        return (z.transpose(1, 2).reshape(B, T, C), *args[1:])

    return hf.transformer.h[layer].attn.c_proj, hook


def test_zero_head_ablation_matches_hugging_face(pair):
    hf, model = pair

    def zero(z):
        z[:, [0, 2]] = 0
        return z

    ours = gptviz.trace(model, CLEAN, interventions=[gptviz.ablate("blocks.1.attn.z", heads=[0, 2])])
    theirs = hf_logits(hf, CLEAN, [head_edit(hf, 1, zero)])
    torch.testing.assert_close(ours.tensor("logits"), theirs, **CLOSE)
    assert not torch.allclose(theirs, hf_logits(hf, CLEAN), atol=1e-3)  # the ablation did something


def test_mean_head_ablation_at_some_positions_matches_hugging_face(pair):
    hf, model = pair

    def mean(z):  # the head's mean over every position of the prompt, written at positions 2 and 7
        z[:, 3, [2, 7]] = z[:, 3].mean(dim=1, keepdim=True)
        return z

    iv = gptviz.ablate("blocks.2.attn.z", heads=[3], positions=[2, 7], how="mean")
    ours = gptviz.trace(model, CLEAN, interventions=[iv])
    theirs = hf_logits(hf, CLEAN, [head_edit(hf, 2, mean)])
    torch.testing.assert_close(ours.tensor("logits"), theirs, **CLOSE)
    assert not torch.allclose(theirs, hf_logits(hf, CLEAN), atol=1e-3)


def test_residual_patch_at_one_position_matches_hugging_face(pair):
    hf, model = pair
    clean = gptviz.trace(model, CLEAN)
    seen = {}

    def keep(mod, args):  # the block's input: the residual stream entering block 1
        seen["x"] = args[0].clone()

    hf_logits(hf, CLEAN, [(hf.transformer.h[1], keep)])

    def put(mod, args):
        x = args[0].clone()
        x[:, 4] = seen["x"][:, 4]
        return (x, *args[1:])

    theirs = hf_logits(hf, CORRUPT, [(hf.transformer.h[1], put)])
    ours = gptviz.trace(model, CORRUPT, interventions=[gptviz.patch("blocks.1.resid_pre", clean, positions=[4])])
    torch.testing.assert_close(ours.tensor("logits"), theirs, **CLOSE)
    torch.testing.assert_close(ours.tensor("blocks.1.resid_pre")[4], seen["x"][0, 4], **CLOSE)
    assert not torch.allclose(theirs, hf_logits(hf, CORRUPT), atol=1e-3)


def test_arbitrary_intervene_matches_hugging_face(pair):
    hf, model = pair

    def swap_and_scale(z):  # [H, T, D] as the Trace holds it: heads 0 and 1 swapped, head 3 reversed in time
        out = z.clone()
        out[0], out[1] = z[1], z[0] * 1.5
        out[3] = z[3].flip(0)
        return out

    ours = gptviz.trace(model, CLEAN, interventions=[gptviz.intervene("blocks.0.attn.z", swap_and_scale)])
    theirs = hf_logits(hf, CLEAN, [head_edit(hf, 0, lambda z: torch.stack([swap_and_scale(r) for r in z]))])
    torch.testing.assert_close(ours.tensor("logits"), theirs, **CLOSE)
    torch.testing.assert_close(
        ours.tensor("blocks.0.attn.z"), swap_and_scale(gptviz.trace(model, CLEAN).tensor("blocks.0.attn.z"))
    )


def test_a_patch_at_p_leaves_earlier_positions_exactly_unchanged():
    model = tiny_model(n_layer=3, n_head=4, n_embd=32, vocab_size=13)
    clean, corrupt = gptviz.trace(model, CLEAN), gptviz.trace(model, CORRUPT)
    for p in (4, 6, 9):  # from position 4 on the two prompts differ
        edited = gptviz.trace(model, CORRUPT, interventions=[gptviz.patch("blocks.1.resid_pre", clean, positions=[p])])
        for name in ("blocks.1.resid_pre", "blocks.2.attn.z", "blocks.2.resid_post", "logits"):
            tok = 1 if name.endswith("attn.z") else 0  # z is [H, T, D]
            a, b = np.moveaxis(edited[name], tok, 0), np.moveaxis(corrupt[name], tok, 0)
            np.testing.assert_array_equal(a[:p], b[:p])
            assert not np.array_equal(a[p:], b[p:]), name


def test_ablating_a_head_changes_the_logits_and_nothing_before_its_layer():
    model = tiny_model(n_layer=3, n_head=4, n_embd=32, vocab_size=13)
    plain = gptviz.trace(model, CLEAN)
    edited = gptviz.trace(model, CLEAN, interventions=[gptviz.ablate("blocks.1.attn.z", heads=[2])])
    for name in ("embed", "blocks.0.resid_post", "blocks.1.resid_pre", "blocks.1.attn.q", "blocks.1.attn.weights"):
        np.testing.assert_array_equal(edited[name], plain[name])
    z = edited["blocks.1.attn.z"]
    assert (z[2] == 0).all() and np.array_equal(z[[0, 1, 3]], plain["blocks.1.attn.z"][[0, 1, 3]])
    assert np.abs(edited["logits"] - plain["logits"]).max() > 1e-4
    assert edited.interventions == (gptviz.ablate("blocks.1.attn.z", heads=[2]),)
    assert plain.interventions == ()


def test_the_source_trace_is_unchanged_after_a_patch():
    model = tiny_model()
    clean = gptviz.trace(model, CLEAN)
    before = {name: clean[name].copy() for name in clean}
    for site in ("resid_pre", "attn.z", "mlp.out", "attn.weights"):
        gptviz.trace(model, CORRUPT, interventions=[gptviz.patch(P(site, 1), clean, positions=[4, 5])])
    gptviz.trace(model, CLEAN, interventions=[gptviz.ablate("blocks.0.mlp.out", how=3.0)])
    assert list(clean) == list(before) and clean.interventions == ()
    for name, a in before.items():
        np.testing.assert_array_equal(clean[name], a, err_msg=name)


def sharp(model):
    """Larger q and k weights, so attention is far from uniform (a random init's is nearly uniform)."""
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight[: 2 * model.config.n_embd] *= 20
    return model


def test_uniform_weights_give_z_as_their_average_of_v():
    model = sharp(tiny_model(n_layer=2, n_head=2, n_embd=16))

    def uniform(w):  # equal weight on every key the query may read
        allowed = torch.ones_like(w).tril()
        return allowed / allowed.sum(-1, keepdim=True)

    edited = gptviz.trace(model, CLEAN, interventions=[gptviz.intervene("blocks.1.attn.weights", uniform)])
    w, v = edited.tensor("blocks.1.attn.weights"), edited.tensor("blocks.1.attn.v")
    T = len(CLEAN)
    torch.testing.assert_close(w[0, 3], torch.tensor([0.25] * 4 + [0.0] * (T - 4)))
    torch.testing.assert_close(edited.tensor("blocks.1.attn.z"), w @ v, atol=1e-6, rtol=1e-5)
    cum = v.cumsum(1) / torch.arange(1, T + 1).view(1, T, 1)  # by hand: the running mean of v
    torch.testing.assert_close(edited.tensor("blocks.1.attn.z"), cum, atol=1e-6, rtol=1e-5)
    # the layer that was not edited keeps its usual maps; the edited run is not the plain one
    plain = gptviz.trace(model, CLEAN)
    np.testing.assert_array_equal(edited["blocks.0.attn.weights"], plain["blocks.0.attn.weights"])
    assert np.abs(edited["blocks.1.attn.z"] - plain["blocks.1.attn.z"]).max() > 1e-3
    assert not np.array_equal(edited["logits"], plain["logits"])


def test_a_mask_edit_switches_to_the_explicit_path_and_lets_position_0_see_the_future():
    model = tiny_model()
    plain = gptviz.trace(model, CLEAN)
    edited = gptviz.trace(model, CLEAN, interventions=[gptviz.ablate("blocks.0.attn.mask", how=1)])
    assert edited["blocks.0.attn.mask"].all() and not plain["blocks.0.attn.mask"].all()
    assert (edited["blocks.0.attn.weights"][:, 0, 1:] > 0).all()  # no longer causal
    assert np.abs(edited["logits"][0] - plain["logits"][0]).max() > 1e-4


def test_scores_edit_on_heads_softmaxes_the_edited_scores():
    model = tiny_model()
    edited = gptviz.trace(model, CLEAN, interventions=[gptviz.ablate("blocks.1.attn.scores", heads=[1])])
    w = edited["blocks.1.attn.weights"][1]
    T = len(CLEAN)
    expected = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]  # zero scores: uniform over allowed keys
    np.testing.assert_allclose(w, expected, atol=1e-6)
    assert (edited["blocks.1.attn.scores"][1] == 0).all()


def test_model_level_points_and_composition_in_order():
    model = tiny_model()
    edited = gptviz.trace(
        model,
        CLEAN,
        interventions=[gptviz.ablate("logits", positions=[-1], how=2.0), gptviz.intervene("logits", lambda x: x * 3)],
    )
    assert (edited["logits"][-1] == 6.0).all()
    np.testing.assert_allclose(edited["logits"][:-1], gptviz.trace(model, CLEAN)["logits"][:-1] * 3, rtol=1e-6)


def _run(model, ivs, out, i, barrier, repeats=5):
    barrier.wait()
    for _ in range(repeats):
        out[i].append(gptviz.trace(model, CLEAN, interventions=ivs)["logits"].copy())


def test_two_threads_one_edited_one_plain_on_a_shared_model():
    model = tiny_model(n_layer=3, n_head=4, n_embd=32, vocab_size=13)
    edits = [gptviz.ablate("blocks.0.attn.z", heads=[0, 1, 2, 3]), gptviz.ablate("blocks.2.attn.weights", how=0.1)]
    alone_plain = gptviz.trace(model, CLEAN)["logits"]
    alone_edited = gptviz.trace(model, CLEAN, interventions=edits)["logits"]
    with torch.no_grad():
        bare = model(torch.tensor([CLEAN]))[0].numpy()
    assert np.abs(alone_plain - alone_edited).max() > 1e-3
    for _ in range(3):
        out, barrier = {0: [], 1: []}, threading.Barrier(2)
        threads = [
            threading.Thread(target=_run, args=(model, (), out, 0, barrier)),
            threading.Thread(target=_run, args=(model, edits, out, 1, barrier)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(out[0]) == len(out[1]) == 5
        for plain, edited in zip(out[0], out[1]):
            np.testing.assert_array_equal(plain, alone_plain)
            np.testing.assert_array_equal(edited, alone_edited)
    np.testing.assert_array_equal(alone_plain, bare)  # and the hooks left the model as it was


BAD = [
    (lambda: gptviz.ablate("blocks.0.resid_pre", heads=[0]), "no head axis"),
    (lambda: gptviz.ablate("blocks.0.attn.zz"), "not a contract name"),
    (lambda: gptviz.ablate("blocks.0.attn.z", how="median"), "how must be"),
    (lambda: gptviz.ablate("blocks.0.attn.z", how=float("nan")), "finite"),
    (lambda: gptviz.ablate("blocks.0.attn.z", heads=[True]), "integers"),
    (lambda: gptviz.ablate("blocks.0.attn.z", heads=[-1]), "start at 0"),
    (lambda: gptviz.ablate("blocks.0.attn.z", positions=[]), "empty"),
    (lambda: gptviz.ablate("blocks.0.attn.mask", how="mean"), "True/False"),
    (lambda: gptviz.intervene("blocks.0.attn.z", 3), "function"),
    (lambda: gptviz.patch("blocks.0.attn.z", {"x": 1}), "source Trace"),
]


@pytest.mark.parametrize("make,message", BAD, ids=[m for _, m in BAD])
def test_bad_interventions_are_refused_when_made(make, message):
    with pytest.raises(InterventionError, match=message):
        make()


def test_bad_interventions_are_refused_when_run():
    model = tiny_model()  # 2 layers, 2 heads, T = 11 here
    short = gptviz.trace(model, CLEAN[:5])
    runs = [
        ([gptviz.ablate("blocks.2.attn.z")], "2 layers"),
        ([gptviz.ablate("blocks.0.attn.z", heads=[2])], "no head 2"),
        ([gptviz.ablate("blocks.0.mlp.out", positions=[11])], "no position 11"),
        ([gptviz.patch("blocks.0.resid_pre", short)], "same length"),
        ([gptviz.intervene("blocks.0.attn.z", lambda z: z[0])], "returned shape"),
        ([gptviz.intervene("blocks.0.attn.z", lambda z: "x")], "not a tensor"),
        (["blocks.0.attn.z"], "gptviz.ablate"),
    ]
    for ivs, message in runs:
        with pytest.raises(InterventionError, match=message):
            gptviz.trace(model, CLEAN, interventions=ivs)
    # a refused run leaves no hook behind
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert issubclass(InterventionError, gptviz.GptvizError)
