"""Attention: one head's heatmap, every head of the layer, every layer × head, the line view."""

import functools

import streamlit as st

from gptviz import analysis
from gptviz.dashboard import caches, layout, progress, widgets
from gptviz.dashboard.panels import attention_why
from gptviz.figures.circuits import score_parts_bars

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

# every figure built once per process for every session (caches.py): a class opens this page together;
# a long prompt's maps take a while: a bar (drawn only when they do) with a Cancel
one, every = progress.waited(
    "Drawing the attention maps",
    "attention",
    (v.key, v.layer, v.head, kind),
    lambda report: caches.attention_figures(v.key, v.layer, v.head, kind, skip, v.presentation, v.labels, report),
)
T = t.n_tokens
widgets.figure_chart(
    one, key="attn_heatmap", on_select=attention_why.open_clicked_cell("attn_heatmap", T), selection_mode="points"
)
st.caption(
    "Rows are queries (the token that reads), columns are keys (the token read). Choose layer, head and "
    "position in the sidebar; click a cell to see below why it scores as it does."
)
widgets.download_later(  # the whole [T, T] matrix, made only when asked for
    f"{kind} (.npz)",
    functools.partial(caches.attention_arrays, v.key, v.layer, v.head, kind, tuple(v.texts)),
    f"{kind.replace(' ', '_')}_L{v.layer}_H{v.head}.npz",
    key="attn_dl",
)

st.subheader(f"Where {widgets.plain(v.texts[v.position])} looks")
widgets.figure_chart(
    caches.lines_figure(v.key, v.layer, v.head, v.position, v.presentation, v.labels), key="attn_lines"
)

st.subheader(f"Every head of layer {v.layer}")
widgets.figure_chart(every, key="attn_heads")


st.subheader("Every layer × head")
# the callback comes from widgets: one defined here would hold this page's globals (the Trace) per session
on_click = widgets.select_head_on_click("attn_grid")
progress.waited("Summarising every head", "attn_grid", v.key, lambda report: caches.layer_head_grid(v.key, report))
grid = caches.marked_grid(v.key, v.layer, v.head, v.presentation)  # the head on view outlined
widgets.figure_chart(grid, key="attn_grid", on_select=on_click, selection_mode="points")
st.caption("Click a tile to open that head above.")

st.subheader(f"Why L{v.layer} H{v.head} attends where it does")
# off by default: the split reads every earlier layer's output, a run of its own on a large model
if st.toggle("Split one cell's score into what each source writes into q and k", key=attention_why.ON):
    query, key = attention_why.cell_inputs(T, v.position)
    if key > query:
        st.info("A key after its query is masked: pick a key at or before the query.")
    else:
        parts = attention_why.parts(v.key, v.layer, v.head, query, key)
        widgets.figure_chart(score_parts_bars(parts, on=v.presentation), key="attn_why")
        st.caption(
            f"The score of {widgets.plain(v.texts[query])} reading {widgets.plain(v.texts[key])} "
            f"({parts.attrs['score']:.4g}, before the softmax) is the bilinear q·k: split over every pair of what one "
            "source writes into q and another into k, with the norms frozen at this run, each pair's term shared "
            "half and half between its two sources. Sources: the embedding, every earlier head, each layer's "
            "attention biases, each MLP; 'bias' is what the norms' and projections' biases put into q or k."
        )
