"""`python -m gptviz bench --load`: loading a model the size people download, against Hugging Face.

Random weights in the real shape (Llama-3.2-1B by default: 16 layers, C = 2,048, 32 query heads
sharing 8 key/value heads, SwiGLU MLP of 8,192, vocabulary 128,256, tied, llama3 rope), written as
bf16 sharded safetensors the way the Hub ships them, one shard at a time, into a temporary folder.
Then each contender runs in its own fresh Python process, one after another:

- load: `gptviz.load(dtype=float32 / bfloat16)` against `LlamaForCausalLM.from_pretrained(dtype=...)`:
  the process's peak resident memory once loaded (VmHWM: its own peak; ru_maxrss would count the
  parent's size at fork), its CPU time and wall time for the load;
- numbers, T = 1,024: float32 logits against Hugging Face's eager float32 (max |Δ|), bf16 logits
  against Hugging Face's eager bf16 (argmax agreement over the positions, max |Δ|), from both of gptviz's
  paths: the fused attention (`model(ids)`, which equals HF's SDPA) and the explicit one
  (`model(ids, explicit=True)`, which computes the attention weights in HF eager's order);
- speed: the plain forward in bf16 against Hugging Face's bf16 SDPA forward at T = 256 and 1,024,
  both models in one process, runs interleaved (medians).

`--parts bf16` loads only in bf16 and compares those logits (no 5 GB float32 model); `--parts reference`
sets them beside HF's own bf16 eager and SDPA paths and float32 (bf16 rounding alone), and says how a
Trace's attention weights relate to the output each path computed; `--T 256` sets the
lengths of the numbers and the speed; `--checkpoint` reads a folder of bf16 shards of the same shape
(write_checkpoint) instead of writing one.

`--shape 8b` (Llama-3.1-8B: 32 layers, C = 4,096, MLP 14,336) writes 16 GB and only loads it with
gptviz in bf16 and traces T = 512: it needs about 17 GB of free memory. A benchmark prints numbers;
it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..config import GPTConfig
from ..formats.hf_llama_export import hf_llama_config

LLAMA3: dict[str, Any] = dict(
    pos_encoding="rotary",
    norm="rmsnorm",
    activation="silu",
    mlp_gated=True,
    bias=False,
    vocab_size=128256,
    block_size=8192,
    n_head=32,
    n_kv_head=8,
    rope_theta=500000.0,
    rope_scaling="llama3",
    rope_factor=32.0,
    rope_low_freq=1.0,
    rope_high_freq=4.0,
    rope_original_max=8192,
    norm_eps=1e-5,
)
SHAPES: dict[str, dict[str, Any]] = {
    "1b": dict(LLAMA3, n_layer=16, n_embd=2048, n_inner=8192, tie_weights=True),
    "8b": dict(LLAMA3, n_layer=32, n_embd=4096, n_inner=14336, tie_weights=False, rope_factor=8.0),
    "tiny": dict(LLAMA3, vocab_size=512, block_size=1024, n_layer=2, n_embd=64, n_head=4, n_kv_head=2, n_inner=128),
}
SHARD_BYTES = 2 * 10**9  # the Hub's shards are 2 to 5 GB


def hf_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Hugging Face Llama of this shape, by its Hugging Face name."""
    C, F, D = config.n_embd, config.mlp_dim, config.head_dim
    H, Hkv = config.n_head, config.kv_heads
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, C)}
    for i in range(config.n_layer):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (C,),
            f"{p}.self_attn.q_proj.weight": (H * D, C),
            f"{p}.self_attn.k_proj.weight": (Hkv * D, C),
            f"{p}.self_attn.v_proj.weight": (Hkv * D, C),
            f"{p}.self_attn.o_proj.weight": (C, H * D),
            f"{p}.post_attention_layernorm.weight": (C,),
            f"{p}.mlp.gate_proj.weight": (F, C),
            f"{p}.mlp.up_proj.weight": (F, C),
            f"{p}.mlp.down_proj.weight": (C, F),
        }
    shapes["model.norm.weight"] = (C,)
    if not config.tie_weights:
        shapes["lm_head.weight"] = (config.vocab_size, C)
    return shapes


