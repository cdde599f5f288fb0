"""The demo model: a small random-weight GPT over printable ASCII, built in memory. Every view
works on it, none of its predictions mean anything: the fallback when nothing is shipped."""

from __future__ import annotations

import torch

from ..config import GPTConfig
from ..model import GPT
from ..tokenizers import CharTokenizer
from .bundle import Bundle, LoadReport, finish

DEMO_CHARS = sorted({chr(c) for c in range(32, 127)} | {"\n", "\t"})


def demo_bundle(device: str | torch.device = "cpu") -> Bundle:
    config = GPTConfig(vocab_size=len(DEMO_CHARS), block_size=256, n_layer=4, n_head=4, n_embd=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(config)
    report = LoadReport(path="(built in memory)", format="random weights (demo)", tokenizer="char")
    card = {"note": "random weights: no shipped checkpoint was found; the views work, the predictions mean nothing"}
    return Bundle(finish(model, report, torch.device(device)), CharTokenizer(DEMO_CHARS), report, card)
