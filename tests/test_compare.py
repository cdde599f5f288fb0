"""gptviz.analysis.compare: two Traces of the same model shape, A − B."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.analysis import map_blocks
from gptviz.analysis.attention import attention_mask, attention_row, layer_weights
from gptviz.analysis.blocks import block_mean
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


WINDOWED = dict(pos_encoding="rotary", n_head=4, n_kv_head=2, n_embd=32, sliding_window=5, layer_types="lg")
LONG_A = [(7 * i + 3) % 11 for i in range(37)]
LONG_B = LONG_A[:20] + [(5 * i + 1) % 11 for i in range(17)]  # differs from position 20 on


@pytest.mark.parametrize("overrides", [{}, WINDOWED], ids=["gpt2", "gqa and a window"])
def test_the_change_per_head_made_in_bands_equals_the_whole_maps(monkeypatch, overrides):
    """attention_change, a band of query rows at a time (a few rows each here: every band boundary), gives
    what the whole [H, T, T] maps give by the definition, worked out with NumPy."""
    monkeypatch.setattr(map_blocks, "BAND_CELLS", 4 * 3 * 37)
    model = tiny_model(block_size=64, **overrides)
    a, b = gptviz.trace(model, LONG_A), gptviz.trace(model, LONG_B)
    got = attention_change(a, b)
    T = len(LONG_A)
    for layer in range(2):
        d = np.abs(a[f"blocks.{layer}.attn.weights"].astype(np.float64) - b[f"blocks.{layer}.attn.weights"])
        rows = got[got["layer"] == layer]
        np.testing.assert_allclose(rows["max_abs_diff"], d.max(axis=(1, 2)), atol=1e-6)
        np.testing.assert_allclose(rows["mean_abs_diff"], d.sum(axis=(1, 2)) / (T * (T + 1) / 2), atol=1e-6)
        np.testing.assert_allclose(rows["row_tv"], 0.5 * d.sum(-1).mean(-1), atol=1e-6)
    assert (got["max_abs_diff"] > 1e-5).all()  # the maps do differ: nothing passes as 0


@pytest.mark.parametrize("overrides", [{}, WINDOWED], ids=["gpt2", "gqa and a window"])
@pytest.mark.parametrize("side", [1, 4])
def test_difference_blocks_equal_the_block_means_of_the_whole_difference(monkeypatch, overrides, side):
    """A − B in blocks, made from both runs' bands, equals the NaN-aware block means of the whole
    difference with A's masked cells left out, as the Compare page drew it from [T, T] maps."""
    monkeypatch.setattr(map_blocks, "BAND_CELLS", 4 * 2 * 37)
    model = tiny_model(block_size=64, **overrides)
    a, b = gptviz.trace(model, LONG_A), gptviz.trace(model, LONG_B)
    for layer in range(2):
        whole = attention_difference(a, b, layer).astype(np.float64)  # [H, T, T]
        whole[:, ~attention_mask(a, layer)] = np.nan
        got = map_blocks.difference_blocks(a, b, layer, side, heads=[1, 0])
        for i, head in enumerate((1, 0)):
            want = block_mean(whole[head], -(-len(LONG_A) // side))[0] if side > 1 else whole[head]
            np.testing.assert_array_equal(np.isnan(got.means[i]), np.isnan(want))
            np.testing.assert_allclose(got.means[i], want, atol=1e-6, equal_nan=True)
        assert np.nanmax(np.abs(got.means)) > 1e-5


def test_one_querys_row_equals_its_row_of_the_whole_map():
    model = tiny_model(block_size=64, **WINDOWED)
    t = gptviz.trace(model, LONG_A)
    for layer in range(2):
        whole = layer_weights(t, layer)  # masked cells NaN
        for query in (0, 4, 20, 36):
            row = attention_row(t, layer, 2, query)
            np.testing.assert_array_equal(np.isnan(row), np.isnan(whole[2, query]))
            np.testing.assert_allclose(row, whole[2, query], atol=1e-6, equal_nan=True)
