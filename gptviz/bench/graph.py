"""`python -m gptviz bench --graph`: attribution graphs (gptviz.attribution_graph) against one
forward pass of the same model on the same 32-token prompt.

- the shipped model (shakespeare-char) with its shipped transcoders when it has them, else random
  TopK ones (width 8 C, k = 32): every feature's row, pruned as circuit-tracer prunes;
- a SmolLM2-135M-shaped Llama with random weights and random TopK transcoders (width 8 C, k = 32;
  random ones are fine for timing): the rows of the most influential features only
  (max_feature_nodes), as circuit-tracer computes them, and, with --tiny left out, the budgets given.

Printed: the graph's seconds and its ratio to the forward's (goal for the 135M shape on the CPU:
<= 30x), wall and CPU (this process's time: on a shared machine, with --threads 1, the steadier
figure; the forward is timed before and after the graph), where the time goes (setup: the capture
and freezing; rows: the edges; prune), peak resident memory above the start, nodes and edges before
and after pruning. It asserts nothing.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from ..capture import trace
from ..config import GPTConfig
from ..formats import load
from ..model import GPT
from ..shipped import shipped_dir
from ..transcoders import Transcoder, TranscoderSet
from .families import SMOLLM2_135M, TINY
from .forward import PeakRSS, synchronize

T = 32


def random_transcoders(model: GPT, width: int = 8, k: int = 32, seed: int = 0) -> TranscoderSet:
    g = torch.Generator().manual_seed(seed)
    C = model.config.n_embd
    out = []
    for l in range(model.config.n_layer):
        tc = Transcoder(C, width * C, l, "topk", k=min(k, width * C))
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(torch.randn(p.shape, generator=g) / C**0.5)
        out.append(tc.requires_grad_(False))
    return TranscoderSet(out)


def _forward_seconds(model: GPT, ids: torch.Tensor, repeats: int = 5) -> tuple[float, float]:
    """The median wall and CPU (this process's) seconds of one forward."""
    with torch.no_grad():
        model(ids[None])
        wall, cpu = [], []
        for _ in range(repeats):
            synchronize(model.device)
            start, start_cpu = time.perf_counter(), time.process_time()
            model(ids[None])
            synchronize(model.device)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def measure(name: str, model: GPT, tcs, ids: torch.Tensor, **kw) -> dict:
    from ..circuits import attribution_graph

    ids = ids.to(model.device)
    forward, forward_cpu = _forward_seconds(model, ids)
    with torch.no_grad():
        trace(model, ids)  # warm
    attribution_graph(model, tcs, ids, max_feature_nodes=16)  # warm: the first graph pays the allocations
    with PeakRSS() as mem:
        synchronize(model.device)
        start, start_cpu = time.perf_counter(), time.process_time()
        g = attribution_graph(model, tcs, ids, **kw)
        synchronize(model.device)
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    after, after_cpu = _forward_seconds(model, ids)  # the forward again: a shared machine's load moves
    forward, forward_cpu = (forward + after) / 2, (forward_cpu + after_cpu) / 2
    info = g.info
    row = dict(
        model=name,
        options=kw,
        seconds=round(seconds, 3),
        forward_s=round(forward, 5),
        ratio=round(seconds / forward, 1),
        cpu_s=round(cpu, 3),
        forward_cpu_s=round(forward_cpu, 5),
        cpu_ratio=round(cpu / max(forward_cpu, 1e-9), 1),
        setup_s=round(info["seconds_setup"], 3),
        rows_s=round(info["seconds_rows"], 3),
        prune_s=round(info["seconds_prune"], 3),
        peak_mb=round(mem.bytes / 2**20, 1),
        rows=info["rows"],
        nodes_before=info["nodes_before"],
        edges_before=info["edges_before"],
        nodes_after=info["nodes_after"],
        edges_after=info["edges_after"],
    )
    print(json.dumps(row))
    return row


def main(args) -> None:
    torch.manual_seed(0)
    threads = getattr(args, "threads", None)
    if threads:
        torch.set_num_threads(threads)
    where = getattr(args, "device", "cpu")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, T = {T}, device {where}")
    results = []
    path = shipped_dir("checkpoints") / "shakespeare-char"
    device = getattr(args, "device", "cpu") or "cpu"
    bundle = load(path, device=device)
    shipped = bundle.model
    folder = path / "transcoders"
    if folder.is_dir():
        from ..transcoders import load_transcoders

        tcs, what = load_transcoders(folder).to(device), "shipped transcoders"
    else:
        tcs, what = random_transcoders(shipped).to(device), "random TopK transcoders (none shipped)"
    ids = torch.randint(0, shipped.config.vocab_size, (T,), generator=torch.Generator().manual_seed(1))
    every = dict(max_feature_nodes=64) if args.tiny else {}  # --tiny: proves the bench runs, in seconds
    results.append(measure(f"shakespeare-char, {what}", shipped, tcs, ids, **every))
    shape = TINY if args.tiny else SMOLLM2_135M
    big = GPT(GPTConfig(**shape)).eval().to(device)
    tcs = random_transcoders(big).to(device)
    ids = torch.randint(0, big.config.vocab_size, (T,), generator=torch.Generator().manual_seed(1))
    name = "tiny Llama" if args.tiny else "SmolLM2-135M-shaped Llama"
    budgets = (16,) if args.tiny else (256, 512, 1024, 4096) if device != "cpu" else (256, 512, 1024)
    for budget in budgets:
        results.append(measure(name, big, tcs, ids, max_feature_nodes=budget))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
