"""Attention: one head's heatmap, every head of the layer, every layer × head, the line view."""

import streamlit as st

from gptviz import analysis, figures
from gptviz.dashboard import caches, widgets

v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Attention")

c1, c2 = st.columns([2, 1])
kind = c1.segmented_control(
    "Show",
    analysis.ATTENTION_KINDS,
    key="attn_kind",
    default="weights",
    required=True,
    help="scores = q·kᵀ/√D before the mask; masked scores hide the future; weights = softmax",
)
skip = c2.checkbox(
    "Leave key 0 out of the colour scale",
    key="attn_skip_first",
    help="Key 0 often takes most of the weight (an attention sink)",
)

layer = analysis.layer_weights(t, v.layer)  # [H, T, T], masked cells NaN: built once per run of this page
m = layer[v.head] if kind == "weights" else analysis.attention_matrix(t, v.layer, v.head, kind)
widgets.chart(
    figures.attention_heatmap(
        m, v.labels, kind=kind, skip_first_key=skip, title=f"Layer {v.layer}, head {v.head}: {kind}"
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

st.subheader(f"Where {v.labels[v.position]} looks")
widgets.chart(figures.attention_lines(layer[v.head, v.position], v.labels, v.position), key="attn_lines")

st.subheader(f"Every head of layer {v.layer}")
widgets.chart(figures.head_grid(layer, v.labels, layer=v.layer), key="attn_heads")


def open_clicked() -> None:
    points = st.session_state["attn_grid"].selection.get("points") or []
    if points and "x" in points[0] and "y" in points[0]:
        layer, head = figures.overview_cell(points[0]["x"], points[0]["y"])
        st.session_state["layer"], st.session_state["head"] = layer, head


st.subheader("Every layer × head")
widgets.chart(caches.layer_head_grid(v.key), key="attn_grid", on_select=open_clicked, selection_mode="points")
st.caption("Click a tile to open that head above.")
