"""How fast is patching_sweep? Against one plain forward pass of the prompt, the naive loop (one
full gptviz.trace with one patch per cell) and, when it is installed, TransformerLens's
patching.get_act_patch_resid_pre, on one random-weight model of any shape.

    gptviz bench --patching --T 16,64,128 --device cpu [--peers] [--naive-layers 2] [--tl-layers 4]
        [--corrupt-at 0]

The corrupt prompt differs from the clean one in one token, in the middle unless --corrupt-at says
where (0: every position differs, the sweep's most work). Prints one JSON line per T: seconds and
the process's CPU seconds (the figure to read on a busy machine), the sweep over one forward pass in
both. The values of the sweep and the naive loop are compared too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time

import numpy as np
import torch

from ..analysis.patching import patching_sweep
from ..capture import trace
from ..checks import whole
from ..config import GPTConfig
from ..interventions import patch
from ..model import GPT
from ..names import point
from .forward import GPT2_SMALL, to_hf_gpt2, to_transformer_lens


def naive_sweep(
    model: GPT, clean_ids, corrupt_ids, answer: int, wrong: int, site: str = "resid_pre", layers: int | None = None
) -> np.ndarray:
    """The definition, one full patched run per cell: what patching_sweep must equal. layers: only
    the first so many layers (each naive run costs the same whatever its layer)."""
    clean, corrupt = trace(model, clean_ids), trace(model, corrupt_ids)
    d = lambda t: float(t.part("logits", -1)[answer]) - float(t.part("logits", -1)[wrong])  # noqa: E731
    d_clean, d_corrupt = d(clean), d(corrupt)
    L = model.config.n_layer if layers is None else whole(layers, "layers", 1, model.config.n_layer)
    n = model.config.n_head if site == "attn.z" else len(clean_ids)
    out = np.full((L, n), np.nan)
    for l in range(L):
        for c in range(n):
            which = dict(heads=[c]) if site == "attn.z" else dict(positions=[c])
            run = trace(model, corrupt_ids, interventions=[patch(point(site, l), clean, **which)])
            out[l, c] = (d(run) - d_corrupt) / (d_clean - d_corrupt)
    return out


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn, device: str, repeats: int, cpu: list[float] | None = None) -> tuple[float, object]:
    """The best wall time of `repeats` calls and the last call's result; cpu, when given, gets the
    best CPU time of this process."""
    best, best_cpu, result = float("inf"), float("inf"), None
    for _ in range(repeats):
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        _sync(device)
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    if cpu is not None:
        cpu.append(best_cpu)
    return best, result


def _transformer_lens(model: GPT, clean, corrupt, answer: int, wrong: int, layers: int):
    """A function running TransformerLens's resid_pre patching on the same weights (converted by
    its own GPT-2 converter), returning its [layers, T] normalised like patching_sweep; or why not.
    layers < L: only those layers' cells, through the same function's index_df."""
    try:
        import pandas as pd
        from transformer_lens import patching
    except ImportError:
        return "not installed (pip install transformer-lens, outside the project's requirements)"
    tl = to_transformer_lens(to_hf_gpt2(model, "eager"))
    if isinstance(tl, str):
        return tl
    c, r = torch.tensor([clean], device=model.device), torch.tensor([corrupt], device=model.device)
    d = lambda logits: logits[0, -1, answer] - logits[0, -1, wrong]  # noqa: E731
    _, cache = tl.run_with_cache(c)
    d_clean, d_corrupt = float(d(tl(c))), float(d(tl(r)))

    def metric(logits):  # the same normalisation as patching_sweep: 0 = corrupt, 1 = clean
        return (d(logits) - d_corrupt) / (d_clean - d_corrupt)

    T = len(clean)
    if layers >= model.config.n_layer:
        return lambda: patching.get_act_patch_resid_pre(tl, r, cache, metric)
    cells = pd.DataFrame([(l, p) for l in range(layers) for p in range(T)], columns=["layer", "pos"])
    return lambda: patching.get_act_patch_resid_pre(
        tl, r, cache, metric, index_axis_names=None, index_df=cells
    ).reshape(layers, T)


@torch.no_grad()
def measure(
    T: int = 64,
    device: str = "cpu",
    repeats: int = 2,
    peers: bool = False,
    naive_layers: int | None = None,
    tl_layers: int | None = None,
    corrupt_at: int | None = None,
    **shape,
) -> dict:
    """Seconds for the sweep, one plain forward pass and the naive loop (best of `repeats`), their
    ratios and the largest difference. corrupt_at: the position where the prompts differ (default T // 2).
    naive_layers: run the naive loop on the cells of that many layers only and scale its time by
    L / naive_layers (every naive run is one full forward pass, whatever its layer); values are
    compared on those cells. tl_layers: the same for TransformerLens's sweep."""
    cfg = {**GPT2_SMALL, **shape}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg)).to(device).eval()
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(0, cfg["vocab_size"], (T,), generator=g).tolist()
    corrupt, at = list(clean), T // 2 if corrupt_at is None else whole(corrupt_at, "corrupt_at", 0, T - 1)
    corrupt[at] = (clean[at] + 1) % cfg["vocab_size"]
    answer, wrong = 0, 1
    ids, cpu = torch.tensor([clean], device=device), []
    forward_s, _ = _time(lambda: model(ids), device, max(5, repeats), cpu)
    sweep_s, fast = _time(lambda: patching_sweep(model, clean, corrupt, answer, wrong), device, repeats, cpu)
    k = min(naive_layers or cfg["n_layer"], cfg["n_layer"])
    naive_s, slow = _time(lambda: naive_sweep(model, clean, corrupt, answer, wrong, layers=k), device, 1)
    naive_s *= cfg["n_layer"] / k
    out = dict(
        T=T,
        device=device,
        shape={k: cfg[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size")},
        cells=cfg["n_layer"] * T,
        corrupt_at=at,
        forward_s=round(forward_s, 4),
        sweep_s=round(sweep_s, 4),
        sweep_over_forward=round(sweep_s / forward_s, 2),
        sweep_over_forward_cpu=round(cpu[1] / cpu[0], 2),
        naive_s=round(naive_s, 4),
        naive_over_sweep=round(naive_s / sweep_s, 2),
        naive_timed_layers=k,
        max_abs_diff=float(np.abs(fast[:k] - slow).max()),
    )
    j = min(tl_layers or cfg["n_layer"], cfg["n_layer"])
    tl = _transformer_lens(model, clean, corrupt, answer, wrong, j) if peers else None
    if callable(tl):
        with contextlib.redirect_stderr(io.StringIO()):  # its progress bar would fill the output
            tl_s, theirs = _time(tl, device, repeats)
        tl_s *= cfg["n_layer"] / j
        out.update(
            transformer_lens_s=round(tl_s, 4),
            sweep_over_transformer_lens=round(sweep_s / tl_s, 3),
            transformer_lens_timed_layers=j,
            max_abs_diff_transformer_lens=float(np.abs(fast[:j] - theirs.float().cpu().numpy()).max()),
        )
    elif peers:
        out["transformer_lens"] = tl
    return out


def main(args: argparse.Namespace) -> None:
    with torch.no_grad():
        for T in args.T or [32, 64]:
            row = measure(T, args.device, args.repeats, args.peers, args.naive_layers, args.tl_layers, args.corrupt_at)
            print(json.dumps(row), flush=True)
