"""Shapes: the textbook steps of the forward pass with this run's real shapes, and its sizes."""

from __future__ import annotations

import pandas as pd

from ..names import point
from ..record import Trace

# (module path, Trace name, notation, what happens), in forward order; block 0 stands for every block.
FLOW = [
    ("transformer.wte", None, "(B, T, C)", "token embedding: ids (B, T) → vectors"),
    ("transformer.embed", "embed", "(B, T, C)", "+ position information: the input of block 0"),
    ("transformer.h.0.ln_1", None, "(B, T, C)", "norm before attention"),
    ("transformer.h.0.attn.c_attn", None, "(B, T, 3C)", "one matmul gives q, k and v side by side"),
    ("transformer.h.0.attn.q", point("attn.q", 0), "(B, H, T, D)", "split heads: (B, T, C) → (B, H, T, D), D = C / H"),
    ("transformer.h.0.attn.scores", point("attn.scores", 0), "(B, H, T, T)", "scores = q·kᵀ / √D"),
    ("transformer.h.0.attn.weights", point("attn.weights", 0), "(B, H, T, T)", "mask the future, softmax over keys"),
    ("transformer.h.0.attn.c_proj", None, "(B, T, C)", "weights·v, merge heads (B, H, T, D) → (B, T, C), project"),
    ("transformer.h.0.resid_mid", point("resid_mid", 0), "(B, T, C)", "add to the residual stream"),
    ("transformer.h.0.mlp.c_fc", None, "(B, T, 4C)", "MLP widens to 4C"),
    ("transformer.h.0.mlp.c_proj", None, "(B, T, C)", "activation, back to C"),
    ("transformer.h.0.resid_post", point("resid_post", 0), "(B, T, C)", "add to the residual stream (× L blocks)"),
    ("transformer.ln_f", "ln_f", "(B, T, C)", "final norm"),
    ("lm_head", "logits", "(B, T, V)", "LM head: a logit for every token of the vocabulary"),
]


def flow(d: dict[str, int], config=None, rule: str | None = None) -> list[tuple[str, str | None, str, str]]:
    """FLOW in this model's notation (dims: with H_kv and F where they are not H and 4C): grouped-
    query attention, a head size of its own, the MLP's width, rotary positions and the score's own
    formula (rule, analysis.score_rule) named as the model has them."""
    rotary = config is not None and config.pos_encoding == "rotary"
    gated = config is not None and config.mlp_gated
    if "H_kv" not in d and "F" not in d and d["H"] * d["D"] == d["C"] and not rotary and not gated and not rule:
        return FLOW
    rows = []
    for module, name, notation, what in FLOW:
        if module == "transformer.embed" and rotary:
            what = "the input of block 0 (rotary positions turn q and k inside attention instead)"
        elif module.endswith("attn.q") and rotary:
            what = f"split heads: (B, T, H·D) → (B, H, T, D), D = {d['D']}; q and k turned by rotary positions"
        elif module.endswith("attn.scores") and rule:
            what = f"scores = {rule}"
        elif module.endswith("mlp.c_proj") and gated:
            what = f"{config.activation}(gate) × up, then back to C"
        if module.endswith("attn.c_attn") and ("H_kv" in d or d["H"] * d["D"] != d["C"]):
            kv = "H_kv" if "H_kv" in d else "H"
            notation = f"(B, T, (H + 2·{kv})·D)"
            what = f"q for H = {d['H']} heads, k and v for {kv} = {d.get('H_kv', d['H'])}, side by side"
        elif module.endswith("attn.q") and d["H"] * d["D"] != d["C"]:
            what = f"split heads: (B, T, H·D) → (B, H, T, D), D = {d['D']} (its own head size, not C / H)"
            what += "; q and k turned by rotary positions" if rotary else ""
        elif module.endswith("mlp.c_fc") and "F" in d:
            notation, what = "(B, T, F)", f"MLP widens to F = {d['F']}"
        rows.append((module, name, notation, what))
        if module.endswith("attn.q") and "H_kv" in d:
            rows.append(
                (
                    module.removesuffix(".q") + ".k",
                    point("attn.k", 0),
                    "(B, H_kv, T, D)",
                    f"keys and values per key/value head: query head h reads head h // {d['H'] // d['H_kv']}",
                )
            )
    return rows


def shape_flow(trace: Trace) -> pd.DataFrame:
    """The textbook steps of one forward pass with the real output shapes of this run: from the
    shape trace where the module ran, else from the captured tensor (batch axis put back).
    Steps this model lacks are skipped."""
    st = trace.shape_trace
    outputs = dict(zip(st["module"], st["outputs"]))
    rows = []
    specs, config = getattr(trace, "attention_specs", None), getattr(trace, "config", None)
    rule = None
    if specs and config is not None:
        from .attention import score_rule

        rule = score_rule(specs[0].scale, specs[0].softcap, config.head_dim)
        rule = None if rule == f"q·k / √{config.head_dim}" else rule
    for module, name, notation, what in flow(dims(trace), config, rule):
        if outputs.get(module):
            shape = outputs[module][0]
        elif name is not None and name in trace:
            shape = (1, *trace[name].shape)
        else:
            continue
        rows.append((module, notation, shape, what))
    return pd.DataFrame(rows, columns=["module", "notation", "shape", "what"])


def dims(trace: Trace) -> dict[str, int]:
    """The textbook sizes of this run, read off the captured tensors: B, T, C, H, D, V, L, and
    H_kv (key/value heads) and F (the MLP's width) where they are not H and 4C."""
    H, T, D = trace.tensor(point("attn.q", 0)).shape
    C = trace.tensor("embed").shape[1]
    out = dict(B=1, T=T, C=C, H=H, D=D, V=trace.tensor("logits").shape[1], L=trace.n_layer)
    H_kv = trace.tensor(point("attn.k", 0)).shape[0]
    if H_kv != H:
        out["H_kv"] = H_kv
    st = trace.shape_trace
    widths = [o[0][-1] for m, o in zip(st["module"], st["outputs"]) if m == "transformer.h.0.mlp.c_fc" and o]
    if widths and widths[0] != 4 * C:
        out["F"] = widths[0]
    return out


def format_shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    """A shape-trace cell for reading: ((1, 8, 16),) -> "(1, 8, 16)"."""
    return ", ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes)


def shape_table(trace: Trace) -> pd.DataFrame:
    """The shape trace with its shapes written out, for a table or a CSV."""
    df = trace.shape_trace.copy()
    for col in ("inputs", "outputs"):
        df[col] = df[col].map(format_shapes)
    return df
