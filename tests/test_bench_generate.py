"""`python -m gptviz bench --generate --tiny` runs end to end on both shapes it benches (GPT-2 and a
SmolLM2-shaped Llama). It measures; nothing here asserts a time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # runs the benchmark in a subprocess
pytest.importorskip("transformers")


def test_bench_generate_tiny_prints_one_line_per_shape():
    cmd = [sys.executable, "-m", "gptviz", "bench", "--generate", "--tiny", "--repeats", "1", "--threads", "1"]
    p = subprocess.run([*cmd, "--new-tokens", "8"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["shape"] for r in rows] == ["gpt2-small (tiny)", "smollm2-135m (tiny)"]
    for r in rows:
        assert r["same_ids"] is True and r["threads"] == 1 and r["new_tokens"] == 8
        assert r["gptviz_tokens_per_s"] > 0 and r["hf_generate_tokens_per_s"] > 0 and r["gptviz_over_hf_cpu"] > 0
        assert r["gptviz_over_hf_best"] > 0
        assert len(r["all_cpu_seconds"]["gptviz"]) == 1 and len(r["load_average"]) == 3
