"""`bench --load` end to end on the tiny Llama shape: the bf16 loads, their numbers against HF's bf16 eager
forward, and the reference table of every bf16 / float32 path against every other. It measures; the test
checks only what must hold on any machine: gptviz's float32 and fused bf16 logits equal HF's SDPA ones, its
explicit bf16 path HF's eager one, and a Trace's attention weights on that path are what z was computed from."""

from __future__ import annotations

import json

from gptviz.cli import main


def test_bench_load_tiny_bf16_and_reference(tmp_path, capsys):
    out = tmp_path / "load.json"
    assert main(["bench", "--load", "--tiny", "--parts", "bf16,reference", "--T", "16", "--json", str(out)]) in (
        0,
        None,
    )
    got = json.loads(out.read_text())
    assert [r["role"] for r in got["loads"]] == ["gptviz:bfloat16", "hf-eager:bfloat16"]
    assert got["loads"][0]["dtype"] == "bfloat16" and got["numbers"]["bfloat16 T=16 vs HF eager"]["T"] == 16
    explicit = got["numbers"]["bfloat16 T=16 explicit vs HF eager"]
    assert explicit["max_abs_diff"] == 0.0 and explicit["argmax_agree"] == 1.0
    pairs = {(r["a"], r["b"]): r for r in got["reference"][1:]}
    assert len(pairs) == 15  # six forwards, each against each
    assert pairs[("hf float32", "gptviz float32")]["max_abs_diff"] < 1e-5
    assert pairs[("hf bf16 sdpa", "gptviz bf16")]["max_abs_diff"] == 0.0
    assert pairs[("hf bf16 eager", "gptviz bf16 explicit")]["max_abs_diff"] == 0.0
    used = {(r["dtype"], r["path"]): r["max_abs_diff"] for r in got["weights_used"]}
    assert used[("bfloat16", "explicit")] == used[("float32", "explicit")] == 0.0
    assert used[("bfloat16", "fused")] < 0.05 and used[("float32", "fused")] < 1e-4
    assert "hf bf16 sdpa vs gptviz bf16" in " ".join(capsys.readouterr().out.split())
