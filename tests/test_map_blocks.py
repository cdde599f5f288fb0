"""analysis.weight_blocks: the block means the large attention figures draw, made a band of query rows
at a time from q and k, equal to block means of the whole maps worked out with NumPy; and the figures
built from them equal the figures built from the whole maps."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import tiny_model

import gptviz
from gptviz import analysis, figures
from gptviz.analysis import map_blocks
from gptviz.analysis.attention import attention_mask
from gptviz.analysis.blocks import block_mean
from gptviz.figures.style import windowed

IDS = [(7 * i + 3) % 11 for i in range(37)]


def by_hand(t, layer: int, b: int):
    """Block means of every head's whole map (masked cells NaN, left out), all-masked blocks, with NumPy."""
    w = analysis.layer_weights(t, layer)  # [H, T, T] float32, masked cells NaN
    means = np.stack([block_mean(m, -(-m.shape[0] // b))[0] if b > 1 else m for m in w])
    masked = ~attention_mask(t, layer)
    all_masked = block_mean(masked.astype(np.float32), -(-masked.shape[0] // b))[0] == 1 if b > 1 else masked
    return means, all_masked


@pytest.mark.parametrize(
    "overrides",
    [{}, dict(pos_encoding="rotary", n_head=4, n_kv_head=2, n_embd=32, sliding_window=5, layer_types="lg")],
    ids=["gpt2", "gqa and a window"],
)
@pytest.mark.parametrize("b", [1, 3, 8])
def test_blocks_equal_the_block_means_of_the_whole_maps(monkeypatch, overrides, b):
    monkeypatch.setattr(map_blocks, "BAND_CELLS", 4 * 2 * 37)  # bands of a few rows: every band boundary
    model = tiny_model(block_size=64, **overrides)
    t = gptviz.trace(model, IDS)
    for layer in range(2):
        got = analysis.weight_blocks(t, layer, b)
        means, masked = by_hand(t, layer, b)
        assert got.means.shape == means.shape and got.b == b and len(IDS) == got.T
        np.testing.assert_array_equal(np.isnan(got.means), np.isnan(means))
        np.testing.assert_allclose(got.means, means, atol=1e-6, equal_nan=True)
        assert (got.masked == masked).all() and not got.bad.any()
        assert got.window is windowed(attention_mask(t, layer))  # the caption's, with no [T, T] mask
        assert got.window is (overrides.get("layer_types", "gg")[layer] == "l")  # made so: layer 0 is local
        one = analysis.weight_blocks(t, layer, b, heads=[1])  # one head alone: the same blocks
        np.testing.assert_allclose(one.means[0], got.means[1], atol=1e-6, equal_nan=True)


def test_maps_a_run_holds_and_nan_the_model_computed():
    """An edited run holds its maps: they are read, not rebuilt; a NaN written into an allowed cell is
    `bad` in its block (painted apart), a masked cell's value is left out."""
    model = tiny_model(block_size=64)

    def spoil(w):
        w = w.clone()
        w[0, 5, 2] = float("nan")  # head 0, query 5 reads key 2: allowed ([H, T, T], no batch axis)
        w[1, 2, 9] = 0.5  # head 1, query 2, key 9: masked, whatever it holds
        return w

    t = gptviz.trace(model, IDS, interventions=[gptviz.intervene("blocks.1.attn.weights", spoil)])
    assert t.held("blocks.1.attn.weights")
    got = analysis.weight_blocks(t, 1, 4)
    assert got.bad[0, 1, 0] and got.bad.sum() == 1
    w = analysis.layer_weights(t, 1)  # masked cells NaN
    w[0, 5, 2] = np.nan
    np.testing.assert_allclose(got.means[1], block_mean(w[1], 10)[0], atol=1e-6, equal_nan=True)
    keep = np.ones_like(got.means[0], dtype=bool)
    keep[1, 0] = False  # the block with the NaN: its mean is over the other allowed cells
    np.testing.assert_allclose(got.means[0][keep], block_mean(w[0], 10)[0][keep], atol=1e-6)


def test_figures_from_blocks_equal_figures_from_whole_maps():
    model = tiny_model(block_size=64, n_layer=2, n_head=2)
    t = gptviz.trace(model, IDS)
    labels = figures.token_labels(t.tokens)
    whole = figures.layer_head_grid(
        (analysis.layer_weights(t, l) for l in range(2)), tile=8, masks=(attention_mask(t, l) for l in range(2))
    )
    blocks = figures.layer_head_grid((analysis.weight_blocks(t, l, 5) for l in range(2)), tile=8)  # 37 / 8: blocks of 5
    for a, b in zip(whole.data[:2], blocks.data[:2], strict=True):
        np.testing.assert_allclose(
            np.asarray(a.z, dtype=float), np.asarray(b.z, dtype=float), atol=1e-6, equal_nan=True
        )
    assert whole.layout.meta == blocks.layout.meta
    heads = figures.head_grid(analysis.weight_blocks(t, 0, 1), labels, layer=0)
    heads_whole = figures.head_grid(analysis.layer_weights(t, 0), labels, layer=0, mask=attention_mask(t, 0))
    for a, b in zip(heads.data, heads_whole.data, strict=True):
        np.testing.assert_allclose(
            np.asarray(a.z, dtype=float), np.asarray(b.z, dtype=float), atol=1e-6, equal_nan=True
        )
    one = figures.attention_heatmap(analysis.weight_blocks(t, 0, 1, heads=[1]), labels, mask=attention_mask(t, 0))
    one_whole = figures.attention_heatmap(analysis.attention_matrix(t, 0, 1), labels, mask=attention_mask(t, 0))
    np.testing.assert_allclose(
        np.asarray(one.data[0].z, dtype=float), np.asarray(one_whole.data[0].z, dtype=float), atol=1e-6, equal_nan=True
    )
    assert one.layout.title.text == one_whole.layout.title.text


def test_memory_is_one_band_whatever_the_prompt(monkeypatch):
    """No [H, T, T] map: the largest weights a call makes are one band of BAND_CELLS."""
    seen = []
    real = map_blocks.attention_weights

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out.numel())
        return out

    monkeypatch.setattr(map_blocks, "attention_weights", spy)
    monkeypatch.setattr(map_blocks, "BAND_CELLS", 2 * 200 * 16)
    model = tiny_model(block_size=256)
    t = gptviz.trace(model, [(5 * i) % 11 for i in range(200)])
    analysis.weight_blocks(t, 0, 16)
    assert len(seen) > 1 and max(seen) <= map_blocks.BAND_CELLS < 2 * 200 * 200


@pytest.mark.parametrize(
    "overrides",
    [{}, dict(pos_encoding="rotary", n_head=4, n_kv_head=2, n_embd=32, sliding_window=5, layer_types="lg")],
    ids=["gpt2", "gqa and a window"],
)
@pytest.mark.parametrize("kind", ["masked scores", "scores"])
def test_score_blocks_equal_the_block_means_of_the_whole_scores(monkeypatch, overrides, kind):
    """The Attention page's scores of a long prompt: block means of one head made a band of rows at a
    time, equal to the block means of the head's whole matrix (masked cells left out, or every cell
    before the mask), with the same masked blocks and caption."""
    monkeypatch.setattr(map_blocks, "BAND_CELLS", 4 * 2 * 37)  # bands of a few rows: every band boundary
    model = tiny_model(block_size=64, **overrides)
    t = gptviz.trace(model, IDS)
    b = 3
    for layer in range(2):
        for head in (0, 1):
            got = analysis.score_blocks(t, layer, b, heads=[head], kind=kind)
            whole = analysis.attention_matrix(t, layer, head, kind)  # [T, T], masked cells NaN
            means = block_mean(whole, -(-whole.shape[0] // b))[0]
            np.testing.assert_array_equal(np.isnan(got.means[0]), np.isnan(means))
            np.testing.assert_allclose(got.means[0], means, atol=1e-5, equal_nan=True)
            hidden = ~attention_mask(t, layer) if kind == "masked scores" else np.zeros_like(whole, dtype=bool)
            all_hidden = block_mean(hidden.astype(np.float32), -(-hidden.shape[0] // b))[0] == 1
            assert (got.masked[0] == all_hidden).all() and not got.bad.any()
            assert got.window is (kind == "masked scores" and windowed(attention_mask(t, layer)))
