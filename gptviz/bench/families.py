"""`python -m gptviz bench --families`: a Llama-family model against Hugging Face's LlamaForCausalLM.

A SmolLM2-135M-shaped model with random weights (30 layers, C = 576, 9 query heads sharing 3
key/value heads, SwiGLU MLP of 1,536, vocabulary 49,152, tied embeddings), and the same weights
in transformers' LlamaForCausalLM (written through formats/hf_llama_export.py, the code that
ships the Llama checkpoint). One process, one run, the same threads and device:

- the plain forward and the capture (gptviz.trace) against Hugging Face's SDPA forward, at each
  prompt length (runs interleaved, medians; goals: plain <= 1.0x, capture <= 1.1x);
- greedy decoding with the KV cache, recording every step (probability, top 10, the attention row
  of every layer and head), against Hugging Face's `generate`: tokens per second, and whether the
  ids agree (goal >= 0.9x).

A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..capture import trace
from ..config import GPTConfig
from ..devices import resolve_device
from ..formats.hf_llama_export import hf_llama_config, hf_llama_state
from ..generation import generate
from ..model import GPT
from .forward import synchronize

LLAMA: dict[str, Any] = dict(
    pos_encoding="rotary", norm="rmsnorm", activation="silu", mlp_gated=True, bias=False, tie_weights=True
)
SMOLLM2_135M = dict(
    LLAMA,
    vocab_size=49152,
    block_size=2048,
    n_layer=30,
    n_embd=576,
    n_head=9,
    n_kv_head=3,
    n_inner=1536,
    rope_theta=100000.0,
    norm_eps=1e-5,
)
TINY = dict(LLAMA, vocab_size=97, block_size=64, n_layer=2, n_embd=32, n_head=4, n_kv_head=2, n_inner=64)


def to_hf_llama(model: GPT, attn_implementation: str = "sdpa"):
    """The same weights in transformers' LlamaForCausalLM."""
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = hf_llama_config(model.config)
    config = LlamaConfig(**{k: v for k, v in fields.items() if k not in ("architectures", "model_type")})
    hf = LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation, dtype=torch.float32)
    missing, unexpected = hf.load_state_dict(hf_llama_state(model), strict=False)
    if unexpected or set(missing) - ({"lm_head.weight"} if model.config.tie_weights else set()):
        raise RuntimeError(f"weights do not match LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    if model.config.tie_weights:
        hf.tie_weights()
    return hf.to(model.device).eval()


def timed(
    runs: dict[str, Callable[[], object]], repeats: int, device: torch.device
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall seconds and CPU seconds of each run, `repeats` times, interleaved (a busy machine slows every
    contender alike), after one warm-up call of each; each result is dropped after its clock stops
    (a Trace holds the run's activations: freeing them is not part of taking them). On a shared CPU
    the process's own CPU time is the steadier measure: it leaves out the time the process waited
    for a core (not on a GPU, where the work is not this process's CPU time)."""
    for f in runs.values():
        f()
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, f in runs.items():
            synchronize(device)
            t0, c0 = time.perf_counter(), time.process_time()
            result = f()
            synchronize(device)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            del result  # freed after the clock stops: what a run costs is making its result, not dropping it
    return wall, cpu


@torch.no_grad()
def forward_rows(model: GPT, hf, lengths: list[int], repeats: int, device: torch.device) -> list[dict]:
    rows = []
    for T in lengths:
        idx = torch.randint(0, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T)).to(device)
        runs = {
            "hf plain (sdpa)": lambda: hf(idx).logits,
            "gptviz plain": lambda: model(idx),
            "gptviz capture": lambda: trace(model, idx[0]),
        }
        wall, cpu = timed(runs, repeats, device)
        base, cpu_base = statistics.median(wall["hf plain (sdpa)"]), statistics.median(cpu["hf plain (sdpa)"])
        for name in runs:
            s, c = statistics.median(wall[name]), statistics.median(cpu[name])
            rows.append(
                dict(
                    T=T,
                    run=name,
                    seconds=round(s, 4),
                    ratio=round(s / base, 3),
                    cpu_seconds=round(c, 4),
                    cpu_ratio=round(c / cpu_base, 3),
                    all_seconds=[round(x, 3) for x in wall[name]],
                    all_cpu_seconds=[round(x, 3) for x in cpu[name]],
                )
            )
    return rows


@torch.no_grad()
def decode_row(model: GPT, hf, prompt: int, new: int, repeats: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (1, prompt), generator=g).to(device)
    out: dict[str, list[int]] = {}

    def ours() -> None:
        out["gptviz"] = generate(model, ids[0].tolist(), new, temperature=0).ids

    def theirs() -> None:
        ids_out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,  # never stop at an eos: the same number of tokens as ours
            do_sample=False,
            pad_token_id=0,
        )
        out["hf"] = ids_out[0].tolist()

    ours_name = "gptviz generate (per-step capture)"
    wall, cpu = timed({ours_name: ours, "hf generate": theirs}, repeats, device)
    rate = {k: new / statistics.median(v) for k, v in wall.items()}
    cpu_rate = {k: new / statistics.median(v) for k, v in cpu.items()}
    return dict(
        prompt_tokens=prompt,
        new_tokens=new,
        gptviz_tokens_per_s=round(rate[ours_name], 2),
        hf_generate_tokens_per_s=round(rate["hf generate"], 2),
        gptviz_over_hf=round(rate[ours_name] / rate["hf generate"], 3),
        gptviz_tokens_per_cpu_s=round(cpu_rate[ours_name], 2),
        hf_generate_tokens_per_cpu_s=round(cpu_rate["hf generate"], 2),
        gptviz_over_hf_cpu=round(cpu_rate[ours_name] / cpu_rate["hf generate"], 3),
        same_ids=out["gptviz"] == out["hf"],
        all_seconds={k: [round(s, 3) for s in v] for k, v in wall.items()},
        all_cpu_seconds={k: [round(s, 3) for s in v] for k, v in cpu.items()},
    )


@torch.no_grad()
def run_bench(
    shape: dict, lengths: list[int], repeats: int, prompt: int, new: int, device: str = "cpu", seed: int = 0
) -> dict:
    dev = resolve_device(device)
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**shape)).to(dev).eval()
    hf = to_hf_llama(model, "sdpa")
    check = torch.randint(0, shape["vocab_size"], (1, min(lengths)), generator=torch.Generator().manual_seed(7))
    diff = (model(check.to(dev)) - hf(check.to(dev)).logits).abs().max().item()
    return dict(
        shape={k: v for k, v in shape.items() if k not in LLAMA or k == "tie_weights"},
        n_params=model.num_params(),
        device=str(dev),
        threads=torch.get_num_threads(),
        repeats=repeats,
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
        machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        load_average=os.getloadavg(),
        hf_logits_max_abs_diff=diff,
        forward=forward_rows(model, hf, lengths, repeats, dev),
        decode=decode_row(model, hf, prompt, new, repeats, dev),
    )


