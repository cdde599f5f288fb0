"""Heads across a corpus (gptviz.scanning.heads) and the HeadVis export (gptviz.scanning.headvis).

The metrics are held to Neuronpedia's formulas (compute-head-metrics.py) applied here, independently,
to the maps gptviz.trace returns for each window; every file the export writes is validated against
Neuronpedia's own row models (ModelHeadMetrics, ModelHeadSequence in hijohnnylin/neuronpedia
utils/neuronpedia-utils/neuronpedia_utils/headvis/), rebuilt here from their field lists as strict
pydantic models, and filled from the files the way load-head-metrics.py / load-head-sequences.py do."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
from conftest import tiny_model
from pydantic import BaseModel, ConfigDict

import gptviz
from gptviz.scanning.heads import HEADVIS_METRICS, NoHeadData, boundaries, head_metrics, head_samples, top_windows
from gptviz.scanning.headvis import write_headvis

TOK = gptviz.CharTokenizer(list("abcdefghij \n"))


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class ModelHeadMetrics(Strict):  # the fields of neuronpedia's model_head_metrics.py, in order
    id: str
    modelId: str
    layer: int
    headIndex: int
    modelName: str
    datasetName: str
    nSequences: int
    seqLen: int
    dtype: str
    attnImplementation: str
    selfAttentionScore: Optional[float] = None  # noqa: UP045 (their types, as written)
    prevTokenScore: Optional[float] = None  # noqa: UP045
    patternEntropy: Optional[float] = None  # noqa: UP045
    qkDistance: Optional[float] = None  # noqa: UP045
    qkDistanceVariance: Optional[float] = None  # noqa: UP045
    inductionScore: Optional[float] = None  # noqa: UP045
    qkDistanceHistogram: Optional[Any] = None  # noqa: UP045
    topQueryTokens: Optional[Any] = None  # noqa: UP045
    topKeyTokens: Optional[Any] = None  # noqa: UP045
    activationHistogram: Optional[Any] = None  # noqa: UP045
    headStatistics: Optional[Any] = None  # noqa: UP045
    createdAt: datetime
    updatedAt: datetime


class ModelHeadSequence(Strict):  # the fields of neuronpedia's model_head_sequence.py, in order
    id: str
    modelId: str
    layer: int
    headIndex: int
    modelName: str
    datasetName: str
    nSequences: int
    dtype: str
    attnImplementation: str
    interval: int
    tokens: list[str]
    attentionIndices: list[int]
    attentionValues: list[float]
    maxActivation: float
    createdAt: datetime
    updatedAt: datetime


class Histogram(Strict):
    bin_edges: list[float]
    bin_values: list[float]


class Weighted(Strict):
    token: str
    weight: float


CONFIG_KEYS = ("model_name", "dataset_name", "n_sequences", "seq_len", "dtype", "attn_implementation")
METRIC_COLUMNS = {  # scatter_data.json key -> ModelHeadMetrics field (load-head-metrics.py)
    "self_attention_score": "selfAttentionScore",
    "prev_token_score": "prevTokenScore",
    "pattern_entropy": "patternEntropy",
    "qk_distance": "qkDistance",
    "qk_distance_variance": "qkDistanceVariance",
    "induction_score": "inductionScore",
}


def run_config(run: Path) -> dict:
    """config.json flattened as the loaders do: pipeline_config first, then the top level's other keys."""
    raw = json.loads((run / "config.json").read_text())
    merged = dict(raw["pipeline_config"])
    for k, v in raw.items():
        if k != "pipeline_config":
            merged.setdefault(k, v)
    for k in CONFIG_KEYS:
        assert merged.get(k) is not None, k
    return merged


