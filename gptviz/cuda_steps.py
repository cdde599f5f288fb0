"""Decoding on a GPU from one captured step.

A step of decoding runs one token through every layer: a few hundred small kernels, each launched by
Python. On a GPU the launches, not the arithmetic, are then the cost (a 1B model's step is ~0.5 ms of
work behind ~10 ms of launching). Here the step is captured once as a CUDA graph and replayed for each
new token: the token and its position live in device buffers the graph reads, the keys and values in a
StaticKVCache of fixed size, and the graph also stacks every layer's attention row of the new token,
so the per-step capture (generate's Step.attention) costs one copy, not a launch per layer.

The graph runs the same kernels as the eager step (explicit attention), over the cache's every slot
with the empty ones masked: the same numbers up to the order of a few sums. generation.generate uses it
on CUDA when no intervention is asked for and the context fits in block_size (`USE` turns it off).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .decoding import KVCache, StaticKVCache
from .model import GPT

USE = True  # generate's captured step on CUDA; False: the eager step everywhere (benchmarks compare both)
MIN_TOKENS = 4  # a capture costs about two eager steps: below this many new tokens it does not pay


def usable(model: GPT, new_tokens: int, interventions: bool) -> bool:
    return USE and model.device.type == "cuda" and new_tokens >= MIN_TOKENS and not interventions


class CapturedStep:
    """step(new) -> the logits after token `new` ([V], the graph's own buffer, overwritten by the next
    step); step.attention(t): that token's attention row over the first t keys, [L, H, t], on the CPU."""

    def __init__(self, model: GPT, cache: KVCache, capacity: int, rows: list[Tensor]) -> None:
        """cache: the prompt's; capacity: the positions the generation will fill at most; rows: the list the
        attention-row hooks of generation fill (the graph records them once, at capture)."""
        self.model = model
        self.static = StaticKVCache(cache, capacity)
        self.token = torch.zeros(1, 1, dtype=torch.long, device=model.device)
        side = torch.cuda.Stream(model.device)
        side.wait_stream(torch.cuda.current_stream(model.device))
        with torch.cuda.stream(side):  # a warm-up (cuBLAS's workspaces, the allocator); the first replay
            self._run()  # writes the same cache slot again, with the real token
        torch.cuda.current_stream(model.device).wait_stream(side)
        rows.clear()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.logits = self._run()
            self._attention = torch.stack([r[0] for r in rows])  # (L, H, capacity)
        rows.clear()

    def _run(self) -> Tensor:
        return self.model(self.token, explicit=True, cache=self.static)[0, -1]  # type: ignore[arg-type]

    def __call__(self, new: int) -> Tensor:
        self.token.fill_(new)
        self.graph.replay()
        self.static.advance()
        return self.logits

    def attention(self, t: int) -> Tensor:
        return self._attention[:, :, :t].float().cpu()
