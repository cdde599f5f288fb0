"""`python -m gptviz bench --llama` runs end to end on its CPU proxy shape (16 layers of width 64, bf16).
It measures; nothing here asserts a time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # runs the benchmark in a subprocess
pytest.importorskip("transformers")


def test_bench_llama_narrow_prints_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "gptviz", "bench", "--llama", "--shape", "narrow", "--lengths", "16"]
    cmd += ["--repeats", "1", "--threads", "1", "--new-tokens", "4", "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    result = json.loads(out.read_text())
    assert result["logits_max_abs_diff"] == 0.0 and result["argmax_agreement"] == 1.0  # bf16, bit for bit
    rows = {row["run"]: row for row in result["forward"]}
    assert {"hf forward (sdpa)", "gptviz forward", "gptviz trace", "gptviz trace logits"} <= set(rows)
    # what a trace dispatches beyond the forward: the last position's logits kept, no view per value
    assert rows["gptviz trace"]["ops"] - rows["gptviz forward"]["ops"] <= 8
    assert result["decode"]["same_ids"] is True and result["decode"]["new_tokens"] == 4
    assert result["patching"]["layers"] == 16 and result["patching"]["sweep_seconds"] > 0
    if "nnsight save" not in rows:
        assert "nnsight is not installed" in p.stdout
