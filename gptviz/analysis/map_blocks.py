"""Attention maps as the large figures draw them: b × b block means of each head's weights, made on
the model's device a band of query rows at a time, never a whole [H, T, T] map.

A figure of a long prompt shows at most a few hundred cells a side, so it needs block means, not the
T² weights: at T = 1,024 the layer × head grid of GPT-2 small reads 144 maps of 1M cells each. The
weights of a band of query rows are rebuilt from the captured q and k by the model's own functions
(the layer's AttentionSpec: scale, soft-cap, window; as the Trace rebuilds them), summed into blocks
and dropped: memory is one band, bounded by BAND_CELLS, whatever T. A map the Trace holds (an edited
run's) is read in the same bands. Only the block means leave the device, once per call.

A block's mean is over the cells the mask allows whose value is finite (as a NaN-aware mean of the
map with masked cells set to NaN); `masked` says where every cell of a block is masked, and `bad`
where an allowed cell holds NaN or ±Inf (the model computed it): a figure paints those apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..model import attention_weights
from ..names import point

BAND_CELLS = 1 << 24  # heads × query rows × keys of one band (64 MB of float32 weights)
BANDS = 8  # bands of a map at least: a causal map's bands skip the keys after their rows (~7/16 of it)


@dataclass(frozen=True)
class MapBlocks:
    """Every chosen head's map of one layer in b × b blocks (b = 1: the cells themselves).

    means [H, n, n] float32: the mean of each block's allowed finite cells, NaN where it has none;
    masked [H, n, n] bool: every cell of the block masked; bad [H, n, n] bool: a cell the mask allows
    holds NaN or ±Inf; b: the block side; T: the positions the blocks cover; window: the mask also hides
    some key before its query (a sliding-window or local layer), which a figure's caption says."""

    means: np.ndarray
    masked: np.ndarray
    bad: np.ndarray
    b: int
    T: int
    window: bool = False


def block_side(T: int, max_cells: int) -> int:
    """The side b of the blocks that leave at most max_cells a side of T (as block_mean chooses it)."""
    return max(1, math.ceil(T / max_cells))