def write_checkpoint(config: GPTConfig, folder: Path, seed: int = 0) -> int:
    """Random bf16 weights of config's shape as Hugging Face sharded safetensors (an index naming each
    tensor's shard), one shard in memory at a time. Returns the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf_llama_config(config), indent=2))
    shapes = hf_shapes(config)
    groups: list[list[str]] = [[]]  # the names in each shard, in order, each shard <= SHARD_BYTES
    size = 0
    for k, shape in shapes.items():
        n = 2 * math.prod(shape)
        if groups[-1] and size + n > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += n
    g = torch.Generator().manual_seed(seed)
    where = {}
    for i, names in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        shard = {}
        for k in names:
            if len(shapes[k]) == 1:  # a norm's scale: about 1, as trained ones are
                shard[k] = (1.0 + 0.1 * torch.randn(shapes[k], generator=g)).to(torch.bfloat16)
            else:  # (out, in), drawn in bf16: an 8B embedding in float32 would be 2 GB more
                shard[k] = torch.randn(shapes[k], generator=g, dtype=torch.bfloat16).mul_(0.02)
            where[k] = file
        save_file(shard, str(folder / file), metadata={"format": "pt"})
        del shard
    total = sum(2 * math.prod(s) for s in shapes.values())
    index = {"metadata": {"total_size": total}, "weight_map": where}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return total


# Each contender, in its own process: it loads, reports its peak and CPU time, then runs what it is asked.
CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    if sys.argv[1].startswith("gptviz:"):
        import gptviz  # before torch, as `import gptviz` is used: it sets OpenMP's passive wait, read once
    import torch
    role, folder, out, lengths = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])

    def peak_gb():
        hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
        return int(hwm.split()[1]) * 1024 / 1e9

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    tool, dtype = role.split(":")
    before = peak_gb()
    c0, t0 = cpu(), time.perf_counter()
    if tool == "gptviz":
        import gptviz
        c0, t0 = cpu(), time.perf_counter()
        bundle = gptviz.load(folder, dtype=dtype)
        run = lambda ids: bundle.model(ids)[0]
        report = dict(stored=bundle.report.stored_dtype, dtype=bundle.report.dtype, warnings=bundle.report.warnings)
    else:
        from transformers import AutoModelForCausalLM
        c0, t0 = cpu(), time.perf_counter()
        attn = "eager" if tool == "hf-eager" else "sdpa"
        hf = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype), attn_implementation=attn)
        hf.eval()
        run = lambda ids: hf(ids).logits[0]
        report = {}
    row = dict(role=role, load_cpu_s=cpu() - c0, load_wall_s=time.perf_counter() - t0, peak_gb=peak_gb(),
               before_gb=before, **report)
    with torch.no_grad():
        for T in lengths:
            ids = torch.randint(0, 128256 if T > 64 else 512, (1, T), generator=torch.Generator().manual_seed(T))
            ids = ids % (bundle.model.config.vocab_size if tool == "gptviz" else hf.config.vocab_size)
            logits = run(ids)
            torch.save(logits.clone(), f"{out}.T{T}.pt")
            del logits
            if tool == "gptviz":  # and its explicit attention path, in HF eager's order
                torch.save(bundle.model(ids, explicit=True)[0].clone(), f"{out}.explicit.T{T}.pt")
    if tool == "gptviz" and "trace" in sys.argv[5:]:
        ids = torch.randint(0, 128256, (512,), generator=torch.Generator().manual_seed(512))
        c1, t1 = cpu(), time.perf_counter()
        tr = gptviz.trace(bundle.model, ids)
        row |= dict(trace_T=512, trace_cpu_s=cpu() - c1, trace_wall_s=time.perf_counter() - t1)
        row |= dict(peak_after_trace_gb=peak_gb())
    print(json.dumps(row))
    """
)

SPEED = textwrap.dedent(
    """
    import json, statistics, sys
    import torch
    import gptviz
    from transformers import AutoModelForCausalLM
    from gptviz.bench.families import timed
    folder, lengths, repeats = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    model = gptviz.load(folder, dtype="bfloat16").model
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    rows = []
    with torch.no_grad():
        for T in lengths:
            ids = torch.randint(0, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T))
            runs = {"hf bf16 (sdpa)": lambda: hf(ids).logits, "gptviz bf16": lambda: model(ids),
                    "gptviz bf16 capture": lambda: gptviz.trace(model, ids[0])}
            wall, cpu = timed(runs, repeats, torch.device("cpu"))
            base = statistics.median(cpu["hf bf16 (sdpa)"])
            for name in runs:
                c = statistics.median(cpu[name])
                rows.append(dict(T=T, run=name, cpu_s=round(c, 3), wall_s=round(statistics.median(wall[name]), 3),
                                 cpu_ratio=round(c / base, 3)))
    print(json.dumps(rows))
    """
)