def validate_tree(run: Path, L: int, H: int) -> list[ModelHeadSequence]:
    """Every file of a HeadVis run folder, checked as Neuronpedia's loaders read it; the sequences' rows."""
    cfg = run_config(run)
    now = datetime.now()
    common = dict(
        modelId=cfg["np_model_id"],
        modelName=cfg["model_name"],
        datasetName=cfg["dataset_name"],
        nSequences=cfg["n_sequences"],
        dtype=cfg["dtype"],
        attnImplementation=cfg["attn_implementation"],
        createdAt=now,
        updatedAt=now,
    )
    assert json.loads((run / "server_config.json").read_text()) == {}
    assert json.loads((run / "attributions" / "manifest.json").read_text()) == {}
    scatter = json.loads((run / "scatter_data.json").read_text())
    assert [(r["layer"], r["head"]) for r in scatter] == [(l, h) for l in range(L) for h in range(H)]
    files = sorted(p.name for p in (run / "heads").iterdir())
    assert files == sorted(f"L{l}H{h}.json" for l in range(L) for h in range(H))
    assert all(re.fullmatch(r"L(\d+)H(\d+)\.json", f) for f in files)
    rows = []
    for entry in scatter:
        assert set(entry) == {"layer", "head", *METRIC_COLUMNS}
        head = json.loads((run / "heads" / f"L{entry['layer']}H{entry['head']}.json").read_text())
        assert set(head) == {"sequences", "qk_distance_histogram", "top_query_tokens", "top_key_tokens", "histogram",
                             "statistics"}  # fmt: skip
        Histogram(**head["qk_distance_histogram"])
        Histogram(**head["histogram"])
        for t in head["top_query_tokens"] + head["top_key_tokens"]:
            Weighted(**t)
        assert head["statistics"]["n_samples"] == len(head["sequences"])
        ModelHeadMetrics(
            id="x",
            layer=entry["layer"],
            headIndex=entry["head"],
            seqLen=cfg["seq_len"],
            **{k: v for k, v in common.items() if k != "dtype"},
            dtype=cfg["dtype"],
            **{col: entry[key] for key, col in METRIC_COLUMNS.items()},
            qkDistanceHistogram=head["qk_distance_histogram"],
            topQueryTokens=head["top_query_tokens"],
            topKeyTokens=head["top_key_tokens"],
            activationHistogram=head["histogram"],
            headStatistics=head["statistics"],
        )
        for seq in head["sequences"]:
            assert len(seq["attention_indices"]) == len(seq["attention_values"])
            assert seq["seq_len"] == len(seq["tokens"])
            assert 1 <= seq["interval"] <= cfg["n_intervals"]
            rows.append(
                ModelHeadSequence(
                    id="x",
                    layer=entry["layer"],
                    headIndex=entry["head"],
                    interval=seq["interval"],
                    tokens=seq["tokens"],
                    attentionIndices=seq["attention_indices"],
                    attentionValues=seq["attention_values"],
                    maxActivation=seq["max_activation"],
                    **common,
                )
            )
    return rows


def neuronpedia_metrics(maps: list[np.ndarray], ids: list[np.ndarray]) -> dict[str, np.ndarray]:
    """compute-head-metrics.py's six metrics from every window's maps [L, H, n, n], pooled as it pools them."""
    L, H = maps[0].shape[:2]
    s = {k: np.zeros((L, H)) for k in ("self", "prev", "ent", "qk", "qk2", "ind")}
    positions = prev_positions = induction_queries = 0
    for w, t in zip(maps, ids):
        n = len(t)
        positions += n
        prev_positions += n - 1
        d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
        s["self"] += np.trace(w, axis1=-2, axis2=-1)
        s["prev"] += np.diagonal(w, offset=-1, axis1=-2, axis2=-1).sum(-1)
        s["ent"] += -(w * np.log(np.clip(w, np.finfo(np.float32).tiny, None))).sum((-2, -1))
        s["qk"] += (w * d).sum((-2, -1))
        s["qk2"] += (w * d**2).sum((-2, -1))
        seen: dict[int, list[int]] = {}
        for q, tok in enumerate(t.tolist()):
            prior = [p + 1 for p in seen.get(tok, []) if p + 1 < n]
            if prior:
                induction_queries += 1
                a = w[:, :, q, prior]
                s["ind"] += np.where(a < 0.01, 0.0, a).sum(-1)
            seen.setdefault(tok, []).append(q)
    qk = s["qk"] / positions
    return {
        "self_attention_score": s["self"] / positions,
        "prev_token_score": s["prev"] / prev_positions,
        "pattern_entropy": s["ent"] / positions,
        "qk_distance": qk,
        "qk_distance_variance": s["qk2"] / positions - qk**2,
        "induction_score": s["ind"] / induction_queries,
    }


@pytest.fixture(scope="module")
def scanned():
    model = tiny_model(vocab_size=TOK.vocab_size)
    rng = np.random.default_rng(3)
    base = rng.integers(0, 11, 9).tolist()
    docs = [base * 3 + rng.integers(0, 11, 5).tolist(), rng.integers(0, 11, 40).tolist(), base[:4] * 2, [3, 4]]
    docs += [rng.integers(0, 11, 16).tolist() for _ in range(8)]
    s = gptviz.scan(model, docs, window=16, k=3)
    ids = [np.asarray(x) for x in s.windows.sort_values("window")["token_ids"]]
    maps = []
    for t_ids in ids:
        t = gptviz.trace(model, t_ids.tolist())
        maps.append(np.stack([np.asarray(t[f"blocks.{l}.attn.weights"], np.float64) for l in range(2)]))
    return model, s, ids, maps


def test_head_metrics_equal_neuronpedias_formulas_on_each_windows_maps(scanned):
    model, s, ids, maps = scanned
    want = neuronpedia_metrics(maps, ids)
    got = head_metrics(s).sort_values(["layer", "head"])
    L, H = maps[0].shape[:2]
    for m in HEADVIS_METRICS:
        np.testing.assert_allclose(got[m].to_numpy().reshape(L, H), want[m], rtol=1e-4, atol=1e-5, err_msg=m)
    assert np.isfinite(want["induction_score"]).all() and want["induction_score"].max() > 0  # the corpus repeats


def test_max_attention_is_the_largest_weight_past_position_0(scanned):
    _, s, ids, maps = scanned
    for w, m in enumerate(maps):
        got = s.head_attention[s.head_attention.window == w].sort_values(["layer", "head"])["max_attention"]
        np.testing.assert_allclose(got.to_numpy(), m[:, :, 1:, 1:].max((-2, -1)).reshape(-1), rtol=1e-5, atol=1e-6)


