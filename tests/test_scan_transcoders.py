"""A scan with transcoders (`gptviz.scan(..., transcoders=tcs)`): each transcoder feature's strongest
contexts and density equal a hand computation from traced mlp.in values and the encoder's equations;
the folder names the set (a fingerprint that finds it again from another folder); old scan folders
still open, with no transcoder tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import tiny_model
from test_transcoders import random_set

import gptviz
from gptviz.errors import GptvizError
from gptviz.scanning import ScanFolderError, queries
from gptviz.transcoders.files import save_transcoders

ROOT = Path(__file__).resolve().parents[1]
DOCS = [np.random.default_rng(i).integers(0, 11, size=n).tolist() for i, n in enumerate((40, 23, 9, 31))]
WINDOW, K = 12, 3


def by_hand(model, tcs, window: int, k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(contexts, density) from traces of each window and pre = x W_encᵀ + b_enc, the k largest kept
    (topk) or all (relu), relu'd: per window its largest value and first position, the k best windows."""
    windows = [d[i : i + window] for d in DOCS for i in range(0, len(d), window) if len(d[i : i + window]) > 1]
    rows, dens, tokens = [], [], sum(len(w) for w in windows)
    for l in tcs.layers:
        tc = tcs[l]
        W, b = tc.W_enc.numpy().astype(np.float64), tc.b_enc.numpy().astype(np.float64)
        per_window = []
        fires = np.zeros(tc.d_tc, np.int64)
        for w, ids in enumerate(windows):
            pre = gptviz.trace(model, ids)[f"blocks.{l}.mlp.in"].astype(np.float64) @ W.T + b  # [T, d_tc]
            if tc.activation == "topk":
                kth = np.sort(pre, axis=-1)[:, -tc.k][:, None]
                pre = np.where(pre >= kth, pre, 0.0)
            f = np.maximum(pre, 0.0)
            fires += (f > 0).sum(0)
            per_window.append((f.max(0), f.argmax(0), w))
        for feat in range(tc.d_tc):
            cands = sorted(((v[feat], w, int(p[feat])) for v, p, w in per_window), key=lambda c: (-c[0], c[1]))
            for rank, (value, w, pos) in enumerate(c for c in cands[:k] if c[0] > 0):
                rows.append((l, feat, rank, value, w, pos))
        dens.append(pd.DataFrame({"layer": l, "feature": np.arange(tc.d_tc), "fires": fires}))
    contexts = pd.DataFrame(rows, columns=["layer", "feature", "rank", "value", "window", "position"])
    density = pd.concat(dens, ignore_index=True)
    density["density"] = density["fires"] / tokens
    return contexts, density


