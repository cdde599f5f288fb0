"""Activation patching: which layer and position (or head) carries what the clean prompt knows.

For each cell, run the corrupt prompt with one value taken from the clean run and report

    (patched − corrupt) / (clean − corrupt)   of   logit(answer) − logit(wrong) at the last position

so 0 means the patch changed nothing and 1 means it restored the clean prediction's preference.

Fast the honest way, computing exactly what the one-run-per-cell loop computes (to float32 rounding):
- a cell whose clean value equals the corrupt run's, bit for bit (every position before the first
  token the prompts differ in), patches nothing, and the last layer's MLP output at an earlier position
  never reaches the last position's logits: such a run is the corrupt run, so its value is 0 exactly,
  with no run at all;
- a patch at layer l changes nothing before layer l, so a patched run starts from the corrupt run's
  cached residual stream there and runs only the blocks from l on (mlp.out: from l + 1, since an MLP
  reads one position and resid_post = resid_mid + mlp.out, in a parallel block
  resid_pre + (attn.out + mlp.out));
- a patch at position p changes nothing before p either (a position reads only earlier ones), so a
  run patched at p runs only positions p..T-1, reading the corrupt run's cached keys and values of the
  positions before p (a KV cache, as in generation); a head's patch, from the first position its
  output differs at;
- the patched runs go through the model in batches that span layers: a batch starts at its lowest
  layer, and the run patched at layer l joins the batch as it reaches layer l, so no run passes
  through a layer below its own; a batch holds the cells of a few neighbouring positions (it runs
  from the first of them), of every layer;
- only the last position's logits are computed (the final norm and LM head act per position), of the
  answer and the wrong token only, and the values stay on the model's device until the sweep is done
  (one copy to the host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..capture import as_ids, edited, trace
from ..checks import whole
from ..decoding import LayerCache
from ..errors import ArgumentError, PromptError
from ..interventions import patch
from ..model import GPT, Block
from ..names import point
from ..progress import ProgressFn, Reporter
from ..record import Trace

SITES = ("resid_pre", "attn.z", "mlp.out")
TOKENS_PER_BATCH = 8192  # rows × positions per forward batch: bounds the memory of one batched run
# The fixed cost of one batch in one layer, in the work of one run at one position in one layer: what
# a block costs beyond its rows (reading its weights, launching its kernels). Measured on a 2-core CPU
# (GPT-2 small: 2.5 ms a block call, 0.18 ms a row); elsewhere an estimate: a GPU launches ~20 kernels a
# block, ~0.1 ms, where a row of a 1B model's block is ~0.1 µs of work at full speed.
BATCH_OVERHEAD = {"cpu": 16}
GPU_BATCH_OVERHEAD = 1024
# On a CPU a narrower model's row costs less while a block call still dispatches its ~70 ops: the
# overhead above grows as OVERHEAD_WIDTH / C below that width (16 layers of width 64 in bf16, measured:
# 0.6 ms a block call, 3.5 µs a row, so ~170 rows; GPT-2 small's 16 kept from C = 768 up).
OVERHEAD_WIDTH = 768
GROUP_POSITIONS = 64  # the widest group of positions the plan considers


def logit_diff(logits: np.ndarray | Tensor, answer: int, wrong: int) -> float:
    """logit(answer) − logit(wrong) of one position's logits [V], in float64."""
    return float(logits[answer]) - float(logits[wrong])


def _check(model: GPT, clean: Tensor, corrupt: Tensor, answer: int, wrong: int, site: str) -> None:
    if site not in SITES:
        raise PromptError(f"the sweep patches one of {', '.join(SITES)}; got {site!r}")
    if clean.shape != corrupt.shape:
        raise PromptError(
            f"the clean prompt has {clean.size(1)} tokens and the corrupt one {corrupt.size(1)}: "
            "patching compares the same positions, so give prompts of the same length"
        )
    V = model.config.vocab_size
    for what, tok in (("answer", answer), ("wrong", wrong)):
        if isinstance(tok, bool) or not isinstance(tok, (int, np.integer)) or not 0 <= tok < V:
            raise PromptError(f"the {what} token must be an id in [0, {V - 1}], got {tok!r}")
    if answer == wrong:
        raise PromptError("the answer and the wrong token are the same: the difference would be 0")


