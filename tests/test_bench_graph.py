"""`gptviz bench --graph --tiny` runs end to end and writes its figures. It measures; nothing here
asserts a time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # runs the benchmark


def test_bench_graph_tiny_writes_its_figures(tmp_path):
    out = tmp_path / "graph.json"
    cmd = [sys.executable, "-m", "gptviz", "bench", "--graph", "--tiny", "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["model"].split(",")[0] for r in rows] == ["shakespeare-char", "tiny Llama"]
    for r in rows:
        assert (
            r["seconds"] > 0
            and r["forward_s"] > 0
            and r["ratio"] == pytest.approx(r["seconds"] / r["forward_s"], rel=0.15)  # both rounded
        )
        assert r["nodes_after"] <= r["nodes_before"] and r["edges_after"] <= r["edges_before"]
        assert r["rows"] <= r["options"]["max_feature_nodes"] + 10  # the feature budget, plus the logits
