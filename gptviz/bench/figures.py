"""`gptviz bench --figures`: the heaviest figures of the pages, built and serialised as the dashboard
builds and sends them, against one plain forward pass of the same prompt, in the same run.

- the layer × head grid (the Attention page's overview): every layer's maps as block means
  (analysis.weight_blocks), the figure, plotly.io.to_json;
- one layer's heads as small multiples, and one head's heatmap, the same way.

GPT-2-small shape with random weights at T = 1,024 by default (--lengths, --tiny). Interleaved runs,
medians of wall and of this process's CPU time (the figure to read on a busy machine). Goal: each
≤ 1.0× the forward pass. A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import plotly.io as pio
import torch

from .. import analysis, figures
from ..capture import trace
from ..config import GPTConfig
from ..figures.attention import GRID_TILE, MAX_CELLS
from ..model import GPT
from .forward import GPT2_SMALL, TINY, synchronize

HEADS_CELLS = 64  # a head's tile in a layer's small multiples (the dashboard's HEAD_GRID_CELLS)


def page_figures(t, layer: int = 0, head: int = 0) -> dict[str, Callable[[], str]]:
    """name -> a function that builds one figure as the dashboard does and returns its JSON."""
    T, labels = t.n_tokens, figures.token_labels(t.tokens)

    def grid() -> str:
        b = analysis.block_side(T, GRID_TILE)
        return pio.to_json(figures.layer_head_grid(analysis.weight_blocks(t, l, b) for l in range(t.n_layer)))

    def heads() -> str:
        blocks = analysis.weight_blocks(t, layer, analysis.block_side(T, HEADS_CELLS))
        return pio.to_json(figures.head_grid(blocks, labels, layer=layer))

    def one() -> str:
        blocks = analysis.weight_blocks(t, layer, analysis.block_side(T, MAX_CELLS), heads=[head])
        return pio.to_json(figures.attention_heatmap(blocks, labels))

    return {"layer x head grid": grid, "a layer's heads": heads, "one head": one}


def _timed(fn: Callable[[], object], device: torch.device) -> tuple[float, float, object]:
    synchronize(device)
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    synchronize(device)
    return time.perf_counter() - w, time.process_time() - c, out


def measure(config: dict, T: int, repeats: int, device: str = "cpu") -> dict:
    """Median seconds (wall and CPU) of the forward and of each figure, interleaved, and their ratios."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**config)).to(device).eval()
    ids = torch.randint(0, config["vocab_size"], (1, T), device=device)
    with torch.no_grad():
        model(ids)  # warm up
        t = trace(model, ids[0])
    builds = page_figures(t)
    wall: dict[str, list[float]] = {"forward": [], **{k: [] for k in builds}}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    sent: dict[str, int] = {}
    for _ in range(repeats):
        with torch.no_grad():
            w, c, _ = _timed(lambda: model(ids), model.device)
        wall["forward"].append(w)
        cpu["forward"].append(c)
        for name, build in builds.items():
            w, c, out = _timed(build, model.device)
            wall[name].append(w)
            cpu[name].append(c)
            sent[name] = len(str(out).encode())
    med = {k: statistics.median(v) for k, v in wall.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    return dict(
        T=T,
        device=str(device),
        forward_s=round(med["forward"], 4),
        forward_cpu_s=round(med_cpu["forward"], 4),
        figures={
            name: dict(
                seconds=round(med[name], 4),
                over_forward=round(med[name] / med["forward"], 3),
                cpu_over_forward=round(med_cpu[name] / med_cpu["forward"], 3),
                sent_kb=round(sent[name] / 1024, 1),
            )
            for name in builds
        },
    )


def main(args) -> None:
    config = TINY if args.tiny else GPT2_SMALL
    if args.threads:
        torch.set_num_threads(args.threads)
    for T in args.lengths or ([32] if args.tiny else [1024]):
        row = measure(config, T, args.repeats, args.device)
        print(json.dumps(row), flush=True)
        for name, f in row["figures"].items():
            print(
                f"T={T:>5}  {name:<18} {f['seconds']:.3f} s  {f['over_forward']:.2f}x the forward "
                f"(CPU {f['cpu_over_forward']:.2f}x)  sent {f['sent_kb']:.0f} KB",
                flush=True,
            )