def test_samples_follow_headvis_intervals(scanned):
    _, s, _, maps = scanned
    values = np.array([m[1, 0, 1:, 1:].max() for m in maps])
    got = head_samples(s, 1, 0, "max_attention", n_intervals=4, per_interval=2, top=3, seed=0)
    edges = boundaries(values, 4)
    assert edges == sorted(edges) and len(edges) == 3
    for r in got.itertuples():
        assert values[r.window] == pytest.approx(r.value, rel=1e-5)
        lo = -np.inf if r.interval == 1 else edges[r.interval - 2]
        hi = np.inf if r.interval == 4 else edges[r.interval - 1]
        assert lo <= r.value and (r.value < hi or r.interval == 4)
    top = got[got.interval == 4]
    assert sorted(top["value"], reverse=True) == top["value"].tolist()
    in_top = values[values >= edges[-1]]
    np.testing.assert_allclose(top["value"], np.sort(in_top)[::-1][:3], rtol=1e-5)
    assert all((got.interval == i).sum() <= 2 for i in (1, 2, 3))
    assert got.equals(head_samples(s, 1, 0, "max_attention", n_intervals=4, per_interval=2, top=3, seed=0))
    best = top_windows(s, 0, 1, "induction", n=2)
    per_window = s.head_windows[(s.head_windows.layer == 0) & (s.head_windows["head"] == 1)]
    assert best["value"].iloc[0] == per_window["induction"].max()


def test_a_scan_without_the_tables_says_so(scanned):
    _, s, _, _ = scanned
    old = gptviz.Scan(s.windows, s.tokens, s.neurons, s.heads, s.summary)
    with pytest.raises(NoHeadData, match="no head_windows table"):
        head_metrics(old)


def test_the_export_validates_against_neuronpedias_models_and_holds_the_maps(scanned, tmp_path):
    model, s, ids, maps = scanned
    run = write_headvis(model, s, tmp_path / "run", TOK, model_name="tiny", n_intervals=3, topk_per_row=4)
    rows = validate_tree(run, 2, 2)
    assert rows
    heads = {(l, h): json.loads((run / "heads" / f"L{l}H{h}.json").read_text()) for l in range(2) for h in range(2)}
    for (l, h), head in heads.items():
        for seq in head["sequences"]:
            w = seq["sequence_id"]
            m = maps[w][l, h]
            n = len(ids[w])
            assert seq["tokens"] == [TOK.decode([i]) for i in ids[w]]
            assert seq["max_activation"] == pytest.approx(m[1:, 1:].max(), abs=1e-4)
            flat = np.array(seq["attention_indices"])
            q, k = flat // n, flat % n
            assert np.all(np.diff(q * n + k) > 0)  # ordered by query, then key
            np.testing.assert_allclose(seq["attention_values"], m[q, k], atol=6e-5)
            assert min(seq["attention_values"]) >= 0.005 and np.bincount(q).max() <= 4
            for row in range(n):  # each row keeps its strongest keys: nothing left out beats what is kept
                kept = k[q == row]
                dropped = np.setdiff1d(np.arange(n), kept)
                if len(kept) and len(dropped):
                    assert m[row, dropped].max() <= m[row, kept].min() + 1e-6
    scatter = {(r["layer"], r["head"]): r for r in json.loads((run / "scatter_data.json").read_text())}
    want = neuronpedia_metrics(maps, ids)
    for (l, h), r in scatter.items():
        for m in HEADVIS_METRICS:
            assert r[m] == pytest.approx(want[m][l, h], abs=2e-4)
    hist = heads[(0, 0)]["histogram"]
    assert sum(hist["bin_values"]) == len(s.windows)


def test_a_wrong_file_fails_the_validation(scanned, tmp_path):
    model, s, _, _ = scanned
    run = write_headvis(model, s, tmp_path / "run", TOK, model_name="tiny")
    path = run / "heads" / "L0H0.json"
    head = json.loads(path.read_text())
    head["sequences"][0]["max_activation"] = "0.5"  # a string where the model has a float
    path.write_text(json.dumps(head))
    with pytest.raises(Exception, match="maxActivation"):
        validate_tree(run, 2, 2)


def test_the_cli_writes_headvis_data(tmp_path, capsys):
    from gptviz.cli import main

    ckpt = gptviz.save(tiny_model(vocab_size=TOK.vocab_size), tmp_path / "ck", TOK)
    (tmp_path / "c.txt").write_text("abc abc def\nghij " * 6)
    args = ["scan", "--checkpoint", str(ckpt), "--data", str(tmp_path / "c.txt"), "--out", str(tmp_path / "out")]
    assert main([*args, "--window", "16", "--headvis", str(tmp_path / "hv")]) == 0
    assert "wrote HeadVis data for 4 heads" in capsys.readouterr().out
    validate_tree(tmp_path / "hv", 2, 2)
    again = gptviz.load_scan(tmp_path / "out")
    assert len(again.head_attention) == len(again.head_windows) > 0
