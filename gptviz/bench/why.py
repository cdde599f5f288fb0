"""`python -m gptviz bench --why`: what head scores and the logit lens cost, against their floors,
in the same run and on the same weights.

- head_scores of every head against the plain forward pass (goal: at most 0.5x);
- logit_lens at every site against the same number of bare LM-head matmuls of the same size
  (its floor; goal: at most 1.2x), and its peak memory against one site's [T, V] logits;
- the Trace's bytes with the sub-layer outputs' capture points (attn.z, attn.out, mlp.hidden, mlp.out)
  against the Trace without them, and against TransformerLens's cache when it is installed.

Runs are interleaved and times are medians, so a busy machine slows every contender alike.
A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..analysis.heads import head_scores
from ..analysis.lens import lens_sites, logit_lens
from ..capture import trace
from ..config import GPTConfig
from ..devices import resolve_device
from ..model import GPT
from ..names import point
from .forward import GPT2_SMALL, TINY, PeakAllocated, synchronize, to_hf_gpt2, to_transformer_lens

NEW_SITES = ("attn.z", "attn.out", "mlp.hidden", "mlp.out")


def _storages(tensors) -> int:
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def trace_bytes(tr) -> dict[str, int]:
    """Bytes the Trace holds, with and without the sub-layer outputs' points (each storage once)."""
    new = {point(site, l) for l in range(tr.n_layer) for site in NEW_SITES}
    kept = tr._tensors  # the held tensors, not the lazily rebuilt maps
    return dict(
        with_new=_storages(kept.values()),
        without_new=_storages(t for n, t in kept.items() if n not in new),
    )


def transformer_lens_cache_bytes(model: GPT, idx: torch.Tensor) -> int | None:
    """Bytes of TransformerLens's run_with_cache on the same weights, or None if it is not installed."""
    try:
        tl = to_transformer_lens(to_hf_gpt2(model, "eager"))
    except ImportError:  # transformers itself is missing
        return None
    if isinstance(tl, str):  # why it could not be built: TransformerLens is not installed
        return None
    _, cache = tl.run_with_cache(idx)
    return _storages(cache.values())


def _median_times(
    runs: dict[str, Callable[[], object]], repeats: int, dev: torch.device
) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds per run, wall and this process's CPU time (a machine shared with other work slows
    the wall clock more than the CPU time), the runs interleaved after one warm-up of the cheap ones; each
    time is printed as it is taken, so a run cut short still reports what it measured."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for name in ("plain forward", "head_scores (all heads)"):  # first calls pay for allocations
        runs[name]()
    for i in range(repeats):
        for name, f in runs.items():
            synchronize(dev)
            t0, c0 = time.perf_counter(), time.process_time()
            f()
            synchronize(dev)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            print(f"  [{i + 1}/{repeats}] {name}: {times[name][-1]:.3f} s ({cpu[name][-1]:.3f} s CPU)", flush=True)
    median = lambda d: {name: statistics.median(ts) for name, ts in d.items()}  # noqa: E731
    return median(times), median(cpu)


def _peak(f: Callable[[], object], dev: torch.device) -> int:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        start = torch.cuda.memory_allocated(dev)
        f()
        synchronize(dev)
        return torch.cuda.max_memory_allocated(dev) - start
    with PeakAllocated() as peak:
        f()
    return peak.bytes


