"""Head scores and the logit lens: against the definitions worked by hand, a model built by hand, the
shipped checkpoint, and Hugging Face's GPT-2 applying its own final norm and LM head."""

from __future__ import annotations

import math
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_model
from hf_helpers import hf_random

import gptviz
from gptviz.analysis.heads import COLUMNS, LABEL_THRESHOLDS, detection_patterns, label, pattern_band

transformers = pytest.importorskip("transformers")

transformers.logging.set_verbosity_error()
SHAKESPEARE = Path(__file__).resolve().parent.parent / "checkpoints" / "shakespeare-char"
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 1, 4, 1, 5]  # repeats, so duplicate and induction cells exist


# --- head scores ------------------------------------------------------------------------------
def scores_by_hand(w: np.ndarray, ids: list[int]) -> dict[str, float]:
    """One head's [T, T] weights scored with loops, straight from the definitions."""
    T = len(ids)
    total = w.sum()
    prev = sum(w[i, i - 1] for i in range(1, T)) / total
    dup = sum(w[i, j] for i in range(T) for j in range(i) if ids[j] == ids[i]) / total
    ind = sum(w[i, j] for i in range(T) for j in range(1, i + 1) if ids[j - 1] == ids[i] and j - 1 < i) / total
    sink = np.mean([w[i, 0] for i in range(1, T)])
    self_ = np.mean([w[i, i] for i in range(T)])
    entropy = np.mean([-sum(p * math.log(p) for p in w[i] if p > 0) for i in range(T)])
    return dict(previous_token=prev, duplicate_token=dup, induction=ind, sink=sink, self=self_, entropy=entropy)


def test_columns_are_the_contract_and_one_row_per_head():
    model = tiny_model(n_layer=3, n_head=4)
    df = gptviz.head_scores(gptviz.trace(model, IDS))
    assert list(df.columns) == [
        "layer",
        "head",
        "previous_token",
        "duplicate_token",
        "induction",
        "sink",
        "self",
        "entropy",
        "label",
    ]
    assert list(zip(df["layer"], df["head"])) == [(l, h) for l in range(3) for h in range(4)]


def test_scores_equal_the_definitions_worked_by_hand_on_the_captured_weights(model):
    tr = gptviz.trace(model, IDS)
    df = gptviz.head_scores(tr)
    for l in range(model.config.n_layer):
        w = tr[gptviz.point("attn.weights", l)].astype(np.float64)
        for h in range(model.config.n_head):
            row = df[(df["layer"] == l) & (df["head"] == h)].iloc[0]
            for name, value in scores_by_hand(w[h], IDS).items():
                assert row[name] == pytest.approx(value, abs=1e-6), (l, h, name)


def test_scores_built_from_q_and_k_in_blocks_of_rows_equal_the_definitions():
    # 300 tokens: three blocks of query rows (128, 128, 44), scored from q and k without the maps
    model = tiny_model(2, n_layer=2, n_head=2, block_size=320)
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 10, 150)] * 2
    tr = gptviz.trace(model, ids)
    assert not tr.held(gptviz.point("attn.weights", 0))  # the Trace rebuilds its maps: the q, k path
    df = gptviz.head_scores(tr)
    for l in range(2):
        w = tr[gptviz.point("attn.weights", l)].astype(np.float64)
        for h in range(2):
            row = df[(df["layer"] == l) & (df["head"] == h)].iloc[0]
            for name, value in scores_by_hand(w[h], ids).items():
                assert row[name] == pytest.approx(value, abs=1e-6), (l, h, name)


