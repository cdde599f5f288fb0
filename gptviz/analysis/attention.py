"""Attention as the views need it: one head's matrix with masked cells as NaN, a layer's heads,
and one query's attention worked through step by step from the captured q, k and v."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..names import point
from ..record import Trace
from .map_blocks import weight_bands

ATTENTION_KINDS = ("weights", "masked scores", "scores")


def attention_matrix(trace: Trace, layer: int, head: int, kind: str = "weights") -> np.ndarray:
    """One head's [T, T] matrix (queries as rows) in float32, masked cells as NaN (attention_mask
    tells them from NaN the model computed).

    kind: "weights" (after softmax), "masked scores" (scores where the mask allows, else NaN) or
    "scores" (q·kᵀ/√D before the mask: every cell, as the model computed it)."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind={kind!r}: choose one of {', '.join(ATTENTION_KINDS)}")
    site = "weights" if kind == "weights" else "scores"
    m = np.array(trace[point("attn." + site, layer)][head], dtype=np.float32)  # [T, T]
    if kind != "scores":
        m[~trace[point("attn.mask", layer)]] = np.nan
    return m


def attention_mask(trace: Trace, layer: int) -> np.ndarray:
    """The layer's [T, T] bool mask (True where query i may read key j). The matrices above set the
    cells it hides to NaN; figures take it too, to tell those from NaN the model computed itself."""
    return np.asarray(trace[point("attn.mask", layer)], dtype=bool)


def layer_weights(trace: Trace, layer: int) -> np.ndarray:
    """Every head's attention weights of one layer, [H, T, T] float32, masked cells as NaN."""
    w = np.array(trace[point("attn.weights", layer)], dtype=np.float32)  # [H, T, T]
    w[:, ~np.asarray(trace[point("attn.mask", layer)])] = np.nan
    return w


def attention_row(trace: Trace, layer: int, head: int, query: int) -> np.ndarray:
    """One query's attention weights over every key, [T] float32, masked keys NaN: layer_weights(...)[head,
    query] made from that row alone (rebuilt from q and k, to float rounding; read where the Trace holds
    the maps), not from a layer's [H, T, T] maps."""
    T = trace.n_tokens
    ((_, w, allowed, _),) = weight_bands(trace, layer, [head], rows=1, span=range(query, query + 1))
    row = np.full(T, np.nan, dtype=np.float32)
    keys = w.size(-1)
    row[:keys] = np.where(allowed[0].cpu().numpy(), w[0, 0].float().cpu().numpy(), np.nan)
    return row


def _scale_kind(scale: float, D: int) -> str:
    """ "sqrt" (1/√D, GPT-2), "none" (1, GPT-Neo) or "other" (Gemma's query_pre_attn_scalar^-½)."""
    if math.isclose(scale, 1.0 / math.sqrt(D), rel_tol=1e-12):
        return "sqrt"
    return "none" if scale == 1.0 else "other"


def score_rule(scale: float, softcap: float, D: int) -> str:
    """The formula a layer's scores follow, as the page writes it: q·k / √D (GPT-2), q·k (GPT-Neo:
    no scale), q·k × s (Gemma: query_pre_attn_scalar^-½), then the soft-cap where there is one."""
    kind = _scale_kind(scale, D)
    rule = {"sqrt": f"q·k / √{D}", "none": "q·k (no scale)"}.get(kind, f"q·k × {scale:.4g}")
    return f"{softcap:g}·tanh(({rule}) / {softcap:g})" if softcap else rule


def before_rotation(model, trace: Trace, layer: int, which: str) -> np.ndarray | None:
    """q or k of a layer as they were before the rotary positions turned them ([H or H_kv, T, D]),
    or None in a model without rotary positions. The rotation is orthogonal: turning the captured
    values back by the same angles (the layer's own cos and sin) gives them to float rounding."""
    from ..positions import rotate

    attn = model.transformer.h[layer].attn
    if not attn.rotary:
        return None
    x = trace.tensor(point(f"attn.{which}", layer)).to(model.device)  # [heads, T, D]
    cos, sin = attn.rotation(0, x.size(1))
    return rotate(x[None].float(), cos, -sin, attn.interleaved)[0].cpu().numpy()


def scale_step(scale: float, softcap: float, D: int) -> str:
    """The scaling step of the Q/K/V page in words, with this model's real numbers."""
    text = {
        "sqrt": f"÷ √D = ÷ √{D} = ÷ {math.sqrt(D):.4f}",
        "none": "no scale: this model uses q·k as it is (GPT-Neo)",
    }.get(
        _scale_kind(scale, D),
        f"× {scale:.4g}: the model's own scale (e.g. Gemma's query_pre_attn_scalar^-½), not 1/√{D}",
    )
    return f"{text}, then soft-capped: {softcap:g}·tanh(score / {softcap:g})" if softcap else text


def query_computation(trace: Trace, layer: int, head: int, query: int) -> dict:
    """The attention of one query worked through from the captured q, k and v: q·k for each key,
    times the layer's scale (1/√D unless the model says otherwise), its soft-cap where it has one,
    the mask, softmax, the weighted v rows and their sum (the head's output for this query). With
    grouped-query attention, query head h reads key/value head h // (H / H_kv).

    Returns `keys`, a per-key DataFrame holding both the recomputed steps and the Trace's own
    scores and weights; `weighted_v` [T, D] = the Trace's weights × v and `output` [D], their sum;
    `max_diff`, the largest gap between recomputed and captured values (float32 rounding); `rule`,
    the score's formula; `kv_head`, the key/value head this query head reads."""
    q_all = trace[point("attn.q", layer)]
    k_all = trace[point("attn.k", layer)]
    kv = head // (q_all.shape[0] // k_all.shape[0])
    q = np.asarray(q_all[head], dtype=np.float64)  # [T, D]
    k = np.asarray(k_all[kv], dtype=np.float64)  # [T, D]
    v = np.asarray(trace[point("attn.v", layer)][kv], dtype=np.float64)  # [T, D]
    allowed = np.asarray(trace[point("attn.mask", layer)][query])  # [T]
    D = q.shape[1]
    specs = getattr(trace, "attention_specs", None)
    scale = specs[layer].scale if specs else 1.0 / math.sqrt(D)
    softcap = specs[layer].softcap if specs else 0.0
    dots = k @ q[query]  # [T]
    scores = dots * scale
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    masked = np.where(allowed, scores, -np.inf)
    weights = np.exp(masked - masked.max())
    weights /= weights.sum()
    captured_scores = np.asarray(trace[point("attn.scores", layer)][head, query])  # [T]
    captured_weights = np.asarray(trace[point("attn.weights", layer)][head, query])  # [T]
    weighted_v = captured_weights.astype(np.float64)[:, None] * v  # [T, D]
    keys = pd.DataFrame(
        {
            "key": np.arange(len(dots)),
            "q·k": dots,
            "q·k/√D" if not specs or score_rule(scale, softcap, D) == f"q·k / √{D}" else "score": scores,
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
        scale=scale,
        softcap=softcap,
        rule=score_rule(scale, softcap, D),
        kv_head=kv,
        max_diff=dict(
            scores=float(np.abs(scores - captured_scores).max()),
            weights=float(np.abs(weights - captured_weights).max()),
        ),
    )