def _chosen(values: Sequence[int] | None, n: int, what: str) -> list[int]:
    """Sorted distinct indices in [0, n), all of them for None; ArgumentError for one outside."""
    if values is None:
        return list(range(n))
    out = sorted({whole(v, what) for v in values})
    if not out or out[0] < 0 or out[-1] >= n:
        raise ArgumentError(f"{what} must be a non-empty choice within [0, {n - 1}], got {list(values)[:8]}")
    return out


@dataclass
class _Batch:
    """Patched runs that go through the model together: each row a (layer, cell), sorted by the layer
    its run enters at, all running positions p0..T-1."""

    p0: int
    layers: list[int]
    cells: list[int]


def _first_change(site: str, ct: Trace, rt: Trace, L: int) -> np.ndarray:
    """[L, n]: the first position each cell's patch changes (its position; for a head, the first
    position its output differs at), or -1 where the patched run is the corrupt run: the clean value
    equals the corrupt one bit for bit, or it cannot reach the last position's logits. One copy to
    the host."""
    changed = []
    for l in range(L):
        a, b = ct.tensor(point(site, l)), rt.tensor(point(site, l))
        if site == "attn.z":  # [H, T, D]: the head differs from its first differing position on
            diff = (a != b).any(-1)  # [H, T]
            first = torch.where(diff.any(-1), diff.int().argmax(-1), -1)
        else:  # [T, C]: a position's patch changes positions from its own on
            pos = torch.arange(a.size(0), device=a.device)
            reaches = (a != b).any(-1)
            if site == "mlp.out" and l == L - 1:  # the last MLP's output reaches the logits at its position only
                reaches[:-1] = False
            first = torch.where(reaches, pos, -1)
        changed.append(first)
    return torch.stack(changed).cpu().numpy()


