"""Generation: continue a prompt token by token with a KV cache, and record every step.

The model's one forward path takes the cache as an input (gptviz.decoding.KVCache): the prompt runs
once, then each step runs only the new token. A step runs on the explicit attention path, so its
attention weights exist as a tensor; a forward hook on each layer's `attn.weights` probe keeps the
new token's row. The record of a step therefore costs what the step costs, never a re-run.

Past the model's block_size, `crop_context=True` does what nanoGPT's sample.py does: the context
is cropped to its last block_size tokens and generation goes on. Positions are absolute (learned or
sinusoidal), so a kept key would sit at another position in the cropped window: every step past
block_size re-runs the whole window, and its logits equal a fresh forward over it. The step's
attention row then covers that window only (`Step.window_start` says where it begins).

Sampling draws from a torch.Generator seeded from (seed, position), never the global RNG: the
token at a position depends only on the seed and the distribution there, so the same seed gives
the same text, whether the tokens are asked for one at a time or n at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from . import cuda_steps
from .capture import as_ids, edited
from .decoding import KVCache
from .devices import free_memory
from .errors import PromptError
from .interventions import HEAD_SITES, Intervention, InterventionError, check
from .model import GPT
from .names import parse
from .progress import ProgressFn, Reporter

TOP = 10  # alternatives kept per step
# A [C, V] copy of the head (LMHead.one_row_head, decoding.py) saves 2-3 ms of CPU time a token on GPT-2 small and
# SmolLM2-135M; making it costs 65-80 ms, some 25 tokens' saving: below this many it does not pay.
HEAD_COPY_MIN_TOKENS = 32
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
    attention: np.ndarray  # [L, H, t]: the new token's attention row in every layer and head over ids[window_start:]
    position: int  # where it stands in `ids`
    window_start: int = 0  # the first position its attention row reads: > 0 once a sliding window has cropped

    @property
    def window(self) -> range:
        """The positions of `ids` its attention row covers (position + 1 - window_start of them)."""
        return range(self.window_start, self.position + 1)


@dataclass
class Generation(_Record):
    """What generate returns: the ids (prompt + new tokens) and one Step per new token."""

    ids: list[int]
    steps: list[Step] = field(default_factory=list)
    prompt_len: int = 0
    seed: int | None = None  # the seed used (drawn at random when none was given); None when greedy
    stopped: str = ""  # why fewer tokens than asked came out: "eos" (the model's end-of-text token), a
    # sentence naming the model's block_size; empty when every token asked for came out
    crop_context: bool = False  # whether the context was cropped to its last block_size tokens as it grew

    @property
    def new_ids(self) -> list[int]:
        return self.ids[self.prompt_len :]

    @property
    def stop_reason(self) -> str:
        """Why generation ended, as a word: "eos", "block_size" or "length" (max_new_tokens came out)."""
        if self.stopped in ("", "eos"):
            return self.stopped or "length"
        return "block_size"

    def __iter__(self):
        """`ids, steps = gptviz.generate(...)`: the record unpacks into its two main fields."""
        return iter((self.ids, self.steps))


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


class _Edits:
    """Interventions applied in every forward pass of a generation. A pass covers the positions
    [first, first + T) of `ids`; an intervention's positions are positions of `ids`, so each pass
    applies the ones that fall inside it (none named: all of its tokens)."""

    def __init__(self, interventions: tuple[Intervention, ...]):
        for iv in interventions:
            if iv.positions is not None and min(iv.positions) < 0:
                raise InterventionError(
                    f"{iv.describe()}: in generate, positions are positions of ids (0 = the first token); "
                    "a negative one would move as the text grows"
                )
        self.by_name: dict[str, list[Intervention]] = {}
        for iv in interventions:
            self.by_name.setdefault(iv.name, []).append(iv)
        self.first = 0
        # every edit acts on each token alone: a step may run the new token only, on the cached keys
        self.cached = all(iv.pointwise for iv in interventions)
        self.explicit = any(iv.explicit for iv in interventions)
        self.reads = sorted({iv.reads for iv in interventions if iv.reads is not None})

    def _local(self, iv: Intervention, T: int) -> Intervention | None:
        if iv.positions is None:
            return iv
        inside = [p - self.first for p in iv.positions if self.first <= p < self.first + T]
        return dataclasses.replace(iv, positions=tuple(inside)) if inside else None

    def hooks(self) -> dict:
        def for_name(name: str, ivs: list[Intervention]):
            batched = parse(name)[1] != "attn.mask"
            tok_axis = (1 if parse(name)[1] in HEAD_SITES else 0) + (1 if batched else 0)

            def fn(value: Tensor) -> Tensor:
                for iv in ivs:
                    local = self._local(iv, value.size(tok_axis))
                    if local is not None:
                        value = local.apply(value, batched)
                return value

            return fn

        return {name: for_name(name, ivs) for name, ivs in self.by_name.items()}


@torch.no_grad()
def generate(
    model: GPT,
    ids: Sequence[int] | Tensor | np.ndarray,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    crop_context: bool = False,
    step_lock: contextlib.AbstractContextManager | None = None,
    stop_at_eos: bool = True,
    eos_token_id: int | Sequence[int] | None = None,
    progress: ProgressFn | None = None,
    interventions: Sequence[Intervention] = (),
) -> Generation:
    """Continue `ids` by up to max_new_tokens tokens, one at a time, with a KV cache.

    temperature=0 is greedy (the most likely token, as Hugging Face's do_sample=False); otherwise a
    token is drawn from softmax(logits / temperature), restricted to the top_k most likely tokens
    and to the smallest set reaching probability top_p, if given. seed: the same seed gives the same
    text (a random one is drawn, and recorded, when None); the global RNG is never touched.

    Returns a Generation: `ids` (prompt + new), and per new token a Step with `id`, `prob` (its
    probability before temperature), `top` (the TOP most likely tokens with their probabilities) and
    `attention` ([L, H, t], its own attention row in every layer and head).

    Without crop_context, generation stops at the model's block_size, the longest context it reads,
    and `stopped` says so. With it, the context is cropped to its last block_size tokens (a longer
    prompt too) and generation goes on, as nanoGPT's sample.py does; each step past block_size
    re-runs the cropped window (absolute positions move), so its logits equal a fresh forward over it.

    step_lock: held around each forward pass (the prompt's, then each step's) and released between
    them: a server that runs one pass at a time for many sessions passes its lock, so a long
    generation makes other sessions wait one step, not all of it. Re-entered once per step.

    interventions: any of the contract's (gptviz.steer, edit_features, ablate, ...), applied in every
    forward pass: the prompt's and each step's, with the KV cache and with a cropped context alike.
    Their positions are positions of `ids` (all by default). Edits that act on each token alone
    (steer, edit_features, a zero or a number) keep the cache: the cached keys were computed from
    edited values, as a re-run would compute them. Others (a mean over the prompt, a patch, a
    function of the whole value) re-run the whole context at every step.

    stop_at_eos: stop after the model's end-of-text token (eos_token_id, else the config's, read from
    config.json or generation_config.json), as Hugging Face's generate does; `stopped` is then "eos".
    progress: called after each new token (gptviz.Progress); raising gptviz.Cancelled from it stops."""
    _check(max_new_tokens, temperature, top_k, top_p, seed)
    eos = _eos_set(model, eos_token_id) if stop_at_eos else frozenset()
    edits = _Edits(check(interventions, model.config.n_layer))
    idx = as_ids(ids, model.device)  # (1, P)
    block = model.config.block_size
    P = idx.size(1)
    model.check_ids(idx[:, -block:] if crop_context else idx)
    n = max_new_tokens if crop_context else min(max_new_tokens, block - P)
    greedy = temperature == 0
    if seed is None and not greedy:
        seed = secrets.randbits(63)
    out = Generation(ids=idx[0].tolist(), prompt_len=P, seed=None if greedy else seed, crop_context=crop_context)
    if n < max_new_tokens:
        out.stopped = (
            f"stopped after {n} new token(s): the model reads at most block_size={block} tokens and the prompt has {P}"
        )
    if n == 0:
        return out
    cache = KVCache(model.config.n_layer, capacity=min(P + n, block))
    guard = step_lock if step_lock is not None else contextlib.nullcontext()
    reporter = Reporter(progress, "tokens", n)
    reporter.start()
    with (
        edited(model, edits.hooks(), edits.reads),  # edits first: the rows see edited maps
        _attention_rows(model) as rows,
        _decoding_head(model, n),
    ):
        edits.first = max(0, P - block)
        with guard:  # the prompt (its last block) runs once
            logits = model(idx[:, -block:], explicit=edits.explicit, cache=cache)[0, -1]  # (V,)
        rows.clear()
        captured = None
        if cuda_steps.usable(model, n, bool(edits.by_name)) and P + n <= block:
            with guard:
                captured = cuda_steps.CapturedStep(model, cache, P + n, rows)
        for _ in range(n):
            probs = torch.softmax(logits.float(), dim=-1)  # (V,), before temperature
            if greedy:
                new = int(torch.argmax(logits))
            else:
                dist = filtered_probs(logits, temperature, top_k, top_p).cpu()
                assert seed is not None  # drawn above whenever temperature > 0
                new = int(torch.multinomial(dist, 1, generator=step_generator(seed, len(out.ids))))
            top_p_, top_i = torch.topk(probs, min(TOP, probs.numel()))
            position = len(out.ids)
            start = max(0, position + 1 - block)  # the first token the context keeps, the new one included
            edits.first = position if start == 0 and edits.cached else start
            with guard:
                if captured is not None:  # a GPU replays one captured step (cuda_steps.py)
                    logits = captured(new)
                elif start == 0 and edits.cached:  # within block_size: only the new token runs, on the cache
                    logits = model(torch.tensor([[new]], device=idx.device), explicit=True, cache=cache)[0, -1]
                else:  # cropped (every kept token moves one position back) or an edit of the whole context
                    window = torch.tensor([out.ids[start:] + [new]], device=idx.device)  # (1, block)
                    logits = model(window, explicit=True)[0, -1]
            if captured is not None:
                attention = captured.attention(position + 1).numpy()  # (L, H, position + 1)
            else:
                attention = torch.stack([r[0] for r in rows]).float().cpu().numpy()  # (L, H, position + 1 - start)
            rows.clear()
            out.steps.append(
                Step(
                    id=new,
                    prob=float(probs[new]),
                    top=list(zip(top_i.tolist(), top_p_.tolist())),
                    attention=attention,
                    position=position,
                    window_start=start,
                )
            )
            out.ids.append(new)
            reporter.tick()
            if new in eos:
                out.stopped = "eos"
                break
    return out


def _decoding_head(model: GPT, n: int) -> contextlib.AbstractContextManager:
    """The head laid out for one-row products (LMHead.one_row_head, decoding.py) where that is faster and pays for its
    copy: float32 on the CPU, n tokens or more, and the copy within a quarter of the free memory."""
    w = model.lm_head.weight
    if w.device.type != "cpu" or w.dtype != torch.float32 or n < HEAD_COPY_MIN_TOKENS:
        return contextlib.nullcontext()  # (a short Generate reads no free memory)
    free = free_memory(w.device)
    if free is None or 4 * w.numel() * w.element_size() > free:
        return contextlib.nullcontext()
    return model.lm_head.one_row_head()


def _eos_set(model: GPT, eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    ids = model.config.eos_token_id if eos_token_id is None else eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise PromptError(f"eos_token_id must be token ids (whole numbers), got {eos_token_id!r}")
    return frozenset(ids)
