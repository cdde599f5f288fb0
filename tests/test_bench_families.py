"""`python -m gptviz bench --families` runs end to end on a tiny Llama shape. It measures; nothing
here asserts a time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from gptviz.bench.families import TINY, to_hf_llama
from gptviz.config import GPTConfig
from gptviz.model import GPT

pytestmark = pytest.mark.slow  # runs the benchmark in a subprocess
pytest.importorskip("transformers")


def test_bench_families_tiny_prints_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "gptviz", "bench", "--families", "--tiny", "--repeats", "1", "--threads", "1"]
    p = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "ratio: median time / median time of 'hf plain (sdpa)'" in p.stdout
    result = json.loads(out.read_text())
    runs = ["hf plain (sdpa)", "gptviz plain", "gptviz capture"]
    assert [(r["T"], r["run"]) for r in result["forward"]] == [(T, run) for T in (8, 16) for run in runs]
    assert all(r["seconds"] > 0 and r["cpu_seconds"] > 0 for r in result["forward"])
    assert {r["ratio"] for r in result["forward"] if r["run"] == "hf plain (sdpa)"} == {1.0}
    assert result["hf_logits_max_abs_diff"] < 1e-4
    decode = result["decode"]
    assert decode["same_ids"] is True and decode["gptviz_tokens_per_s"] > 0 and decode["hf_generate_tokens_per_s"] > 0
    assert decode["gptviz_over_hf_cpu"] > 0 and "CPU:" in p.stdout
    assert result["shape"]["n_kv_head"] == 2 and len(result["load_average"]) == 3


def test_the_hf_copy_is_the_same_model_under_eager_attention_too():
    # "the same weights" is what makes the comparison fair: held here on the eager path as well
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).eval()
    hf = to_hf_llama(model, "eager")
    idx = torch.randint(0, TINY["vocab_size"], (1, 20))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, atol=1e-5, rtol=0)