@pytest.mark.parametrize("activation", ["topk", "relu"])  # the sparse read and the dense one
def test_contexts_and_density_equal_a_hand_computation(activation):
    model = tiny_model(seed=3)
    tcs = random_set(model, d_tc=24, activation=activation, k=4 if activation == "topk" else None, seed=5)
    s = gptviz.scan(model, DOCS, window=WINDOW, k=K, transcoders=tcs)
    want, density = by_hand(model, tcs, WINDOW, K)
    assert len(want) > 40 and s.summary["transcoders"]["layers"] == [0, 1]
    got = s.transcoder_features
    assert list(got.columns) == ["layer", "feature", "rank", "value", "window", "position"]
    pd.testing.assert_frame_equal(
        got.drop(columns="value").reset_index(drop=True), want.drop(columns="value"), check_dtype=False
    )
    np.testing.assert_allclose(got["value"], want["value"], rtol=1e-5, atol=1e-5)
    pd.testing.assert_frame_equal(s.transcoder_density, density, check_dtype=False)
    assert s.features.empty  # no SAE was read
    # the same set read with an SAE's machinery path for path: a feature's rows through the query
    row = want.iloc[len(want) // 2]
    shown = queries.transcoder_contexts(s, int(row.layer), int(row.feature))
    mine = want[(want.layer == row.layer) & (want.feature == row.feature)]
    assert shown["window"].tolist() == mine["window"].tolist() and shown["rank"].tolist() == list(range(len(mine)))


def test_the_folder_names_the_set_and_is_found_again_from_another_copy(tmp_path):
    model = tiny_model(seed=1)
    save_transcoders(random_set(model, d_tc=20, seed=2), tmp_path / "tcs")
    tcs = gptviz.load_transcoders(tmp_path / "tcs")
    s = gptviz.scan(model, DOCS, window=WINDOW, k=K, transcoders=tcs, out=tmp_path / "scan")
    back = gptviz.load_scan(tmp_path / "scan")
    record = back.summary["transcoders"]
    assert record["path"] == str((tmp_path / "tcs").resolve()) and record["name"] == "tcs"
    assert record["fingerprint"] == tcs.fingerprint() and record["d_tc"] == 20
    assert {"transcoder_features", "transcoder_density"} <= set(back.summary["tables"])
    pd.testing.assert_frame_equal(back.transcoder_features, s.transcoder_features, check_dtype=False)
    shutil.copytree(tmp_path / "tcs", tmp_path / "moved")  # the same weights elsewhere: the same fingerprint
    moved = gptviz.load_transcoders(tmp_path / "moved").fingerprint()
    plain = gptviz.scan(model, DOCS, window=WINDOW, k=K, out=tmp_path / "plain")
    assert plain.transcoder_features.empty and "transcoders" not in plain.summary
    folders = [tmp_path / "plain", tmp_path / "nothing", tmp_path / "scan"]
    assert queries.scans_of_transcoders(moved, folders) == [tmp_path / "scan"]
    other = random_set(model, d_tc=20, seed=3).fingerprint()
    assert other != moved and queries.scans_of_transcoders(other, folders) == []

    # a scan written again into the folder without transcoders leaves no stale transcoder tables
    gptviz.scan(model, DOCS, window=WINDOW, k=K, out=tmp_path / "scan")
    assert not (tmp_path / "scan" / "transcoder_features.parquet").exists()
    assert gptviz.load_scan(tmp_path / "scan").transcoder_features.empty


def test_old_scan_folders_still_open(tmp_path):
    """A folder as scans wrote it before transcoder tables (and the summary's table list) existed opens,
    with none; the shipped scan holds the shipped transcoders' tables, for the Graph page."""
    shipped = ROOT / "samples" / "scans" / "shakespeare-char"
    old = tmp_path / "old"
    shutil.copytree(shipped, old)
    for name in ("transcoder_features", "transcoder_density"):
        (old / f"{name}.parquet").unlink()
    summary = json.loads((old / "summary.json").read_text())
    (old / "summary.json").write_text(
        json.dumps({k: v for k, v in summary.items() if k not in ("transcoders", "tables")})
    )
    s = gptviz.load_scan(old)
    assert "transcoders" not in s.summary and s.transcoder_features.empty and s.transcoder_density.empty
    assert queries.transcoder_contexts(s, 0, 0).empty and queries.transcoder_density(s, 0, 0) is None
    tcs = gptviz.load_transcoders(ROOT / "checkpoints" / "shakespeare-char" / "transcoders")
    assert queries.scans_of_transcoders(tcs.fingerprint(), [old, shipped]) == [shipped]
    full = gptviz.load_scan(shipped)
    assert full.windows.equals(s.windows) and len(full.transcoder_density) == sum(tcs[l].d_tc for l in tcs.layers)


def test_bad_records_and_engines_are_one_line(tmp_path):
    model = tiny_model()
    tcs = random_set(model, d_tc=16)
    gptviz.scan(model, DOCS, window=WINDOW, k=K, transcoders=tcs, out=tmp_path / "s")
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    for bad in ({"layers": "all"}, {"layers": [0, -1]}, {"path": 3}, "a set"):
        record = {**summary["transcoders"], **bad} if isinstance(bad, dict) else bad
        (tmp_path / "s" / "summary.json").write_text(json.dumps({**summary, "transcoders": record}))
        with pytest.raises(ScanFolderError, match="transcoders") as e:
            gptviz.load_scan(tmp_path / "s")
        assert "\n" not in str(e.value)
    (tmp_path / "s" / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "s" / "transcoder_density.parquet").unlink()
    with pytest.raises(ScanFolderError, match="transcoder_density.parquet: missing"):
        gptviz.load_scan(tmp_path / "s")
    with pytest.raises(GptvizError, match="local engine"):
        gptviz.scan(model, DOCS, window=WINDOW, transcoders=tcs, engine="ray")
    with pytest.raises(GptvizError, match="values per token"):
        gptviz.scan(model, DOCS, window=WINDOW, transcoders=random_set(tiny_model(n_embd=8, n_head=2)))


def test_cli_scans_with_a_transcoder_folder(tmp_path):
    from gptviz.cli import main

    tok = gptviz.CharTokenizer([chr(97 + i) for i in range(11)])
    model = tiny_model()
    ckpt = gptviz.save(model, tmp_path / "ckpt", tok)
    save_transcoders(random_set(model, d_tc=16), tmp_path / "tcs")
    (tmp_path / "corpus.txt").write_text("".join(chr(97 + i) for d in DOCS for i in d))
    args = ["scan", "--checkpoint", str(ckpt), "--data", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "o")]
    assert main([*args, "--window", "12", "--k", "2", "--transcoders", str(tmp_path / "tcs")]) == 0
    s = gptviz.load_scan(tmp_path / "o")
    assert s.summary["transcoders"]["fingerprint"] == gptviz.load_transcoders(tmp_path / "tcs").fingerprint()
    assert len(s.transcoder_features) and s.transcoder_features["rank"].max() == 1
    assert main([*args, "--transcoders", str(tmp_path / "nowhere")]) == 2  # one line, before the model runs
