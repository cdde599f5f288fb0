"""How fast does gptviz.generate decode, recording every step, against Hugging Face's `generate`?

    gptviz bench --generate [--prompt-tokens 32] [--new-tokens 128] [--repeats 3] [--threads N] [--device cpu] [--tiny]

Two shapes with random weights: GPT-2 small (against transformers' GPT2LMHeadModel) and SmolLM2-135M
(a Llama: 30 layers, 9 query heads on 3 key/value heads, tied 49,152 vocabulary; against its
LlamaForCausalLM). gptviz's block weights are laid out as a load lays them out: GPT-2's as its file
stores them, SmolLM2's as a float32 load of its bf16 file (as the Hub ships it) writes them. Each
pair decodes greedily from the same prompt with the same weights, the same threads and the same
device. gptviz records, per new token, its probability, its top 10 alternatives
and its attention row in every layer and head; Hugging Face returns the ids only. Runs alternate and
the median of each is reported, in wall-clock time and in this process's CPU time (which leaves out
time spent waiting for a busy core), so a busy machine slows both alike; and the ratio of the fastest
run of each (`gptviz_over_hf_best`). Without --threads both run at torch's default threads, what a user
gets. Prints one JSON line per
shape: tokens per second of each, their ratio, and whether the ids agree.
A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics

import torch

from ..config import GPTConfig
from ..decoding import in_out_layout, is_block_linear
from ..generation import generate
from ..model import GPT
from ..threads import use_threads
from .families import SMOLLM2_135M, timed, to_hf_llama
from .families import TINY as TINY_LLAMA
from .forward import GPT2_SMALL, TINY, to_hf_gpt2

SHAPES = {"gpt2-small": (GPT2_SMALL, TINY), "smollm2-135m": (SMOLLM2_135M, TINY_LLAMA)}


def measure(
    prompt: int = 32,
    new: int = 128,
    repeats: int = 3,
    device: str = "cpu",
    shape: str = "gpt2-small",
    tiny: bool = False,
) -> dict:
    config = SHAPES[shape][1 if tiny else 0]
    torch.manual_seed(0)
    dev = torch.device(device)
    model = GPT(GPTConfig(**config)).to(dev).eval()
    # block weights laid out as a load lays them out (decoding.in_out_layout): an imported GPT-2 as its file stores
    # them (families.conv1d); a Llama as a float32 load of a bf16 file, what the Hub ships, writes them on the CPU
    if shape.startswith("gpt2") or dev.type == "cpu":
        for name, p in model.named_parameters():
            if is_block_linear(name):
                p.data = in_out_layout(p.data)
    hf = to_hf_gpt2(model, "sdpa") if shape.startswith("gpt2") else to_hf_llama(model, "sdpa")
    eos = config["vocab_size"] - 1  # GPT-2's eos; never drawn into the prompt
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, eos, (1, prompt), generator=g)
    results: dict[str, list[int]] = {}

    def ours() -> None:
        results["gptviz"] = generate(model, ids[0].tolist(), new, temperature=0, stop_at_eos=False).ids

    def theirs() -> None:
        out = hf.generate(
            ids.to(dev),
            attention_mask=torch.ones_like(ids, device=dev),
            max_new_tokens=new,
            min_new_tokens=new,  # never stop early at eos: the same number of tokens as ours
            do_sample=False,
            pad_token_id=eos,
        )
        results["hf"] = out[0].tolist()

    with torch.no_grad():
        wall, cpu = timed({"gptviz": ours, "hf": theirs}, repeats, dev)  # a warm-up call each, then interleaved
    rate = {k: new / statistics.median(v) for k, v in wall.items()}
    cpu_rate = {k: new / statistics.median(v) for k, v in cpu.items()}
    return dict(
        shape=shape + (" (tiny)" if tiny else ""),
        sizes={k: config[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size")},
        device=device,
        threads=torch.get_num_threads(),
        prompt_tokens=prompt,
        new_tokens=new,
        repeats=repeats,
        gptviz_tokens_per_s=round(rate["gptviz"], 1),
        hf_generate_tokens_per_s=round(rate["hf"], 1),
        gptviz_over_hf=round(rate["gptviz"] / rate["hf"], 3),
        gptviz_over_hf_cpu=round(cpu_rate["gptviz"] / cpu_rate["hf"], 3),
        # the fastest run of each: on a shared machine the one least slowed by other jobs
        gptviz_over_hf_best=round(min(wall["hf"]) / min(wall["gptviz"]), 3),
        all_seconds={k: [round(s, 3) for s in v] for k, v in wall.items()},
        all_cpu_seconds={k: [round(s, 3) for s in v] for k, v in cpu.items()},
        same_ids=results["gptviz"] == results["hf"],
        gptviz_records="per step: probability, top 10, attention row in every layer and head",
        load_average=[round(x, 2) for x in os.getloadavg()],
        machine=f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
    )


def main(args: argparse.Namespace) -> None:
    use_threads(getattr(args, "threads", None))
    for shape in SHAPES:
        result = measure(args.prompt_tokens, args.new_tokens, args.repeats, args.device, shape, args.tiny)
        print(json.dumps(result), flush=True)
