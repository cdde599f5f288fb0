"""`python -m gptviz bench --llama`: a Llama the size people run, on the device they run it on, against
Hugging Face's LlamaForCausalLM on the same weights in the same process.

Shapes (`--shape`): `1b` (Llama-3.2-1B: 16 layers, C = 2,048, 32 query heads on 8 key/value heads, MLP
8,192, vocabulary 128,256, 131,072 positions), `8b` (Llama-3.1-8B) and `narrow` (16 layers of width 64,
vocabulary 8,192: on a CPU as launch-bound as a GPU is, the proxy for what launches cost). Random
weights, made on the device in the compute dtype (`--dtype`, bfloat16 by default). Per prompt length T:

- the time of Hugging Face's SDPA forward, gptviz's plain forward, the full `trace` and `trace(names=
  ["logits"])` (runs interleaved, medians; ratios against HF's forward of the same T);
- the device memory each run peaks at above the model (the GPU's allocator; malloc's on a CPU);
- where nnsight is installed, nnsight on HF's model saving each layer's q, k, v, attention output, MLP
  output and block output and the logits (the peer's way to see inside; not a requirement of gptviz);
- the ops each dispatches (every aten op after autograd, counted by a dispatch mode: the CPU proxy for
  kernel launches) and, on a GPU, the kernels it really launched (the profiler);

then greedy decoding with per-step capture against HF's `generate` (tokens per second, the same ids),
and a patching sweep (every layer × every position of a 32-token prompt; `--T`: of these lengths) against
one forward, by wall and CPU time. The
figures are also given as a share of what the machine could do where `--peak-tflops` and
`--peak-tbps` say its limits (an H200: 790 and 4.8). A benchmark prints numbers; it asserts nothing.
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
from torch.utils._python_dispatch import TorchDispatchMode

from .. import cuda_steps
from ..analysis.patching import patching_sweep
from ..capture import trace
from ..config import GPTConfig
from ..devices import DTYPES, resolve_device
from ..formats.hf_llama_export import hf_llama_config, hf_llama_state
from ..model import GPT
from .families import decode_row, timed
from .forward import PeakAllocated, synchronize
from .load import LLAMA3
from .load import SHAPES as LOAD_SHAPES

SHAPES: dict[str, dict[str, Any]] = {
    "1b": dict(LOAD_SHAPES["1b"], block_size=131072),
    "8b": dict(LOAD_SHAPES["8b"], block_size=131072),
    "narrow": dict(LLAMA3, vocab_size=8192, block_size=8192, n_layer=16, n_embd=64, n_head=4, n_kv_head=2, n_inner=256),
}


class CountOps(TorchDispatchMode):
    """Counts every aten op dispatched below autograd: what a GPU would launch a kernel (or more) for."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def build(shape: dict, device: torch.device, dtype: torch.dtype, seed: int = 0) -> GPT:
    """A random model of this shape made on the device (a 1B model's float32 init on a CPU takes a minute)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = GPT(GPTConfig(**shape))
    model = model.to(dtype).eval()
    # the rotary table is made on the CPU whatever the default device, and .to(dtype) rounded it: made
    # again on the device in float32, as gptviz.load leaves it
    model.reset_buffers(device)
    return model


def hf_twin(model: GPT, attn_implementation: str = "sdpa"):
    """The same weights in transformers' LlamaForCausalLM, made on the model's device in its dtype."""
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = hf_llama_config(model.config)
    config = LlamaConfig(**{k: v for k, v in fields.items() if k not in ("architectures", "model_type")})
    with torch.device(model.device):
        hf = LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation, dtype=model.dtype)
    hf.load_state_dict(hf_llama_state(model), strict=False)
    if model.config.tie_weights:
        hf.tie_weights()
    return hf.eval()


def peak_bytes(f: Callable[[], object], device: torch.device) -> int:
    """Bytes the device holds at the peak of one call, above what it held before."""
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        result = f()
        synchronize(device)
        del result
        return torch.cuda.max_memory_allocated(device) - base
    with PeakAllocated() as peak:
        result = f()
    del result
    return peak.bytes


def ops(f: Callable[[], object]) -> int:
    with CountOps() as counter:
        f()
    return counter.n


def kernels(f: Callable[[], object], device: torch.device) -> int | None:
    """The kernels (and copies) a GPU really ran for one call, by the profiler; None off a GPU."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        f()
        synchronize(device)
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def nnsight_saver(hf) -> Callable[[torch.Tensor], list] | None:
    """A run of HF's model under nnsight saving what a full trace's pages read most (every layer's q, k,
    v, attention output, MLP output and block output, then the logits); None where nnsight is absent."""
    try:
        from nnsight import NNsight
    except ImportError:
        return None
    wrapped = NNsight(hf)

    def save(idx: torch.Tensor) -> list:
        saved = []
        with wrapped.trace(idx):  # nnsight asks for the points in the order the forward reaches them
            for layer in wrapped.model.layers:
                attn = layer.self_attn
                saved += [attn.q_proj.output.save(), attn.k_proj.output.save(), attn.v_proj.output.save()]
                saved += [attn.o_proj.output.save(), layer.mlp.output.save(), layer.output.save()]
            saved.append(wrapped.lm_head.output.save())
        return saved

    return save


