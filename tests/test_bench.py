"""The benchmark runs end to end on a tiny model. It measures; nothing here asserts a time."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.bench.forward import held_bytes, to_hf_gpt2

pytestmark = pytest.mark.slow  # trains models or runs the benchmark


def test_bench_tiny_with_peers_writes_a_table_and_json(tmp_path):
    out = tmp_path / "bench.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gptviz",
            "bench",
            "--tiny",
            "--peers",
            "--lengths",
            "8,16",
            "--repeats",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert "ratio: median time / median time of 'hf plain (sdpa)'" in p.stdout
    result = json.loads(out.read_text())
    runs = ["gptviz plain", "gptviz capture", "hf plain (sdpa)", "hf eager + attentions + hidden"]
    if importlib.util.find_spec("transformer_lens") is not None:  # --peers adds it where it is installed
        runs.append("transformer_lens run_with_cache")
    assert [(r["T"], r["run"]) for r in result["rows"]] == [(T, run) for T in (8, 16) for run in runs]
    for r in result["rows"]:
        assert r["seconds"] > 0
        if r["run"] == "hf plain (sdpa)":
            assert r["ratio"] == 1.0
    capture = [r for r in result["rows"] if r["run"] == "gptviz capture" and r["T"] == 16][0]
    assert capture["held_bytes"] > 0
    figures = {(f["T"], f["figure"]): f["bytes"] for f in result["figures"]}
    assert len(figures) == 2 * 9 and min(figures.values()) > 1000  # every page's main figure, per T
    assert "Attention: layer x head grid" in p.stdout


@pytest.mark.parametrize("tie", [True, False])
def test_the_hf_copy_computes_the_same_logits(tie):
    # The bench compares against HF on "the same weights"; this holds it to that.
    model = tiny_model(activation="gelu_tanh", tie_weights=tie)
    idx = torch.tensor([[1, 5, 2, 9, 0]])
    with torch.no_grad():
        torch.testing.assert_close(to_hf_gpt2(model, "sdpa")(idx).logits, model(idx), atol=1e-5, rtol=1e-5)


def test_held_bytes_counts_a_trace_and_hf_outputs():
    model = tiny_model()
    tr = gptviz.trace(model, [1, 2, 3])
    assert held_bytes(tr) == tr.nbytes
    logits = torch.zeros(1, 3, 11)
    assert held_bytes({"logits": logits, "hidden": (logits, torch.zeros(4))}) == 4 * (33 + 4)


def test_bench_on_a_missing_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the message is for machines without it")
    p = subprocess.run(
        [sys.executable, "-m", "gptviz", "bench", "--tiny", "--device", "cuda", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert "no CUDA GPU is available here" in p.stderr and "Traceback" not in p.stderr