# The bf16 forwards against each other and against float32, one model at a time in one process: how far
# bf16 rounding alone moves the logits of this model (HF's own eager and SDPA paths), beside gptviz's. gptviz's
# bf16 model runs both its paths: the fused kernel (as HF's SDPA) and the explicit one, which builds the
# attention weights as a tensor in HF eager's order. Then, per path, how the attention weights a Trace shows
# relate to the output the forward computed: max over layers of |weights @ v - z| (0 where z is weights @ v).
REFERENCE = textwrap.dedent(
    """
    import gc, json, sys
    import torch
    import gptviz
    from gptviz.attention import expand_kv
    from transformers import AutoModelForCausalLM
    folder, T = sys.argv[1], int(sys.argv[2])
    ids = torch.randint(0, 128256, (1, T), generator=torch.Generator().manual_seed(T))

    def hf(dtype, attn=None):
        how = {} if attn is None else dict(attn_implementation=attn)
        return lambda: AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **how)

    def weights_used(model, ids):
        rows = []
        for explicit in (False, True):
            with gptviz.explicit_attention(explicit):
                tr = gptviz.trace(model, ids[0], names=["blocks.*.attn.weights", "blocks.*.attn.v", "blocks.*.attn.z"])
            worst, top = 0.0, 0.0
            for l in range(model.config.n_layer):
                w, v, z = (tr.tensor(f"blocks.{l}.attn.{s}") for s in ("weights", "v", "z"))
                y = (w[None] @ expand_kv(v[None], w.size(0)))[0]  # as the explicit path computes z
                worst, top = max(worst, float((y.float() - z.float()).abs().max())), max(top, float(z.abs().max()))
            rows.append(dict(path="explicit" if explicit else "fused", dtype=str(model.dtype)[6:],
                             max_abs_diff=worst, max_abs_z=top))
            del tr
        return rows

    loads = {  # name: (the model, its paths: False the fused kernel, True the explicit attention)
        "hf float32": (hf(torch.float32), [False]),
        "hf bf16 eager": (hf(torch.bfloat16, "eager"), [False]),
        "hf bf16 sdpa": (hf(torch.bfloat16, "sdpa"), [False]),
        "gptviz bf16": (lambda: gptviz.load(folder, dtype="bfloat16").model, [False, True]),
        "gptviz float32": (lambda: gptviz.load(folder, dtype="float32").model, [False]),
    }
    logits, weights = {}, []
    with torch.no_grad():
        for name, (make, paths) in loads.items():
            model = make().eval()
            x = ids % model.config.vocab_size
            for explicit in paths:
                out = model(x, explicit=True) if explicit else model(x)
                out = out.logits if hasattr(out, "logits") else out
                logits[name + (" explicit" if explicit else "")] = out[0].float()
                del out
            if name.startswith("gptviz"):
                weights += weights_used(model, x)
            del model
            gc.collect()
    top2 = logits["hf float32"].topk(2, -1).values
    rows = [dict(a="float32 top-1 minus top-2 (median)", b="", max_abs_diff=float((top2[:, 0] - top2[:, 1]).median()),
                 argmax_agree=1.0)]
    names = list(logits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            x, y = logits[a], logits[b]
            rows.append(dict(a=a, b=b, max_abs_diff=float((x - y).abs().max()),
                             argmax_agree=float((x.argmax(-1) == y.argmax(-1)).float().mean())))
    print(json.dumps(dict(pairs=rows, weights=weights)))
    """
)


