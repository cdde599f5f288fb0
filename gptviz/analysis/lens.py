"""The logit lens: the final norm and LM head applied to an intermediate residual, as if the model
stopped there and predicted.

Sites are the residual stream between sub-layers: embed, then each block's resid_mid and
resid_post (resid_pre of block l is resid_post of block l-1, so it adds no site). Each site goes
through model.transformer.ln_f with its own statistics, exactly as the last one does in the forward
pass; borrowing the last layer's scale for every site (TransformerLens before 2026) shrinks or
swells early residuals and makes their predictions look uniform or sharp for no reason.

At the last site the logits are the model's own, bit for bit: the lens reads the run's logits
there. One [T, V] buffer serves every site, and only [T, k] of each leaves the model's device.
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


RANK_ROWS = 64  # rows per comparison when ranking the target: a [64, V] bool mask at a time


def _site_logits(model, x: Tensor, out: Tensor) -> Tensor:
    """lm_head(ln_f(x)) for one site [n, C], written into `out` [n, V]: one buffer serves every site,
    so no site pays for a fresh [n, V] allocation (at T = 1,024 and GPT-2's vocabulary, 206 MB of
    new pages each time, 10% of the matmul)."""
    h = model.transformer.ln_f(x[None])[0]  # [n, C]: the norm with this site's own statistics
    torch.mm(h, model.lm_head.weight.t(), out=out)
    if model.lm_head.bias is not None:
        out.add_(model.lm_head.bias)
    cap = getattr(model.lm_head, "softcap", 0.0)
    if cap:  # the model's own final soft-cap (Gemma 2), as its head applies it
        out.div_(cap).tanh_().mul_(cap)
    return out


def _ranks(logits: Tensor, target_logit: Tensor) -> Tensor:
    """How many tokens score above the target at each row: its rank, 0 = top. [n] int64. The
    comparison is made RANK_ROWS rows at a time into one small mask, never a [n, V] one."""
    n = logits.size(0)
    above = torch.empty(min(n, RANK_ROWS), logits.size(1), dtype=torch.bool, device=logits.device)
    counts = []
    for a in range(0, n, RANK_ROWS):
        rows = logits[a : a + RANK_ROWS]
        mask = torch.gt(rows, target_logit[a : a + RANK_ROWS, None], out=above[: rows.size(0)])
        counts.append(mask.sum(-1, dtype=torch.int32))
    return torch.cat(counts).long()


@torch.no_grad()
def logit_lens(
    model, trace, k: int = 5, target: int | None = None, positions=None, progress: ProgressFn | None = None
) -> LogitLens:
    """The lens at every site of `trace` (a run of `model`): the top k tokens with their
    probabilities, and where `target` (a token id) ranks, per site and position.

    positions: only these prompt positions (a page showing 40 of 1,024 pays for 40); the default,
    every position, is the one that reproduces the model's own logits bit for bit. progress: called
    with a gptviz.Progress after each site (raise gptviz.Cancelled from it to stop)."""
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
    sites = lens_sites(trace.n_layer)
    top_ids, top_probs, ranks, probs = [], [], [], []
    rows = None if positions is None else torch.as_tensor(pos)
    logits = None  # [n, V]: one buffer, rewritten by every site
    reporter = Reporter(progress, "sites", len(sites))
    reporter.start()
    for name in sites:
        # the last site is the model's own output: its logits are the run's, read, not recomputed
        x = trace.tensor("logits" if name == sites[-1] else name)
        x = (x if rows is None else x[rows.to(x.device)]).to(model.device)
        if logits is None:
            logits = torch.empty(x.size(0), V, dtype=model.lm_head.weight.dtype, device=model.device)
        if name == sites[-1]:
            logits.copy_(x)
        else:
            _site_logits(model, x, logits)
        vals, ids = logits.topk(k, dim=-1)
        if target is not None:
            t_logit = logits[:, target].clone()
            ranks.append(_ranks(logits, t_logit).cpu())
        # log-sum-exp in place: exp(logits - max) overwrites the logits instead of a second [T, V]
        m = vals[:, :1]
        lse = (m[:, 0].double() + logits.sub_(m).exp_().sum(-1).double().log())[:, None]  # [T, 1]
        top_ids.append(ids.cpu())
        top_probs.append((vals.double() - lse).exp().cpu())
        if target is not None:
            probs.append((t_logit.double() - lse[:, 0]).exp().cpu())
        reporter.tick()
    stack = lambda xs: torch.stack(xs).numpy()  # noqa: E731
    return LogitLens(
        sites=sites,
        top_ids=stack(top_ids),
        top_probs=stack(top_probs),
        target=target,
        target_rank=stack(ranks) if target is not None else None,
        target_prob=stack(probs) if target is not None else None,
        positions=pos,
    )
