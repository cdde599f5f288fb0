"""Analyses: small pure computations on a Trace that the views need.

Everything here takes plain NumPy arrays (or a Trace) and returns arrays or DataFrames. Nothing
re-runs the model: a temperature, a top-k or a per-token loss is computed from the captured
logits, so changing it in the dashboard is instant and the numbers stay the model's own.
Probabilities are computed in float64 so rounding never reorders the top of a distribution.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .trace import RESID_SITES

ATTENTION_KINDS = ("weights", "masked scores", "scores")
GROWTH_LIMIT = 3.0  # a block (after the first) that multiplies the residual norm by more is flagged
NORM_LIMIT = 1e4  # a residual norm above this is flagged: float16 tops out at 65504


# --- the next-token distribution ----------------------------------------------------------------
def softmax(logits: np.ndarray, temperature: float = 1.0, axis: int = -1) -> np.ndarray:
    """softmax(logits / temperature) in float64, stable for any logit range."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def top_k(logits: np.ndarray, k: int, temperature: float = 1.0, display: Callable[[list[int]], list[str]] | None = None) -> pd.DataFrame:
    """The k most likely next tokens of one position's logits [V], most likely first.

    display: ids -> token strings (e.g. tokenizer.display). Ties go to the lower id, so the
    order is deterministic."""
    logits = np.asarray(logits)
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
    """(rank, probability) of one token: rank 1 is the most likely; ties count in its favour."""
    probs = softmax(logits, temperature)
    p = probs[token_id]
    return int((probs > p).sum()) + 1, float(p)


def per_token_loss(logits: np.ndarray | torch.Tensor, ids: Sequence[int]) -> pd.DataFrame:
    """Cross-entropy of every prompt token given the tokens before it: row t scores ids[t+1]
    under the logits at position t. The first token has no prediction, so T-1 rows.
    logits [T, V]: an array, or a tensor on any device (only the T-1 losses leave it)."""
    ids = np.asarray(ids, dtype=np.int64)
    target = ids[1:]
    # log p = z[target] - logsumexp(z): one pass over the [T-1, V] logits (50 M cells at T = 1024,
    # V = 50,257), in float64, on torch's threads.
    z = _float64(logits[:-1])
    rows, target_t = torch.arange(len(target), device=z.device), torch.from_numpy(target).to(z.device)
    lp = (z[rows, target_t] - torch.logsumexp(z, dim=-1)).cpu().numpy()
    return pd.DataFrame(
        {
            "position": np.arange(1, len(ids)),
            "id": target,
            "loss_nats": -lp,
            "loss_bits": -lp / math.log(2),
            "probability": np.exp(lp),
        }
    )


# --- attention ---------------------------------------------------------------------------------
def attention_matrix(trace: Mapping, layer: int, head: int, kind: str = "weights") -> np.ndarray:
    """One head's [T, T] matrix (queries as rows) in float32, masked cells as NaN.

    kind: "weights" (after softmax), "masked scores" (scores where the mask allows, else NaN) or
    "scores" (q·kᵀ/√D before the mask: every cell, as the model computed it)."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind={kind!r}: choose one of {', '.join(ATTENTION_KINDS)}")
    site = "weights" if kind == "weights" else "scores"
    m = np.array(trace[f"blocks.{layer}.attn.{site}"][head], dtype=np.float32)  # [T, T]
    if kind != "scores":
        m[~trace[f"blocks.{layer}.attn.mask"]] = np.nan
    return m


def layer_weights(trace: Mapping, layer: int) -> np.ndarray:
    """Every head's attention weights of one layer, [H, T, T] float32, masked cells as NaN."""
    w = np.array(trace[f"blocks.{layer}.attn.weights"], dtype=np.float32)  # [H, T, T]
    w[:, ~np.asarray(trace[f"blocks.{layer}.attn.mask"])] = np.nan
    return w


