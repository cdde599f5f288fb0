"""How fast does gptviz.generate decode, recording every step, against Hugging Face's `generate`?

    gptviz bench --generate [--prompt-tokens 32] [--new-tokens 128] [--repeats 3] [--device cpu] [--tiny]

Both decode greedily from the same prompt with the same weights (gptviz's model converted to a
GPT2LMHeadModel), the same threads and the same device. gptviz records, per new token, its
probability, its top 10 alternatives and its attention row in every layer and head; Hugging Face
returns the ids only. Runs alternate and the median of each is reported, so a busy machine slows
both alike. Prints one JSON line: tokens per second of each, their ratio, and whether the ids agree.
A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from ..config import GPTConfig
from ..generation import generate
from ..model import GPT
from .forward import GPT2_SMALL, TINY, synchronize, to_hf_gpt2


def measure(prompt: int = 32, new: int = 128, repeats: int = 3, device: str = "cpu", shape: dict = GPT2_SMALL) -> dict:
    torch.manual_seed(0)
    model = GPT(GPTConfig(**shape)).to(device).eval()
    hf = to_hf_gpt2(model, "sdpa")
    dev = torch.device(device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, shape["vocab_size"] - 1, (1, prompt), generator=g)  # the last id is HF's eos

    def ours() -> list[int]:
        return generate(model, ids[0].tolist(), new, temperature=0).ids

    def theirs() -> list[int]:
        out = hf.generate(
            ids.to(dev),
            attention_mask=torch.ones_like(ids, device=dev),
            max_new_tokens=new,
            min_new_tokens=new,  # never stop early at eos: the same number of tokens as ours
            do_sample=False,
            pad_token_id=shape["vocab_size"] - 1,
        )
        return out[0].tolist()

    times: dict[str, list[float]] = {"gptviz": [], "hf": []}
    results = {}
    with torch.no_grad():
        ours(), theirs()  # warm-up: allocator, kernels, HF's generation config
        for _ in range(repeats):
            for name, fn in (("gptviz", ours), ("hf", theirs)):
                synchronize(dev)
                t0 = time.perf_counter()
                results[name] = fn()
                synchronize(dev)
                times[name].append(time.perf_counter() - t0)
    rate = {k: new / statistics.median(v) for k, v in times.items()}
    return dict(
        shape={k: shape[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size")},
        device=device,
        threads=torch.get_num_threads(),
        prompt_tokens=prompt,
        new_tokens=new,
        repeats=repeats,
        gptviz_tokens_per_s=round(rate["gptviz"], 1),
        hf_generate_tokens_per_s=round(rate["hf"], 1),
        gptviz_over_hf=round(rate["gptviz"] / rate["hf"], 3),
        same_ids=results["gptviz"] == results["hf"],
        gptviz_records="per step: probability, top 10, attention row in every layer and head",
        machine=f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
    )


def main(args: argparse.Namespace) -> None:
    shape = {**(TINY if args.tiny else GPT2_SMALL)}
    print(json.dumps(measure(args.prompt_tokens, args.new_tokens, args.repeats, args.device, shape)), flush=True)