def test_detection_patterns_are_transformer_lens_patterns_for_a_small_prompt():
    # tokens a b a b: TransformerLens's patterns written out cell by cell (rows = queries)
    p = {k: v.int().tolist() for k, v in detection_patterns(np.array([7, 8, 7, 8])).items()}
    assert p["previous_token"] == [[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert p["duplicate_token"] == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
    assert p["induction"] == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]


def test_each_band_of_patterns_is_the_whole_patterns_rows_it_reads():
    """The scores from q and k read the patterns a band of query rows at a time, made from the ids alone:
    each band is the whole [T, T] patterns' rows a..b-1 over keys 0..b-1, for bands that do not divide T."""
    ids = np.array([3, 1, 3, 1, 2, 3, 1, 2, 2, 3, 1])
    whole = detection_patterns(ids)
    for rows in (1, 3, 4, 11):
        for a in range(0, len(ids), rows):
            b = min(len(ids), a + rows)
            want = torch.stack([pat[a:b, :b].reshape(-1) for pat in whole.values()], dim=1).float()
            assert torch.equal(pattern_band(torch.as_tensor(ids), a, b), want), (rows, a)


def previous_token_model() -> gptviz.GPT:
    """One layer, two heads, weights set by hand. Positions are one-hot (wpe = I, wte = 0) and
    RMSNorm turns e_p into 4 e_p; head 0's query at position i is c·e_(i-1) and its key at j is e_j,
    so it reads the previous token and nothing else; head 1's q and k are zero: uniform attention."""
    cfg = gptviz.GPTConfig(
        vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=16, norm="rmsnorm", bias=False, tie_weights=False
    )
    model = gptviz.GPT(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.transformer.wpe.weight[:, :8] = torch.eye(8)
        block = model.transformer.h[0]
        block.ln_1.weight.fill_(1.0)
        block.ln_2.weight.fill_(1.0)
        model.transformer.ln_f.weight.fill_(1.0)
        w = block.attn.c_attn.weight  # [3C, C]: rows 0..15 q, 16..31 k, 32..47 v; head 0 = first 8 of each
        shift = torch.zeros(8, 8)
        shift[torch.arange(7), torch.arange(1, 8)] = 1.0  # e_i -> e_(i-1)
        w[0:8, 0:8] = 50.0 * shift
        w[16:24, 0:8] = torch.eye(8)
        w[32:48] = torch.randn(16, 16)
    return model


def test_a_hand_built_previous_token_head_is_found_and_labelled():
    ids = [1, 2, 3, 1, 2, 3, 4]  # no token repeats its neighbour: no cell is both previous and duplicate
    T = len(ids)
    tr = gptviz.trace(previous_token_model(), ids)
    w = tr["blocks.0.attn.weights"]
    np.testing.assert_allclose(w[0, 1:], np.eye(T)[:-1], atol=1e-6)  # the head is what we built
    df = gptviz.head_scores(tr).set_index("head")
    # query 0 can only read itself and the pattern has no cell in row 0: the best score is (T-1)/T
    assert df.loc[0, "previous_token"] == pytest.approx((T - 1) / T, abs=1e-6)
    assert df.loc[0, "duplicate_token"] == pytest.approx(0.0, abs=1e-6)
    assert df.loc[0, "entropy"] == pytest.approx(0.0, abs=1e-5)
    assert df.loc[0, "label"] == "previous_token"
    # the uniform head: query i spreads 1/(i+1) over keys 0..i
    n = np.arange(1, T + 1)
    assert df.loc[1, "previous_token"] == pytest.approx((1 / n[1:]).sum() / T, abs=1e-6)
    assert df.loc[1, "self"] == pytest.approx((1 / n).mean(), abs=1e-6)
    assert df.loc[1, "sink"] == pytest.approx((1 / n[1:]).mean(), abs=1e-6)
    assert df.loc[1, "entropy"] == pytest.approx(np.log(n).mean(), abs=1e-6)
    assert df.loc[1, "label"] == ""


def test_label_takes_the_highest_passing_score_and_none_below_the_threshold():
    base = dict(previous_token=0.1, duplicate_token=0.0, induction=0.0, sink=0.0, self=0.0)
    assert label(base) == ""
    assert label({**base, "previous_token": 0.4}) == "previous_token"  # the threshold itself passes
    assert label({**base, "previous_token": 0.5, "sink": 0.45}) == "previous_token"
    assert label({**base, "induction": 0.7, "sink": 0.9}) == "sink"
    assert label({**base, "sink": float("nan")}) == ""
    assert set(LABEL_THRESHOLDS) == set(COLUMNS[2:7])


def test_shipped_shakespeare_layer_0_head_3_is_a_previous_token_head():
    bundle = gptviz.load(SHAKESPEARE)
    text = "ROMEO:\nBut, soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
    df = gptviz.head_scores(gptviz.trace(bundle.model, bundle.tokenizer.encode(text), bundle.tokenizer))
    row = df[(df["layer"] == 0) & (df["head"] == 3)].iloc[0]
    assert row["label"] == "previous_token"
    assert row["previous_token"] > 0.6
    assert (df["label"] == "previous_token").sum() < len(df) / 2  # the label picks heads out, not everyone


class CountingTrace:
    """A Trace stand-in that notes, each time a layer's maps are asked for, how many earlier maps
    are still alive."""

    def __init__(self, tr):
        self.tr, self.token_ids, self.n_layer = tr, tr.token_ids, tr.n_layer
        self.refs, self.alive = [], []

    def tensor(self, name):
        self.alive.append(sum(r() is not None for r in self.refs))
        t = self.tr.tensor(name)
        self.refs.append(weakref.ref(t))
        return t


def test_one_layer_of_maps_at_a_time():
    tr = CountingTrace(gptviz.trace(tiny_model(n_layer=4), IDS))
    gptviz.head_scores(tr)
    assert tr.alive == [0, 0, 0, 0]


# --- the logit lens ---------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [{}, dict(tie_word_embeddings=False, n_layer=2)])
def test_lens_equals_hf_norm_and_head_on_hf_residuals_at_every_site(tmp_path, overrides):
    hf = hf_random(seed=1, **{"vocab_size": 41, **overrides})
    hf.save_pretrained(tmp_path / "hf")
    model = gptviz.load(tmp_path / "hf").model
    L = hf.config.n_layer
    resid, handles = {}, []
    for l, block in enumerate(hf.transformer.h):
        handles.append(block.ln_2.register_forward_pre_hook(lambda m, a, l=l: resid.__setitem__(("mid", l), a[0][0])))
    handles.append(hf.transformer.ln_f.register_forward_pre_hook(lambda m, a: resid.__setitem__("last", a[0][0])))
    try:
        with torch.no_grad():
            out = hf(torch.tensor([IDS]), output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    # HF's hidden_states: the embedding, then each block's input; its last entry is after ln_f
    theirs = [out.hidden_states[0][0]]
    for l in range(L):
        theirs += [resid[("mid", l)], out.hidden_states[l + 1][0] if l + 1 < L else resid["last"]]
    target = 7
    lens = gptviz.logit_lens(model, gptviz.trace(model, IDS), k=4, target=target)
    assert lens.sites == ["embed", *(f"blocks.{l}.{s}" for l in range(L) for s in ("resid_mid", "resid_post"))]
    assert lens.top_ids.shape == (2 * L + 1, len(IDS), 4) and lens.target_rank.shape == (2 * L + 1, len(IDS))
    for s, x in enumerate(theirs):
        with torch.no_grad():
            logits = hf.lm_head(hf.transformer.ln_f(x)).double()  # HF's own final norm and head
        probs = logits.softmax(-1)
        top = probs.topk(4, dim=-1)
        np.testing.assert_array_equal(lens.top_ids[s], top.indices.numpy(), err_msg=lens.sites[s])
        np.testing.assert_allclose(lens.top_probs[s], top.values.numpy(), atol=1e-5, err_msg=lens.sites[s])
        np.testing.assert_allclose(lens.target_prob[s], probs[:, target].numpy(), atol=1e-5)
        rank = (logits > logits[:, target : target + 1]).sum(-1).numpy()
        np.testing.assert_array_equal(lens.target_rank[s], rank, err_msg=lens.sites[s])
    torch.testing.assert_close(hf.lm_head(out.hidden_states[-1][0]), out.logits[0])  # what 'last' is


def test_each_site_uses_its_own_norm_statistics_not_the_last_layers(model):
    tr = gptviz.trace(model, IDS)
    lens = gptviz.logit_lens(model, tr, k=3)
    ln = model.transformer.ln_f
    with torch.no_grad():
        x = tr.tensor("embed")
        last = tr.tensor(f"blocks.{model.config.n_layer - 1}.resid_post")
        own = model.lm_head(ln(x)).softmax(-1)
        # the mistake: the embedding centred, but divided by the last layer's standard deviation
        borrowed = (x - x.mean(-1, keepdim=True)) / (last.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()
        wrong = model.lm_head(borrowed * ln.weight + ln.bias).softmax(-1)
    np.testing.assert_allclose(lens.top_probs[0, :, 0], own.max(-1).values.numpy(), atol=1e-6)
    assert not np.allclose(lens.top_probs[0, :, 0], wrong.max(-1).values.numpy(), atol=1e-3)


def test_last_site_is_the_models_own_prediction_exactly(model):
    tr = gptviz.trace(model, IDS)
    lens = gptviz.logit_lens(model, tr, k=11, target=2)  # k = V: the whole distribution
    logits = tr["logits"].astype(np.float64)
    order = np.argsort(-tr["logits"], axis=-1, kind="stable")
    np.testing.assert_array_equal(lens.top_ids[-1], order)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(lens.top_probs[-1], np.take_along_axis(probs, order, -1), rtol=1e-6, atol=0)
    np.testing.assert_allclose(lens.target_prob[-1], probs[:, 2], rtol=1e-6, atol=0)
    np.testing.assert_array_equal(lens.target_rank[-1], (logits > logits[:, 2:3]).sum(-1))


def test_one_logits_buffer_for_every_site_and_the_last_site_is_the_runs_own(model, monkeypatch):
    tr = gptviz.trace(model, IDS)
    written, mm = [], torch.mm

    def spy(a, b, *, out=None):
        written.append((out.data_ptr(), a.size(0)))
        return mm(a, b, out=out)

    monkeypatch.setattr(torch, "mm", spy)
    lens = gptviz.logit_lens(model, tr, k=2, target=3)
    assert len(lens.sites) == 2 * model.config.n_layer + 1
    # every site's logits go through one buffer, the sites stacked into one matmul; the run does not hold
    # its logits, so the last site is the head on its ln_f, as the Trace rebuilds them: the run's own
    assert len({ptr for ptr, _ in written}) == 1
    assert sum(rows for _, rows in written) == len(lens.sites) * len(IDS)
    np.testing.assert_array_equal(lens.top_ids[-1], np.argsort(-tr["logits"], axis=-1, kind="stable")[:, :2])


def test_lens_reads_as_attributes_and_keys_and_without_target(model):
    lens = gptviz.logit_lens(model, gptviz.trace(model, IDS))
    assert lens["top_ids"] is lens.top_ids and lens["sites"] == lens.sites
    assert lens.top_ids.shape == (5, len(IDS), 5) and lens.top_probs.dtype == np.float64
    assert lens.target_rank is None and lens["target_prob"] is None and "target_rank" in lens
    assert np.all(np.diff(lens.top_probs, axis=-1) <= 0)  # most likely first
    with pytest.raises(KeyError, match="holds"):
        lens["logits"]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(target=11), "outside the vocabulary [0, 10]"),
        (dict(target=-1), "outside the vocabulary"),
        (dict(target=2.5), "outside the vocabulary"),
        (dict(target=True), "outside the vocabulary"),
        (dict(k=0), "must lie in [1, 11]"),
        (dict(k=12), "must lie in [1, 11]"),
    ],
)
def test_bad_lens_arguments_are_refused_with_a_reason(model, kwargs, words):
    with pytest.raises(gptviz.PromptError, match=words.replace("[", r"\[").replace("]", r"\]")):
        gptviz.logit_lens(model, gptviz.trace(model, IDS), **kwargs)


def test_lens_at_chosen_positions_equals_those_columns_of_the_whole(model):
    tr = gptviz.trace(model, IDS)
    whole = gptviz.logit_lens(model, tr, k=3, target=4)
    part = gptviz.logit_lens(model, tr, k=3, target=4, positions=[9, 2, 14])
    np.testing.assert_array_equal(part.positions, [9, 2, 14])
    np.testing.assert_array_equal(part.top_ids, whole.top_ids[:, [9, 2, 14]])
    np.testing.assert_allclose(part.top_probs, whole.top_probs[:, [9, 2, 14]], rtol=1e-5)
    np.testing.assert_array_equal(part.target_rank, whole.target_rank[:, [9, 2, 14]])
    for bad in ([], [15], [-1]):
        with pytest.raises(gptviz.PromptError, match="positions must lie in"):
            gptviz.logit_lens(model, tr, positions=bad)


# --- figures ----------------------------------------------------------------------------------
def test_lens_grid_escapes_token_text_and_uses_category_axes():
    from gptviz.figures import lens_grid

    tokens = np.array([[["<b>x</b>", "&"], ["a", "<br>"]], [["1", "2"], ["3", "4"]]], dtype=object)  # [S=2, W=2, k=2]
    probs = np.array([[[0.9, 0.1], [0.6, 0.3]], [[0.5, 0.2], [0.7, 0.1]]])
    fig = lens_grid(["embed", "blocks.0.resid_mid"], ["0 <i>", "1 b"], tokens, probs)
    heat = fig.data[0]
    assert heat.text[0][0] == "&lt;b&gt;x&lt;/b&gt;" and heat.text[1][0] == "1"
    assert "&lt;br&gt;" in heat.customdata[0][1] and "<br>" in heat.customdata[0][1]  # lines are ours, text is not
    assert list(heat.x) == ["0 &lt;i&gt;", "1 b"] and list(heat.y) == ["embed", "L0 mid"]
    assert fig.layout.xaxis.type == "category" and fig.layout.yaxis.type == "category"
    np.testing.assert_array_equal(heat.z, probs[:, :, 0])
    assert "applied to an intermediate residual" in fig.layout.title.text


def test_head_score_grid_colours_by_the_chosen_score():
    from gptviz.figures import head_score_grid

    df = gptviz.head_scores(gptviz.trace(tiny_model(n_layer=3, n_head=2), IDS))
    fig = head_score_grid(df, "sink", n_tokens=len(IDS))
    np.testing.assert_array_equal(fig.data[0].z, df["sink"].to_numpy().reshape(3, 2))
    assert fig.layout.xaxis.type == "category" and fig.layout.yaxis.type == "category"
    assert head_score_grid(df, "entropy", n_tokens=len(IDS)).data[0].zmax == pytest.approx(np.log(len(IDS)))
    with pytest.raises(ValueError, match="choose one of"):
        head_score_grid(df, "label")


@pytest.mark.parametrize("analysis", ["head_scores", "logit_lens", "patching_sweep"])
def test_the_analyses_copy_to_the_host_once_whatever_the_layers(monkeypatch, analysis):
    """The results stay on the model's device until the end (on a GPU a copy per layer, site or batch
    waits for the device each time): as many copies to the host for 4 layers as for 1."""
    run = {
        "head_scores": lambda model, t: gptviz.head_scores(t),
        "logit_lens": lambda model, t: gptviz.logit_lens(model, t, k=3, target=2),
        "patching_sweep": lambda model, t: gptviz.patching_sweep(model, t.token_ids, [1, 2, 9, 4, 5, 1, 2], 3, 4),
    }[analysis]
    copies = []
    real_cpu = torch.Tensor.cpu

    def counted(self, *args, **kwargs):
        copies.append(self.shape)
        return real_cpu(self, *args, **kwargs)

    counts, results = [], []
    for n_layer in (1, 4):
        model = tiny_model(n_layer=n_layer)
        t = gptviz.trace(model, [1, 2, 3, 4, 5, 1, 2])
        copies.clear()
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, "cpu", counted)
            results.append(run(model, t))
        counts.append(len(copies))
    # head scores: one table; the lens: ids, probabilities, ranks, target's; the sweep: which cells
    # change, the values, and the two runs' logits it is normalised by
    assert counts[0] == counts[1] <= 4
    if analysis == "head_scores":
        assert len(results[1]) == 4 * 2 and results[1]["entropy"].notna().all()
    elif analysis == "logit_lens":
        assert results[1].top_ids.shape == (9, 7, 3)
    else:
        assert results[1].shape == (4, 7) and np.isfinite(results[1]).all()
