"""Attention: one head's heatmap, every head of the layer, every layer × head, the line view."""

import streamlit as st

from gptviz import analysis, figures
from gptviz.analysis.attention import attention_mask
from gptviz.dashboard import caches, layout, widgets
from gptviz.figures.attention import mark_tile

v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Attention")

c1, c2 = layout.columns([2, 1])  # stacked on a projector: the checkbox label stays whole
kind = c1.segmented_control(
    "Show",
    analysis.ATTENTION_KINDS,
    key="attn_kind",
    default="weights",
    required=True,
    help="scores = what the softmax reads (q·kᵀ/√D in GPT-2; this model's own scale and soft-cap) before the "
    "mask; masked scores hide the future (and, in a local layer, keys beyond its window); weights = softmax",
)
skip = c2.checkbox(
    "Leave key 0 out of the colour scale",
    key="attn_skip_first",
    help="Key 0 often takes most of the weight (an attention sink)",
)

spec = v.bundle.model.transformer.h[v.layer].attn.spec  # this layer's own scale and soft-cap
score_rule = analysis.score_rule(spec.scale, spec.softcap, v.bundle.model.config.head_dim)
layer = analysis.layer_weights(t, v.layer)  # [H, T, T], masked cells NaN: built once per run of this page
m = layer[v.head] if kind == "weights" else analysis.attention_matrix(t, v.layer, v.head, kind)
widgets.chart(
    figures.attention_heatmap(
        m,
        v.labels,
        kind=kind,
        skip_first_key=skip,
        title=f"Layer {v.layer}, head {v.head}: {kind}",
        mask=attention_mask(t, v.layer),
        score_rule=score_rule,
    ),
    key="attn_heatmap",
)
st.caption(
    "Rows are queries (the token that reads), columns are keys (the "
    "token read). Choose layer, head and position in the sidebar."
)
widgets.download(
    f"{kind} (.npz)",
    lambda: {kind.replace(" ", "_"): m, "tokens": v.labels},
    f"{kind.replace(' ', '_')}_L{v.layer}_H{v.head}.npz",
    key="attn_dl",
)

st.subheader(f"Where {widgets.plain(v.labels[v.position])} looks")
widgets.chart(figures.attention_lines(layer[v.head, v.position], v.labels, v.position), key="attn_lines")

st.subheader(f"Every head of layer {v.layer}")
heads = figures.head_grid(
    layer, v.labels, layer=v.layer, mask=attention_mask(t, v.layer), cols=2 if v.presentation else 4
)
widgets.chart(heads, key="attn_heads")


st.subheader("Every layer × head")
# the callback comes from widgets: one defined here would hold this page's globals (the Trace) per session
on_click = widgets.select_head_on_click("attn_grid")
grid = mark_tile(caches.layer_head_grid(v.key), v.layer, v.head)  # outline the head on view
widgets.chart(grid, key="attn_grid", on_select=on_click, selection_mode="points")
st.caption("Click a tile to open that head above.")