@torch.no_grad()
def forward_rows(model: GPT, hf, lengths: list[int], repeats: int) -> list[dict]:
    device = model.device
    rows = []
    peer = nnsight_saver(hf)
    for T in lengths:
        g = torch.Generator().manual_seed(T)
        idx = torch.randint(0, model.config.vocab_size, (1, T), generator=g).to(device)
        runs: dict[str, Callable[[], object]] = {
            "hf forward (sdpa)": lambda: hf(idx).logits,
            "gptviz forward": lambda: model(idx),
            "gptviz trace": lambda: trace(model, idx[0]),
            "gptviz trace logits": lambda: trace(model, idx[0], names=["logits"]),
        }
        if peer is not None:
            runs["nnsight save"] = lambda: peer(idx)
        wall, _ = timed(runs, repeats, device)
        base = statistics.median(wall["hf forward (sdpa)"])
        for name, f in runs.items():
            s = statistics.median(wall[name])
            rows.append(
                dict(
                    T=T,
                    run=name,
                    seconds=round(s, 5),
                    ratio=round(s / base, 3),
                    peak_mb=round(peak_bytes(f, device) / 2**20, 1),
                    ops=ops(f),
                    kernels=kernels(f, device),
                    all_seconds=[round(x, 5) for x in wall[name]],
                )
            )
    return rows


