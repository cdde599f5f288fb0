"""What each attention head does on this prompt: scores against the patterns of known head kinds,
and a label where one score is clear enough.

previous_token, duplicate_token and induction follow TransformerLens's `detect_head` with
`error_measure="mul"`, `exclude_bos=False`, `exclude_current_token=False`: the share of all the
head's attention that lands on the pattern's cells, with the patterns built from the prompt's
own tokens:

    previous_token   key i-1 for query i
    duplicate_token  an earlier key holding the same token as the query
    induction        the key right after an earlier copy of the query's token

sink is the mean weight on key 0 over queries 1..T-1 (query 0 can read nothing else), self the
mean weight on the diagonal, entropy the mean over queries of the row's entropy in nats.

The maps grow as L·H·T² (1.2 GB for GPT-2 small at T = 1,024), and a Trace does not hold them:
when it rebuilds them from q and k, the scores are computed from q and k directly, a block of query
rows at a time, each block reading only the keys its rows may see (about half of the whole map, and
no [H, T, T] tensor at all). Maps a Trace does hold (an edited run's) are scored one layer at a time.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..attention import AttentionSpec, attention_weights
from ..names import point
from ..progress import ProgressFn, Reporter

COLUMNS = ("layer", "head", "previous_token", "duplicate_token", "induction", "sink", "self", "entropy", "label")
SCORES = COLUMNS[2:-1]

# A head is labelled with a kind when that score reaches its threshold; when several do, the
# highest score wins. 0.4 is the convention of the head-detector literature: at 0.4 the pattern's
# cells take more of the head's attention than any other single kind could then.
LABEL_THRESHOLDS = {"previous_token": 0.4, "duplicate_token": 0.4, "induction": 0.4, "sink": 0.4, "self": 0.4}
LABEL_NAMES = {
    "previous_token": "previous token",
    "duplicate_token": "duplicate token",
    "induction": "induction",
    "sink": "sink",
    "self": "self",
}


def detection_patterns(token_ids: np.ndarray, device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """The [T, T] 0/1 patterns of TransformerLens's previous-token, duplicate-token and induction
    heads for these tokens (query rows, key columns; all lower-triangular)."""
    ids = torch.as_tensor(np.asarray(token_ids, dtype=np.int64), device=device)
    T = ids.numel()
    same = ids[:, None] == ids[None, :]  # [T, T]: query i and key j hold the same token
    duplicate = torch.tril(same, diagonal=-1)  # an earlier copy; a token is no duplicate of itself
    induction = torch.zeros_like(duplicate)
    induction[:, 1:] = duplicate[:, :-1]  # key j follows an earlier copy (at j-1) of the query's token
    previous = torch.zeros(T, T, dtype=torch.bool, device=device)
    previous[1:, :-1] = torch.eye(T - 1, dtype=torch.bool, device=device)
    return {"previous_token": previous, "duplicate_token": duplicate, "induction": induction}


def layer_head_scores(weights: Tensor, patterns: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every score of one layer's heads from its attention weights [H, T, T]: name -> [H]."""
    w = weights.float()
    H, T = w.size(0), w.size(-1)
    total = w.sum(dim=(-2, -1))  # [H]; T when rows sum to 1, as detect_head divides by it
    # every pattern's share in one pass over the maps: [H, T²] @ [T², patterns], no [H, T, T] temporaries
    stacked = torch.stack([pat.reshape(-1) for pat in patterns.values()], dim=1).to(w.dtype)
    hits = w.reshape(H, T * T) @ stacked  # [H, patterns]
    out = {name: hits[:, i] / total for i, name in enumerate(patterns)}
    out["sink"] = w[:, 1:, 0].mean(-1) if T > 1 else torch.full_like(total, float("nan"))
    out["self"] = w.diagonal(dim1=-2, dim2=-1).mean(-1)
    out["entropy"] = torch.special.entr(w).sum(-1).mean(-1)  # entr(0) = 0: masked keys add nothing
    return out


ROWS = 128  # query rows per block when scoring from q and k: [H, 128, T] floats at a time


def pattern_band(ids: Tensor, a: int, b: int) -> Tensor:
    """detection_patterns' cells that query rows a..b-1 may see (keys 0..b-1), as one [(b-a)·b, patterns]
    float matrix, made from the token ids alone: what a band of rows reads, never a [T, T] pattern
    (three of them, with their float copies, are 6·T² bytes: 6 GB at T = 32,768)."""
    i = torch.arange(a, b, device=ids.device)[:, None]
    j = torch.arange(b, device=ids.device)[None, :]
    duplicate = (ids[a:b, None] == ids[None, :b]) & (j < i)  # an earlier copy of the query's token
    induction = torch.zeros_like(duplicate)
    induction[:, 1:] = duplicate[:, :-1]  # key j follows an earlier copy (at j-1) of the query's token
    previous = j == i - 1
    return torch.stack([previous.reshape(-1), duplicate.reshape(-1), induction.reshape(-1)], dim=1).float()


