"""What features and steering cost on the shipped default model.

    gptviz bench --features [--repeats 3] [--threads N]

1. steering_sweep: 8 coefficients × every layer's resid_post on the preset prompt, against the naive
   loop (one gptviz.trace with a steer intervention per cell); the same numbers either way.
2. scan with the shipped SAE against the same scan without it (samples/shakespeare, local engine),
   run alternately so a busy machine slows both alike.
Prints one JSON line. A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

import torch

from ..capture import trace
from ..features import load_sae
from ..formats import load
from ..scanning import scan
from ..shipped import shipped_dir
from ..steering import steer, steering_sweep
from ..tokenizers import encode_prompt

CHECKPOINT = "shakespeare-char"
SAE = "saes/l2-resid-post-topk-8x"
PROMPT = "ROMEO.\nBut, soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
COEFFS = (-16.0, -8.0, -4.0, -2.0, 2.0, 4.0, 8.0, 16.0)


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    root = shipped_dir("checkpoints") / CHECKPOINT
    bundle = load(root)
    model = bundle.model
    if bundle.tokenizer is None:
        raise SystemExit(f"{root} has no tokenizer, so the benchmark's prompt cannot be encoded")
    ids = encode_prompt(bundle.tokenizer, PROMPT, model.config.block_size)
    sae = load_sae(root / SAE, model=model)
    v = sae.W_dec[0].numpy()
    L = model.config.n_layer
    repeats = args.repeats

    def naive():
        return [
            trace(model, ids, interventions=[steer(f"blocks.{l}.resid_post", v, c)]) for l in range(L) for c in COEFFS
        ]

    batched = _median(lambda: steering_sweep(model, ids, v, "resid_post", COEFFS, target=0), repeats)
    loop = _median(naive, repeats)
    data = shipped_dir("samples") / "shakespeare"
    plain_s, sae_s, plain_cpu, sae_cpu = [], [], [], []
    for _ in range(max(1, repeats // 2)):
        t0, c0 = time.perf_counter(), time.process_time()
        s0 = scan(model, data, bundle.tokenizer)
        plain_s.append(time.perf_counter() - t0)
        plain_cpu.append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        scan(model, data, bundle.tokenizer, saes=[sae])
        sae_s.append(time.perf_counter() - t0)
        sae_cpu.append(time.process_time() - c0)
    out = {
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "prompt_tokens": len(ids),
        "sweep_cells": L * len(COEFFS),
        "sweep_s": round(batched, 4),
        "naive_loop_s": round(loop, 4),
        "sweep_speedup": round(loop / batched, 2),
        "scan_tokens": s0.summary["tokens"],
        "scan_s": round(statistics.median(plain_s), 3),
        "scan_with_sae_s": round(statistics.median(sae_s), 3),
        "scan_sae_ratio": round(statistics.median(sae_s) / statistics.median(plain_s), 3),
        # CPU time: on a shared machine the wall time of the same scan varies several-fold, its CPU time little
        "scan_cpu_s": round(statistics.median(plain_cpu), 3),
        "scan_with_sae_cpu_s": round(statistics.median(sae_cpu), 3),
        "scan_sae_cpu_ratio": round(statistics.median(sae_cpu) / statistics.median(plain_cpu), 3),
        "sae": f"{sae}",
    }
    print(json.dumps(out))
