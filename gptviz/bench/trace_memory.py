"""`python -m gptviz bench --trace-memory`: the bytes a Trace of a Llama-3.2-1B-shaped model holds at
T = 1,024 (random weights, built in memory), in full and for the dashboard's Overview (with --pages:
for every page that names what it reads, a forward pass each).

The sixteen blocks share one block's weights, so the model takes 1.3 GB instead of 5 GB: a Trace's size
depends on the shapes, not on the values. It also prints what the same Trace held before the logits
were rebuilt from ln_f and resid_mid from resid_pre and z. A benchmark prints numbers; it asserts nothing.
"""

from __future__ import annotations

from typing import cast

import torch

from ..capture import trace
from ..config import GPTConfig
from ..dashboard.pages import PAGES, reads, run_names
from ..model import GPT, Blocks
from .families import LLAMA
from .load import SHAPES

# load.py's Llama-3.2-1B, with more positions than T needs (gptviz.limits caps them; the real model reads 131,072)
LLAMA_1B = dict(SHAPES["1b"], block_size=16384)
TINY = dict(LLAMA, vocab_size=97, block_size=64, n_layer=2, n_embd=32, n_head=4, n_kv_head=2, n_inner=64)


def shared_blocks(config: GPTConfig) -> GPT:
    """A random model whose blocks all use block 0's parameters (built one block at a time)."""
    one = GPTConfig(**{**config.__dict__, "n_layer": 1})
    model = GPT(one).eval()
    # GPT builds transformer.h as a ModuleList; nn.Module's __getattr__ types it Tensor | Module
    blocks: list[torch.nn.Module] = [cast(torch.nn.ModuleList, model.transformer.h)[0]]
    for _ in range(1, config.n_layer):
        block = cast(torch.nn.ModuleList, GPT(GPTConfig(**{**one.__dict__, "vocab_size": 1})).transformer.h)[0]
        block.load_state_dict(blocks[0].state_dict(), assign=True)  # block 0's tensors, not copies
        blocks.append(block)
    model.transformer.h = Blocks(blocks)
    model.config = config
    return model


def main(args) -> None:
    shape = TINY if args.tiny else LLAMA_1B
    T = 16 if args.tiny else 1024
    model = shared_blocks(GPTConfig(**shape))
    ids = torch.randint(0, shape["vocab_size"], (T,), generator=torch.Generator().manual_seed(0))
    GB = 1e9
    full = trace(model, ids)
    logits = T * shape["vocab_size"] * 4
    print(f"Llama-3.2-1B shape ({shape['n_layer']} layers, C {shape['n_embd']}, V {shape['vocab_size']:,}), T = {T}")
    print(f"  full trace:      {full.nbytes / GB:.3f} GB held ({len(full)} names)")
    resid_mid = shape["n_layer"] * T * shape["n_embd"] * 4
    before = full.nbytes + logits - shape["vocab_size"] * 4 + resid_mid
    print(f"  as before:       {before / GB:.3f} GB (the [T, V] logits and every resid_mid held)")
    del full
    names = reads("")
    if names is None:  # pages.reads: None means the page reads everything
        raise SystemExit("the Overview page no longer names what it reads; nothing smaller to measure")
    overview = trace(model, ids, names=names)
    print(f"  Overview's run:  {overview.nbytes / GB:.3f} GB held (names={list(names)})")
    del overview
    if getattr(args, "pages", False):
        page_runs(model, ids)


def page_runs(model: GPT, ids: torch.Tensor) -> None:
    """What the dashboard's run holds on each page that names what it reads (a model above
    $GPTVIZ_FULL_RUN_MB), each run alone: one forward pass a page."""
    for page in PAGES:
        if page.reads is None:
            continue
        t = trace(model, ids, names=run_names(page.reads, model.config.n_layer))
        print(f"  {page.title + ' page:':<22} {t.nbytes / 1e9:.3f} GB held")
        del t
