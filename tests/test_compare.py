"""gptviz.analysis.compare: two Traces of the same model shape, A − B."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.analysis.compare import (
    CompareError,
    attention_change,
    attention_difference,
    check_comparable,
    first_difference,
    head_score_change,
    kl_divergence,
    loss_comparison,
    next_token_divergence,
)
from gptviz.analysis.heads import SCORES

IDS_A = [1, 5, 9, 2, 7, 3, 8, 4, 6, 2]
IDS_B = [1, 5, 9, 2, 0, 3, 8, 4, 6, 2]  # differs at position 4 only


@pytest.fixture(scope="module")
def pair():
    model = tiny_model(seed=3)
    return model, gptviz.trace(model, IDS_A), gptviz.trace(model, IDS_B)


def test_a_trace_against_itself_is_zero_everywhere(pair):
    model, a, _ = pair
    again = gptviz.trace(model, IDS_A)
    for layer in range(a.n_layer):
        assert np.array_equal(attention_difference(a, again, layer), np.zeros_like(a[f"blocks.{layer}.attn.weights"]))
    assert (attention_change(a, again)[["max_abs_diff", "mean_abs_diff", "row_tv"]].to_numpy() == 0).all()
    heads = head_score_change(a, again)
    assert (heads[[f"{s}_change" for s in SCORES]].to_numpy() == 0).all()
    kl = next_token_divergence(a, again)
    assert (kl["kl_ab"] == 0).all() and (kl["kl_ba"] == 0).all()
    assert (loss_comparison(a, again)["change"] == 0).all()
    assert first_difference(a, again) is None


def test_two_prompts_differ_where_the_tokens_differ_and_after(pair):
    _, a, b = pair
    assert first_difference(a, b) == 4
    kl = next_token_divergence(a, b)["kl_ab"].to_numpy()
    assert np.allclose(kl[:4], 0.0, atol=1e-12)  # causal: positions before 4 cannot see the change
    assert (kl[4:] > 1e-9).all()
    for layer in range(a.n_layer):
        d = attention_difference(a, b, layer)  # [H, T, T]
        assert np.allclose(d[:, :4], 0.0, atol=1e-7)  # query rows before the change are untouched
        assert np.abs(d[:, 4:]).max() > 1e-4
    loss = loss_comparison(a, b)
    assert list(loss["position"]) == list(range(1, len(IDS_A)))
    early = loss[loss["position"] <= 3]  # predicted from positions 0..2: the same context and target
    assert np.allclose(early["change"], 0.0, atol=1e-12)
    assert loss.loc[loss["position"] == 4, "change"].abs().item() > 0  # another target token


def test_kl_against_a_hand_computation():
    la = np.array([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]])
    lb = np.array([[2.0, 1.0, 0.0], [3.0, 0.0, 0.0]])
    pa = np.exp(la) / np.exp(la).sum(-1, keepdims=True)
    pb = np.exp(lb) / np.exp(lb).sum(-1, keepdims=True)
    by_hand = [sum(pa[r, i] * np.log(pa[r, i] / pb[r, i]) for i in range(3)) for r in range(2)]
    got = kl_divergence(la, lb)
    assert np.allclose(got, by_hand, rtol=1e-12)
    # [0, 1, 2] vs its reverse: (e^2 - 1) / (1 + e + e^2) * 2 nats, worked out on paper
    assert got[0] == pytest.approx(2 * (np.e**2 - 1) / (1 + np.e + np.e**2), rel=1e-12)
    assert got[1] == 0.0
    assert np.allclose(kl_divergence(torch.tensor(la), torch.tensor(lb)), by_hand)


def test_kl_of_the_traces_equals_torch_kl_div(pair):
    _, a, b = pair
    la, lb = torch.tensor(a["logits"]).double(), torch.tensor(b["logits"]).double()
    ref = torch.nn.functional.kl_div(lb.log_softmax(-1), la.log_softmax(-1), log_target=True, reduction="none")
    assert np.allclose(next_token_divergence(a, b)["kl_ab"], ref.sum(-1).numpy(), atol=1e-12)


def test_two_checkpoints_of_one_shape_and_head_score_changes(pair):
    model, a, _ = pair
    other = tiny_model(seed=4)
    b = gptviz.trace(other, IDS_A)
    heads = head_score_change(a, b)
    sa, sb = gptviz.head_scores(a), gptviz.head_scores(b)
    assert np.allclose(heads["induction_change"], sb["induction"] - sa["induction"])
    assert np.allclose(heads["previous_token_a"], sa["previous_token"])
    assert len(heads) == model.config.n_layer * model.config.n_head


@pytest.mark.parametrize(
    "other",
    [
        dict(ids=IDS_A[:-1]),  # another length
        dict(model=dict(n_layer=3)),  # another depth
        dict(model=dict(n_head=4)),  # other heads
    ],
)
def test_traces_of_other_shapes_are_refused_with_a_sentence(pair, other):
    _, a, _ = pair
    model = tiny_model(seed=3, **other.get("model", {}))
    b = gptviz.trace(model, other.get("ids", IDS_A))
    with pytest.raises(CompareError, match="same"):
        check_comparable(a, b)
    with pytest.raises(CompareError):
        loss_comparison(a, b)
