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


def shape_flow(trace: Trace) -> pd.DataFrame:
    """The textbook steps of one forward pass with the real output shapes of this run: from the
    shape trace where the module ran, else from the captured tensor (batch axis put back).
    Steps this model lacks are skipped."""
    st = trace.shape_trace
    outputs = dict(zip(st["module"], st["outputs"]))
    rows = []
    for module, name, notation, what in FLOW:
        if outputs.get(module):
            shape = outputs[module][0]
        elif name is not None and name in trace:
            shape = (1, *trace[name].shape)
        else:
            continue
        rows.append((module, notation, shape, what))
    return pd.DataFrame(rows, columns=["module", "notation", "shape", "what"])


def dims(trace: Trace) -> dict[str, int]:
    """The textbook sizes of this run, read off the captured tensors: B, T, C, H, D, V, L."""
    H, T, D = trace.tensor(point("attn.q", 0)).shape
    return dict(
        B=1, T=T, C=trace.tensor("embed").shape[1], H=H, D=D, V=trace.tensor("logits").shape[1], L=trace.n_layer
    )


def format_shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    """A shape-trace cell for reading: ((1, 8, 16),) -> "(1, 8, 16)"."""
    return ", ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes)


def shape_table(trace: Trace) -> pd.DataFrame:
    """The shape trace with its shapes written out, for a table or a CSV."""
    df = trace.shape_trace.copy()
    for col in ("inputs", "outputs"):
        df[col] = df[col].map(format_shapes)
    return df
