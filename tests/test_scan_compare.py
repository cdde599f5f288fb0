"""Two scans compared (gptviz.scanning.compare): on hand-built scans against numbers worked out by
hand; on real scans of two checkpoints of the shipped induction-2l run (the induction head forms
between them) against the tables recomputed another way; on a tiny model and the same model with one
head's query zeroed, where that head's scores are known in closed form and the other layer-0 head
must not move at all."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.analysis.heads import SCORES
from gptviz.scanning import Scan
from gptviz.scanning.compare import ScanCompareError, document_losses, head_changes, neuron_overlap
from gptviz.training.repeated import repeated_text

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "checkpoints" / "induction-2l"


def hand_scan(losses, induction, neurons, names=("a.txt", "b.txt")) -> Scan:
    """Windows 0 and 1 of document 0 (5 and 3 tokens), window 2 of document 1 (4 tokens); one layer
    of two heads; neurons: {(layer, neuron): [(window, value), ...] by rank}."""
    windows = pd.DataFrame(
        {
            "window": [0, 1, 2],
            "doc": [0, 0, 1],
            "start": [0, 5, 0],
            "n_tokens": [5, 3, 4],
            "loss": losses,
            "token_ids": [[1, 2, 3, 4, 5], [6, 7, 8], [1, 1, 2, 2]],
        }
    )
    heads = pd.DataFrame({"layer": [0, 0], "head": [0, 1], **{s: [0.0, 0.0] for s in SCORES}})
    heads["induction"] = induction
    rows = [(l, n, r, v, w, 0) for (l, n), top in neurons.items() for r, (w, v) in enumerate(top)]
    table = pd.DataFrame(rows, columns=["layer", "neuron", "rank", "value", "window", "position"])
    summary = {"docs": 2, "windows": 3, "tokens": 12, "loss": 0.0, "seconds": 0, "engine": "local"}
    return Scan(windows, pd.DataFrame(), table, heads, {**summary, "doc_names": list(names)})


A = hand_scan(
    [2.0, 1.0, 3.0], [0.1, 0.2], {(0, 0): [(0, 5.0), (1, 4.0), (2, 3.0)], (0, 1): [(2, 9.0), (0, 8.0), (1, 7.0)]}
)
B = hand_scan([1.0, 1.0, 3.5], [0.7, 0.1], {(0, 0): [(1, 6.0), (0, 5.0)], (0, 1): [(1, 9.5), (2, 1.0)]})


def test_hand_built_scans_give_the_numbers_worked_out_by_hand():
    docs = document_losses(A, B)
    # document 0: (4 x 2.0 + 2 x 1.0) / 6 predicted tokens in A, (4 + 2) / 6 in B; document 1: 3 tokens
    assert docs["document"].tolist() == ["a.txt", "b.txt"]  # the larger change (-2/3) first
    np.testing.assert_allclose(docs["loss_a"], [10 / 6, 3.0])
    np.testing.assert_allclose(docs["loss_b"], [1.0, 3.5])
    np.testing.assert_allclose(docs["change"], [-4 / 6, 0.5])
    assert docs["tokens_a"].tolist() == [6, 3]

    heads = head_changes(A, B, "induction")
    assert heads["name"].tolist() == ["L0 H0", "L0 H1"]
    np.testing.assert_allclose(heads[["a", "b", "change"]].to_numpy(), [[0.1, 0.7, 0.6], [0.2, 0.1, -0.1]])

    # k = 2 (B kept 2): neuron 0 keeps {0, 1} in both; neuron 1 {2, 0} against {1, 2}: one shared
    n = neuron_overlap(A, B)
    assert n[["neuron", "k", "shared"]].values.tolist() == [[1, 2, 1], [0, 2, 2]]
    np.testing.assert_allclose(n["overlap"], [0.5, 1.0])
    assert n.iloc[0][["value_a", "value_b", "window_a", "window_b"]].tolist() == [9.0, 9.5, 2, 1]


def test_scans_that_cannot_be_compared_say_why_in_one_line():
    other = hand_scan([1.0, 1.0, 1.0], [0.0, 0.0], {(0, 0): [(0, 1.0)]}, names=("a.txt", "c.txt"))
    with pytest.raises(ScanCompareError, match="different corpora: document 1 is 'b.txt' in one, 'c.txt'"):
        document_losses(A, other)
    recut = hand_scan([2.0, 1.0, 3.0], [0.1, 0.2], {(0, 0): [(0, 1.0)]})
    recut.windows.at[1, "token_ids"] = [6, 7, 9]
    assert len(document_losses(A, recut)) == 2  # documents still compare ...
    with pytest.raises(ScanCompareError, match="same windows"):  # ... neuron contexts do not
        neuron_overlap(A, recut)
    with pytest.raises(ScanCompareError, match="not a head score both scans have"):
        head_changes(A, B, "qk_distance")


@pytest.fixture(scope="module")
def induction_pair():
    """The run's checkpoints either side of the jump (checkpoints/README.md), on lines said twice."""
    text = repeated_text(120, 10, 20, seed=3)
    docs = [text[i * 600 : (i + 1) * 600] for i in range(4)]
    before = gptviz.scan(str(RUN / "step-002500"), docs, window=64, k=5)
    after = gptviz.scan(str(RUN / "step-003000"), docs, window=64, k=5)
    return before, after