def _sums(x: Tensor, b: int) -> Tensor:
    """[H, R, C] -> [H, ceil(R / b), ceil(C / b)] block sums (zero-padded to whole blocks)."""
    H, R, C = x.shape
    if R % b or C % b:
        x = torch.nn.functional.pad(x, (0, -C % b, 0, -R % b))
    # the contiguous axis first: one strided sum over both block axes is several times slower
    return x.view(H, x.size(1) // b, b, x.size(2) // b, b).sum(-1).sum(2)


def reduce_maps(maps: Tensor | np.ndarray, allowed: Tensor | np.ndarray | None, b: int) -> MapBlocks:
    """MapBlocks of whole maps [H, T, T] in hand. allowed: the [T, T] mask (True = may read); None takes
    every NaN for masked (the analysis functions' convention for maps without their mask)."""
    w = _tensor(maps)
    allowed = ~torch.isnan(w) if allowed is None else _tensor(allowed).to(w.device)
    parts = _band(w, allowed.expand(w.shape), b)
    return _blocks(*parts, b, w.size(-1), _hides_earlier(0, allowed.reshape(-1, *allowed.shape[-2:])[0]))


def _tensor(x: Tensor | np.ndarray) -> Tensor:
    """A tensor of x; a read-only array (a Trace's) copied, as torch cannot wrap one."""
    if isinstance(x, Tensor):
        return x
    return torch.from_numpy(np.array(x) if not x.flags.writeable else np.asarray(x))


def _band(w: Tensor, allowed: Tensor, b: int, zero_masked: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Block sums of one band [H, rows, keys]: the allowed finite values, their count, the allowed
    cells and the allowed non-finite ones. zero_masked: masked cells hold 0 (a softmax's weights), so
    where every block's sum is finite, the plain sums are those of the allowed values (one pass)."""
    w = w.float()
    if zero_masked:
        total = _sums(w, b)
        if bool(torch.isfinite(total).all()):  # no NaN or ±Inf anywhere: the count is the mask's
            count = _sums(allowed[:1].float(), b).expand(total.shape)
            return total, count, count, torch.zeros_like(total)
    finite = torch.isfinite(w)
    good = allowed & finite
    return (
        _sums(torch.where(good, w, 0.0), b),
        _sums(good.float(), b),
        _sums(allowed.float(), b),
        _sums((allowed & ~finite).float(), b),
    )


def _blocks(total: Tensor, count: Tensor, allowed: Tensor, bad: Tensor, b: int, T: int, window: bool) -> MapBlocks:
    means = torch.where(count > 0, total / count.clamp_min(1), float("nan"))
    masked, bad = (allowed == 0).expand(means.shape), bad > 0
    host = torch.stack([means, masked.float(), bad.float()]).cpu().numpy()  # one copy to the host
    return MapBlocks(host[0].astype(np.float32), host[1] > 0, host[2] > 0, b, T, window)


def _hides_earlier(a: int, allowed: Tensor) -> bool:
    """Whether a band's mask (query rows a.., every key it reads) hides a key at or before its query."""
    rows, keys = allowed.shape
    earlier = torch.arange(keys, device=allowed.device) <= torch.arange(a, a + rows, device=allowed.device)[:, None]
    return bool((earlier & ~allowed).any())


def band_rows(T: int, heads: int, b: int = 1) -> int:
    """Query rows per band: whole blocks of b rows, about BANDS bands (a band reads only the keys its rows
    may see), at most BAND_CELLS cells of `heads` heads' weights."""
    return max(b, min(BAND_CELLS // max(1, heads * T), -(-T // BANDS)) // b * b)


def weight_bands(
    trace,
    layer: int,
    heads: Sequence[int] | None = None,
    rows: int | None = None,
    span: range | None = None,
    rebuild: bool = True,
    kind: str = "weights",
) -> Iterator[tuple[int, Tensor, Tensor, bool]]:
    """The attention weights of `layer` (the chosen heads, all by default) a band of `rows` query rows at a time
    (band_rows by default), over the query rows of `span` (all by default): (a, w, allowed, zeroed) per band,
    w [H', rows, K] the weights of query rows a.., allowed [rows, K] their mask, K the keys they may read.
    Rebuilt from q and k by the model's own functions where the Trace rebuilds them (K = the band's last row
    + 1, as a causal map's later keys are masked; zeroed: every masked cell is exactly 0), read from the
    Trace where it holds them or where `rebuild` is False (K = T; a small map read whole, bit for bit what
    the model computed: a band's products may round differently). Memory: one band, whatever T.
    kind "masked scores": the scores instead, over the same cells; "scores": every key's score before
    the mask, all allowed (K = T); neither is zeroed."""
    site = "attn.weights" if kind == "weights" else "attn.scores"
    name, T = point(site, layer), trace.n_tokens
    specs = getattr(trace, "attention_specs", None)
    qk = [point("attn.q", layer), point("attn.k", layer)]
    rebuilt = rebuild and specs is not None and not trace.held(name) and all(n in trace for n in qk)
    if rebuilt and specs is not None:
        q, k = (trace.tensor(n) for n in qk)  # [H, T, D], [H_kv, T, D]
        chosen = list(range(q.size(0))) if heads is None else [int(h) for h in heads]
        group = q.size(0) // k.size(0)  # query head h reads key head h // group
        q, k = q[chosen], k[[h // group for h in chosen]]
        spec = specs[layer]
    else:
        maps, mask = trace.tensor(name), trace.tensor(point("attn.mask", layer))
        chosen = list(range(maps.size(0))) if heads is None else [int(h) for h in heads]
        maps = maps[chosen]
    span = span or range(T)
    rows = rows or band_rows(T, len(chosen))
    for a in range(span.start, span.stop, rows):
        e = min(span.stop, a + rows)
        if kind == "scores":  # before the mask: every key, every cell counts
            s = spec.scores(q[None, :, a:e], k[None])[0] if rebuilt else maps[:, a:e]
            yield a, s, torch.ones(e - a, T, dtype=torch.bool, device=s.device), False
        elif rebuilt:
            allowed = spec.mask(e - a, q.device, a)  # (rows, e): the keys after e are masked for these rows
            s = spec.scores(q[None, :, a:e], k[None, :, :e])
            if kind == "weights":
                yield a, attention_weights(s, allowed, q.dtype)[0], allowed, True
            else:
                yield a, s[0], allowed, False
        else:
            yield a, maps[:, a:e], mask[a:e], False


def weight_blocks(trace, layer: int, b: int, heads: Sequence[int] | None = None) -> MapBlocks:
    """The attention weights of `layer` (the chosen heads, all by default) in b × b blocks, from a
    Trace: rebuilt from q and k one band of query rows at a time where the Trace rebuilds them, read
    in bands where it holds them (or where b = 1). Memory: one band (BAND_CELLS), whatever T."""
    T, n_heads = trace.n_tokens, _count(trace, layer, heads)
    return _reduce_bands(weight_bands(trace, layer, heads, band_rows(T, n_heads, b), rebuild=b > 1), n_heads, b, T)


def score_blocks(
    trace, layer: int, b: int, heads: Sequence[int] | None = None, kind: str = "masked scores"
) -> MapBlocks:
    """The attention scores of `layer` (the chosen heads, all by default) in b × b blocks: kind "masked
    scores" over the cells the mask allows, "scores" over every cell (before the mask, as the model
    computed them), made a band of query rows at a time as weight_blocks makes the weights. Memory: one
    band, whatever T; a Trace's scores would be every head's [T, T] at once."""
    T, n_heads = trace.n_tokens, _count(trace, layer, heads)
    return _reduce_bands(weight_bands(trace, layer, heads, band_rows(T, n_heads, b), kind=kind), n_heads, b, T)


def _count(trace, layer: int, heads: Sequence[int] | None) -> int:
    """How many heads a call reads: the chosen ones, or every query head of the layer."""
    if heads is not None:
        return len(heads)
    q = point("attn.q", layer)
    return trace.tensor(q if q in trace else point("attn.weights", layer)).size(0)


def _reduce_bands(bands: Iterator[tuple[int, Tensor, Tensor, bool]], n_heads: int, b: int, T: int) -> MapBlocks:
    """MapBlocks of the bands of weight_bands (or of a difference of two): each band fills its rows' blocks."""
    n, sums, window = -(-T // b), None, False
    for a, w, allowed, zeroed in bands:
        window = window or _hides_earlier(a, allowed)
        band = _band(w, allowed.expand(w.shape), b, zero_masked=zeroed)
        if sums is None:
            sums = [torch.zeros(n_heads, n, n, device=w.device) for _ in range(4)]
        for whole, part in zip(sums, band, strict=True):
            whole[:, a // b : a // b + part.size(1), : part.size(2)] = part
    total, count, allowed, bad = sums or [torch.zeros(n_heads, n, n) for _ in range(4)]
    return _blocks(total, count, allowed, bad, b, T, window)


def difference_blocks(a, b_trace, layer: int, b: int, heads: Sequence[int] | None = None) -> MapBlocks:
    """A's attention weights minus B's in `layer` (the chosen heads), in b × b blocks over A's mask: the
    NaN-aware block means of the [H, T, T] difference, made a band of query rows at a time from both
    Traces (as weight_blocks), never a whole map of either. Memory: two bands, whatever T."""
    T, n_heads = a.n_tokens, _count(a, layer, heads)
    rows = band_rows(T, 2 * n_heads, b)

    def bands() -> Iterator[tuple[int, Tensor, Tensor, bool]]:
        for (r, wa, allowed, za), (_, wb, _, zb) in zip(
            weight_bands(a, layer, heads, rows, rebuild=b > 1),
            weight_bands(b_trace, layer, heads, rows, rebuild=b > 1),
            strict=True,
        ):
            keys = min(wa.size(-1), wb.size(-1))  # a rebuilt band reads only the keys its rows may see
            yield r, wa[..., :keys].float() - wb[..., :keys].float().to(wa.device), allowed[:, :keys], za and zb

    return _reduce_bands(bands(), n_heads, b, T)
