"""Training an SAE with the activations computed on Ray workers (the scan's Ray engine) gives the local
engine's SAE: the workers' activations are the ones the local trainer computes, window group by window
group in the same order, so the minibatches, the steps and the weights are the same. On a real Ray
started by gptviz in this process, and by the CLI in its own process (each stopped after)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import one_error_line, tiny_model

import gptviz
from gptviz.bench.cluster import free_port
from gptviz.scanning.corpus import read_corpus
from gptviz.scanning.ray_engine import site_activations

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # starting Ray takes seconds
DOCS = [list(np.random.default_rng(i).integers(0, 11, size=120)) for i in range(12)]
SITE = "blocks.1.resid_post"


def test_workers_activations_and_the_trained_sae_equal_the_local_engines(monkeypatch, ray_files_here):
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    model = tiny_model()
    windows = read_corpus(DOCS, None, 16, 11).windows
    groups = [windows[:5], windows[5:6], windows[6:40]]  # windows of 16 and of the docs' last 8 tokens
    got = list(site_activations(model, SITE, 16, [[w.ids for w in g] for g in groups], threads=1))
    assert [len(x) for x in got] == [sum(len(w.ids) for w in g) for g in groups]
    for x, g in zip(got, groups):  # the traced values, not only the trainer's own function
        want = np.concatenate([gptviz.trace(model, w.ids)[SITE] for w in g])
        np.testing.assert_allclose(x, want, atol=1e-5)
    assert not ray.is_initialized()  # the Ray it started is stopped once the stream is closed

    # 70 steps: more than one buffer fill yields (64), so Ray is handed the groups of two fills (many epochs)
    args = dict(width=4, k=8, steps=70, seed=1, threads=1)
    local = gptviz.train_sae(model, DOCS, SITE, **args)
    on_ray = gptviz.train_sae(model, DOCS, SITE, engine="ray", **args)
    assert (on_ray.report.engine, local.report.engine) == ("ray", "local")
    assert on_ray.report.tokens == local.report.tokens == 70 * 1024
    for name in ("W_enc", "W_dec", "b_enc", "b_dec"):
        torch.testing.assert_close(getattr(on_ray, name), getattr(local, name), rtol=0, atol=1e-6)
    assert on_ray.report.fvu == pytest.approx(local.report.fvu, abs=1e-6)
    assert on_ray.report.fvu < 0.5  # it learned (a random SAE explains nothing)
    assert not ray.is_initialized()


def test_cli_trains_on_ray_and_says_when_the_cluster_is_not_there(tmp_path, ray_files_here):
    """`sae train --engine ray` (a Ray started by the command, in its own process) writes the SAE the
    local engine writes; a --ray-address where nothing listens gets one line that says so."""
    tok = gptviz.CharTokenizer([chr(97 + i) for i in range(11)])
    ckpt = gptviz.save(tiny_model(), tmp_path / "ckpt", tok)
    data = tmp_path / "corpus.txt"
    data.write_text("".join(chr(97 + int(i)) for d in DOCS for i in d))
    cmd = [sys.executable, "-m", "gptviz", "sae", "train", "--checkpoint", str(ckpt), "--data", str(data)]
    cmd += ["--site", "blocks.0.resid_post", "--width", "2", "--k", "4", "--steps", "20", "--threads", "1"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    outs = {}
    for engine in ("local", "ray"):
        outs[engine] = tmp_path / engine
        done = subprocess.run(
            [*cmd, "--out", str(outs[engine]), "--engine", engine], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"({engine})" in done.stdout and "tokens/s" in done.stdout
    local, on_ray = (gptviz.load_sae(outs[e]) for e in ("local", "ray"))
    torch.testing.assert_close(on_ray.W_enc, local.W_enc, rtol=0, atol=1e-6)
    nowhere = f"127.0.0.1:{free_port()}"
    bad = [*cmd, "--out", str(tmp_path / "x"), "--engine", "ray", "--ray-address", nowhere, "--ray-timeout", "5"]
    line = one_error_line(bad, env, timeout=120)
    assert nowhere in line and "nothing listens there" in line, line