def test_two_checkpoints_of_the_induction_run(induction_pair):
    a, b = induction_pair
    docs = document_losses(a, b)
    # recomputed from the token table: every predicted token's loss, averaged per document
    for scan, col in ((a, "loss_a"), (b, "loss_b")):
        t = scan.tokens.merge(scan.windows[["window", "doc"]], on="window")
        by_doc = t.groupby("doc")["loss"].apply(lambda x: x.astype(np.float64).mean())
        np.testing.assert_allclose(docs.set_index("doc")[col].sort_index(), by_doc.sort_index(), rtol=1e-6)
    assert (docs["change"] < -0.3).all()  # the second half of every line becomes predictable

    heads = head_changes(a, b, "induction")
    wide = a.heads.merge(b.heads, on=["layer", "head"])
    expect = (wide["induction_y"] - wide["induction_x"]).abs().sort_values(ascending=False).to_numpy()
    np.testing.assert_allclose(heads["change"].abs().to_numpy(), expect, atol=1e-12)
    top = heads.iloc[0]
    assert top["layer"] == 1 and top["a"] < 0.1 and top["b"] > 0.3  # an induction head formed in layer 1

    n = neuron_overlap(a, b)
    assert len(n) == 2 * 256 and (n["k"] == 5).all() and n["overlap"].is_monotonic_increasing
    for row in n.sample(20, random_state=0).itertuples():
        sets = [
            set(s.neurons[(s.neurons.layer == row.layer) & (s.neurons.neuron == row.neuron)]["window"]) for s in (a, b)
        ]
        assert row.shared == len(sets[0] & sets[1])
    assert n["overlap"].min() == 0.0 and n["overlap"].max() < 1.0  # training moved every neuron's contexts


def test_a_head_with_its_query_zeroed_attends_uniformly_and_no_other_layer0_head_moves():
    """Zeroing L0H1's query (weights and bias) makes its every score 0 to every earlier key: each query
    i spreads 1/(i+1) over keys 0..i. Over a window of n tokens its previous-token score is then
    (H_n - 1) / n (H_n the n-th harmonic number) and its self score H_n / n; L0H0 reads the same input
    as before, so its scores do not change at all."""
    model = tiny_model(seed=5)
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 11, 16).tolist() for _ in range(3)]
    a = gptviz.scan(model, docs, window=16, k=3)
    D = model.config.n_embd // model.config.n_head
    with torch.no_grad():
        attn = model.transformer.h[0].attn.c_attn
        attn.weight[D : 2 * D] = 0  # head 1's rows of q
        attn.bias[D : 2 * D] = 0
    b = gptviz.scan(model, docs, window=16, k=3)
    H16 = sum(1 / j for j in range(1, 17))
    prev = head_changes(a, b, "previous_token").set_index("name")
    assert prev.loc["L0 H1", "b"] == pytest.approx((H16 - 1) / 16, abs=1e-6)
    assert head_changes(a, b, "self").set_index("name").loc["L0 H1", "b"] == pytest.approx(H16 / 16, abs=1e-6)
    ent = head_changes(a, b, "entropy").set_index("name").loc["L0 H1", "b"]
    assert ent == pytest.approx(math.lgamma(17) / 16, abs=1e-5)  # sum of ln(i+1) over i < 16, per query
    for score in SCORES:
        assert head_changes(a, b, score).set_index("name").loc["L0 H0", "change"] == pytest.approx(0, abs=1e-6)
    assert len(neuron_overlap(a, b)) == 2 * 4 * model.config.n_embd