def layer_head_scores_from_qk(
    q: Tensor, k: Tensor, ids: Tensor, rows: int = ROWS, spec: AttentionSpec | None = None
) -> dict[str, Tensor]:
    """layer_head_scores of the causal maps of one layer, from its q [H, T, D] and k [H_kv, T, D],
    built by the model's own functions (spec: the layer's scale, soft-cap and window; 1/√D and no
    window when None) for a block of query rows at a time, each block's patterns from the token ids
    [T] (pattern_band). Memory: one block, whatever T."""
    spec = spec or AttentionSpec(scale=1.0 / math.sqrt(q.size(-1)))
    H, T = q.size(0), q.size(1)
    names = ("previous_token", "duplicate_token", "induction")  # detection_patterns' order
    hits = torch.zeros(H, len(names), device=q.device)
    total, entropy, diagonal, sink = (torch.zeros(H, device=q.device) for _ in range(4))
    for a in range(0, T, rows):
        b = min(T, a + rows)
        pattern = pattern_band(ids, a, b)
        w = attention_weights(spec.scores(q[:, a:b], k[:, :b]), spec.mask(b - a, q.device, a), q.dtype).float()
        total += w.sum(dim=(-2, -1))
        hits += w.reshape(H, -1) @ pattern
        entropy += torch.special.entr(w).sum(dim=(-2, -1))
        diagonal += w.diagonal(offset=a, dim1=-2, dim2=-1).sum(-1)
        sink += w[:, max(1, a) - a :, 0].sum(-1)
    out = {name: hits[:, i] / total for i, name in enumerate(names)}
    out["sink"] = sink / (T - 1) if T > 1 else torch.full_like(total, float("nan"))
    out["self"] = diagonal / T
    out["entropy"] = entropy / T
    return out


def label(scores: dict[str, float], thresholds: dict[str, float] = LABEL_THRESHOLDS) -> str:
    """The kind whose score passes its threshold (the highest when several do), else ''."""
    passed = [(scores[k], k) for k, limit in thresholds.items() if scores[k] >= limit]  # NaN never passes
    return max(passed)[1] if passed else ""


def head_scores(trace, progress: ProgressFn | None = None) -> pd.DataFrame:
    """One row per (layer, head): previous_token, duplicate_token, induction, sink, self, entropy
    and label (see the module docstring; label is '' when no score reaches LABEL_THRESHOLDS).

    trace: a Trace (or anything with token_ids, n_layer and tensor()/[name] for attn.weights).
    progress: reports each layer scored (gptviz.Progress, "layers"): every map is rebuilt for it."""
    ids = np.asarray(trace.token_ids)
    reporter = Reporter(progress, "layers", total=trace.n_layer)
    reporter.start()
    # [scores, H] each, on the maps' device: one copy to the host for every layer, at the end
    per_layer: list[torch.Tensor] = []
    patterns = on_device = None
    for layer in range(trace.n_layer):
        name = point("attn.weights", layer)
        if hasattr(trace, "held") and not trace.held(name):  # rebuilt from q and k: score from them
            q, k = trace.tensor(point("attn.q", layer)), trace.tensor(point("attn.k", layer))
            specs = getattr(trace, "attention_specs", None)
            if on_device is None:
                on_device = torch.as_tensor(ids.astype(np.int64), device=q.device)
            scores = layer_head_scores_from_qk(q, k, on_device, spec=specs[layer] if specs else None)
        else:
            w = trace.tensor(name) if hasattr(trace, "tensor") else torch.as_tensor(np.asarray(trace[name]))
            if patterns is None:
                patterns = detection_patterns(ids, w.device)
            scores = layer_head_scores(w, patterns)
            del w  # the next layer's maps replace this one's, never join them
        table = torch.stack([scores[k].double() for k in SCORES])  # [scores, H]
        per_layer.append(table.to(per_layer[0].device) if per_layer else table)
        reporter.tick()
    values = torch.stack(per_layer).cpu().numpy() if per_layer else np.zeros((0, len(SCORES), 0))  # [L, scores, H]
    rows = []
    for layer, of_layer in enumerate(values):
        for head in range(of_layer.shape[1]):
            row = {k: float(of_layer[i, head]) for i, k in enumerate(SCORES)}
            rows.append({"layer": layer, "head": head, **row, "label": label(row)})
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"layer": int, "head": int, "label": str})
