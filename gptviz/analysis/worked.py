"""Worked examples for a class: the toy computations of the teaching material, with small numbers a
person can check by hand. Pure NumPy (float64): each function takes the input matrices (which the
page lets a class edit) and returns every intermediate step, so nothing on screen is typed in.

The inputs are the numbers of the seed texts the project grew from (shared/seeds): seed 000's tiny
attention head, seed 004's support reply "Order shipped from" -> "hub". Seed 002's mean and std
before and after each block come from a real Trace (block_stats).
"""

from __future__ import annotations

from typing import Any, TypedDict
from urllib.parse import urlencode

import numpy as np
import pandas as pd

from ..names import point
from ..record import Trace

# --- inputs (numbers from the seeds) ---------------------------------------------------------
# Seed 000: one head, T = 3 tokens, d_model = 4, d_k = 2.
TOY_ATTENTION = dict(
    X=[[0.1, 0.2, 0.3, 0.4], [0.5, 0.4, 0.3, 0.2], [0.0, 0.1, 0.0, 0.1]],
    Wq=[[0.2, -0.1], [0.0, 0.1], [0.1, 0.2], [-0.1, 0.0]],
    Wk=[[0.1, 0.1], [0.0, -0.1], [0.2, 0.0], [0.0, 0.2]],
    Wv=[[0.1, 0.0], [-0.1, 0.1], [0.2, -0.1], [0.0, 0.2]],
)
# A sharper preset of the same shapes, where attention visibly chooses: one-hot tokens, and query
# and key weights of 3, so token 1 reads token 0 and token 2 reads token 1 (a previous-token head in
# miniature: scores of 9 / √2 ≈ 6.36 against 0 give weights of 0.998).
TOY_ATTENTION_SHARP = dict(
    X=[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
    Wq=[[0.0, 0.0], [3.0, 0.0], [0.0, 3.0], [0.0, 0.0]],
    Wk=[[3.0, 0.0], [0.0, 3.0], [0.0, 0.0], [0.0, 0.0]],
    Wv=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]],
)
TOY_PRESETS = {"textbook": TOY_ATTENTION, "sharp": TOY_ATTENTION_SHARP}

