"""The corpus scan: its tables equal a brute-force loop of gptviz.trace + gptviz.head_scores per
window; the readers take every kind of data the contract names; bad data is one line; a scan folder
round-trips and a bad one is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model

import gptviz
from gptviz import limits
from gptviz.analysis.heads import SCORES
from gptviz.scanning import ScanDataError, ScanFolderError
from gptviz.scanning.corpus import read_corpus

TOK = gptviz.CharTokenizer(list("abcdefghij \n"))


def brute_force(model, ids_per_window: list[np.ndarray], k: int):
    """Loss per window, mean head scores and neuron top-k from one gptviz.trace per window."""
    losses, token_losses, heads, maxima = [], [], [], []
    for ids in ids_per_window:
        t = gptviz.trace(model, ids.tolist())
        logits = torch.tensor(t["logits"])
        nll = F.cross_entropy(logits[:-1].double(), torch.as_tensor(ids[1:]), reduction="none").numpy()
        token_losses.append(nll)
        losses.append(nll.mean())
        heads.append(gptviz.head_scores(t)[list(SCORES)].to_numpy())
        hidden = [np.asarray(t[f"blocks.{l}.mlp.hidden"]) for l in range(model.config.n_layer)]  # [T, F] each
        maxima.append(hidden)
    L, Fn = len(maxima[0]), maxima[0][0].shape[1]
    top = {}
    for l in range(L):
        for n in range(Fn):
            cands = sorted((-maxima[w][l][:, n].max(), w) for w in range(len(maxima)))[:k]
            top[(l, n)] = [-v for v, _ in cands]
    return np.array(losses), token_losses, np.mean(heads, axis=0), top, maxima


def check_against_brute_force(s: gptviz.Scan, model, k: int) -> None:
    ids = [np.asarray(x) for x in s.windows.sort_values("window")["token_ids"]]
    losses, token_losses, heads, top, hidden = brute_force(model, ids, k)
    np.testing.assert_allclose(s.windows.sort_values("window")["loss"].to_numpy(), losses, rtol=1e-5, atol=1e-5)
    for w, nll in enumerate(token_losses):
        got = s.tokens[s.tokens.window == w].sort_values("position")
        assert got["position"].tolist() == list(range(1, len(ids[w])))
        np.testing.assert_allclose(got["loss"].to_numpy(), nll, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.heads.sort_values(["layer", "head"])[list(SCORES)].to_numpy(), heads, atol=1e-5)
    assert len(s.neurons) == sum(len(v) for v in top.values())
    for (l, n), expected in top.items():
        got = s.neurons[(s.neurons.layer == l) & (s.neurons.neuron == n)].sort_values("rank")
        assert got["rank"].tolist() == list(range(len(expected)))
        np.testing.assert_allclose(got["value"].to_numpy(), expected, rtol=1e-5, atol=1e-6)
        # windows and positions: where two windows tie exactly (the same first tokens give the same
        # activations) either may be kept, so each must be distinct and hold its value at that position
        assert got["window"].nunique() == len(got)
        for r in got.itertuples():
            h = hidden[r.window][l][:, n]
            assert h[r.position] == pytest.approx(r.value, rel=1e-5, abs=1e-6)
            assert h.max() == pytest.approx(r.value, rel=1e-5, abs=1e-6)


@pytest.fixture(scope="module")
def docs():
    rng = np.random.default_rng(1)
    # documents of several lengths: full windows, short last windows, a 1-token remainder, a 2-token doc
    return [rng.integers(0, 11, n).tolist() for n in (40, 13, 2, 1, 25, 17)]


def test_scan_equals_a_loop_of_traces(docs):
    model = tiny_model()
    s = gptviz.scan(model, docs, window=8, k=4, batch_size=3)
    check_against_brute_force(s, model, k=4)
    # every token in exactly one window; 1-token windows dropped (doc of 1 token; 25 = 3*8 + 1, 17 = 2*8 + 1)
    assert s.windows["n_tokens"].tolist() == [8] * 5 + [8, 5] + [2] + [8] * 3 + [8, 8]
    assert s.windows.groupby("doc")["start"].apply(list).to_dict() == {
        0: [0, 8, 16, 24, 32],
        1: [0, 8],
        2: [0],
        4: [0, 8, 16],
        5: [0, 8],
    }
    for row in s.windows.itertuples():
        assert row.token_ids == docs[row.doc][row.start : row.start + row.n_tokens]
    assert list(s.windows.columns) == ["window", "doc", "start", "n_tokens", "loss", "token_ids"]
    assert list(s.tokens.columns) == ["window", "position", "token_id", "loss"]
    assert list(s.neurons.columns) == ["layer", "neuron", "rank", "value", "window", "position"]
    assert list(s.heads.columns) == ["layer", "head", *SCORES]
    assert set(s.summary) >= {"docs", "windows", "tokens", "loss", "seconds", "engine"}
    assert s.summary["docs"] == 6 and s.summary["windows"] == 13 and s.summary["engine"] == "local"
    assert s.summary["tokens"] == sum(len(d) for d in docs) - 3  # the 1-token doc and two 1-token remainders
    assert s.summary["loss"] == pytest.approx(s.tokens["loss"].mean(), rel=1e-6)


def test_batching_does_not_change_the_result(docs):
    """Padding a batch (windows of different lengths) and the grouping give the same tables."""
    model = tiny_model(seed=3, activation="gelu_tanh", norm="rmsnorm", bias=False)  # relu: ties at 0
    one = gptviz.scan(model, docs, window=8, k=3, batch_size=1)
    many = gptviz.scan(model, docs, window=8, k=3, batch_size=64)
    for name in ("windows", "tokens", "heads"):
        a, b = getattr(one, name), getattr(many, name)
        pd.testing.assert_frame_equal(
            a.drop(columns=["token_ids"], errors="ignore"),
            b.drop(columns=["token_ids"], errors="ignore"),
            rtol=1e-5,
            atol=1e-6,
        )
    np.testing.assert_allclose(one.neurons["value"], many.neurons["value"], rtol=1e-5, atol=1e-6)
    check_against_brute_force(many, model, k=3)


def test_k_larger_than_the_windows_keeps_every_window_once():
    model = tiny_model()
    s = gptviz.scan(model, [[1, 2, 3, 4, 5, 6], [7, 8, 9]], window=4, k=10)
    per = s.neurons.groupby(["layer", "neuron"])
    assert (per.size() == 3).all()  # 3 windows: [1..4], [5, 6], [7, 8, 9]
    assert (per["window"].nunique() == 3).all()


def test_text_data_through_the_tokenizer(tmp_path):
    model = tiny_model(vocab_size=TOK.vocab_size)
    (tmp_path / "b.txt").write_text("abc def\nghij " * 5)
    (tmp_path / "a.txt").write_text("jihgf edcba")
    (tmp_path / "notes.md").write_text("not read")
    s = gptviz.scan(model, tmp_path, TOK, window=16, k=2)
    assert s.summary["docs"] == 2 and s.summary["doc_names"] == ["a.txt", "b.txt"]
    first = s.windows[s.windows.doc == 0]
    assert TOK.decode(first.iloc[0]["token_ids"]) == "jihgf edcba"
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text(json.dumps({"text": "jihgf edcba"}) + "\n\n" + json.dumps({"text": "abc def\nghij " * 5}) + "\n")
    from_jsonl = gptviz.scan(model, jsonl, TOK, window=16, k=2)
    pd.testing.assert_frame_equal(from_jsonl.windows, s.windows)
    parquet = tmp_path / "d.parquet"
    pd.DataFrame({"text": ["jihgf edcba", "abc def\nghij " * 5], "other": [1, 2]}).to_parquet(parquet)
    pd.testing.assert_frame_equal(gptviz.scan(model, parquet, TOK, window=16, k=2).windows, s.windows)
    strings = gptviz.scan(model, ["jihgf edcba", "abc def\nghij " * 5], TOK, window=16, k=2)
    pd.testing.assert_frame_equal(strings.tokens, s.tokens)


def link(path: Path, target: str) -> Path:
    path.symlink_to(target)
    return path


def sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:  # a hole: no disk used, but stat says size
        f.truncate(size)
    return path


def bad(tmp_path, name, content: bytes):
    p = tmp_path / name
    p.write_bytes(content)
    return p


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: d / "missing.txt", "missing.txt: no such file or folder"),
        (lambda d: bad(d, "x.txt", b"abc\x00\x01\x02"), "looks binary"),
        (lambda d: bad(d, "x.txt", b"abc\ndef\xff\xfe"), "not UTF-8 text (byte 0xff at line 2)"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "the folder holds no .txt files"),
        (lambda d: bad(d, "x.jsonl", b'{"text": "abc"}\n{"txt": "abc"}\n'), 'line 2 has no "text" field'),
        (lambda d: bad(d, "x.jsonl", b'{"text": "abc"}\n{oops\n'), "line 2 is not JSON"),
        (lambda d: bad(d, "x.txt", b"abc\nde#f\nXY"), "cannot encode 3 character(s): '#' (line 2, column 3)"),
        (lambda d: bad(d, "x.parquet", b"PAR1 not really"), "not a readable Parquet file"),
        (lambda d: link(d / "zero.txt", "/dev/zero"), "not a regular file"),  # read whole, never ending
        (lambda d: bad(d, "secrets.toml", b"password = 1"), "a corpus is a .txt, .jsonl or .parquet file"),
        (lambda d: sparse(d / "huge.txt", limits.MAX_CORPUS_FILE_BYTES + 1), "too large for a corpus file"),
    ],
    ids=[
        "missing",
        "binary",
        "not-utf8",
        "empty-folder",
        "jsonl-no-text",
        "jsonl-not-json",
        "unknown-chars",
        "bad-parquet",
        "device",
        "not-a-corpus-kind",
        "too-large",
    ],
)
def test_bad_data_is_one_line(tmp_path, make, words):
    path = make(tmp_path)
    with pytest.raises(ScanDataError) as e:
        read_corpus(path, TOK, 8, TOK.vocab_size)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_folder_past_the_listing_bound_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_LISTING_ENTRIES", 5)
    for i in range(8):
        (tmp_path / f"{i}.txt").write_text("abc")
    with pytest.raises(ScanDataError, match="holds more than gptviz reads of a folder") as e:
        read_corpus(tmp_path, TOK, 8, TOK.vocab_size)
    assert "\n" not in str(e.value)


def test_bad_arguments_and_ids():
    model = tiny_model()
    with pytest.raises(ScanDataError, match="token id 11 is outside the vocabulary"):
        gptviz.scan(model, [[1, 2, 11]])
    with pytest.raises(ScanDataError, match="no tokenizer"):
        gptviz.scan(model, ["abc"])
    with pytest.raises(gptviz.GptvizError, match="longer than the model reads"):
        gptviz.scan(model, [[1, 2, 3]], window=17)
    assert gptviz.scan(model, [list(range(10)) * 2]).summary["window"] == 16  # the default, cut to block_size
    with pytest.raises(ScanDataError, match="nothing to predict"):
        gptviz.scan(model, [[1], []])


def test_out_round_trips_and_bad_folders_are_one_line(tmp_path, docs):
    model = tiny_model()
    s = gptviz.scan(model, docs, window=8, k=2, out=tmp_path / "scan")
    names = sorted(p.name for p in (tmp_path / "scan").iterdir())
    assert {"windows.parquet", "tokens.parquet", "neurons.parquet", "heads.parquet", "summary.json"} <= set(names)
    back = gptviz.load_scan(tmp_path / "scan")
    for name in ("windows", "tokens", "neurons", "heads", "head_windows"):
        pd.testing.assert_frame_equal(getattr(back, name), getattr(s, name), check_dtype=False)
    assert back.summary == json.loads(json.dumps(s.summary))
    # a folder that is not a scan, a missing table, a table with the wrong columns, a summary that is not JSON
    with pytest.raises(ScanFolderError, match="no such folder"):
        gptviz.load_scan(tmp_path / "nothing")
    (tmp_path / "scan" / "tokens.parquet").unlink()
    with pytest.raises(ScanFolderError, match="tokens.parquet: missing"):
        gptviz.load_scan(tmp_path / "scan")
    pd.DataFrame({"window": [0]}).to_parquet(tmp_path / "scan" / "tokens.parquet")
    with pytest.raises(ScanFolderError, match="lacks the column"):
        gptviz.load_scan(tmp_path / "scan")
    good = json.loads((tmp_path / "scan" / "summary.json").read_text())
    (tmp_path / "scan" / "summary.json").write_text(json.dumps({**good, "loss": "<b>1</b>"}))
    with pytest.raises(ScanFolderError, match="loss has a value of the wrong type"):
        gptviz.load_scan(tmp_path / "scan")
    (tmp_path / "scan" / "summary.json").write_text("{oops")
    with pytest.raises(ScanFolderError, match="summary.json: not readable JSON"):
        gptviz.load_scan(tmp_path / "scan")


def test_a_corpus_too_large_for_the_disk_is_refused_before_anything_runs(tmp_path, monkeypatch, docs):
    import shutil

    from gptviz.scanning import store

    Usage = type(shutil.disk_usage(tmp_path))
    monkeypatch.setattr(store.shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 1000, 1000))
    ran = []
    monkeypatch.setattr("gptviz.scanning.run_local", lambda *a, **k: ran.append(1))
    with pytest.raises(ScanFolderError, match="the scan needs about .* but the disk has 1.0 KB free"):
        gptviz.scan(tiny_model(), docs, window=8, out=tmp_path / "scan")
    assert not ran and not (tmp_path / "scan").exists()


def test_the_cli_writes_a_scan_with_progress_and_bad_data_is_one_line(tmp_path, capsys):
    from gptviz.cli import main

    ckpt = gptviz.save(tiny_model(vocab_size=TOK.vocab_size), tmp_path / "ck", TOK)
    (tmp_path / "c.txt").write_text("abc def\nghij " * 6)
    progress = tmp_path / "progress.json"
    args = ["scan", "--checkpoint", str(ckpt), "--data", str(tmp_path / "c.txt"), "--out", str(tmp_path / "out")]
    assert main([*args, "--window", "16", "--k", "3", "--progress-file", str(progress)]) == 0
    s = gptviz.load_scan(tmp_path / "out")
    assert json.loads(progress.read_text()) == {
        "done": len(s.windows),
        "total": len(s.windows),
        "state": "done",
        "out": str(tmp_path / "out"),
    }
    assert f"{len(s.windows)} windows" in capsys.readouterr().out
    (tmp_path / "bad.jsonl").write_text('{"text": "abc"}\n{"txt": 1}\n')
    bad = ["scan", "--checkpoint", str(ckpt), "--data", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "out")]
    assert main([*bad, "--progress-file", str(progress)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and 'line 2 has no "text" field' in err
    assert json.loads(progress.read_text())["state"] == "error"
    pd.testing.assert_frame_equal(gptviz.load_scan(tmp_path / "out").windows, s.windows)  # the old scan is kept


def test_a_context_is_text_never_markup():
    from gptviz.figures.corpus import context_html

    out = context_html(["<script>", "x", "*b*", "<img src=x>"], 1, 0.5)
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;img src=x&gt;" in out
    assert 'title="activation 0.5000"' in out


def test_a_small_table_that_claims_millions_of_rows_is_refused_before_it_is_read(tmp_path, docs):
    """Run-length encoding lets a few hundred KB of Parquet claim 20 million rows (over 600 MB as a
    DataFrame, in a cache every session of the dashboard shares): refused from the metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    gptviz.scan(tiny_model(), docs, window=8, k=2, out=tmp_path / "scan")
    n = 20_000_000
    zeros = pa.array(np.zeros(n, dtype=np.int64))
    table = pa.table({"window": zeros, "position": zeros, "token_id": zeros, "loss": pa.array(np.zeros(n))})
    pq.write_table(table, tmp_path / "scan" / "tokens.parquet")
    assert (tmp_path / "scan" / "tokens.parquet").stat().st_size < 2_000_000
    with pytest.raises(ScanFolderError, match=r"refused: its 20,000,000 rows would take") as e:
        gptviz.load_scan(tmp_path / "scan")
    assert "\n" not in str(e.value)


def test_the_shipped_scan_is_within_the_table_bound():
    scan = gptviz.load_scan(Path(__file__).resolve().parents[1] / "samples" / "scans" / "shakespeare-char")
    assert len(scan.tokens) == scan.summary["tokens"] - scan.summary["windows"]
