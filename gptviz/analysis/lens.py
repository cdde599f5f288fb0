"""The logit lens: the final norm and LM head applied to an intermediate residual, as if the model
stopped there and predicted.

Sites are the residual stream between sub-layers: embed, then each block's resid_mid and
resid_post (resid_pre of block l is resid_post of block l-1, so it adds no site). Each site goes
through model.transformer.ln_f with its own statistics, exactly as the last one does in the forward
pass; borrowing the last layer's scale for every site (TransformerLens before 2026) shrinks or
swells early residuals and makes their predictions look uniform or sharp for no reason.

At the last site the logits are the model's own, bit for bit: the lens applies the LM head to the run's
ln_f, as the Trace rebuilds its logits, or reads the logits a run holds (an edited run's). One [T, chunk]
buffer serves every site and chunk, and only [T, k] of each leaves the model's device, once, for every
site together at the end (a copy per site would wait on the device at every site).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor

from ..checks import whole
from ..errors import ArgumentError, PromptError
from ..names import point
from ..progress import ProgressFn, Reporter


@dataclass(frozen=True)
class LogitLens:
    """What the lens saw. Fields read as attributes or as keys (lens.top_ids, lens["top_ids"]).

    sites: S names; top_ids, top_probs: [S, T, k], most likely first; target: the token id asked
    about, or None; target_rank [S, T] (0 = top) and target_prob [S, T], or None without a target;
    positions: the prompt positions along the T axis (all of them unless some were asked for)."""

    sites: list[str]
    top_ids: np.ndarray
    top_probs: np.ndarray
    target: int | None = None
    target_rank: np.ndarray | None = None
    target_prob: np.ndarray | None = None
    positions: np.ndarray | None = None

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(f"{key!r}: a logit lens holds {', '.join(self.keys())}")
        return getattr(self, key)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]

    def __contains__(self, key: object) -> bool:
        return key in self.keys()


def lens_sites(n_layer: int) -> list[str]:
    """embed, blocks.0.resid_mid, blocks.0.resid_post, ..., blocks.{L-1}.resid_post: 2L + 1 sites."""
    return ["embed", *(point(site, l) for l in range(n_layer) for site in ("resid_mid", "resid_post"))]


RANK_ROWS = 64  # rows per comparison when ranking the target: a [64, columns] float buffer at a time
# The largest [n, vocabulary chunk] logits buffer: at 128k tokens, 520 rows whole. Narrower chunks cost
# time (a quarter of this: 1.4-1.8x the CPU time of the lens at T = 1,024, for the ranks and top k of each
# chunk), and so did stacking 4-8 sites into one matmul over 8,192-16,384 columns: the matmul gains ~10 %,
# the chunks' merges lose more (1.22-1.36x the bench's floor against 1.24x a site at a time, one run).
CHUNK_BYTES = 256 * 2**20


def _head(model, h: Tensor, out: Tensor, cols: slice) -> Tensor:
    """lm_head(h) for the vocabulary columns `cols`, written into `out` [n, cols]: the head's own matmul,
    bias and final soft-cap (Gemma 2) on those columns only."""
    torch.mm(h, model.lm_head.weight[cols].t(), out=out)
    if model.lm_head.bias is not None:
        out.add_(model.lm_head.bias[cols])
    cap = getattr(model.lm_head, "softcap", 0.0)
    if cap:
        out.div_(cap).tanh_().mul_(cap)
    return out


def _ranks(logits: Tensor, target_logit: Tensor, above: Tensor) -> Tensor:
    """How many tokens score above the target at each row: its rank, 0 = top. [n] int64. The
    comparison is written as 0.0 / 1.0 into `above` [RANK_ROWS, columns], RANK_ROWS rows at a time, never a
    [n, V] one; summing floats skips the copy a bool mask makes to be summed (exact below 2**24 columns)."""
    counts = []
    for a in range(0, logits.size(0), RANK_ROWS):
        rows = logits[a : a + RANK_ROWS]
        mask = torch.gt(rows, target_logit[a : a + RANK_ROWS, None], out=above[: rows.size(0), : rows.size(1)])
        counts.append(mask.sum(-1))
    return torch.cat(counts).long()


def _chunks(V: int, width: int, target: int | None) -> list[slice]:
    """The vocabulary in slices of `width` columns, the target's first (its logit is then known before
    any other column is compared with it)."""
    cuts = [slice(a, min(V, a + width)) for a in range(0, V, width)]
    if target is not None:
        cuts.sort(key=lambda c: not c.start <= target < c.stop)
    return cuts


class _Rows:
    """Each row's top k, log-sum-exp and target rank, gathered over vocabulary chunks: the top k of each
    chunk merged into the running one, the sum of exponentials rescaled to each new maximum (float64)."""

    def __init__(self, n: int, k: int, target: int | None, device) -> None:
        self.k, self.target = k, target
        self.vals: Tensor | None = None
        self.ids: Tensor | None = None
        self.max = torch.full((n,), -torch.inf, dtype=torch.float64, device=device)
        self.sum = torch.zeros(n, dtype=torch.float64, device=device)
        self.t_logit: Tensor | None = None
        self.rank = torch.zeros(n, dtype=torch.long, device=device)

    def add(self, logits: Tensor, cols: slice, above: Tensor) -> None:
        """Take in the logits [n, cols] of one chunk (overwritten: the exponentials are made in place)."""
        vals, ids = logits.topk(min(self.k, logits.size(1)), dim=-1)
        ids += cols.start
        if self.vals is None or self.ids is None:  # the first chunk: nothing to merge with
            self.vals, self.ids = vals, ids
        else:
            vals, ids = torch.cat([self.vals, vals], 1), torch.cat([self.ids, ids], 1)
            self.vals, order = vals.topk(min(self.k, vals.size(1)), dim=-1)
            self.ids = ids.gather(1, order)
        if self.target is not None:
            if self.t_logit is None:  # _chunks puts the target's chunk first
                self.t_logit = logits[:, self.target - cols.start].clone()
            self.rank += _ranks(logits, self.t_logit, above)
        m = self.vals[:, 0].double()  # the largest logit so far, this chunk's included
        # exp(logits - max) overwrites the logits instead of a second buffer. Half-precision logits are
        # exact in float32 and their exponentials are made there: bf16's own exp is off by up to 0.4 %.
        e = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
        chunk_sum = e.sub_(m.to(e.dtype)[:, None]).exp_().sum(-1).double()
        self.sum = self.sum * (self.max - m).exp() + chunk_sum
        self.max = m

    def lse(self) -> Tensor:
        return self.max + self.sum.log()


@torch.no_grad()
def logit_lens(
    model,
    trace,
    k: int = 5,
    target: int | None = None,
    positions=None,
    progress: ProgressFn | None = None,
    chunk: int | None = None,
) -> LogitLens:
    """The lens at every site of `trace` (a run of `model`): the top k tokens with their
    probabilities, and where `target` (a token id) ranks, per site and position.

    positions: only these prompt positions (a page showing 40 of 1,024 pays for 40); the default,
    every position, is the one that reproduces the model's own logits bit for bit. progress: called
    with a gptviz.Progress after each site (raise gptviz.Cancelled from it to stop). chunk: vocabulary
    columns per step (default: as many as fit CHUNK_BYTES for the positions asked); the logits are made
    one chunk at a time and only the top k, the log-sum-exp and the target's rank kept, so a 128k
    vocabulary at T = 1,024 holds 256 MB of logits at a time, not 525 MB (nor the run's own rebuilt)."""
    V = model.config.vocab_size
    k = whole(k, "k (tokens per site)", low=1, high=V)
    if target is not None:
        if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not 0 <= target < V:
            raise PromptError(f"target token id {target!r} is outside the vocabulary [0, {V - 1}]")
        target = int(target)
    T = trace.n_tokens
    pos = np.arange(T) if positions is None else np.asarray(positions).reshape(-1)
    if pos.size and pos.dtype.kind not in "iu":  # 1.5 would become position 1
        raise ArgumentError(f"positions must be whole numbers, got values of type {pos.dtype}")
    if pos.size == 0 or pos.min() < 0 or pos.max() >= T:
        raise PromptError(f"positions must lie in [0, {T - 1}] for this prompt of {T} tokens")
    if chunk is not None:
        chunk = whole(chunk, "chunk (vocabulary columns)", low=1)
    dtype, n = model.lm_head.weight.dtype, len(pos)
    width = max(k, min(V, CHUNK_BYTES // (n * dtype.itemsize))) if chunk is None else chunk
    cuts = _chunks(V, width, target)
    sites = lens_sites(trace.n_layer)
    rows = None if positions is None else torch.as_tensor(pos)
    # An edited run's logits are its own (held): read. Else the last site is the head on the run's ln_f,
    # as the Trace would rebuild its logits (bit for bit), written straight into the buffer, not into a
    # fresh [T, V] copied over.
    read_logits = trace.held("logits") or "ln_f" not in trace
    buffer = torch.empty(n, min(width, V), dtype=dtype, device=model.device)  # rewritten by every chunk
    above = torch.empty(min(n, RANK_ROWS), min(width, V), device=model.device)  # float32: counts
    top_ids, top_probs, ranks, probs = [], [], [], []
    reporter = Reporter(progress, "sites", len(sites))
    reporter.start()
    for name in sites:
        last = name == sites[-1]
        x = trace.tensor(("logits" if read_logits else "ln_f") if last else name)
        x = (x if rows is None else x[rows.to(x.device)]).to(model.device)
        h = x if last else model.transformer.ln_f(x[None])[0]  # [n, C] (or [n, V], the held logits)
        found = _Rows(n, k, target, model.device)
        for cols in cuts:
            out = buffer[:, : cols.stop - cols.start]
            if last and read_logits:
                out.copy_(h[:, cols])
            else:
                _head(model, h, out, cols)
            found.add(out, cols, above)
        assert found.vals is not None and found.ids is not None
        lse = found.lse()[:, None]  # [n, 1]
        top_ids.append(found.ids)  # on the model's device: one copy to the host for every site, at the end
        top_probs.append((found.vals.double() - lse).exp())
        if target is not None:
            assert found.t_logit is not None
            ranks.append(found.rank)
            probs.append((found.t_logit.double() - lse[:, 0]).exp())
        reporter.tick()
    stack = lambda xs: torch.stack(xs).cpu().numpy()  # noqa: E731
    return LogitLens(
        sites=sites,
        top_ids=stack(top_ids),
        top_probs=stack(top_probs),
        target=target,
        target_rank=stack(ranks) if target is not None else None,
        target_prob=stack(probs) if target is not None else None,
        positions=pos,
    )