# Seed 004: a four-word vocabulary, three prompt tokens, four features.
SUPPORT_TOKENS = ["Order", "shipped", "from"]
SUPPORT_VOCAB = ["Order", "shipped", "from", "hub"]
SUPPORT_EMBED = dict(
    table=[[1.0, 0.0, 0.4, 0.0], [0.2, 1.0, 0.5, 0.0], [0.0, 0.3, 0.8, 1.0], [0.1, 0.5, 1.0, 0.9]],
    positions=[[0.0, 0.0, 0.0, 0.0], [0.05, 0.0, 0.0, 0.05], [0.1, 0.0, 0.0, 0.1]],
)
SUPPORT_IDS = [0, 1, 2]
SUPPORT_QKV = dict(
    q=[[1.0, 0.0], [0.5, 1.0], [0.2, 1.2]],
    k=[[1.0, 0.0], [0.4, 1.0], [0.0, 0.8]],
    v=[[1.0, 0.0], [0.3, 1.0], [0.0, 0.6]],
)
SCALING_SCORES = [12.4, 9.1, 3.8]  # one query's raw scores against three keys
SCALING_HEAD_DIM = 64
MASK_SCORES = [  # four tokens ("Order shipped from hub"), scores before the mask
    [2.0, 1.5, 0.5, 1.0],
    [1.0, 2.5, 1.5, 0.5],
    [0.5, 1.0, 3.0, 2.0],
    [1.5, 0.5, 1.0, 2.5],
]
LEAK_SCORES = [[2.0, 5.0, 4.0], [1.0, 2.0, 6.0], [0.5, 1.0, 2.0]]  # large future scores: the leak shows
FFN = dict(
    x=[[1.0, 0.0, 0.4, 0.0], [0.2, 1.0, 0.5, 0.0], [0.0, 0.3, 0.8, 1.0]],
    w1=[
        [1.0, 0.0, 0.5, 0.0, 0.0, 0.2],
        [0.0, 1.0, 0.0, 0.5, 0.2, 0.0],
        [0.4, 0.2, 1.0, 0.0, 0.0, 0.5],
        [0.0, 0.2, 0.0, 1.0, 0.4, 0.0],
    ],
    w2=[
        [0.3, 0.0, 0.0, 0.1],
        [0.0, 0.3, 0.1, 0.0],
        [0.2, 0.0, 0.3, 0.0],
        [0.0, 0.2, 0.0, 0.3],
        [0.1, 0.0, 0.0, 0.2],
        [0.0, 0.1, 0.2, 0.0],
    ],
)
NORM_INPUT = [[1.0, 2.0, 0.0, 1.0], [0.2, 0.4, 0.8, 0.6]]
NORM_UPDATE_SCALE = 0.1  # the toy sub-layer: 0.1 × its normalised input
LOGIT_VOCAB = ["hub", "today", "late", "refund", "carrier", "warehouse"]
LOGITS_INPUT = dict(
    hidden=[[0.7, -0.2, 0.5, 0.1]],  # the last position's vector after the final norm
    W=[
        [1.0, 0.5, 0.0, 0.0, 0.1, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        [1.0, 0.0, 0.8, 0.0, 0.1, 0.0],
        [0.0, 0.0, 0.0, 0.5, 0.0, 0.0],
    ],
)


def arr(x) -> np.ndarray:
    """Any matrix-like (list, DataFrame, array) as a float64 array."""
    return np.asarray(x.to_numpy() if isinstance(x, pd.DataFrame) else x, dtype=np.float64)


# --- the building blocks ----------------------------------------------------------------------
def future(T: int) -> np.ndarray:
    """(T, T) bools, True where key j lies after query i (j > i): the cells a causal mask hides."""
    return np.triu(np.ones((T, T), dtype=bool), k=1)


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; -inf scores get exactly 0."""
    shifted = scores - scores.max(axis=-1, keepdims=True)  # exp of a large score would overflow
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def masked_softmax(scores, causal: bool = True) -> dict[str, Any]:
    """Scores -> (mask) -> weights, and the attention mass that lands on future keys (the leak).
    With causal=False nothing is hidden, which is the bug the mask exists to prevent."""
    s = arr(scores)
    fut = future(s.shape[-1])
    masked = np.where(fut, -np.inf, s) if causal else s.copy()
    w = softmax_rows(masked)
    return dict(scores=s, future=fut, masked=masked, weights=w, future_mass=float(w[..., fut].sum()))


def toy_attention(X, Wq, Wk, Wv, causal: bool = True) -> dict[str, Any]:
    """One attention head on [T, C] inputs: Q = X Wq, K = X Wk, V = X Wv, scores = Q Kᵀ / √d_k,
    mask, softmax over keys, output = weights V. Returns every step."""
    X, Wq, Wk, Wv = (arr(m) for m in (X, Wq, Wk, Wv))
    Q, K, V = X @ Wq, X @ Wk, X @ Wv  # (T, d_k) each
    scores = Q @ K.T / np.sqrt(Q.shape[-1])  # (T, T)
    m = masked_softmax(scores, causal)
    return dict(
        X=X,
        Q=Q,
        K=K,
        V=V,
        scores=scores,
        masked=m["masked"],
        weights=m["weights"],
        output=m["weights"] @ V,
        future_mass=m["future_mass"],
    )


def embed(table, positions, ids) -> np.ndarray:
    """Token embedding rows for the ids plus one position vector per position: (T, C)."""
    return arr(table)[np.asarray(ids, dtype=int)] + arr(positions)[: len(ids)]


def raw_scores(q, k) -> np.ndarray:
    """q·kᵀ for every query and key, no scaling: (T, T)."""
    return arr(q) @ arr(k).T


def scaling(scores, head_dim: int) -> dict[str, np.ndarray]:
    """One query's weights from raw scores and from scores ÷ √head_dim: why attention scales."""
    s = arr(scores)
    scaled = s / np.sqrt(head_dim)
    return dict(scores=s, unscaled_weights=softmax_rows(s), scaled_scores=scaled, scaled_weights=softmax_rows(scaled))


def leak(scores) -> dict[str, Any]:
    """The same scores with the causal mask and without it: weights and future mass of each."""
    on, off = masked_softmax(scores, True), masked_softmax(scores, False)
    return dict(
        masked=on["weights"], unmasked=off["weights"], masked_mass=on["future_mass"], unmasked_mass=off["future_mass"]
    )


def feed_forward(x, w1, w2) -> dict[str, np.ndarray]:
    """Widen with w1, ReLU, back to the model width with w2: (T, C) -> (T, 4C-ish) -> (T, C)."""
    hidden = np.maximum(0.0, arr(x) @ arr(w1))
    return dict(hidden=hidden, output=hidden @ arr(w2))


def layer_norm(x, eps: float = 1e-5, update_scale: float = NORM_UPDATE_SCALE) -> dict[str, np.ndarray]:
    """Normalise each row to mean 0 and variance 1 (no learned scale or offset), then a residual add
    of a toy sub-layer (update_scale × the normalised row)."""
    x = arr(x)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    normed = (x - mean) / np.sqrt(var + eps)
    return dict(
        x=x,
        mean=mean[:, 0],
        var=var[:, 0],
        normed=normed,
        normed_mean=normed.mean(-1),
        normed_var=normed.var(-1),
        residual=x + update_scale * normed,
    )


def logits(hidden, W, vocab: list[str]) -> pd.DataFrame:
    """The LM head on one normalised vector: a logit and a probability per vocabulary word, best first."""
    z = (arr(hidden) @ arr(W)).reshape(-1)
    p = softmax_rows(z)
    df = pd.DataFrame({"token": list(vocab)[: len(z)], "logit": z, "probability": p})
    return df.sort_values("probability", ascending=False, kind="stable").reset_index(drop=True)


# --- seed 002 on a real model -------------------------------------------------------------------
def block_stats(trace: Trace) -> pd.DataFrame:
    """Mean and std of the whole residual stream (every position and feature, population std)
    entering block 0 and after each block: does the stream drift or blow up with depth?"""
    rows = []
    for label, name in [("before block 0", point("resid_pre", 0))] + [
        (f"after block {l}", point("resid_post", l)) for l in range(trace.n_layer)
    ]:
        x = trace[name].astype(np.float64)
        rows.append((label, name, float(x.mean()), float(x.std())))
    return pd.DataFrame(rows, columns=["where", "point", "mean", "std"])


DRIFT_FACTOR = 2.0  # a std that more than doubles in every block after the first keeps multiplying: drift


def growth_note(stats: pd.DataFrame) -> str:
    """What block_stats says about the stream's scale, in words a class reads: "drifting" only when
    the std multiplies block after block (or is not finite), never for the steady growth of a
    healthy pre-norm model, where each block adds its output to the stream."""
    std = stats["std"].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(std)):
        return "The std is not finite: the stream has blown up (NaN or Inf somewhere)."
    if len(std) < 2:
        return ""
    ratios = std[2:] / np.maximum(std[1:-1], 1e-30)  # block to block, after block 0
    if len(ratios) >= 2 and np.all(ratios > DRIFT_FACTOR):
        return (
            f"The std more than doubles in every block after the first (×{ratios.min():.2f} at least): the stream "
            "is drifting, growing block after block."
        )
    per_block = f"; later blocks change it by ×{ratios.min():.2f} to ×{ratios.max():.2f} each" if len(ratios) else ""
    return (
        f"The std goes from {std[0]:.4f} before block 0 to {std[-1]:.4f} after the last block: block 0 lifts the "
        f"embedding's small scale (×{std[1] / max(std[0], 1e-30):.2f}){per_block}. Growth like this is normal in a "
        "pre-norm model (each block adds its output to the stream); drift would be a std that keeps multiplying "
        "block after block."
    )


