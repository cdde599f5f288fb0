"""The Ray engine gives the local engine's tables: on a Ray started in this process, and on a real
Ray head started as its own process on 127.0.0.1 and reached through RAY_ADDRESS, as a person with a
cluster would (the head is stopped after, and no process of it may remain)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import one_error_line, tiny_model

import gptviz

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # starting Ray takes seconds
ROOT = Path(__file__).resolve().parents[1]
TOK = gptviz.CharTokenizer(list("abcdefghij \n"))


def same_tables(a: gptviz.Scan, b: gptviz.Scan) -> None:
    for name in ("windows", "tokens", "heads", "head_windows"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), rtol=1e-5, atol=1e-5, check_dtype=False)
    # neurons: the values to 1e-5; a window may differ only where two windows tie exactly
    pd.testing.assert_frame_equal(
        a.neurons.drop(columns=["window", "position"]), b.neurons.drop(columns=["window", "position"]), atol=1e-5
    )
    differ = (a.neurons["window"] != b.neurons["window"]).mean()
    assert differ < 0.05, differ


@pytest.fixture(scope="module")
def docs():
    rng = np.random.default_rng(7)
    return [rng.integers(0, 11, n).tolist() for n in (70, 13, 2, 33, 16)]


def test_ray_in_this_process_equals_local(docs, monkeypatch, ray_files_here):
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    model = tiny_model(seed=2)
    local = gptviz.scan(model, docs, window=8, k=3, batch_size=3)
    on_ray = gptviz.scan(model, docs, window=8, k=3, batch_size=3, engine="ray")
    same_tables(local, on_ray)
    assert on_ray.summary["engine"] == "ray" and on_ray.summary["windows"] == local.summary["windows"]
    cores = min(os.cpu_count() or 1, 8)  # a Ray started here takes at most 8 cores; 2 threads a worker
    want = {
        "workers": max(1, cores // min(cores, 2)),
        "threads": [min(cores, 2)],
        "omp_wait_policy": [os.environ["OMP_WAIT_POLICY"]],
    }
    assert on_ray.summary["ray_workers"] == want
    assert not ray.is_initialized()  # the Ray it started is shut down after
    assert list(ray_files_here.glob("ray/session_*"))  # its files went where the fixture removes them


def test_workers_fit_the_nodes_they_run_on():
    """plan(node CPUs, threads) -> (threads per worker, CPUs each reserves, workers): an actor reserves
    no more than one node has (two 1-CPU nodes took a 2-CPU actor that never started)."""
    from gptviz.scanning.ray_engine import plan

    assert plan([1, 1], None) == (1, 1, 2)
    assert plan([2], None) == (2, 2, 1)
    assert plan([2], 1) == (1, 1, 2)
    assert plan([2], 4) == (4, 2, 1)  # more threads than a node's cores: they share its 2
    assert plan([4, 2], 2) == (2, 2, 3)
    assert plan([0.5], None) == (1, 1, 1)


def test_ray_head_in_its_own_process_through_ray_address(ray_head, tmp_path):
    """The CLI with --engine ray on a real head reached through RAY_ADDRESS; the workers load the
    checkpoint from its path, given relative to where the command runs (the workers run in Ray's
    session folder: it is made absolute first). Its folder equals the local engine's. Without the
    cluster's token, one line that names it."""
    ckpt = gptviz.save(tiny_model(seed=4, vocab_size=TOK.vocab_size), tmp_path / "ck", TOK)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("abc def\nghij " * 9)
    (corpus / "b.txt").write_text("jihgf edcba\n" * 4)
    args = ["--checkpoint", str(ckpt), "--data", str(corpus), "--window", "16", "--k", "4", "--batch-size", "2"]
    run = [sys.executable, "-m", "gptviz", "scan", *args]
    local = subprocess.run([*run, "--out", str(tmp_path / "local")], env=ray_head, capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    relative = [a if a != str(ckpt) else ckpt.name for a in run]
    on_ray = subprocess.run(
        [*relative, "--out", str(tmp_path / "ray"), "--engine", "ray", "--threads", "1"],
        env={**ray_head, "OMP_WAIT_POLICY": "passive"},  # the user's own spelling, which gptviz keeps
        capture_output=True,
        text=True,
        cwd=ckpt.parent,
    )
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert "(ray)" in on_ray.stdout
    same_tables(gptviz.load_scan(tmp_path / "local"), gptviz.load_scan(tmp_path / "ray"))
    summary = gptviz.load_scan(tmp_path / "ray").summary
    assert summary["engine"] == "ray"
    # --threads reached the workers: 1 thread each, so 2 workers on the head's 2 CPUs (2 threads and 1
    # worker when ignored); their OpenMP waits as the driver's does (the head's environment has no policy)
    assert summary["ray_workers"] == {"workers": 2, "threads": [1], "omp_wait_policy": ["passive"]}
    tokenless = {k: v for k, v in ray_head.items() if k != "RAY_AUTH_TOKEN"} | {"HOME": str(tmp_path / "nohome")}
    denied = [*run, "--out", str(tmp_path / "denied"), "--engine", "ray", "--ray-timeout", "20"]
    line = one_error_line(denied, tokenless, timeout=300)
    assert "RAY_AUTH_TOKEN" in line and ray_head["RAY_ADDRESS"] in line, line


def test_bench_scan_runs_on_a_tiny_model(tmp_path):
    """`python -m gptviz bench --scan --tiny` measures and writes its JSON (no figure is asserted)."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "gptviz", "bench", "--scan", "--tiny", "--parts", "speed,memory"]
    done = subprocess.run([*cmd, "--mem-windows", "4", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert {"plain_s", "scan_s", "scan_over_plain", "peak_rss_1x_mb", "peak_rss_3x_mb", "peak_growth_3x_mb"} <= set(
        result
    )
    assert result["scan_s"] > 0 and result["peak_rss_3x_mb"] > 0


def test_bench_scan_cluster_of_two_nodes_on_a_tiny_model(tmp_path):
    """`bench --scan --parts cluster`: two `ray start` nodes of 1 CPU on 127.0.0.1, the Ray engine's
    driver in its own process: two workers of 1 thread scan, and no process of the cluster is left."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "gptviz", "bench", "--scan", "--tiny", "--parts", "cluster", "--ray-windows", "8"]
    done = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["cluster_workers"] == {
        "workers": 2,
        "threads": [1],
        "omp_wait_policy": [os.environ["OMP_WAIT_POLICY"]],
    }
    assert result["cluster_tokens_per_s"] > 0 and result["local_tokens_per_s_before"] > 0
    assert result["ray_processes_left"] == 0
    wrong = subprocess.run([*cmd[:-4], "--parts", "clusters"], capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 2 and "unknown --parts clusters" in wrong.stderr, wrong.stderr
