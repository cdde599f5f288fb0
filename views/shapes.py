"""Shapes: every module's input and output shape, and the forward pass as a flow in B, T, C, H, D."""

import streamlit as st

from gptviz import analysis, figures
from gptviz.dashboard import layout, widgets

v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Shapes")
dims = analysis.dims(t)
cols = st.columns(len(dims))
meaning = dict(
    B="batch",
    T="tokens",
    C="d_model",
    H="heads",
    D="head size",
    V="vocabulary",
    L="layers",
    H_kv="KV heads",
    F="MLP width",
)
for col, (k, n) in zip(cols, dims.items()):
    col.metric(f"{k} ({meaning[k]})", n)

widgets.chart(figures.shape_flow(analysis.shape_flow(t), dims), key="shape_flow")
st.subheader("Every module, in call order")
table = analysis.shape_table(t)
layout.table(table, hide_index=False, height=420)
widgets.download("shape trace (CSV)", lambda: table.reset_index(), "shape_trace.csv", key="shape_dl")
