"""Block means: how a grid too large to draw is shrunk, NaN-aware (a block that is entirely NaN,
for example masked cells, stays NaN). One implementation serves every figure."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np


def block_mean(m: np.ndarray, max_size: int, axis: int | None = None) -> tuple[np.ndarray, int]:
    """Average b consecutive cells along `axis` (None: both axes, b × b blocks) so at most
    max_size remain; the last block may be shorter. Returns (float32 array, b); b == 1 means unchanged."""
    m = np.asarray(m)
    axes = (0, 1) if axis is None else (axis,)
    b = max(1, max(math.ceil(m.shape[a] / max_size) for a in axes))
    if b == 1:
        return m, 1
    pad = [(0, math.ceil(n / b) * b - n if a in axes else 0) for a, n in enumerate(m.shape)]
    x = np.pad(np.asarray(m, dtype=np.float64), pad, constant_values=np.nan)
    shape = []  # each reduced axis n -> (n / b, b); the b axes are averaged together
    for a, n in enumerate(x.shape):
        shape += [n // b, b] if a in axes else [n]
    inner = tuple(i for i, a in enumerate(sorted(axes)) for i in [a + i + 1])
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN block stays NaN
        x = np.nanmean(x.reshape(shape), axis=inner)
    return x.astype(np.float32), b


def block_reduce(m: np.ndarray, max_size: int) -> tuple[np.ndarray, int]:
    """Shrink a [R, C] grid so neither side exceeds max_size by averaging b × b blocks."""
    return block_mean(m, max_size, axis=None)


def block_labels(labels: Sequence[str], b: int) -> list[str]:
    """Axis labels for a block-averaged axis: each block named by its first and last position."""
    if b == 1:
        return list(labels)
    n = len(labels)
    return [f"{i}–{min(i + b, n) - 1}" for i in range(0, n, b)]
