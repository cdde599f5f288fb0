"""Generation: continue a prompt token by token with a KV cache, and record every step.

The model's one forward path takes the cache as an input (gptviz.model.KVCache): the prompt runs
once, then each step runs only the new token. A step runs on the explicit attention path, so its
attention weights exist as a tensor; a forward hook on each layer's `attn.weights` probe keeps the
new token's row. The record of a step therefore costs what the step costs, never a re-run.

Sampling draws from a torch.Generator seeded from (seed, position), never the global RNG: the
token at a position depends only on the seed and the distribution there, so the same seed gives
the same text, whether the tokens are asked for one at a time or n at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .capture import as_ids
from .errors import PromptError
from .model import GPT, KVCache

TOP = 10  # alternatives kept per step
_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant (the golden ratio): spreads (seed, position) over seeds

# The rows list of the generate call running in this thread: hooks on a shared model see every
# thread's forward pass and keep only their own call's rows.
_rows: contextvars.ContextVar[list[Tensor] | None] = contextvars.ContextVar("gptviz_generation_rows", default=None)


class _Record:
    """Item access as well as attributes: record["ids"] == record.ids."""

    def __getitem__(self, name: str):
        return getattr(self, name)


@dataclass
class Step(_Record):
    """One generated token."""

    id: int
    prob: float  # its probability under the model, before temperature, top-k and top-p
    top: list[tuple[int, float]]  # the most likely tokens (id, probability before temperature), best first
    attention: np.ndarray  # [L, H, t]: the new token's attention row in every layer and head, t = its position + 1
    position: int  # where it stands in `ids`


@dataclass
class Generation(_Record):
    """What generate returns: the ids (prompt + new tokens) and one Step per new token."""

    ids: list[int]
    steps: list[Step] = field(default_factory=list)
    prompt_len: int = 0
    seed: int | None = None  # the seed used (drawn at random when none was given); None when greedy
    stopped: str = ""  # why fewer tokens than asked came out (the model's block_size), else empty

    @property
    def new_ids(self) -> list[int]:
        return self.ids[self.prompt_len :]


def step_generator(seed: int, position: int) -> torch.Generator:
    """The CPU generator that draws the token at `position` for `seed`."""
    return torch.Generator().manual_seed((seed * _MIX + position) % (1 << 63))


def filtered_probs(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """The distribution a token is sampled from: softmax(logits / temperature) over the top_k most
    likely tokens and, within those, the smallest set whose probability reaches top_p; renormalised.
    logits: [V]. The most likely token always stays."""
    # float64, less the largest logit first: logits / 1e-45 overflow to inf, and inf − inf is NaN, where
    # a temperature that small means a one-hot on the best token (the shift changes no probability)
    z = logits.double()  # (V,)
    z = (z - z.max()) / temperature
    if top_k is not None and top_k < z.numel():
        kth = torch.topk(z, top_k).values[-1]
        z = z.masked_fill(z < kth, float("-inf"))
    probs = torch.softmax(z, dim=-1)  # (V,)
    if top_p is not None and top_p < 1.0:
        p, order = torch.sort(probs, descending=True)
        before = torch.cumsum(p, dim=0) - p  # mass of the tokens ranked above each one
        drop = order[before >= top_p]  # the first token has 0 before it: always kept
        probs = probs.index_fill(0, drop, 0.0)
        probs = probs / probs.sum()
    return probs.float()


def _check(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None, seed: int | None) -> None:
    def is_int(x: object) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if not is_int(max_new_tokens) or max_new_tokens < 0:
        raise PromptError(f"max_new_tokens must be a whole number >= 0, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < 1e6:
        raise PromptError(f"temperature must be a number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (not is_int(top_k) or top_k < 1):
        raise PromptError(f"top_k must be a whole number >= 1 or None, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise PromptError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")
    if seed is not None and not is_int(seed):
        raise PromptError(f"seed must be a whole number or None, got {seed!r}")


@contextlib.contextmanager
def _attention_rows(model: GPT) -> Iterator[list[Tensor]]:
    """Within this block, each forward pass of this thread appends every layer's last attention row
    (B, H, t) to the yielded list, in layer order (the explicit path must be on)."""
    rows: list[Tensor] = []

    def keep(mod, args, output):
        if _rows.get() is rows:
            rows.append(output[:, :, -1])  # (B, H, t): the newest token's row

    handles = [block.attn.weights.register_forward_hook(keep) for block in model.transformer.h]
    token = _rows.set(rows)
    try:
        yield rows
    finally:
        for h in handles:
            h.remove()
        _rows.reset(token)


@torch.no_grad()
def generate(
    model: GPT,
    ids: Sequence[int] | Tensor | np.ndarray,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
) -> Generation:
    """Continue `ids` by up to max_new_tokens tokens, one at a time, with a KV cache.

    temperature=0 is greedy (the most likely token, as Hugging Face's do_sample=False); otherwise a
    token is drawn from softmax(logits / temperature), restricted to the top_k most likely tokens
    and to the smallest set reaching probability top_p, if given. seed: the same seed gives the same
    text (a random one is drawn, and recorded, when None); the global RNG is never touched.

    Returns a Generation: `ids` (prompt + new), and per new token a Step with `id`, `prob` (its
    probability before temperature), `top` (the TOP most likely tokens with their probabilities) and
    `attention` ([L, H, t], its own attention row in every layer and head). Generation stops at the
    model's block_size, the longest context it reads, and `stopped` says so."""
    _check(max_new_tokens, temperature, top_k, top_p, seed)
    idx = as_ids(ids, model.device)  # (1, P)
    model.check_ids(idx)
    block = model.config.block_size
    P = idx.size(1)
    n = min(max_new_tokens, block - P)
    greedy = temperature == 0
    if seed is None and not greedy:
        seed = secrets.randbits(63)
    out = Generation(ids=idx[0].tolist(), prompt_len=P, seed=None if greedy else seed)
    if n < max_new_tokens:
        out.stopped = (
            f"stopped after {n} new token(s): the model reads at most block_size={block} tokens and the prompt has {P}"
        )
    if n == 0:
        return out
    cache = KVCache(model.config.n_layer, capacity=P + n)
    with _attention_rows(model) as rows:
        logits = model(idx, cache=cache)[0, -1]  # (V,): the prompt runs once, fused
        rows.clear()
        for _ in range(n):
            probs = torch.softmax(logits.float(), dim=-1)  # (V,), before temperature
            if greedy:
                new = int(torch.argmax(logits))
            else:
                dist = filtered_probs(logits, temperature, top_k, top_p).cpu()
                new = int(torch.multinomial(dist, 1, generator=step_generator(seed, len(out.ids))))
            top_p_, top_i = torch.topk(probs, min(TOP, probs.numel()))
            logits = model(torch.tensor([[new]], device=idx.device), explicit=True, cache=cache)[0, -1]
            attention = torch.stack([r[0] for r in rows]).float().cpu().numpy()  # (L, H, t)
            rows.clear()
            out.steps.append(
                Step(
                    id=new,
                    prob=float(probs[new]),
                    top=list(zip(top_i.tolist(), top_p_.tolist())),
                    attention=attention,
                    position=len(out.ids),
                )
            )
            out.ids.append(new)
    return out