@torch.no_grad()
def run_why(config: dict, T: int, repeats: int, seed: int = 0, device: str = "cpu") -> dict:
    """Time and size head_scores and logit_lens on a random-weight model of `config` at length T."""
    dev = resolve_device(device)
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**config)).to(dev).eval()
    T = min(T, model.config.block_size)
    idx = torch.randint(0, model.config.vocab_size, (1, T), device=dev)
    tr = trace(model, idx[0])
    S = len(lens_sites(model.config.n_layer))
    xs = torch.randn(S, 1, T, model.config.n_embd, device=dev)

    def bare_matmuls():  # the lens's floor: S LM-head matmuls of [T, C] x [C, V], nothing else
        for s in range(S):
            model.lm_head(xs[s])

    seconds, cpu = _median_times(
        {
            "plain forward": lambda: model(idx),
            "head_scores (all heads)": lambda: head_scores(tr),
            f"{S} bare LM-head matmuls": bare_matmuls,
            f"logit_lens ({S} sites, k=5, target)": lambda: logit_lens(model, tr, k=5, target=0),
        },
        repeats,
        dev,
    )
    V, L, H = model.config.vocab_size, model.config.n_layer, model.config.n_head
    one_site = T * V * 4
    one_layer_maps = H * T * T * 4
    peaks = {
        "head_scores": _peak(lambda: head_scores(tr), dev),
        "logit_lens": _peak(lambda: logit_lens(model, tr, k=5, target=0), dev),
    }
    sizes = trace_bytes(tr)
    tl = transformer_lens_cache_bytes(model, idx)
    base, floor = seconds["plain forward"], seconds[f"{S} bare LM-head matmuls"]
    return dict(
        config=config,
        T=T,
        repeats=repeats,
        threads=torch.get_num_threads(),
        device=str(dev),
        torch=torch.__version__,
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        seconds={k: round(v, 4) for k, v in seconds.items()},
        cpu_seconds={k: round(v, 4) for k, v in cpu.items()},
        ratios={
            "head_scores / plain forward (goal <= 0.5)": round(seconds["head_scores (all heads)"] / base, 3),
            "logit_lens (target) / bare matmuls (goal <= 1.2)": round(
                seconds[f"logit_lens ({S} sites, k=5, target)"] / floor, 3
            ),
            "the same by CPU time": round(
                cpu[f"logit_lens ({S} sites, k=5, target)"] / cpu[f"{S} bare LM-head matmuls"], 3
            ),
        },
        memory={
            "head_scores peak MB": round(peaks["head_scores"] / 2**20, 1),
            "one layer's maps [H, T, T] MB": round(one_layer_maps / 2**20, 1),
            f"all {L * H} heads' maps MB (never held)": round(L * one_layer_maps / 2**20, 1),
            "logit_lens peak MB": round(peaks["logit_lens"] / 2**20, 1),
            "one site's [T, V] logits MB": round(one_site / 2**20, 1),
            f"all {S} sites' logits MB (never held)": round(S * one_site / 2**20, 1),
            "logit_lens peak / one site": round(peaks["logit_lens"] / one_site, 2),
        },
        trace={
            "Trace MB with attn.z/out, mlp.hidden/out": round(sizes["with_new"] / 2**20, 1),
            "Trace MB without them": round(sizes["without_new"] / 2**20, 1),
            "with / without": round(sizes["with_new"] / sizes["without_new"], 3),
            "TransformerLens cache MB": round(tl / 2**20, 1) if tl else "not installed",
            "Trace / TransformerLens cache": round(sizes["with_new"] / tl, 3) if tl else "not installed",
        },
    )


def format_why(r: dict) -> str:
    lines = [
        f"{r['config']['n_layer']} layers x {r['config']['n_head']} heads, T = {r['T']}, {r['device']}, "
        f"{r['threads']} threads, median of {r['repeats']}"
    ]
    lines += [f"  {k:<42} {v:>9.4f} s ({r['cpu_seconds'][k]:.4f} s CPU)" for k, v in r["seconds"].items()]
    lines += [f"  {k:<42} {v:>9}x" for k, v in r["ratios"].items()]
    lines += [f"  {k:<42} {v:>9}" for k, v in r["memory"].items()]
    lines += [f"  {k:<42} {v:>9}" for k, v in r["trace"].items()]
    peak = "allocated GPU memory" if r["device"].startswith("cuda") else "bytes malloc has handed out (mallinfo2)"
    lines.append(f"peak: {peak} above the start while it runs")
    return "\n".join(lines)


def main(args) -> None:
    config = TINY if args.tiny else GPT2_SMALL
    T = min(getattr(args, "why_tokens", 1024) or 1024, config["block_size"])
    result = run_why(config, T, args.repeats, device=getattr(args, "device", "cpu"))
    print(format_why(result))
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(result, indent=2))