@torch.no_grad()
def patching_row(model: GPT, T: int, repeats: int) -> dict:
    """The resid_pre sweep over every layer and position of a T-token prompt whose corrupt twin differs at
    T/2, against one forward of it: wall and CPU time (the steadier on a shared CPU), medians. The answer
    and wrong tokens are the two whose logits the corruption moves most apart (a random model's fixed pair
    may move by less than bf16 resolves, and the sweep refuses a difference it cannot restore)."""
    device = model.device
    g = torch.Generator().manual_seed(2)
    clean = torch.randint(0, model.config.vocab_size, (T,), generator=g)
    corrupt = clean.clone()
    corrupt[T // 2] = (corrupt[T // 2] + 1) % model.config.vocab_size
    idx = clean[None].to(device)
    moved = (model(idx)[0, -1].float() - model(corrupt[None].to(device))[0, -1].float()).cpu()
    answer, wrong = int(moved.argmax()), int(moved.argmin())
    runs = {
        "one forward": lambda: model(idx),
        "patching sweep": lambda: patching_sweep(model, clean, corrupt, answer, wrong, site="resid_pre"),
    }
    wall, cpu = timed(runs, repeats, device)
    one, sweep = (statistics.median(wall[k]) for k in runs)
    one_cpu, sweep_cpu = (statistics.median(cpu[k]) for k in runs)
    return dict(
        T=T,
        layers=model.config.n_layer,
        forward_seconds=round(one, 5),
        sweep_seconds=round(sweep, 4),
        sweep_over_forward=round(sweep / one, 1),
        forward_cpu_seconds=round(one_cpu, 5),
        sweep_cpu_seconds=round(sweep_cpu, 4),
        sweep_over_forward_cpu=round(sweep_cpu / one_cpu, 1),
        ops_forward=ops(runs["one forward"]),
        ops_sweep=ops(runs["patching sweep"]),
    )


def flops_per_token(model: GPT) -> float:
    """Multiply-adds × 2 of the weights one token passes through (attention's T-dependent part left out)."""
    return 2.0 * sum(
        p.numel()
        for n, p in model.named_parameters()
        if n.endswith("weight") and p.dim() == 2 and "wte" not in n and "wpe" not in n
    ) + 2.0 * model.config.vocab_size * model.config.n_embd * (model.config.tie_weights)


def run(args: argparse.Namespace) -> dict:
    device = resolve_device(args.device)
    shape_name = args.shape or ("1b" if device.type == "cuda" else "narrow")
    shape = SHAPES[shape_name]
    dtype = DTYPES[args.dtype or "bfloat16"]
    lengths = args.lengths or ([1024, 4096, 16384, 32768] if device.type == "cuda" else [256])
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model = build(shape, device, dtype)
    hf = hf_twin(model)
    made = time.perf_counter() - t0
    check = torch.randint(0, shape["vocab_size"], (1, 256), generator=torch.Generator().manual_seed(7)).to(device)
    with torch.no_grad():
        ours, theirs = model(check), hf(check).logits
    agree = float((ours.argmax(-1) == theirs.argmax(-1)).float().mean())
    out: dict[str, Any] = dict(
        shape=shape_name,
        dtype=str(dtype).removeprefix("torch."),
        device=torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu, {torch.get_num_threads()} threads",
        n_params=model.num_params(),
        seconds_to_build=round(made, 1),
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
        machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        logits_max_abs_diff=float((ours.float() - theirs.float()).abs().max()),
        argmax_agreement=agree,
        flops_per_token=flops_per_token(model),
        weight_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
    )
    del ours, theirs
    out["forward"] = forward_rows(model, hf, lengths, args.repeats)
    new = args.new_tokens or (64 if device.type == "cuda" else 16)
    out["decode"] = decode_row(model, hf, args.prompt_tokens or 32, new, max(1, args.repeats // 2), device)
    if cuda_steps.usable(model, new, False):  # the same without the captured step
        cuda_steps.USE = False
        try:
            eager = decode_row(model, hf, args.prompt_tokens or 32, new, max(1, args.repeats // 2), device)
        finally:
            cuda_steps.USE = True
        out["decode"]["eager_tokens_per_s"] = eager["gptviz_tokens_per_s"]
    out["patching_rows"] = [patching_row(model, T, max(1, args.repeats // 2)) for T in args.T or [32]]
    out["patching"] = out["patching_rows"][0]
    out["load_average"] = os.getloadavg()
    return out


def format_table(r: dict, peak_tflops: float | None, peak_tbps: float | None) -> str:
    lines = [
        f"Llama {r['shape']} shape, {r['n_params'] / 1e6:,.1f} M parameters, {r['dtype']}, {r['device']} "
        f"(torch {r['torch']}, transformers {r['transformers']})",
        f"logits against HF's SDPA forward at T = 256: max |diff| {r['logits_max_abs_diff']:.3g}, "
        f"argmax agreement {r['argmax_agreement']:.1%}",
        "",
        f"{'T':>6}  {'run':<20} {'ms':>9} {'ratio':>7} {'peak MB':>9} {'ops':>6} {'kernels':>8}  share of peak",
    ]
    for row in r["forward"]:
        share = ""
        if peak_tflops:
            tflop = r["flops_per_token"] * row["T"] / 1e12
            share = f"{tflop / peak_tflops / row['seconds']:.0%} of {peak_tflops:g} TFLOP/s"
        k = "" if row["kernels"] is None else str(row["kernels"])
        lines.append(
            f"{row['T']:>6}  {row['run']:<20} {row['seconds'] * 1e3:>9.2f} {row['ratio']:>6.2f}x "
            f"{row['peak_mb']:>9.1f} {row['ops']:>6} {k:>8}  {share}"
        )
    lines.append("ratio: median time / median time of HF's SDPA forward at the same T (runs interleaved)")
    if not any(row["run"] == "nnsight save" for row in r["forward"]):
        lines.append("nnsight is not installed: no row for it (pip install nnsight to time it beside these)")
    d = r["decode"]
    lines += [
        "",
        f"greedy decoding, {d['prompt_tokens']} prompt + {d['new_tokens']} new tokens, per-step capture: gptviz "
        f"{d['gptviz_tokens_per_s']:.1f} tok/s, HF generate {d['hf_generate_tokens_per_s']:.1f} tok/s, "
        f"{d['gptviz_over_hf']:.2f}x; same ids: {d['same_ids']}",
    ]
    if "eager_tokens_per_s" in d:
        lines.append(f"  without the captured step (cuda_steps.USE = False): {d['eager_tokens_per_s']:.1f} tok/s")
    if peak_tbps:
        limit = peak_tbps * 1e12 / r["weight_bytes"]
        lines.append(
            f"  a step reads {r['weight_bytes'] / 1e9:.2f} GB of weights: at most {limit:.0f} tok/s at "
            f"{peak_tbps:g} TB/s; gptviz reaches {d['gptviz_tokens_per_s'] / limit:.0%} of that"
        )
    lines.append("")
    for p in r["patching_rows"]:
        lines.append(
            f"patching sweep, {p['layers']} layers × {p['T']} positions: {p['sweep_seconds']:.3f} s, "
            f"{p['sweep_over_forward']:.1f}× one forward ({p['forward_seconds'] * 1e3:.2f} ms); CPU time "
            f"{p['sweep_over_forward_cpu']:.1f}×; ops {p['ops_sweep']:,} against {p['ops_forward']:,}"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    result = run(args)
    print(format_table(result, args.peak_tflops, args.peak_tbps))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
