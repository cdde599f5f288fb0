"""Activation patching: which layer and position (or head) carries what the clean prompt knows.

For each cell, run the corrupt prompt with one value taken from the clean run and report

    (patched − corrupt) / (clean − corrupt)   of   logit(answer) − logit(wrong) at the last position

so 0 means the patch changed nothing and 1 means it restored the clean prediction's preference.

Fast the honest way, computing exactly what the one-run-per-cell loop computes:
- a patch at layer l changes nothing before layer l, so every patched run starts from the corrupt
  run's cached residual stream there and runs only the blocks from l on (mlp.out: from l + 1,
  since an MLP reads one position and resid_post = resid_mid + mlp.out, in a parallel block
  resid_pre + (attn.out + mlp.out));
- a patch at position p changes nothing before p either (a position reads only earlier ones), so a
  batch of positions from p0 on runs only positions p0..T-1, reading the corrupt run's cached keys
  and values of the positions before p0 (a KV cache, as in generation): about half the work;
- the patched runs of one layer go through the model in batches;
- only the last position's logits are computed (the final norm and LM head act per position).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..capture import as_ids, edited, trace
from ..checks import whole
from ..decoding import KVCache
from ..errors import ArgumentError, PromptError
from ..interventions import patch
from ..model import GPT, Block
from ..names import point
from ..progress import ProgressFn, Reporter
from ..record import Trace

SITES = ("resid_pre", "attn.z", "mlp.out")
TOKENS_PER_BATCH = 8192  # rows × T per forward batch: bounds the memory of one batched run


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


def _last_diff(model: GPT, x: Tensor, start: int, answer: int, wrong: int, cache: KVCache | None = None) -> Tensor:
    """Run the blocks from `start` on residuals x [N, T', C]; logit(answer) − logit(wrong) at the last
    position, [N] float64. The same modules, in the same order, as GPT.forward after the embedding.
    cache: the keys and values of the positions before x's (x then holds the last T' positions)."""
    for l, block in enumerate(model.transformer.h[start:], start):
        x = block(x) if cache is None else block(x, cache.layers[l])
    h = model.transformer.ln_f(x[:, -1])  # [N, C]: the last position only
    # every column, as the full run computes them: a GEMM of two columns may round differently, and a
    # difference of 1e-6 can be a visible share of a small clean − corrupt gap
    logits = model.lm_head(h)  # [N, V]
    return logits[:, answer].double() - logits[:, wrong].double()


def _corrupt_past(model: GPT, rt: Trace, p0: int, N: int, start: int) -> KVCache | None:
    """The corrupt run's keys and values of positions 0..p0-1 in the layers from `start` on (the only
    ones the patched runs pass through), for N runs: a patch at position p >= p0 leaves them as they
    were (a position reads only those before it)."""
    if p0 == 0:
        return None
    cache = KVCache(model.config.n_layer, capacity=rt.n_tokens)
    for l, layer in enumerate(cache.layers[start:], start):
        k, v = rt.tensor(point("attn.k", l))[None, :, :p0], rt.tensor(point("attn.v", l))[None, :, :p0]
        layer.append(k.expand(N, -1, -1, -1), v.expand(N, -1, -1, -1))  # (N, H, p0, D)
    return cache


def _chunks(n: int, T: int, batch_size: int | None, site: str) -> list[range]:
    """The cells of one layer, in batches. A batch of positions starts at its first position, so
    small batches skip more of the prompt; T / 8 wastes little of that and keeps matmuls large."""
    if batch_size:
        rows = batch_size
    elif site == "attn.z":
        rows = max(1, TOKENS_PER_BATCH // T)
    else:
        rows = max(1, min(TOKENS_PER_BATCH // T, max(T // 8, 256 // T)))
    return [range(i, min(n, i + rows)) for i in range(0, n, rows)]


def _chosen(values: Sequence[int] | None, n: int, what: str) -> list[int]:
    """Sorted distinct indices in [0, n), all of them for None; ArgumentError for one outside."""
    if values is None:
        return list(range(n))
    out = sorted({whole(v, what) for v in values})
    if not out or out[0] < 0 or out[-1] >= n:
        raise ArgumentError(f"{what} must be a non-empty choice within [0, {n - 1}], got {list(values)[:8]}")
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

    batch_size: patched runs per forward batch (default: about 8192 tokens per batch). layers, cells:
    only these layers and positions (heads for attn.z) are run; the other cells are NaN. progress:
    called with a gptviz.Progress after each batch (raise gptviz.Cancelled from it to stop)."""
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
    raw = np.full((L, n), np.nan)  # NaN, not whatever memory held, should a cell ever go unwritten
    batches = [rows for rows in _chunks(n, T, batch_size, site) if any(c in cell_list for c in rows)]
    reporter = Reporter(progress, "batches", len(layer_list) * len(batches))
    reporter.start()
    for l in layer_list:
        # the clean value at this layer, fetched once for all its batches (mlp.out is rebuilt on request)
        source = ct.tensor(point(site, l))
        for rows in batches:
            raw[l, rows.start : rows.stop] = _patched(model, source, rt, site, l, rows, answer, wrong).cpu().numpy()
            reporter.tick()
    if len(cell_list) < n:  # a batch runs whole ranges: keep only the cells asked for
        raw[:, [c for c in range(n) if c not in set(cell_list)]] = np.nan
    return (raw - d_corrupt) / (d_clean - d_corrupt) + 0.0  # + 0.0: no -0.0 in a table


def _patched(model: GPT, source: Tensor, rt: Trace, site: str, l: int, rows: range, answer: int, wrong: int) -> Tensor:
    """logit differences of the patched runs `rows` (positions, or heads for attn.z) of layer l, each
    taking its cell from `source` (the clean run's value of `site` at layer l)."""
    cells = torch.arange(rows.start, rows.stop, device=model.device)
    N, i = len(rows), torch.arange(len(rows), device=model.device)
    if site in ("resid_pre", "mlp.out"):  # positions before the batch's first are the corrupt run's
        p0 = rows.start
        if site == "resid_pre":
            start, x = l, rt.tensor(point("resid_pre", l))[p0:].expand(N, -1, -1).clone()  # (N, T - p0, C)
            x[i, cells - p0] = source[cells]
        else:
            start, x = l + 1, rt.tensor(point("resid_post", l))[p0:].expand(N, -1, -1).clone()
            pre, mid = rt.tensor(point("resid_pre", l))[cells], rt.tensor(point("resid_mid", l))[cells]
            block = model.get_submodule(f"transformer.h.{l}")
            assert isinstance(block, Block)
            # a parallel block sums in another order, which reads attn.out
            out = rt.tensor(point("attn.out", l))[cells] if block.parallel else None
            x[i, cells - p0] = block.residual_out(pre, out, mid, source[cells])
        return _last_diff(model, x, start, answer, wrong, _corrupt_past(model, rt, p0, N, start))

    def swap_heads(z: Tensor) -> Tensor:  # z [N, H, T, D]: row r takes head cells[r] from the clean run
        z = z.clone()
        z[i, cells] = source[cells]  # source: the clean run's z [H, T, D]
        return z

    x = rt.tensor(point("resid_pre", l)).expand(N, -1, -1)
    with edited(model, {point("attn.z", l): swap_heads}):
        return _last_diff(model, x, l, answer, wrong)


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
