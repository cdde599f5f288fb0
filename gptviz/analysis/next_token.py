"""The next-token distribution: top-k with a temperature, the rank of any token, per-token loss.

Nothing re-runs the model: each is computed from the captured logits, so changing a temperature in
the dashboard is instant and the numbers stay the model's own. Probabilities are computed in
float64 so rounding never reorders the top of a distribution.

Logits with a NaN (or +Inf) give no distribution at all: the softmax is NaN everywhere, and a sort
would "rank" ids 0, 1, 2, ... by their position in the array. nan_logits() finds such positions once,
and top_k / token_rank / the pages refuse to rank them instead of drawing that order as a result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from .values import float64


def softmax(logits: np.ndarray, temperature: float = 1.0, axis: int = -1) -> np.ndarray:
    """softmax(logits / temperature) in float64, stable for any logit range."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def nan_logits(logits: np.ndarray | torch.Tensor) -> np.ndarray:
    """True for each position whose logits [..., V] give no next-token distribution: a NaN, or a +Inf
    (softmax of +Inf is Inf / Inf = NaN). A -Inf logit is a token given probability 0, which is fine.
    For one position's logits [V] the result is a 0-d bool array (use it as a bool)."""
    if isinstance(logits, torch.Tensor):  # only the answer leaves the device
        return (torch.isnan(logits) | torch.isposinf(logits)).any(dim=-1).cpu().numpy()
    z = np.asarray(logits)
    return (np.isnan(z) | np.isposinf(z)).any(axis=-1)


def nan_message(where: str) -> str:
    """The one sentence every page shows where the logits are NaN (`where`: "after 12 e")."""
    return (
        f"The logits {where} are NaN: the model computed no next-token distribution there, so there is "
        "nothing to rank (NaN weights or activations upstream: see Health)."
    )


_TOP_COLUMNS = {"rank": "int64", "id": "int64", "token": "object", "probability": "float64", "logit": "float64"}


def top_k(
    logits: np.ndarray, k: int, temperature: float = 1.0, display: Callable[[list[int]], list[str]] | None = None
) -> pd.DataFrame:
    """The k most likely next tokens of one position's logits [V], most likely first.

    display: ids -> token strings (e.g. tokenizer.display). Ties go to the lower id, so the
    order is deterministic. Logits with a NaN (nan_logits) give no rows, and attrs["nan"] is True."""
    logits = np.asarray(logits)
    if nan_logits(logits):
        empty = pd.DataFrame({c: pd.Series(dtype=d) for c, d in _TOP_COLUMNS.items()})
        empty.attrs["nan"] = True
        return empty
    probs = softmax(logits, temperature)
    k = max(1, min(int(k), probs.size))
    order = np.lexsort((np.arange(probs.size), -probs))[:k]
    return pd.DataFrame(
        {
            "rank": np.arange(1, k + 1),
            "id": order,
            "token": display(order.tolist()) if display is not None else [str(i) for i in order],
            "probability": probs[order],
            "logit": logits[order].astype(np.float64),
        }
    )


def token_rank(logits: np.ndarray, token_id: int, temperature: float = 1.0) -> tuple[int, float]:
    """(rank, probability) of one token: rank 1 is the most likely; ties count in its favour.
    Raises ValueError when the logits are NaN (nan_logits): no token has a rank there."""
    if nan_logits(logits):
        raise ValueError(nan_message("at this position"))
    probs = softmax(logits, temperature)
    p = probs[token_id]
    return int((probs > p).sum()) + 1, float(p)


LOSS_BLOCK_CELLS = 1 << 23  # positions × vocabulary of one block of per_token_loss (64 MB of float64)


def per_token_loss(logits: np.ndarray | torch.Tensor, ids: Sequence[int] | np.ndarray) -> pd.DataFrame:
    """Cross-entropy of every prompt token given the tokens before it: row t scores ids[t+1]
    under the logits at position t. The first token has no prediction, so T-1 rows.
    logits [T, V]: an array, or a tensor on any device (only the T-1 losses leave it)."""
    target = np.asarray(ids, dtype=np.int64)[1:]
    # log p = z[target] - logsumexp(z): one pass over the [T-1, V] logits (50 M cells at T = 1024,
    # V = 50,257), in float64 a block of rows at a time (a float64 copy of them all is 8 bytes a cell:
    # 3.3 GB at T = 8,192 with GPT-2's vocabulary), on torch's threads.
    n, V = len(target), logits.shape[-1]
    step = max(1, LOSS_BLOCK_CELLS // max(1, V))
    parts = []
    for a in range(0, n, step):
        z = float64(logits[a : min(n, a + step)])
        want = torch.from_numpy(target[a : a + len(z)]).to(z.device)
        parts.append(z[torch.arange(len(z), device=z.device), want] - torch.logsumexp(z, dim=-1))
    lp = torch.cat(parts).cpu().numpy() if parts else np.zeros(0)
    return pd.DataFrame(
        {
            "position": np.arange(1, len(ids)),
            "id": target,
            "loss_nats": -lp,
            "loss_bits": -lp / math.log(2),
            "probability": np.exp(lp),
        }
    )