# --- lesson links ---------------------------------------------------------------------------------
LESSON_PROMPT = (
    "First Citizen:\nBefore we proceed any further,\nhear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved"
)
INDUCTION_PROMPT = "k3x9qbz07mwe5uyhdq8tr" * 2  # 21 random symbols said twice


class Lesson(TypedDict):
    """A link the Worked examples page offers: a page opened on a checkpoint, prompt, layer and head."""

    title: str
    page: str
    checkpoint: str
    prompt: str
    layer: int
    head: int
    what: str


LESSONS: list[Lesson] = [
    dict(
        title="A previous-token head",
        page="attention",
        checkpoint="shakespeare-char",
        prompt=LESSON_PROMPT,
        layer=0,
        head=3,
        what="layer 0, head 3 of shakespeare-char: almost every token looks at the token just before it "
        "(the diagonal under the main one)",
    ),
    dict(
        title="A newline head",
        page="attention",
        checkpoint="shakespeare-char",
        prompt=LESSON_PROMPT,
        layer=1,
        head=4,
        what="layer 1, head 4 of shakespeare-char: tokens look back at the last line breaks (the columns of '\\n')",
    ),
    dict(
        title="An induction head",
        page="attention",
        checkpoint="induction-2l",
        prompt=INDUCTION_PROMPT,
        layer=1,
        head=1,
        what="layer 1, head 1 of the shipped induction run: in the second half, each token looks at the "
        "token after its own earlier copy (a stripe one right of the first half's diagonal)",
    ),
]


def lesson_url(page: str, **params) -> str:
    """A link relative to the dashboard's root that opens `page` with these sidebar choices."""
    return f"{page}?{urlencode({k: str(v) for k, v in params.items()})}"
