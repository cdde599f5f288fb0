"""The classroom's computations: the seeds' worked examples reproduce the numbers the seeds print
(to the digits they print), edits change the outputs as a hand computation says, the mask switch
shows the leak; the step-by-step walk has the Trace's shapes, and every value it recomputes agrees
with what the forward pass captured downstream of it."""

from __future__ import annotations

import math
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import VARIANTS, tiny_model, variant_id

import gptviz
from gptviz.analysis import walkthrough, worked
from gptviz.names import point

ROOT = Path(__file__).resolve().parents[1]


# --- seed 000: the tiny NumPy attention head -----------------------------------------------------
def test_toy_attention_prints_the_seeds_numbers():
    r = worked.toy_attention(**worked.TOY_ATTENTION)
    # The seed prints (float32): weights rows 1 / 0.49939896 0.50060104 / 0.33337261 0.3332312 0.33339619
    printed = np.array([[1, 0, 0], [0.49939896, 0.50060104, 0], [0.33337261, 0.3332312, 0.33339619]])
    assert np.allclose(r["weights"], printed, atol=5e-7)  # float64 here, float32 there: last digit may move
    assert np.array_equal(np.round(r["weights"], 4), [[1, 0, 0], [0.4994, 0.5006, 0], [0.3334, 0.3332, 0.3334]])
    assert np.allclose(r["Q"], [[0.01, 0.07], [0.11, 0.05], [-0.01, 0.01]], atol=1e-12)
    assert np.allclose(r["K"], [[0.07, 0.07], [0.11, 0.05], [0.0, 0.01]], atol=1e-12)
    assert np.allclose(r["V"], [[0.05, 0.07], [0.07, 0.05], [-0.01, 0.03]], atol=1e-12)
    out = [[0.05, 0.07], [0.06001202, 0.05998798], [0.03666085, 0.04999953]]
    assert np.allclose(r["output"], out, atol=5e-8)
    assert r["future_mass"] == 0.0
    assert np.all(r["weights"][np.triu_indices(3, 1)] == 0.0)  # exactly zero, not small


def test_toy_mask_off_leaks_what_a_hand_computation_says():
    d = worked.TOY_ATTENTION
    r = worked.toy_attention(**d, causal=False)
    # By hand: q_i·k_j / √2 from the seed's Q and K, then each row's share on keys j > i.
    Q = [[0.01, 0.07], [0.11, 0.05], [-0.01, 0.01]]
    K = [[0.07, 0.07], [0.11, 0.05], [0.0, 0.01]]
    s = [[(Q[i][0] * K[j][0] + Q[i][1] * K[j][1]) / math.sqrt(2) for j in range(3)] for i in range(3)]
    e = [[math.exp(x) for x in row] for row in s]
    hand = (e[0][1] + e[0][2]) / sum(e[0]) + e[1][2] / sum(e[1])
    assert r["future_mass"] == pytest.approx(hand, abs=1e-12)
    assert r["future_mass"] == pytest.approx(0.9976, abs=5e-5)  # almost a whole row's worth: scores are tiny
    assert worked.toy_attention(**d, causal=True)["future_mass"] == 0.0