def block_reduce(m: np.ndarray, max_size: int) -> tuple[np.ndarray, int]:
    """Shrink a [R, C] grid so neither side exceeds max_size by averaging b×b blocks (NaN-aware:
    a block that is entirely NaN stays NaN). Returns (grid, b); b == 1 means unchanged."""
    rows, cols = m.shape
    b = max(1, math.ceil(max(rows, cols) / max_size))
    if b == 1:
        return m, 1
    R, C = math.ceil(rows / b), math.ceil(cols / b)
    padded = np.full((R * b, C * b), np.nan, dtype=np.float64)
    padded[:rows, :cols] = m
    blocks = padded.reshape(R, b, C, b)
    count = np.isfinite(blocks).sum(axis=(1, 3))
    total = np.nansum(blocks, axis=(1, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out.astype(np.float32), b


def block_mean(m: np.ndarray, max_size: int, axis: int) -> tuple[np.ndarray, int]:
    """Average consecutive blocks along one axis of a 2-D array so at most max_size remain
    (NaN-aware; the last block may be shorter). Returns (array, b); b == 1 means unchanged."""
    n = m.shape[axis]
    b = max(1, math.ceil(n / max_size))
    if b == 1:
        return m, 1
    x = np.moveaxis(np.asarray(m, dtype=np.float64), axis, 0)  # [n, other]
    pad = np.full((math.ceil(n / b) * b, x.shape[1]), np.nan)
    pad[:n] = x
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN block stays NaN
        out = np.nanmean(pad.reshape(-1, b, x.shape[1]), axis=1)
    return np.moveaxis(out, 0, axis).astype(np.float32), b


def head_entropy(trace) -> np.ndarray:
    """Mean attention entropy in bits per (layer, head) over query positions: [L, H].
    Low = the head looks at few tokens; log2(i+1) is the most a query at position i can reach."""
    out = []
    for l in range(trace.n_layer):
        w = np.asarray(trace[f"blocks.{l}.attn.weights"], dtype=np.float64)  # [H, T, T]
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.where(w > 0, w * np.log2(w), 0.0).sum(-1)  # [H, T]
        out.append(ent.mean(-1))
    return np.array(out)


def query_computation(trace: Mapping, layer: int, head: int, query: int) -> dict:
    """The attention of one query worked through from the captured q, k and v: q·k for each key,
    ÷√D, the mask, softmax, the weighted v rows and their sum (the head's output for this query).

    Returns `keys`, a per-key DataFrame holding both the recomputed steps and the Trace's own
    scores and weights; `weighted_v` [T, D] = the Trace's weights × v and `output` [D], their sum;
    `max_diff`, the largest gap between recomputed and captured values (float32 rounding)."""
    q = np.asarray(trace[f"blocks.{layer}.attn.q"][head], dtype=np.float64)  # [T, D]
    k = np.asarray(trace[f"blocks.{layer}.attn.k"][head], dtype=np.float64)  # [T, D]
    v = np.asarray(trace[f"blocks.{layer}.attn.v"][head], dtype=np.float64)  # [T, D]
    allowed = np.asarray(trace[f"blocks.{layer}.attn.mask"][query])  # [T]
    D = q.shape[1]
    dots = k @ q[query]  # [T]
    scores = dots / math.sqrt(D)
    masked = np.where(allowed, scores, -np.inf)
    weights = np.exp(masked - masked.max())
    weights /= weights.sum()
    captured_scores = np.asarray(trace[f"blocks.{layer}.attn.scores"][head, query])  # [T]
    captured_weights = np.asarray(trace[f"blocks.{layer}.attn.weights"][head, query])  # [T]
    weighted_v = captured_weights.astype(np.float64)[:, None] * v  # [T, D]
    keys = pd.DataFrame(
        {
            "key": np.arange(len(dots)),
            "q·k": dots,
            "q·k/√D": scores,
            "score (Trace)": captured_scores,
            "allowed": allowed,
            "softmax": np.where(allowed, weights, 0.0),
            "weight (Trace)": captured_weights,
        }
    )
    return dict(
        keys=keys,
        weighted_v=weighted_v,
        output=weighted_v.sum(0),
        head_dim=D,
        max_diff=dict(
            scores=float(np.abs(scores - captured_scores).max()),
            weights=float(np.abs(weights - captured_weights).max()),
        ),
    )


# --- residual stream ---------------------------------------------------------------------------
def residual_sites(n_layer: int) -> list[tuple[str, str]]:
    """(label, trace name) of every distinct point of the residual stream, in forward order.
    resid_pre of block l+1 is resid_post of block l, so it appears once."""
    sites = [("embed (0.pre)", "blocks.0.resid_pre")]
    for l in range(n_layer):
        sites += [(f"{l}.mid", f"blocks.{l}.resid_mid"), (f"{l}.post", f"blocks.{l}.resid_post")]
    return sites


def exact(trace, name: str) -> torch.Tensor:
    """A captured value as a float64 tensor where it lives (a Trace keeps the model's device), so
    statistics over it come back to the CPU, not the value itself."""
    return _float64(trace.tensor(name) if hasattr(trace, "tensor") else trace[name])


def _float64(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """An array (copied) or a tensor (on its device) as float64; float32 on Apple MPS, which has no float64."""
    if not isinstance(x, torch.Tensor):
        return torch.from_numpy(np.array(x, dtype=np.float64))
    return x.to(torch.float32 if x.device.type == "mps" else torch.float64)


def _stat(x: torch.Tensor, stat: str) -> torch.Tensor:
    """One statistic over the C axis of a [T, C] residual (std: population, as NumPy's default)."""
    if stat == "mean":
        return x.mean(1)
    if stat == "std":
        return x.std(1, correction=0)
    if stat == "norm":
        return torch.linalg.vector_norm(x, dim=1)
    raise ValueError(f"stat={stat!r}: choose mean, std or norm")


def residual_stat_grid(trace, stat: str) -> tuple[list[str], np.ndarray]:
    """A [sites, T] grid of one statistic over C (mean, std, or norm = L2 norm)."""
    sites = residual_sites(trace.n_layer)
    grid = torch.stack([_stat(exact(trace, name), stat) for _, name in sites])
    return [label for label, _ in sites], grid.cpu().double().numpy()


def sublayer_contributions(trace) -> pd.DataFrame:
    """What each attention and MLP sub-layer writes into the residual stream: the L2 norm of its
    output (the difference it adds), next to the norm of the stream it reads, averaged over positions."""
    rows = []
    for l in range(trace.n_layer):
        pre, mid, post = (exact(trace, f"blocks.{l}.{s}") for s in RESID_SITES)
        for sub, before, after in (("attention", pre, mid), ("MLP", mid, post)):
            added, stream, out = (_stat(x, "norm").mean().item() for x in (after - before, before, after))
            rows.append((l, sub, added, stream, out, added / stream if stream else np.inf, out / stream if stream else np.inf))
    return pd.DataFrame(rows, columns=["layer", "sublayer", "added_norm", "input_norm", "output_norm", "added_ratio", "growth"])


def residual_flags(trace) -> list[str]:
    """Plain-language warnings about the residual stream: NaN or Inf; a block after the first
    that multiplies the norm by more than GROWTH_LIMIT; a norm above NORM_LIMIT anywhere.

    Block 0 is not judged by growth: in trained GPTs its MLP often rescales the small embedding
    many times over (it acts as part of the embedding), and a steady growth over depth is normal."""
    flags = []
    for _, name in residual_sites(trace.n_layer):
        if not torch.isfinite(exact(trace, name)).all():
            flags.append(f"{name} holds NaN or Inf values")
    for l in range(1, trace.n_layer):
        before, after = (_stat(exact(trace, f"blocks.{l}.{s}"), "norm").mean().item() for s in ("resid_pre", "resid_post"))
        if before > 0 and after / before > GROWTH_LIMIT:
            flags.append(f"block {l} multiplies the mean residual norm by {after / before:.1f}× (flagged above {GROWTH_LIMIT:g}×)")
    _, norms = residual_stat_grid(trace, "norm")
    if np.nanmax(norms, initial=0.0) > NORM_LIMIT:
        flags.append(f"a residual norm reaches {np.nanmax(norms):.3g} (flagged above {NORM_LIMIT:g}): float16 would overflow soon")
    return flags


def residual_growth(trace) -> float:
    """Mean residual norm after the last block ÷ mean norm of the embedding."""
    _, norms = residual_stat_grid(trace, "norm")
    return float(norms[-1].mean() / norms[0].mean()) if norms[0].mean() > 0 else float("inf")


# --- shapes -----------------------------------------------------------------------------------
_SHAPE = re.compile(r"\(([\d, ]*)\)")


def parse_shape(text: str) -> tuple[int, ...]:
    """The first shape in a shape-trace cell, e.g. "(1, 17, 128)" -> (1, 17, 128)."""
    m = _SHAPE.search(text or "")
    return tuple(int(s) for s in m.group(1).split(",") if s.strip()) if m else ()


# (module path, Trace name, notation, what happens), in forward order; block 0 stands for every block.
FLOW = [
    ("transformer.wte", None, "(B, T, C)", "token embedding: ids (B, T) → vectors"),
    ("transformer.embed", "embed", "(B, T, C)", "+ position information: the input of block 0"),
    ("transformer.h.0.ln_1", None, "(B, T, C)", "norm before attention"),
    ("transformer.h.0.attn.c_attn", None, "(B, T, 3C)", "one matmul gives q, k and v side by side"),
    ("transformer.h.0.attn.q", "blocks.0.attn.q", "(B, H, T, D)", "split heads: (B, T, C) → (B, H, T, D), D = C / H"),
    ("transformer.h.0.attn.scores", "blocks.0.attn.scores", "(B, H, T, T)", "scores = q·kᵀ / √D"),
    ("transformer.h.0.attn.weights", "blocks.0.attn.weights", "(B, H, T, T)", "mask the future, softmax over keys"),
    ("transformer.h.0.attn.c_proj", None, "(B, T, C)", "weights·v, merge heads (B, H, T, D) → (B, T, C), project"),
    ("transformer.h.0.resid_mid", "blocks.0.resid_mid", "(B, T, C)", "add to the residual stream"),
    ("transformer.h.0.mlp.c_fc", None, "(B, T, 4C)", "MLP widens to 4C"),
    ("transformer.h.0.mlp.c_proj", None, "(B, T, C)", "activation, back to C"),
    ("transformer.h.0.resid_post", "blocks.0.resid_post", "(B, T, C)", "add to the residual stream (× L blocks)"),
    ("transformer.ln_f", "ln_f", "(B, T, C)", "final norm"),
    ("lm_head", "logits", "(B, T, V)", "LM head: a logit for every token of the vocabulary"),
]


def shape_flow(trace) -> pd.DataFrame:
    """The textbook steps of one forward pass with the real output shapes of this run: from the
    shape trace where the module ran, else from the captured tensor (batch axis put back).
    Steps this model lacks are skipped."""
    st = trace.shape_trace
    outputs = dict(zip(st["module"], st["outputs"]))
    rows = []
    for module, name, notation, what in FLOW:
        if module in outputs:
            shape = parse_shape(outputs[module])
        elif name is not None and name in trace:
            shape = (1, *trace[name].shape)
        else:
            continue
        rows.append((module, notation, shape, what))
    return pd.DataFrame(rows, columns=["module", "notation", "shape", "what"])


def dims(trace) -> dict[str, int]:
    """The textbook sizes of this run, read off the captured tensors: B, T, C, H, D, V, L."""
    H, T, D = trace.tensor("blocks.0.attn.q").shape
    return dict(B=1, T=T, C=trace.tensor("embed").shape[1], H=H, D=D, V=trace.tensor("logits").shape[1], L=trace.n_layer)
