"""Overview: the tokens, the model card and load report, the next token, one headline heatmap."""

import functools

import pandas as pd
import streamlit as st

from gptviz import analysis, figures
from gptviz.dashboard import caches, layout, widgets, window
from gptviz.dashboard.classroom import join

join.join_box()  # a student arriving with a class code follows from here
v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Overview")
st.caption(
    f"Checkpoint **{widgets.plain(v.source_label)}** on **{v.device}** · {t.n_tokens} tokens · "
    f"capture holds {t.nbytes / 2**20:.1f} MiB"
)

st.subheader("Tokens")
shown = window.positions(t.n_tokens, "tokens")  # a chip per token: a long prompt's in a window
a, b = shown.start, shown.stop
st.markdown(figures.token_chips_html(v.display(t.token_ids[a:b]), t.token_ids[a:b], first=a), unsafe_allow_html=True)
st.caption("Each chip: position · token id, then the token (␣ space, ↵ newline, ⇥ tab).")

left, right = layout.columns(2)  # stacked in presentation mode
with left:
    # figures built once per process for every session (caches.py): a class opens this page together
    widgets.figure_chart(caches.topk_figure(v.key, 10, v.presentation, v.labels, v.display), key="overview_topk")
    widgets.download(
        "top-10 (CSV)",
        lambda: analysis.top_k(t.part("logits", -1), 10, display=v.display),
        "top_k.csv",
        key="overview_topk_dl",
    )
with right:
    widgets.figure_chart(
        caches.head_figure(v.key, v.layer, v.head, 520, v.presentation, v.labels), key="overview_heatmap"
    )
    widgets.download_later(  # the whole [T, T] map, made only when asked for
        "these weights (.npz)",
        functools.partial(caches.attention_arrays, v.key, v.layer, v.head, "weights", tuple(v.texts)),
        f"attention_L{v.layer}_H{v.head}.npz",
        key="overview_heatmap_dl",
    )

card, report = layout.columns(2)
with card:
    st.subheader("Model card")
    config = v.bundle.model.config
    special = {"special": "; ".join(config.special())} if config.special() else {}
    rows = [(k, str(x)) for k, x in {**v.bundle.card, **special, **config.card_dict()}.items()]
    layout.table(pd.DataFrame(rows, columns=["field", "value"]))
with report:
    st.subheader("Load report")
    layout.table(pd.DataFrame(v.bundle.report.as_rows(), columns=["field", "value"]))