def child(args: list[str]) -> Any:  # the last line a contender printed, as JSON
    p = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, timeout=3600)
    if p.returncode:
        raise SystemExit(f"a contender failed ({args[1]}): {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def compare(a: Path, b: Path) -> dict:
    """Max |Δ logit| and argmax agreement of two [T, V] logits files."""
    x, y = torch.load(a).float(), torch.load(b).float()
    return dict(
        max_abs_diff=float((x - y).abs().max()),
        argmax_agree=float((x.argmax(-1) == y.argmax(-1)).float().mean()),
        T=x.shape[0],
    )


def run(shape: str, folder: Path | None, repeats: int, parts: set[str], lengths: list[int] | None = None) -> dict:
    config = GPTConfig(**SHAPES[shape])
    tmp = Path(tempfile.mkdtemp(prefix="gptviz-bench-load-"))
    try:
        ckpt = folder or tmp / "model"
        written = write_checkpoint(config, ckpt) if folder is None else None
        out: dict = dict(shape=shape, checkpoint_gb=written and round(written / 1e9, 2), loads=[], numbers={})
        T_num = lengths or ([1024] if shape != "tiny" else [64])
        if shape == "8b":
            row = child([CHILD, "gptviz:bfloat16", str(ckpt), str(tmp / "g"), "[]", "trace"])
            out["loads"].append(row)
            return out
        numbers = {"float32", "bfloat16"} if "numbers" in parts else {"bfloat16"} if "bf16" in parts else set()
        roles = {  # bf16: only the bf16 loads, and their numbers (no float32 model of 5 GB)
            f"{tool}:{dtype}": T_num if dtype in numbers else []
            for dtype in ("float32", "bfloat16")
            for tool in ("gptviz", "hf-eager")
            if "load" in parts or "numbers" in parts or dtype in numbers
        }
        for role, lengths in roles.items():
            row = child([CHILD, role, str(ckpt), str(tmp / role.replace(":", "-")), json.dumps(lengths)])
            out["loads"].append(row)
            print(json.dumps(row), flush=True)
        if numbers:
            for dtype in sorted(numbers, reverse=True):
                for T in T_num:
                    a, b = tmp / f"gptviz-{dtype}.T{T}.pt", tmp / f"hf-eager-{dtype}.T{T}.pt"
                    e = tmp / f"gptviz-{dtype}.explicit.T{T}.pt"
                    out["numbers"][f"{dtype} T={T} vs HF eager"] = compare(a, b)
                    out["numbers"][f"{dtype} T={T} explicit vs HF eager"] = compare(e, b)
                    for f in (a, b, e):
                        f.unlink()
        if "reference" in parts:
            ref = child([REFERENCE, str(ckpt), str(T_num[0])])
            out["reference"], out["weights_used"] = ref["pairs"], ref["weights"]
        if "speed" in parts:
            speed = lengths or ([256, 1024] if shape != "tiny" else [16, 64])
            out["speed"] = child([SPEED, str(ckpt), json.dumps(speed), str(repeats)])
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def summary(out: dict) -> list[str]:
    lines = [f"shape {out['shape']}, checkpoint {out['checkpoint_gb']} GB of bf16 shards"]
    loads = {r["role"]: r for r in out["loads"]}
    for r in out["loads"]:
        lines.append(
            f"  load {r['role']:<20} peak {r['peak_gb']:.2f} GB  "
            f"cpu {r['load_cpu_s']:.1f} s  wall {r['load_wall_s']:.1f} s"
            + (
                f"  trace T=512 cpu {r['trace_cpu_s']:.1f} s, peak {r['peak_after_trace_gb']:.2f} GB"
                if "trace_T" in r
                else ""
            )
        )
    for dtype in ("float32", "bfloat16"):
        g, h = loads.get(f"gptviz:{dtype}"), loads.get(f"hf-eager:{dtype}")
        if g and h:
            mapped = "  (HF's bf16 weights stay in the mapped file: a page counts once a forward reads it)"
            lines.append(
                f"  {dtype}: gptviz / HF peak {g['peak_gb'] / h['peak_gb']:.2f}x, "
                f"cpu {g['load_cpu_s'] / h['load_cpu_s']:.2f}x" + (mapped if dtype == "bfloat16" else "")
            )
    for name, n in out["numbers"].items():
        lines.append(f"  {name}: max |Δlogit| {n['max_abs_diff']:.3g}, argmax agreement {n['argmax_agree']:.1%}")
    for r in out.get("reference", []):
        lines.append(f"  {r['a']:>20} vs {r['b']:<20} max |Δ| {r['max_abs_diff']:.4f}  argmax {r['argmax_agree']:.1%}")
    for r in out.get("weights_used", []):
        lines.append(
            f"  trace {r['dtype']} {r['path']:<8} max |weights @ v - z| {r['max_abs_diff']:.3g}"
            f" (max |z| {r['max_abs_z']:.3g})"
        )
    for r in out.get("speed", []):
        lines.append(f"  T={r['T']:<5} {r['run']:<22} cpu {r['cpu_s']:.3f} s  {r['cpu_ratio']:.2f}x HF bf16 sdpa")
    return lines


def main(args: argparse.Namespace) -> None:
    shape = "tiny" if getattr(args, "tiny", False) else getattr(args, "shape", None) or "1b"
    parts = set((getattr(args, "parts", None) or "load,numbers,speed").split(","))
    folder = getattr(args, "checkpoint", None)  # a checkpoint bench --load wrote before: not written again
    out = run(
        shape, Path(folder) if folder else None, getattr(args, "repeats", 3) or 3, parts, getattr(args, "T", None)
    )
    print("\n".join(summary(out)))
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(argparse.Namespace())
