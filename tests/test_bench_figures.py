"""`gptviz bench --figures --tiny` runs end to end and prints each figure's ratio to a forward pass;
the figures it times are the dashboard's (their values are tested in tests/test_map_blocks.py).
It measures; nothing here asserts a time."""

from __future__ import annotations

import json

from gptviz.cli import main


def test_bench_figures_tiny_prints_the_ratios(capsys):
    assert main(["bench", "--figures", "--tiny", "--repeats", "1", "--lengths", "40"]) in (0, None)
    out = capsys.readouterr().out.splitlines()
    row = json.loads(out[0])
    assert row["T"] == 40 and row["forward_s"] > 0
    assert set(row["figures"]) == {"layer x head grid", "a layer's heads", "one head"}
    for f in row["figures"].values():
        assert f["over_forward"] > 0 and f["sent_kb"] > 0
    assert any("layer x head grid" in line and "x the forward" in line for line in out[1:])