def test_editing_the_toy_inputs_recomputes_every_step():
    d = dict(worked.TOY_ATTENTION)
    # Zero query weights: every score is 0, so each query spreads evenly over the keys it may read,
    # and the output is the running mean of V's rows. Mask off: rows 0 and 1 put 2/3 and 1/3 on the future.
    d["Wq"] = np.zeros((4, 2))
    on, off = worked.toy_attention(**d), worked.toy_attention(**d, causal=False)
    V = np.array(worked.TOY_ATTENTION["X"]) @ np.array(worked.TOY_ATTENTION["Wv"])
    assert np.allclose(on["weights"], [[1, 0, 0], [1 / 2, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-15)
    assert np.allclose(on["output"], [V[0], V[:2].mean(0), V.mean(0)], atol=1e-15)
    assert off["future_mass"] == pytest.approx(2 / 3 + 1 / 3, abs=1e-15)
    assert on["future_mass"] == 0.0
    # One cell of X: token 2's first feature 0 -> 1 adds Wv's first row to V[2] = [-0.01, 0.03].
    X = np.array(worked.TOY_ATTENTION["X"])
    X[2, 0] = 1.0
    assert np.allclose(worked.toy_attention(X, d["Wq"], d["Wk"], d["Wv"])["V"][2], [0.09, 0.03], atol=1e-12)


# --- seed 004: "Order shipped from" -> "hub" -----------------------------------------------------
def test_support_reply_prints_the_seeds_numbers():
    x = worked.embed(**worked.SUPPORT_EMBED, ids=worked.SUPPORT_IDS)
    assert x.shape == (3, 4)
    assert np.array_equal(np.round(x[-1], 2), [0.1, 0.3, 0.8, 1.1])
    raw = worked.raw_scores(worked.SUPPORT_QKV["q"], worked.SUPPORT_QKV["k"])
    assert raw.shape == (3, 3) and np.array_equal(np.round(raw[2], 2), [0.2, 1.28, 0.96])
    s = worked.scaling(worked.SCALING_SCORES, worked.SCALING_HEAD_DIM)
    assert np.array_equal(np.round(s["unscaled_weights"], 3), [0.964, 0.036, 0.0])
    assert np.array_equal(np.round(s["scaled_scores"], 3), [1.55, 1.138, 0.475])
    assert np.array_equal(np.round(s["scaled_weights"], 3), [0.499, 0.33, 0.17])
    m = worked.masked_softmax(worked.MASK_SCORES)
    printed = [[1, 0, 0, 0], [0.182, 0.818, 0, 0], [0.067, 0.111, 0.821, 0], [0.213, 0.078, 0.129, 0.579]]
    assert np.array_equal(np.round(m["weights"], 3), printed)
    assert m["future_mass"] == 0.0
    lk = worked.leak(worked.LEAK_SCORES)
    assert f"{lk['unmasked_mass']:.3f}" == "1.940" and f"{lk['unmasked_mass']:.4f}" == "1.9404"
    assert lk["masked_mass"] == 0.0
    ff = worked.feed_forward(**worked.FFN)
    assert ff["hidden"].shape == (3, 6) and ff["output"].shape == (3, 4)
    assert np.array_equal(np.round(ff["output"][-1], 3), [0.302, 0.468, 0.386, 0.469])
    ln = worked.layer_norm(worked.NORM_INPUT)
    assert np.array_equal(np.round(ln["normed_mean"], 6), [0, 0])
    assert np.array_equal(np.round(ln["normed_var"], 4), [1.0, 0.9998])
    assert ln["residual"].shape == (2, 4)
    lg = worked.logits(**worked.LOGITS_INPUT, vocab=worked.LOGIT_VOCAB)
    assert len(lg) == 6 and lg["token"][0] == "hub"
    assert f"{lg['probability'][0]:.3f}" == "0.360" and f"{lg['probability'][0]:.4f}" == "0.3598"


def test_editing_the_support_reply_follows_a_hand_computation():
    # Leak: equal scores everywhere. Without the mask row 0 puts 2/3 on the future, row 1 puts 1/3.
    lk = worked.leak(np.ones((3, 3)))
    assert lk["unmasked_mass"] == pytest.approx(1.0, abs=1e-15) and lk["masked_mass"] == 0.0
    # Mask on a 4 x 4: row 3's future is empty whatever it holds; a huge future score in row 0 is hidden.
    scores = np.array(worked.MASK_SCORES)
    scores[0, 3] = 100.0
    m = worked.masked_softmax(scores)
    assert m["weights"][0, 0] == 1.0 and m["future_mass"] == 0.0
    assert worked.masked_softmax(scores, causal=False)["weights"][0, 3] == pytest.approx(1.0, abs=1e-40)
    # Logits: the hidden vector [0, 1, 0, 0] picks row 1 of W, which scores only "warehouse" (logit 1).
    lg = worked.logits([[0.0, 1.0, 0.0, 0.0]], worked.LOGITS_INPUT["W"], worked.LOGIT_VOCAB)
    assert lg["token"][0] == "warehouse"
    assert lg["probability"][0] == pytest.approx(math.e / (5 + math.e), abs=1e-15)
    # Layer norm of 1, 2, 3, 4: mean 2.5, variance 1.25.
    ln = worked.layer_norm([[1.0, 2.0, 3.0, 4.0]])
    assert np.allclose(ln["normed"], (np.array([1, 2, 3, 4]) - 2.5) / math.sqrt(1.25 + 1e-5), atol=1e-15)
    # FFN: input e0 keeps w1's row 0 = [1, 0, .5, 0, 0, .2] (all >= 0), then times w2:
    # 1·[.3,0,0,.1] + .5·[.2,0,.3,0] + .2·[0,.1,.2,0] = [.4, .02, .19, .1].
    ff = worked.feed_forward([[1.0, 0, 0, 0]], worked.FFN["w1"], worked.FFN["w2"])
    assert np.allclose(ff["output"], [[0.4, 0.02, 0.19, 0.1]], atol=1e-15)
    # A negative first-layer sum is cut by the ReLU: -e0 gives all zeros.
    assert np.all(worked.feed_forward([[-1.0, 0, 0, 0]], worked.FFN["w1"], worked.FFN["w2"])["output"] == 0)
    # Embedding: a position edit moves only its own token.
    pos = np.array(worked.SUPPORT_EMBED["positions"])
    pos[1, 2] = 1.0
    x = worked.embed(worked.SUPPORT_EMBED["table"], pos, worked.SUPPORT_IDS)
    assert x[1, 2] == pytest.approx(1.5) and np.array_equal(
        x[[0, 2]], worked.embed(**worked.SUPPORT_EMBED, ids=[0, 1, 2])[[0, 2]]
    )


# --- seed 002: mean and std per block, on a real model ---------------------------------------------
@torch.no_grad()
def test_block_stats_equal_a_run_through_the_blocks_by_hand():
    model = tiny_model(3)
    ids = [1, 4, 2, 9, 9, 0, 7]
    t = gptviz.trace(model, ids)
    df = worked.block_stats(t)
    assert list(df["where"]) == ["before block 0", "after block 0", "after block 1"]
    idx = torch.tensor([ids])
    x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(len(ids)))
    expect = [x]
    for block in model.transformer.h:
        x = block(x)
        expect.append(x)
    for row, e in zip(df.itertuples(), expect):
        e = e.double()
        assert row.mean == pytest.approx(float(e.mean()), abs=1e-6)
        assert row.std == pytest.approx(float(e.std(correction=0)), abs=1e-6)


# --- the step-by-step forward pass ------------------------------------------------------------------
def trace_shape(t: gptviz.Trace, step: walkthrough.Step) -> tuple[int, ...]:
    a = t[step.point]
    return a.shape if step.key == "mask" else (1, *a.shape)


@pytest.mark.parametrize("layer", [0, 1])
def test_every_step_has_the_traces_shape(layer):
    model = tiny_model(1)
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    t = gptviz.trace(model, ids)
    steps = walkthrough.forward_steps(model, t, layer)
    keys = [s.key for s in steps]
    assert keys[:3] == ["ids", "wte", "embed"] and keys[-3:] == ["ln_f", "logits", "next"]
    for s in ("ln_1", "q", "k", "v", "scores", "mask", "weights", "z", "merge", "attn_out", "resid_mid"):
        assert s in keys
    T, C, H, D, V = 9, 16, 2, 8, 11
    want = dict(ids=(1, T), wte=(1, T, C), ln_1=(1, T, C), merge=(1, T, C), mlp_hidden=(1, T, 4 * C), next=(1, V))
    for s in steps:
        assert s.shape == (1, *s.values.shape) or s.key == "mask"
        if s.point is not None:
            assert s.shape == trace_shape(t, s), s.key
            assert np.array_equal(s.values, t[s.point]), s.key
        if s.key in want:
            assert s.shape == want[s.key], s.key
        if s.notation == "(B, H, T, D)":
            assert s.shape == (1, H, T, D)
        assert len(s.notation.strip("()").split(",")) == len(s.shape), s.key
    assert {s.point for s in steps if s.point} >= {point("attn.weights", layer), point("resid_post", layer), "logits"}
    with pytest.raises(ValueError, match="blocks 0 to 1"):
        walkthrough.forward_steps(model, t, 2)


@pytest.mark.parametrize("variant", VARIANTS[::5], ids=variant_id)
@pytest.mark.parametrize("recompute", [False, True])
def test_recomputed_steps_agree_with_the_captured_values_downstream(variant, recompute):
    model = tiny_model(2, **variant)
    ids = [0, 5, 5, 2, 8, 10, 1]
    t = gptviz.trace(model, ids)
    for layer in range(2):
        s = {
            st.key: torch.from_numpy(np.array(st.values))
            for st in walkthrough.forward_steps(model, t, layer, recompute)
        }
        blk = model.transformer.h[layer]
        with torch.no_grad():
            # ln_1 -> c_attn gives back the captured q, k, v
            q, k, v = blk.attn.c_attn(s["ln_1"]).split(16, dim=-1)
            for name, x in (("q", q), ("k", k), ("v", v)):
                assert torch.allclose(x.view(7, 2, 8).transpose(0, 1), s[name], atol=1e-6), name
            # the heads' weighted sums, merged and projected, are what attention added to the stream
            assert torch.allclose(s["z"], s["weights"] @ s["v"], atol=1e-6)
            assert torch.allclose(s["resid_pre"] + s["attn_out"], s["resid_mid"], atol=1e-6)
            assert torch.allclose(blk.attn.c_proj(s["merge"]), s["attn_out"], atol=1e-6)
            # ln_2 -> MLP is what the MLP added
            assert torch.allclose(blk.mlp.c_proj(s["mlp_hidden"]), s["mlp_out"], atol=1e-6)
            assert torch.allclose(s["resid_mid"] + s["mlp_out"], s["resid_post"], atol=1e-6)
            assert torch.allclose(blk.mlp(s["ln_2"]), s["mlp_out"], atol=1e-6)
        if recompute:  # the recomputed values equal the captured ones where the Trace has them
            for key, site in (
                ("z", "attn.z"),
                ("attn_out", "attn.out"),
                ("mlp_hidden", "mlp.hidden"),
                ("mlp_out", "mlp.out"),
            ):
                if point(site, layer) in t.names:
                    assert np.allclose(s[key].numpy(), t[point(site, layer)], atol=1e-6), key
    # token embedding + positions = the captured embed; the last step's argmax is the model's prediction
    s = {st.key: st for st in walkthrough.forward_steps(model, t, 0, recompute)}
    pos = model.transformer.wpe.weight[:7] if variant["pos_encoding"] == "learned" else model.sinusoid[:7]
    assert np.allclose(s["wte"].values + pos.detach().numpy(), t["embed"], atol=1e-6)
    logits = model(torch.tensor([ids]))[0, -1]
    assert int(s["next"].values.argmax()) == int(logits.argmax()) == walkthrough.next_token(t)[0]
    assert np.allclose(s["next"].values, torch.softmax(logits.double(), -1).detach().numpy(), atol=1e-6)


def test_slices_fit_a_slide_and_sizes_are_spelled():
    model = tiny_model(1, n_embd=32, n_head=4)
    t = gptviz.trace(model, list(range(10)))
    for s in walkthrough.forward_steps(model, t, 1):
        piece = walkthrough.view_slice(s, head=3)
        assert piece.ndim == 2 and piece.shape[0] <= 6 and piece.shape[1] <= 8, s.key
    q = next(s for s in walkthrough.forward_steps(model, t, 1) if s.key == "q")
    assert np.array_equal(walkthrough.view_slice(q, head=3), t[point("attn.q", 1)][3, :6, :8])
    sizes = walkthrough.sizes(model, t)
    assert walkthrough.spelled("(B, H, T, D)", sizes) == "B = 1 · H = 4 · T = 10 · D = 8"
    assert walkthrough.spelled("(B, T, 4C)", sizes) == "B = 1 · T = 10 · 4C = 128"


# --- lesson links ---------------------------------------------------------------------------------
def test_lesson_urls_carry_the_sidebar_choices():
    lesson = worked.LESSONS[1]
    url = worked.lesson_url("attention", checkpoint="shakespeare-char", prompt=lesson["prompt"], layer=1, head=4)
    parts = urlsplit(url)
    q = parse_qs(parts.query)
    assert parts.path == "attention"
    assert q == {"checkpoint": ["shakespeare-char"], "prompt": [lesson["prompt"]], "layer": ["1"], "head": ["4"]}
    assert "\n" in q["prompt"][0]  # newlines survive the round trip


@pytest.mark.skipif(not (ROOT / "checkpoints/shakespeare-char").exists(), reason="shipped checkpoint not present")
def test_lesson_heads_show_what_they_promise():
    bundle = gptviz.load(ROOT / "checkpoints/shakespeare-char")
    prev, newline = worked.LESSONS[:2]
    ids = bundle.tokenizer.encode(prev["prompt"])
    t = gptviz.trace(bundle.model, ids)
    T = len(ids)
    w = t[point("attn.weights", prev["layer"])][prev["head"]]
    assert w[np.arange(1, T), np.arange(T - 1)].mean() > 0.6  # the cell just left of the diagonal
    others = [t[point("attn.weights", prev["layer"])][h][np.arange(1, T), np.arange(T - 1)].mean() for h in range(6)]
    assert int(np.argmax(others)) == prev["head"]
    is_nl = np.array([c == "\n" for c in newline["prompt"]])
    w = t[point("attn.weights", newline["layer"])][newline["head"]]
    first = int(np.argmax(is_nl))
    assert w[first:, is_nl].sum(1).mean() > 0.6  # share of attention on line breaks, after the first one
    assert is_nl.mean() < 0.1  # not because line breaks are most of the prompt


@pytest.mark.skipif(not (ROOT / "checkpoints/induction-2l").exists(), reason="shipped induction run not present")
def test_the_induction_lesson_head_is_an_induction_head():
    lesson = worked.LESSONS[2]
    bundle = gptviz.load(ROOT / "checkpoints" / lesson["checkpoint"])
    scores = gptviz.head_scores(gptviz.trace(bundle.model, bundle.tokenizer.encode(lesson["prompt"])))
    row = scores[(scores.layer == lesson["layer"]) & (scores["head"] == lesson["head"])].iloc[0]
    assert row["label"] == "induction" and row["induction"] > 0.4


def test_the_sharp_preset_chooses_where_the_textbook_spreads():
    soft = worked.toy_attention(**worked.TOY_ATTENTION)["weights"]
    sharp = worked.toy_attention(**worked.TOY_ATTENTION_SHARP)["weights"]
    assert soft[2].max() < 0.34  # the textbook's small weights: every row nearly even
    # by hand: scores 3·3/√2 ≈ 6.364 against 0, so weight e^6.364 / (e^6.364 + 2) on the previous token
    e = np.exp(9 / np.sqrt(2))
    assert sharp[1, 0] == pytest.approx(e / (e + 1)) and sharp[2, 1] == pytest.approx(e / (e + 2))
    assert sharp[2, 1] > 0.99


def test_growth_note_calls_only_real_drift_drifting():
    def stats(stds):
        return pd.DataFrame({"std": stds})

    healthy = worked.growth_note(stats([0.087, 0.878, 1.013, 1.199, 2.087]))  # the shipped char model
    assert "drifting" not in healthy and "normal" in healthy and "×1.15" in healthy
    drift = worked.growth_note(stats([0.1, 1.0, 3.0, 9.0, 30.0]))
    assert "drifting" in drift
    assert "blown up" in worked.growth_note(stats([0.1, 1.0, float("nan")]))
