"""Training an SAE on a model's own activations: it learns (the held-out reconstruction improves),
the report's numbers are what they say, it writes SAELens's format, and the CLI does the same."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.errors import GptvizError
from gptviz.scanning.corpus import read_corpus
from gptviz.training.sae import _site_rows, evaluate, train_sae

DOCS = [list(np.random.default_rng(i).integers(0, 11, size=120)) for i in range(12)]


def test_site_rows_are_the_traced_values_of_real_tokens():
    model = tiny_model()
    corpus = read_corpus([d[:9] for d in DOCS[:2]] + [DOCS[2][:16]], None, 16, 11)
    rows = _site_rows(model, "blocks.1.resid_mid", corpus.windows)
    assert rows.shape == (9 + 9 + 16, 16)
    want = np.concatenate([gptviz.trace(model, w.ids)["blocks.1.resid_mid"] for w in corpus.windows])
    np.testing.assert_allclose(rows.numpy(), want, atol=1e-5)


def test_training_learns_and_reports_on_held_out_windows(tmp_path):
    model = tiny_model()
    seen = []
    few = train_sae(model, DOCS, "blocks.1.resid_post", width=4, k=8, steps=2, seed=1)
    sae = gptviz.train_sae(
        model,
        DOCS,
        "blocks.1.resid_post",
        width=4,
        k=8,
        steps=150,
        out=tmp_path,
        progress=lambda p: seen.append((p.done, p.total)),
        seed=1,
    )
    assert (sae.site, sae.d_in, sae.d_sae, sae.k, sae.architecture) == ("blocks.1.resid_post", 16, 64, 8, "topk")
    assert seen[-1] == (150, 150) and [d for d, _ in seen] == list(range(151))
    r = sae.report
    assert r.fvu < few.report.fvu and r.fvu < 0.3, (r.fvu, few.report.fvu)
    assert r.l0 <= 8 and 0 <= r.dead <= 1 and r.steps == 150 and r.tokens == 150 * 1024
    # the report's numbers recomputed from the written SAE on the same held-out windows
    back = gptviz.load_sae(tmp_path, model=model)
    corpus = read_corpus(DOCS, None, 16, 11)
    held = [
        corpus.windows[i]
        for i in sorted(np.random.default_rng(1).permutation(len(corpus.windows))[: len(corpus.windows) // 10])
    ]
    again = evaluate(model, back, held)
    assert again["fvu"] == pytest.approx(r.fvu, rel=1e-5) and again["spliced_loss"] == pytest.approx(
        r.spliced_loss, rel=1e-5
    )
    # the spliced loss by hand: a trace with the site replaced by the reconstruction, window by window
    total = n = 0.0
    for w in held:
        t = gptviz.trace(model, w.ids, interventions=[gptviz.intervene(back.site, lambda x: back.reconstruct(x))])
        logp = torch.log_softmax(t.tensor("logits")[:-1], -1)
        total -= float(logp[torch.arange(len(w.ids) - 1), torch.as_tensor(w.ids[1:])].sum())
        n += len(w.ids) - 1
    assert again["spliced_loss"] == pytest.approx(total / n, rel=1e-4)


def test_bad_training_arguments_get_one_line():
    model = tiny_model()
    with pytest.raises(GptvizError, match="unknown engine 'spark'; choose local or ray"):
        train_sae(model, DOCS, "blocks.1.resid_post", engine="spark")
    with pytest.raises(GptvizError, match="2 layers"):
        train_sae(model, DOCS, "blocks.4.resid_post")
    with pytest.raises(GptvizError, match="k=100"):
        train_sae(model, DOCS, "blocks.1.resid_post", width=2, k=100)
    with pytest.raises(GptvizError, match="too small"):
        train_sae(model, [DOCS[0][:10]], "blocks.1.resid_post")


@pytest.mark.slow
def test_cli_trains_and_writes_an_sae(tmp_path):
    model = tiny_model()
    ckpt = gptviz.save(model, tmp_path / "ckpt")
    data = tmp_path / "ids.jsonl"
    tok = gptviz.CharTokenizer([chr(97 + i) for i in range(11)])
    gptviz.save(model, ckpt, tokenizer=tok)
    data = tmp_path / "corpus.txt"
    data.write_text("".join(chr(97 + int(i)) for d in DOCS for i in d))
    out = tmp_path / "sae"
    cmd = [sys.executable, "-m", "gptviz", "sae", "train", "--checkpoint", str(ckpt), "--data", str(data)]
    cmd += ["--site", "blocks.0.resid_post", "--width", "2", "--k", "4", "--steps", "20", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fraction of variance unexplained" in done.stdout
    sae = gptviz.load_sae(out, model=model)
    assert (sae.site, sae.d_sae, sae.k) == ("blocks.0.resid_post", 32, 4)
    bad = subprocess.run(
        [*cmd[:-1], str(tmp_path / "x"), "--site", "blocks.9.resid_post"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "layers" in bad.stderr


def test_scan_with_an_sae_keeps_each_features_strongest_contexts(tmp_path):
    model = tiny_model()
    sae = train_sae(model, DOCS, "blocks.1.resid_post", width=2, k=4, steps=3)
    s = gptviz.scan(model, DOCS, window=16, k=3, saes=[sae], out=tmp_path)
    assert list(s.features.columns) == ["feature", "rank", "value", "window", "position", "sae"]
    # brute force: every window's features from a Trace, the best window per feature
    acts = {
        w: gptviz.feature_activations(gptviz.trace(model, ids), sae)
        for w, ids in zip(s.windows.window, s.windows.token_ids)
    }
    tokens = sum(len(a) for a in acts.values())
    for f in range(sae.d_sae):
        best = sorted(
            ((float(a[:, f].max()), w, int(a[:, f].argmax())) for w, a in acts.items()), key=lambda t: (-t[0], t[1])
        )
        best = [b for b in best if b[0] > 0][:3]
        got = s.features[s.features.feature == f].sort_values("rank")
        assert len(got) == len(best)
        for row, (value, w, pos) in zip(got.itertuples(), best):
            assert row.value == pytest.approx(value, abs=1e-5) and (row.window, row.position) == (w, pos)
        fires = sum(int((a[:, f] > 0).sum()) for a in acts.values())
        assert s.feature_density.set_index("feature").loc[f, "fires"] == fires
        assert s.feature_density.set_index("feature").loc[f, "density"] == pytest.approx(fires / tokens)
    back = gptviz.load_scan(tmp_path)
    assert back.features.equals(s.features)
    plain = gptviz.scan(model, DOCS, window=16, k=3)
    assert plain.neurons.equals(s.neurons) and len(plain.features) == 0
