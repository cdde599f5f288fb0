"""`bench --load` end to end on the tiny Llama shape: the bf16 loads, their numbers against HF's bf16 eager
forward, and the reference table of every bf16 / float32 path against every other. It measures; the test
checks only what must hold on any machine: gptviz's float32 and bf16 logits equal HF's SDPA ones."""

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
    pairs = {(r["a"], r["b"]): r for r in got["reference"][1:]}
    assert len(pairs) == 10  # five forwards, each against each
    assert pairs[("hf float32", "gptviz float32")]["max_abs_diff"] < 1e-5
    assert pairs[("hf bf16 sdpa", "gptviz bf16")]["argmax_agree"] == 1.0
    assert "hf bf16 sdpa vs gptviz bf16" in " ".join(capsys.readouterr().out.split())
