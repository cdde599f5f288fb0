"""One batch of windows through the model, reduced at once to what the scan's tables keep.

The forward pass runs the explicit attention path (the one a Trace runs), and hooks on the contract
points (gptviz.capture.edited) read each layer's attn.weights and mlp.hidden as they are made and
reduce them right there, so no more than one layer's activations of one batch are alive at a time:

    attn.weights     -> each window's head scores and EXTRAS (head_reductions: one layer's maps of one batch)
    mlp.hidden       -> each window's largest activation of every neuron, and where it is
    logits           -> the loss of every predicted token

Windows of different lengths share a batch padded on the right: attention is causal, so a real
token never reads a pad, and each reduction reads the windows of one length together, their own tokens only.

A Partial is a batch's result; an Accumulator gathers them. The top-k merge is exact (the top-k of a
union is the top-k of the two top-ks), so the engines may reduce in any grouping and order.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..analysis.heads import SCORES
from ..attention import AttentionSpec, attention_weights
from ..capture import edited
from ..names import point

# What each window adds per head besides SCORES, as Neuronpedia's HeadVis pipeline computes it
# (utils/neuronpedia-utils/neuronpedia_utils/headvis/compute-head-metrics.py): the largest weight from a
# query to a key, both past position 0 (HeadVis's "activation", which ranks and buckets windows); the
# sums over the map of w·|q-k| and w·|q-k|²; the induction weights of at least INDUCTION_THRESHOLD, summed.
EXTRAS = ("max_attention", "qk_distance_sum", "qk_distance_sq_sum", "induction_sum")
INDUCTION_THRESHOLD = 0.01


@dataclass
class Partial:
    """The reduced result of some windows. Per window: ids, loss, token losses, head scores.
    Per neuron: the top-k (value, window, position), rank 0 the largest; fewer than k ranks when
    fewer windows were seen."""

    window: np.ndarray  # [W] int64
    loss: np.ndarray  # [W] float64, mean over the window's predicted tokens
    n_tokens: np.ndarray  # [W] int64
    token_loss: np.ndarray  # [sum(n_tokens - 1)] float32, windows in the order of `window`
    heads: np.ndarray  # [W, L, H, len(SCORES)] float64
    top_value: np.ndarray  # [L, F, k] float32
    top_window: np.ndarray  # [L, F, k] int64
    top_position: np.ndarray  # [L, F, k] int32
    # per window, for HeadVis's metrics and samples (EXTRAS order) and its induction denominator
    head_extra: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, len(EXTRAS))))  # [W, L, H, 4] float64
    induction_queries: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [W] int64

    def to_bytes(self) -> bytes:
        """A plain .npz (no pickles), how a Ray worker hands a partial to the driver."""
        buffer = io.BytesIO()
        np.savez(buffer, **self.__dict__)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Partial:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return cls(**{k: z[k] for k in cls.__dataclass_fields__})


def top_k(values: np.ndarray, windows: np.ndarray, positions: np.ndarray, k: int):
    """The k best of each row of [L, F, n] candidates: value descending, ties by window ascending,
    so the result is the same whatever order partials are merged in."""
    order = np.lexsort((windows, -values.astype(np.float64)), axis=-1)[..., :k]
    take = lambda a: np.take_along_axis(a, order, axis=-1)  # noqa: E731
    return take(values), take(windows), take(positions)


class Accumulator:
    """Partials gathered in any order: the per-window parts are kept as they came (joined once, at
    the end), the per-neuron top-k is merged at once, so it never holds more than k + one batch."""

    def __init__(self, k: int):
        self.k = k
        self.parts: list[Partial] = []
        self.top: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def add(self, part: Partial) -> None:
        if self.top is None:
            self.top = (part.top_value, part.top_window, part.top_position)
        else:
            values, windows, positions = (
                np.concatenate([mine, theirs], axis=-1) for mine, theirs in zip(self.top, self._top(part))
            )
            self.top = top_k(
                values,
                windows,
                positions,
                self.k,
            )
        # the per-window arrays stay; the partial's own top-k is dropped, already merged
        self.parts.append(
            Partial(
                part.window,
                part.loss,
                part.n_tokens,
                part.token_loss,
                part.heads,
                *EMPTY,
                head_extra=part.head_extra,
                induction_queries=part.induction_queries,
            )
        )

    @staticmethod
    def _top(part: Partial):
        return part.top_value, part.top_window, part.top_position

    def result(self) -> Partial:
        """Every window, in window order, and the merged top-k."""
        per_window = [
            t for p in self.parts for t in np.split(p.token_loss, np.cumsum(p.n_tokens - 1)[:-1].astype(np.int64))
        ]
        order = np.argsort(np.concatenate([p.window for p in self.parts]), kind="stable")
        cat = lambda name: np.concatenate([getattr(p, name) for p in self.parts])[order]  # noqa: E731
        token_loss = np.concatenate([per_window[i] for i in order])
        assert self.top is not None, "no partial was added"
        top: tuple[np.ndarray, np.ndarray, np.ndarray] = self.top
        return Partial(
            cat("window"),
            cat("loss"),
            cat("n_tokens"),
            token_loss,
            cat("heads"),
            *top,
            head_extra=cat("head_extra"),
            induction_queries=cat("induction_queries"),
        )


EMPTY = (np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(0, np.int32))


def batch_patterns(ids: Tensor) -> Tensor:
    """The previous-token, duplicate-token and induction patterns (gptviz.analysis.heads's, which
    follow TransformerLens's detect_head) of G windows of n tokens at once: [G, n, n, 3] floats."""
    G, n = ids.shape
    same = ids[:, :, None] == ids[:, None, :]  # [G, n, n]: query i and key j hold the same token
    duplicate = torch.tril(same, diagonal=-1)  # an earlier copy; a token is no duplicate of itself
    induction = torch.zeros_like(duplicate)
    induction[:, :, 1:] = duplicate[:, :, :-1]  # key j follows an earlier copy of the query's token
    previous = torch.zeros_like(duplicate)
    previous[:, 1:, :-1] = torch.eye(n - 1, dtype=torch.bool, device=ids.device)
    return torch.stack([previous, duplicate, induction], dim=-1).float()


def batch_maps(q: Tensor, k: Tensor, spec: AttentionSpec | None = None) -> Tensor:
    """The attention maps of G windows of n tokens, as the model builds them: q, k [G, H, n, D] -> [G, H, n, n]."""
    n, D = q.shape[-2:]
    spec = spec or AttentionSpec(scale=1.0 / math.sqrt(D))
    return attention_weights(spec.scores(q, k), spec.mask(n, q.device), q.dtype).float()


def distances(n: int, device: torch.device | str = "cpu") -> Tensor:
    """|q - k| and |q - k|² of every query and key of n tokens, as the columns of an [n·n, 2] matrix (each is
    multiplied apart: two matrix-vector products read the maps faster than one product with two columns)."""
    pos = torch.arange(n, device=device, dtype=torch.float32)
    dist = (pos[:, None] - pos[None, :]).abs().reshape(-1)  # [n·n]
    return torch.stack([dist, dist.square()], dim=-1)


def induction_entries(patterns: Tensor) -> tuple[Tensor, Tensor]:
    """Where G windows' induction patterns [G, n, n, 3] are 1: (window, query·n + key) [m] each."""
    G, n = patterns.shape[:2]
    g, at = patterns[..., 2].reshape(G, n * n).nonzero(as_tuple=True)
    return g, at


def head_reductions(
    w: Tensor, patterns: Tensor, dist: Tensor | None = None, induction: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """SCORES and EXTRAS of every head of G windows: maps w [G, H, n, n], patterns [G, n, n, 3] (batch_patterns),
    dist [n·n, 2] (distances), induction (induction_entries) -> [G, H, 6], [G, H, 4]. Each pass reads the maps
    once and makes no map-sized temporary, except entropy's: the sums weighted by a pattern or a distance are
    matrix products. dist and induction are the same in every layer: a batch makes them once."""
    G, H, n, _ = w.shape
    flat = w.reshape(G, H, n * n)
    dist = distances(n, w.device) if dist is None else dist
    g, at = induction_entries(patterns) if induction is None else induction  # [m] each
    total = flat.sum(-1)  # [G, H]
    hits = torch.bmm(flat, patterns.reshape(G, n * n, 3)) / total[..., None]  # [G, H, 3]
    sink = w[..., 1:, 0].sum(-1) / (n - 1)  # n >= 2: a window of one token is never scanned
    self_ = w.diagonal(dim1=-2, dim2=-1).sum(-1) / n
    entropy = torch.special.entr(w).sum(dim=(-2, -1)) / n
    scores = torch.cat([hits, torch.stack([sink, self_, entropy], dim=-1)], dim=-1)
    max_attention = w[..., 1:, 1:].amax(dim=(-2, -1))  # [G, H]
    rows = flat.reshape(G * H, n * n)
    qk = torch.stack([rows @ dist[:, 0], rows @ dist[:, 1]], dim=-1).reshape(G, H, 2)  # Σ w·|q-k|, Σ w·|q-k|²
    # the induction weights of at least INDUCTION_THRESHOLD: the pattern is sparse, so its entries are gathered
    picked = flat[g, :, at]  # [m, H]
    strong = torch.where(picked >= INDUCTION_THRESHOLD, picked, torch.zeros_like(picked))
    induced = torch.zeros(G, H, device=w.device, dtype=w.dtype).index_add_(0, g, strong)
    return scores, torch.stack([max_attention, qk[..., 0], qk[..., 1], induced], dim=-1)


def _rows(rows: Tensor) -> slice | Tensor:
    """A group's rows of the batch as a slice where they are consecutive (the local engine sorts by
    length): a slice of the maps is a view, an index would copy them."""
    first, last = int(rows[0]), int(rows[-1])
    return slice(first, last + 1) if last - first + 1 == len(rows) else rows


class _Layers:
    """The hooks' state for one batch: each layer's reductions as they arrive."""

    def __init__(self, lengths: Tensor, idx: Tensor):
        self.lengths = lengths  # [B]
        # the windows grouped by length (rows of the batch), and each group's patterns [G, n, n, 3]
        by_length = [(n, (lengths == n).nonzero().flatten().to(idx.device)) for n in lengths.unique().tolist()]
        self.patterns = {n: batch_patterns(idx[rows, :n]) for n, rows in by_length}
        self.groups = [(n, _rows(rows)) for n, rows in by_length]
        # what every layer's reductions share: the distances and where the induction patterns are 1
        self.dist = {n: distances(n, idx.device) for n, _ in by_length}
        self.induction = {n: induction_entries(self.patterns[n]) for n, _ in by_length}
        self.heads: dict[int, Tensor] = {}  # layer -> [B, H, scores]
        self.extra: dict[int, Tensor] = {}  # layer -> [B, H, EXTRAS]
        # queries with an earlier copy of their token (HeadVis's induction denominator) [B]
        self.induction_queries = torch.zeros(len(lengths), dtype=torch.long)
        for n, rows in by_length:
            self.induction_queries[rows.cpu()] = self.patterns[n][..., 1].any(-1).sum(-1).cpu().long()
        self.neuron: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> ([B, F] max, [B, F] argmax)

    def score(self, layer: int):
        def hook(w: Tensor) -> Tensor:  # [B, H, T, T]: the weights the layer attends with
            B, H = w.shape[:2]
            out = torch.empty(B, H, len(SCORES), device=w.device)
            extra = torch.empty(B, H, len(EXTRAS), device=w.device)
            for n, rows in self.groups:  # windows of one length together: a few large ops, not many small ones
                # a causal map's first n queries read only the first n keys: a shorter window's map is its corner
                m = w[rows, :, :n, :n].float()  # [G, H, n, n]
                out[rows], extra[rows] = head_reductions(m, self.patterns[n], self.dist[n], self.induction[n])
            self.heads[layer] = out
            self.extra[layer] = extra
            return w

        return hook

    def neurons(self, layer: int):
        def hook(h: Tensor) -> Tensor:  # [B, T, F]
            B, _, F_ = h.shape
            value = torch.empty(B, F_, device=h.device)
            position = torch.empty(B, F_, dtype=torch.long, device=h.device)
            for n, rows in self.groups:  # each window's own tokens: no pad is read, none needs masking
                value[rows], position[rows] = h[rows, :n].float().max(dim=1)  # [G, F] each
            self.neuron[layer] = (value, position)
            return h

        return hook


@torch.no_grad()
def run_batch(model, windows: Sequence[int], batch: Sequence[np.ndarray], k: int, features=None) -> Partial:
    """The Partial of one batch of windows (ids of each, at most block_size long). features: a
    FeatureScan (scanning/features.py) whose hooks read the SAEs' features in the same pass."""
    device = model.device
    lengths = torch.tensor([len(ids) for ids in batch], dtype=torch.long)
    B, T = len(batch), int(lengths.max())
    idx = torch.zeros(B, T, dtype=torch.long)
    for b, ids in enumerate(batch):
        idx[b, : len(ids)] = torch.as_tensor(ids)
    idx = idx.to(device)
    state = _Layers(lengths, idx)
    L = model.config.n_layer
    hooks = {}
    for l in range(L):
        hooks[point("attn.weights", l)] = state.score(l)
        hooks[point("mlp.hidden", l)] = state.neurons(l)
    for name, fn in (features.hooks(lengths) if features is not None else {}).items():
        hooks[name] = (lambda a, b: lambda value: b(a(value)))(hooks[name], fn) if name in hooks else fn
    with edited(model, hooks):  # explicit: the layers' own maps are read, not built a second time
        logits = model(idx, explicit=True)  # [B, T, V]
    # loss of predicting token t+1 from tokens <= t, for the real tokens only
    # one window at a time: the log-softmax of a whole batch would be a second [B, T, V] tensor
    token_loss = [
        F.cross_entropy(logits[b, : n - 1].float(), idx[b, 1:n], reduction="none").cpu().numpy()
        for b, n in enumerate(lengths.tolist())
    ]
    loss = np.array([t.astype(np.float64).mean() for t in token_loss])
    heads = torch.stack([state.heads[l] for l in range(L)], dim=1).double().cpu().numpy()  # [B, L, H, scores]
    value = torch.stack([state.neuron[l][0] for l in range(L)]).cpu().numpy()  # [L, B, F]
    position = torch.stack([state.neuron[l][1] for l in range(L)]).cpu().numpy()
    win = np.asarray(windows, dtype=np.int64)
    cand_value = value.transpose(0, 2, 1)  # [L, F, B]
    cand_window = np.broadcast_to(win[None, None, :], cand_value.shape)
    top = top_k(cand_value, cand_window, position.transpose(0, 2, 1).astype(np.int32), k)
    extra = torch.stack([state.extra[l] for l in range(L)], dim=1).double().cpu().numpy()  # [B, L, H, EXTRAS]
    return Partial(
        win,
        loss,
        lengths.numpy().astype(np.int64),
        np.concatenate(token_loss),
        heads,
        top[0],
        top[1],
        top[2],
        head_extra=extra,
        induction_queries=state.induction_queries.numpy().astype(np.int64),
    )
