"""One forward pass, step by step: what a class follows from the token ids to the next token.

Each step names the tensor, its shape in B, T, C, H, D notation with this model's sizes, and its
real values. A value the Trace holds is read from it; a value the Trace does not hold (the norm
outputs, the merged heads, the MLP's inside) is recomputed by the model's own module on the
Trace's own input to it, so it is what the forward pass computed (the tests check each one
against the captured value downstream of it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..attention import expand_kv
from ..model import GPT
from ..names import point
from ..record import Trace
from .attention import score_rule

SLICE_T, SLICE_C = 6, 8  # what fits on a slide: the first 6 tokens × the first 8 features


@dataclass(frozen=True)
class Step:
    """One step of the walk. `values` has the batch axis dropped; `shape` puts it back."""

    key: str  # short id, stable across models: "ln_1", "q", "logits", ...
    title: str
    notation: str  # e.g. "(B, H, T, D)"
    shape: tuple[int, ...]  # with B = 1, in the notation's order
    values: np.ndarray  # [T, ...] or [H, T, ...]: the whole tensor, batch axis dropped
    source: str  # "captured: <trace name>" or "recomputed: <module> on <input>"
    what: str
    point: str | None = None  # the Trace name this step equals, where there is one


def _captured_or(
    trace: Trace, site: str, layer: int, skip: bool, how: str, rebuild: Callable[[], torch.Tensor]
) -> tuple[torch.Tensor, str]:
    """(value, where it came from): the Trace's value where it holds that point (the sub-layer
    outputs attn.z, attn.out, mlp.hidden, mlp.out may be absent, and skip forces the recomputation), else
    rebuild() described by `how`."""
    name = point(site, layer)
    if not skip and name in trace.names:
        return trace.tensor(name), f"captured: {name}"
    return rebuild(), f"recomputed: {how}"


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _batch(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.to(device).unsqueeze(0)  # the modules expect (B, T, ...)


def sizes(model: GPT, trace: Trace) -> dict[str, int]:
    """B, T, C, H, D, V, L of this model on this prompt."""
    c = model.config
    out = dict(B=1, T=trace.n_tokens, C=c.n_embd, H=c.n_head, D=c.head_dim, V=c.vocab_size, L=c.n_layer)
    if c.kv_heads != c.n_head:  # grouped-query attention: fewer key/value heads than query heads
        out["H_kv"] = c.kv_heads
    if c.mlp_dim != 4 * c.n_embd or c.mlp_gated:
        out["F"] = c.mlp_dim
    return out


@torch.no_grad()
def forward_steps(model: GPT, trace: Trace, layer: int = 0, recompute: bool = False) -> list[Step]:
    """The steps of the forward pass that produced `trace`, with block `layer` opened up.
    recompute=True rebuilds attn.z, attn.out, mlp.hidden and mlp.out with the model's modules even
    where the Trace holds them (for Traces from files that lack them, and to check one against the other)."""
    if not 0 <= layer < trace.n_layer:
        raise ValueError(f"layer {layer} does not exist: the model has blocks 0 to {trace.n_layer - 1}")
    dev = model.device
    n = sizes(model, trace)
    T, C, H, D, V = n["T"], n["C"], n["H"], n["D"], n["V"]
    blk = model.transformer.h[layer]
    ids = torch.as_tensor(trace.token_ids, device=dev)
    steps: list[Step] = []

    def add(key, title, notation, values, source, what, name=None):
        arr = values if isinstance(values, np.ndarray) else _np(values)
        shape = arr.shape if key == "mask" else (1, *arr.shape)  # one mask serves every batch row and head
        steps.append(Step(key, title, notation, shape, arr, source, what, name))

    add(
        "ids",
        "Token ids",
        "(B, T)",
        np.asarray(trace.token_ids),
        "captured: token_ids",
        f"the prompt as {T} integers, each < V = {V}",
    )
    wte = model.transformer.wte(ids)  # (T, C)
    add(
        "wte",
        "Token embedding",
        "(B, T, C)",
        wte,
        "recomputed: transformer.wte on token_ids",
        f"one learned row of C = {C} numbers per token id",
    )
    embed = trace.tensor("embed")
    pos = {
        "learned": "learned rows of transformer.wpe",
        "sinusoidal": "the fixed sin/cos table",
        "rotary": "none here: rotary positions turn q and k inside attention",
        "none": "none",
    }[model.config.pos_encoding]
    if model.config.embed_scale != 1.0:
        pos += f"; the embedding is first multiplied by {model.config.embed_scale:.4g}"
    add(
        "embed",
        "Embedding + positions",
        "(B, T, C)",
        embed,
        "captured: embed",
        f"token embedding + position ({pos}): the input of block 0",
        "embed",
    )

    l = layer
    pre = trace.tensor(point("resid_pre", l))
    add(
        "resid_pre",
        f"Block {l}: residual stream in",
        "(B, T, C)",
        pre,
        f"captured: {point('resid_pre', l)}",
        f"what block {l} reads",
        point("resid_pre", l),
    )
    ln1 = blk.ln_1(_batch(pre, dev))  # (1, T, C)
    add(
        "ln_1",
        f"Block {l}: norm (ln_1)",
        "(B, T, C)",
        ln1[0],
        f"recomputed: h.{l}.ln_1 on resid_pre",
        "each token's vector normalised before attention",
    )
    for s, what in (("q", "what each token looks for"), ("k", "what each token offers"), ("v", "what it passes on")):
        name = point(f"attn.{s}", l)
        add(
            s,
            f"Block {l}: {s}",
            "(B, H_kv, T, D)" if s != "q" and "H_kv" in n else "(B, H, T, D)",
            trace.tensor(name),
            f"captured: {name}",
            f"c_attn(ln_1) split into {H if s == 'q' else n.get('H_kv', H)} heads of D = {D}"
            f"{' (after rotary positions)' if s in 'qk' and model.config.pos_encoding == 'rotary' else ''}: {what}",
            name,
        )
    name = point("attn.scores", l)
    add(
        "scores",
        f"Block {l}: scores",
        "(B, H, T, T)",
        trace.tensor(name),
        f"captured: {name}",
        f"{score_rule(blk.attn.spec.scale, blk.attn.spec.softcap, D)}, for every query (row) and key (column)",
        name,
    )
    name = point("attn.mask", l)
    add(
        "mask",
        f"Block {l}: causal mask",
        "(T, T)",
        trace.tensor(name),
        f"captured: {name}",
        "True where query i may read key j (j ≤ i): the future is hidden"
        + (f"; a local layer reads only its last {blk.attn.spec.window} keys" if blk.attn.spec.window else ""),
        name,
    )
    name = point("attn.weights", l)
    weights = trace.tensor(name)
    add(
        "weights",
        f"Block {l}: softmax",
        "(B, H, T, T)",
        weights,
        f"captured: {name}",
        "softmax over the keys each query may read; every row sums to 1",
        name,
    )
    v = trace.tensor(point("attn.v", l))
    z, z_src = _captured_or(
        trace, "attn.z", l, recompute, "weights @ v", lambda: weights.to(v.dtype) @ expand_kv(v, H)
    )  # (H, T, D)
    add(
        "z",
        f"Block {l}: weighted sum of v",
        "(B, H, T, D)",
        z,
        z_src,
        "each head's output: its weights times its values",
    )
    merged = z.transpose(0, 1).reshape(T, H * D)  # (T, H, D) -> (T, H·D)
    add(
        "merge",
        f"Block {l}: heads merged",
        "(B, T, C)",
        merged,
        "recomputed: z, heads side by side",
        f"the {H} heads' D = {D} numbers put side by side: H × D = {H * D}",
    )
    out, out_src = _captured_or(
        trace, "attn.out", l, recompute, f"h.{l}.attn.c_proj on merged", lambda: blk.attn.project(_batch(z, dev))[0]
    )
    add(
        "attn_out",
        f"Block {l}: output projection",
        "(B, T, C)",
        out,
        out_src,
        "c_proj mixes the heads: what attention adds to the stream",
    )
    mid = trace.tensor(point("resid_mid", l))
    add(
        "resid_mid",
        f"Block {l}: residual add",
        "(B, T, C)",
        mid,
        f"captured: {point('resid_mid', l)}",
        "resid_pre + attention output",
        point("resid_mid", l),
    )
    parallel = bool(blk.parallel)
    ln2 = blk.mlp_input(_batch(pre, dev), _batch(mid, dev))  # a parallel block's MLP reads resid_pre
    add(
        "ln_2",
        f"Block {l}: norm (ln_2)",
        "(B, T, C)",
        ln2[0],
        f"recomputed: h.{l}.ln_2 on {'resid_pre' if parallel else 'resid_mid'}",
        "normalised again before the MLP",
    )
    hidden, h_src = _captured_or(
        trace, "mlp.hidden", l, recompute, f"h.{l}.mlp.act(c_fc(ln_2))", lambda: blk.mlp.neurons(ln2)[0]
    )
    add(
        "mlp_hidden",
        f"Block {l}: MLP widens",
        "(B, T, F)" if "F" in n else "(B, T, 4C)",
        hidden,
        h_src,
        f"c_fc to {'F' if 'F' in n else '4C'} = {model.config.mlp_dim}, then {model.config.activation}"
        f"{' times the up projection (gated)' if model.config.mlp_gated else ''}: the MLP's neurons",
    )
    mlp_out, m_src = _captured_or(
        trace, "mlp.out", l, recompute, f"h.{l}.mlp.c_proj on hidden", lambda: blk.mlp.project(_batch(hidden, dev))[0]
    )
    add(
        "mlp_out",
        f"Block {l}: MLP back to C",
        "(B, T, C)",
        mlp_out,
        m_src,
        "c_proj back to C: what the MLP adds to the stream",
    )
    post = trace.tensor(point("resid_post", l))
    add(
        "resid_post",
        f"Block {l}: residual add",
        "(B, T, C)",
        post,
        f"captured: {point('resid_post', l)}",
        ("resid_pre + (attention output + MLP output)" if parallel else "resid_mid + MLP output")
        + ": the next block (or ln_f) reads",
        point("resid_post", l),
    )

    add(
        "ln_f",
        "Final norm",
        "(B, T, C)",
        trace.tensor("ln_f"),
        "captured: ln_f",
        f"after all L = {n['L']} blocks, one last norm",
        "ln_f",
    )
    logits = trace.tensor("logits")
    add(
        "logits",
        "Logits",
        "(B, T, V)",
        logits,
        "captured: logits",
        f"lm_head: one score for each of the V = {V} vocabulary entries, at every position",
        "logits",
    )
    probs = torch.softmax(logits[-1].double(), -1)  # (V,)
    add(
        "next",
        "Next token",
        "(B, V)",
        probs,
        "recomputed: softmax of the last position's logits",
        "probabilities after the last token; the most likely one is the prediction",
    )
    return steps


def next_token(trace: Trace) -> tuple[int, float]:
    """The most likely next token after the prompt: (id, probability)."""
    p = torch.softmax(trace.tensor("logits")[-1].double(), -1)
    i = int(p.argmax())
    return i, float(p[i])


def view_slice(step: Step, head: int = 0, t: int = SLICE_T, c: int = SLICE_C) -> np.ndarray:
    """A 2-D piece small enough for a slide: per-head tensors show one head, then the first
    t rows × first c columns (ids: the first t)."""
    a = step.values
    if step.notation.startswith("(B, H"):
        a = a[head]
    if a.ndim == 1:
        return a[:t].reshape(1, -1)
    return a[:t, :c]


def spelled(notation: str, sizes: dict[str, int]) -> str:
    """'(B, H, T, D)' -> 'B = 1 · H = 6 · T = 24 · D = 32' with this model's sizes (4C too)."""
    parts = []
    for x in (p.strip() for p in notation.strip("()").split(",")):
        if x in sizes:
            parts.append(f"{x} = {sizes[x]}")
        elif x.endswith("C") and x[:-1].isdigit():
            parts.append(f"{x} = {int(x[:-1]) * sizes['C']}")
    return " · ".join(parts)