def _plan(
    first: np.ndarray, layers: list[int], cells: list[int], shift: int, T: int, rows: int | None, overhead: float
) -> list[_Batch]:
    """The batches of the cells to run ((layer, cell) pairs with a first change), grouped by the
    position they run from. A group from p0 runs all its cells over positions p0..T-1, so a wide group
    wastes work on its later cells, and a narrow one pays the fixed cost of a batch in every layer it
    passes (a block's weights read for a few rows, its launches): the groups that cost least in all,
    by dynamic programming over the positions. A group is cut into batches of at most `rows` runs
    (default: TOKENS_PER_BATCH tokens), sorted by the layer each run enters at (its layer + shift)."""
    L = first.shape[0]
    by: dict[int, list[tuple[int, int]]] = {}
    for l in layers:
        for c in cells:
            if first[l, c] >= 0:
                by.setdefault(int(first[l, c]), []).append((l + shift, c))
    starts = sorted(by)
    best, cut = [0.0] + [float("inf")] * len(starts), [0] * (len(starts) + 1)
    for end in range(1, len(starts) + 1):  # best[end]: the cheapest grouping of starts[:end]
        work, n, low = 0, 0, L
        for a in range(end - 1, max(-1, end - 1 - GROUP_POSITIONS), -1):  # the last group: starts[a:end]
            work += sum(L - entry for entry, _ in by[starts[a]])  # blocks each run passes through
            n += len(by[starts[a]])
            low = min(low, *(entry for entry, _ in by[starts[a]]))
            batches = -(-n // (rows or max(1, TOKENS_PER_BATCH // (T - starts[a]))))
            cost = best[a] + work * (T - starts[a]) + batches * (L - low + 1) * overhead
            if cost < best[end]:
                best[end], cut[end] = cost, a
    groups, end = [], len(starts)
    while end:
        groups.append(starts[cut[end] : end])
        end = cut[end]
    out = []
    for group in reversed(groups):
        todo = sorted((entry, c, p) for p in group for entry, c in by[p])  # a run joins as the batch reaches it
        cap = rows or max(1, TOKENS_PER_BATCH // (T - group[0]))
        for k in range(0, len(todo), cap):
            part = todo[k : k + cap]
            out.append(_Batch(min(t[2] for t in part), [t[0] - shift for t in part], [t[1] for t in part]))
    return out


@torch.no_grad()
def patching_sweep(
    model: GPT,
    clean_ids: Sequence[int] | Tensor | np.ndarray,
    corrupt_ids: Sequence[int] | Tensor | np.ndarray,
    answer: int,
    wrong: int,
    site: str = "resid_pre",
    *,
    batch_size: int | None = None,
    layers: Sequence[int] | None = None,
    cells: Sequence[int] | None = None,
    progress: ProgressFn | None = None,
) -> np.ndarray:
    """For each layer and position (site resid_pre or mlp.out: [L, T]) or layer and head (attn.z:
    [L, H]), the corrupt run with that one value from the clean run, as (patched − corrupt) /
    (clean − corrupt) of logit(answer) − logit(wrong) at the last position. float64.

    batch_size: patched runs per forward batch at most (default: about 8192 tokens per batch). layers,
    cells: only these layers and positions (heads for attn.z) are run; the other cells are NaN.
    progress: called with a gptviz.Progress after each batch (raise gptviz.Cancelled from it to stop)."""
    if batch_size is not None:  # -1 or 0 would make no batches and leave every cell unwritten
        batch_size = whole(batch_size, "batch_size", low=1)
    clean, corrupt = as_ids(clean_ids, model.device), as_ids(corrupt_ids, model.device)
    _check(model, clean, corrupt, answer, wrong, site)
    ct, rt = trace(model, clean[0]), trace(model, corrupt[0])
    d_clean = logit_diff(ct.part("logits", -1), answer, wrong)
    d_corrupt = logit_diff(rt.part("logits", -1), answer, wrong)
    if not abs(d_clean - d_corrupt) > 1e-6:
        raise PromptError(
            f"the clean and corrupt prompts give the same logit difference ({d_clean:.4g}): "
            "there is nothing for a patch to restore; choose another answer, wrong token or corruption"
        )
    L, T = model.config.n_layer, clean.size(1)
    n = model.config.n_head if site == "attn.z" else T
    layer_list = _chosen(layers, L, "layers")
    cell_list = _chosen(cells, n, "heads" if site == "attn.z" else "positions")
    first = _first_change(site, ct, rt, L)
    overhead = float(BATCH_OVERHEAD.get(model.device.type, GPU_BATCH_OVERHEAD))
    if model.device.type == "cpu":
        overhead *= max(1.0, OVERHEAD_WIDTH / model.config.n_embd)
    batches = _plan(first, layer_list, cell_list, int(site == "mlp.out"), T, batch_size, overhead)
    # NaN where not asked for; the corrupt run's own difference where the patch changes nothing
    raw = torch.full((L, n), float("nan"), dtype=torch.float64, device=model.device)
    unchanged = np.zeros((L, n), dtype=bool)
    unchanged[np.ix_(layer_list, cell_list)] = first[np.ix_(layer_list, cell_list)] < 0
    raw[torch.as_tensor(unchanged, device=model.device)] = d_corrupt
    reporter = Reporter(progress, "batches", len(batches))
    reporter.start()
    last = []  # each batch's runs' final-norm output at the last position, [N, C]
    for b in batches:
        last.append(_run_batch(model, ct, rt, site, b))
        reporter.tick()
    if batches:
        rows = [torch.as_tensor([i for b in batches for i in getattr(b, axis)]) for axis in ("layers", "cells")]
        raw[rows[0].to(model.device), rows[1].to(model.device)] = _last_diffs(model, torch.cat(last), answer, wrong)
    return ((raw.cpu().numpy() - d_corrupt) / (d_clean - d_corrupt)) + 0.0  # + 0.0: no -0.0 in a table


def _entries(model: GPT, ct: Trace, rt: Trace, site: str, layer: int, cells: list[int], p0: int) -> Tensor:
    """The residual stream, positions p0..T-1, of the runs patched at `layer` in `cells`, where they
    join the batch (before block `layer`; for mlp.out, before block layer + 1): (N, T - p0, C)."""
    dev, N = model.device, len(cells)
    i, c = torch.arange(N, device=dev), torch.as_tensor(cells, device=dev)
    if site == "attn.z":  # the heads are swapped inside the block (_head_swaps)
        return rt.tensor(point("resid_pre", layer))[p0:].expand(N, -1, -1)
    source = ct.tensor(point(site, layer))  # the clean value at this layer, [T, C]
    if site == "resid_pre":
        x = rt.tensor(point("resid_pre", layer))[p0:].expand(N, -1, -1).clone()  # (N, T - p0, C)
        x[i, c - p0] = source[c]
        return x
    x = rt.tensor(point("resid_post", layer))[p0:].expand(N, -1, -1).clone()
    pre, mid = rt.tensor(point("resid_pre", layer))[c], rt.tensor(point("resid_mid", layer))[c]
    block = model.get_submodule(f"transformer.h.{layer}")
    assert isinstance(block, Block)
    # a parallel block sums in another order, which reads attn.out
    out = rt.tensor(point("attn.out", layer))[c] if block.parallel else None
    x[i, c - p0] = block.residual_out(pre, out, mid, source[c])
    return x


def _past(rt: Trace, layer: int, p0: int, N: int) -> LayerCache | None:
    """The corrupt run's keys and values of positions 0..p0-1 at `layer`, for N runs: a patch at a
    position from p0 on leaves them as they were (a position reads only those before it)."""
    if p0 == 0:
        return None
    cache = LayerCache(capacity=rt.n_tokens)
    k, v = rt.tensor(point("attn.k", layer))[None, :, :p0], rt.tensor(point("attn.v", layer))[None, :, :p0]
    cache.append(k.expand(N, -1, -1, -1), v.expand(N, -1, -1, -1))  # (N, H_kv, p0, D)
    return cache


def _run_batch(model: GPT, ct: Trace, rt: Trace, site: str, b: _Batch) -> Tensor:
    """The final norm's output at the last position of each of the batch's patched runs, [N, C], in
    its rows' order. The same modules, in the same order, as GPT.forward after the embedding; a run
    joins at its own layer (mlp.out: the next one) and passes through the rest."""
    L, shift = model.config.n_layer, int(site == "mlp.out")
    joining: dict[int, list[int]] = {}
    for l, c in zip(b.layers, b.cells, strict=True):
        joining.setdefault(l + shift, []).append(c)
    swaps = _head_swaps(ct, b, joining) if site == "attn.z" else {}
    x: Tensor | None = None
    with edited(model, swaps):
        for j in range(min(joining), L + 1):
            if j in joining:
                new = _entries(model, ct, rt, site, j - shift, joining[j], b.p0)
                if j == L:  # mlp.out of the last layer: only the last position is read from here on
                    x, new = (None if x is None else x[:, -1:]), new[:, -1:]
                x = new if x is None else torch.cat((x, new))
            if j < L and x is not None:
                x = _block(model, j, x, _past(rt, j, b.p0, x.size(0)), last=site != "attn.z")
    assert x is not None
    return model.transformer.ln_f(x[:, -1])  # [N, C]: the last position only


def _block(model: GPT, j: int, x: Tensor, past: LayerCache | None, last: bool) -> Tensor:
    """Block j on x (N, T', C) after the positions in `past`. The last block's output is read at the
    last position only (last: the caller allows it; a head's edit would see the positions split):
    the earlier positions go only through its attention, for their keys and values, as a prompt does
    before a step of generation, and the last one through the whole block, reading them. The MLP of
    T' - 1 positions is saved."""
    block = model.transformer.h[j]
    if not (last and j == model.config.n_layer - 1 and x.size(1) > 1):
        return block(x, past)
    past = past or LayerCache(capacity=x.size(1))
    block.attn(block.ln_1(x[:, :-1]), past)  # appends their keys and values to `past`
    return block(x[:, -1:], past)


def _last_diffs(model: GPT, h: Tensor, answer: int, wrong: int) -> Tensor:
    """logit(answer) − logit(wrong) of final-norm outputs h [N, C], [N] float64: the head's two columns
    (its own product, bias and soft-cap: lens._head), once for every run of the sweep. Every column
    would cost a forward pass's worth of products for nothing: a product of N rows rounds differently
    from the full run's T rows anyway (~1e-6, whichever columns), and the cells that patch nothing are
    the corrupt run's own value, exactly."""
    from .lens import _head

    a, w = (_head(model, h, h.new_empty(h.size(0), 1), slice(i, i + 1))[:, 0] for i in (answer, wrong))
    return a.double() - w.double()


def _head_swaps(ct: Trace, b: _Batch, joining: dict[int, list[int]]) -> dict:
    """For each layer where runs join: an edit of its attn.z in which the runs that joined there (the
    batch's last rows at that layer) take their head from the clean run; the other rows pass as they are."""
    swaps, before = {}, 0
    for j in sorted(joining):
        heads, before = joining[j], before + len(joining[j])
        start, source = before - len(heads), ct.tensor(point("attn.z", j))[:, b.p0 :]  # [H, T - p0, D]

        def swap(z: Tensor, start=start, heads=heads, source=source) -> Tensor:  # z [N, H, T - p0, D]
            z = z.clone()
            h = torch.as_tensor(heads, device=z.device)
            z[torch.arange(start, start + len(heads), device=z.device), h] = source[h]
            return z

        swaps[point("attn.z", j)] = swap
    return swaps


def patched_run(model: GPT, clean: Trace, corrupt_ids, site: str, layer: int, cell: int, tokenizer=None) -> Trace:
    """One cell of the sweep as a full Trace: the corrupt prompt with clean's value at `site` of
    `layer`, at position `cell` (resid_pre, mlp.out) or for head `cell` (attn.z)."""
    if site not in SITES:
        raise PromptError(f"the sweep patches one of {', '.join(SITES)}; got {site!r}")
    which = dict(heads=[cell]) if site == "attn.z" else dict(positions=[cell])
    return trace(model, corrupt_ids, tokenizer, interventions=[patch(point(site, layer), clean, **which)])


def one_token(tokenizer, text: str, what: str = "answer") -> int:
    """The id of text that the tokenizer makes exactly one token of (an answer or wrong token)."""
    if tokenizer is None:
        raise PromptError(f"this checkpoint has no tokenizer: give the {what} token as an id")
    if not text:
        raise PromptError(f"the {what} token is empty: type one token")
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        raise PromptError(f"the {what} {text!r} is {len(ids)} tokens; it must be exactly one")
    return int(ids[0])


def sweep_table(sweep: np.ndarray, site: str, labels: Sequence[str]) -> pd.DataFrame:
    """The sweep as long-form rows: layer, position (or head), token (positions only), value."""
    L, n = sweep.shape
    cell = "head" if site == "attn.z" else "position"
    df = pd.DataFrame({"layer": np.repeat(np.arange(L), n), cell: np.tile(np.arange(n), L)})
    if cell == "position":
        df["token"] = [labels[i] for i in df["position"]]
    df["value"] = sweep.ravel()
    return df


def compare_top_k(before: np.ndarray, after: np.ndarray, k: int, display=None) -> pd.DataFrame:
    """Next-token probabilities of two runs at one position (logits [V] each): the tokens in either
    run's top k, most likely after the edit first, with both probabilities, ranks and the change.
    A run whose logits are NaN (nan_logits) ranks nothing: its columns are NaN, and the tokens come
    from the other run only (no rows when both are NaN)."""
    from .next_token import nan_logits, softmax

    runs = []
    for logits in (before, after):
        if nan_logits(logits):
            runs.append((np.full(np.asarray(logits).shape, np.nan), np.full(np.asarray(logits).shape, np.nan)))
        else:
            p = softmax(logits)
            runs.append((p, np.argsort(np.lexsort((np.arange(p.size), -p))).astype(np.float64)))  # rank 0 = top
    (p0, r0), (p1, r1) = runs
    ids = np.union1d(np.flatnonzero(r0 < k), np.flatnonzero(r1 < k))
    order = p1 if np.isfinite(r1).any() else p0
    ids = ids[np.lexsort((ids, -order[ids]))]
    return pd.DataFrame(
        {
            "id": ids,
            "token": display(ids.tolist()) if display is not None else [str(i) for i in ids],
            "before": p0[ids],
            "after": p1[ids],
            "change": p1[ids] - p0[ids],
            "rank_before": pd.array(r0[ids] + 1, dtype="Int64"),
            "rank_after": pd.array(r1[ids] + 1, dtype="Int64"),
        }
    )
