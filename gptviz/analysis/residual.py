"""The residual stream: a statistic over C at every site and position, what each sub-layer adds,
and plain-language flags for runaway growth. Computed where the Trace lives (its device); only
the small results come back."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..names import RESID_SITES, point
from ..record import Trace
from .values import exact

GROWTH_LIMIT = 3.0  # a block (after the first) that multiplies the residual norm by more is flagged
NORM_LIMIT = 1e4  # a residual norm above this is flagged: float16 tops out at 65504


def residual_sites(n_layer: int) -> list[tuple[str, str]]:
    """(label, trace name) of every distinct point of the residual stream, in forward order.
    resid_pre of block l+1 is resid_post of block l, so it appears once."""
    sites = [("embed (0.pre)", point("resid_pre", 0))]
    for l in range(n_layer):
        sites += [(f"{l}.mid", point("resid_mid", l)), (f"{l}.post", point("resid_post", l))]
    return sites


def _stat(x: torch.Tensor, stat: str) -> torch.Tensor:
    """One statistic over the C axis of a [T, C] residual (std: population, as NumPy's default)."""
    if stat == "mean":
        return x.mean(1)
    if stat == "std":
        return x.std(1, correction=0)
    if stat == "norm":
        return torch.linalg.vector_norm(x, dim=1)
    raise ValueError(f"stat={stat!r}: choose mean, std or norm")


def residual_stat_grid(trace: Trace, stat: str) -> tuple[list[str], np.ndarray]:
    """A [sites, T] grid of one statistic over C (mean, std, or norm = L2 norm)."""
    sites = residual_sites(trace.n_layer)
    grid = torch.stack([_stat(exact(trace, name), stat) for _, name in sites])
    return [label for label, _ in sites], grid.cpu().double().numpy()


def sublayer_contributions(trace: Trace) -> pd.DataFrame:
    """What each attention and MLP sub-layer writes into the residual stream: the L2 norm of its
    output (the difference it adds), next to the norm of the stream it reads, averaged over positions."""
    rows = []
    for l in range(trace.n_layer):
        pre, mid, post = (exact(trace, point(s, l)) for s in RESID_SITES)
        for sub, before, after in (("attention", pre, mid), ("MLP", mid, post)):
            added, stream, out = (_stat(x, "norm").mean().item() for x in (after - before, before, after))
            rows.append(
                (l, sub, added, stream, out, added / stream if stream else np.inf, out / stream if stream else np.inf)
            )
    return pd.DataFrame(
        rows, columns=["layer", "sublayer", "added_norm", "input_norm", "output_norm", "added_ratio", "growth"]
    )


def residual_flags(trace: Trace) -> list[str]:
    """Plain-language warnings about the residual stream: NaN or Inf; a block after the first
    that multiplies the norm by more than GROWTH_LIMIT; a norm above NORM_LIMIT anywhere.

    Block 0 is not judged by growth: in trained GPTs its MLP often rescales the small embedding
    many times over (it acts as part of the embedding), and a steady growth over depth is normal."""
    flags = []
    for _, name in residual_sites(trace.n_layer):
        if not torch.isfinite(exact(trace, name)).all():
            flags.append(f"{name} holds NaN or Inf values")
    for l in range(1, trace.n_layer):
        before, after = (_stat(exact(trace, point(s, l)), "norm").mean().item() for s in ("resid_pre", "resid_post"))
        if before > 0 and after / before > GROWTH_LIMIT:
            flags.append(
                f"block {l} multiplies the mean residual norm by "
                f"{after / before:.1f}× (flagged above {GROWTH_LIMIT:g}×)"
            )
    _, norms = residual_stat_grid(trace, "norm")
    if np.nanmax(norms, initial=0.0) > NORM_LIMIT:
        flags.append(
            f"a residual norm reaches {np.nanmax(norms):.3g} (flagged "
            f"above {NORM_LIMIT:g}): float16 would overflow soon"
        )
    return flags


def residual_growth(trace: Trace) -> float:
    """Mean residual norm after the last block ÷ mean norm of the embedding."""
    _, norms = residual_stat_grid(trace, "norm")
    return float(norms[-1].mean() / norms[0].mean()) if norms[0].mean() > 0 else float("inf")