def format_table(result: dict) -> str:
    lines = [
        f"{result['n_params']:,} parameters, {result['device']}, {result['threads']} threads, "
        f"load average at the end {', '.join(f'{x:.1f}' for x in result['load_average'])}",
        f"logits against Hugging Face (SDPA): max |diff| {result['hf_logits_max_abs_diff']:.2e}",
        "",
        f"{'T':>5}  {'run':<20} {'wall s':>9} {'ratio':>7} {'CPU s':>9} {'ratio':>7}",
    ]
    for r in result["forward"]:
        lines.append(
            f"{r['T']:>5}  {r['run']:<20} {r['seconds']:>9.4f} {r['ratio']:>6.2f}x "
            f"{r['cpu_seconds']:>9.4f} {r['cpu_ratio']:>6.2f}x"
        )
    lines.append(
        "ratio: median time / median time of 'hf plain (sdpa)' at the same T, wall clock and this process's "
        "CPU time (goals: plain <= 1.0, capture <= 1.1)"
    )
    d = result["decode"]
    lines += [
        "",
        f"greedy decoding, {d['prompt_tokens']} prompt + {d['new_tokens']} new tokens (goal >= 0.9x); same ids: "
        f"{d['same_ids']}",
        f"  wall: gptviz (KV cache, per-step capture) {d['gptviz_tokens_per_s']:.2f} tok/s, hf generate "
        f"{d['hf_generate_tokens_per_s']:.2f} tok/s, ratio {d['gptviz_over_hf']:.2f}x",
        f"  CPU:  gptviz {d['gptviz_tokens_per_cpu_s']:.2f} tok/CPU-s, hf generate "
        f"{d['hf_generate_tokens_per_cpu_s']:.2f} tok/CPU-s, ratio {d['gptviz_over_hf_cpu']:.2f}x",
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    shape = TINY if args.tiny else SMOLLM2_135M
    lengths = args.lengths or ([8, 16] if args.tiny else [256, 1024])  # a list of whole numbers (cli_args)
    if args.threads:
        torch.set_num_threads(args.threads)
    new = 8 if args.tiny else 64
    result = run_bench(shape, lengths, args.repeats, prompt=8 if args.tiny else 32, new=new, device=args.device)
    print(format_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
