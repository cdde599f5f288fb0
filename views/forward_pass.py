"""One forward pass, step by step: Back / Next through the prompt's way from token ids to the next
token, each step with its shape in B, T, C, H, D and a slide-sized piece of its real values."""

import numpy as np
import pandas as pd
import streamlit as st

from gptviz.analysis import walkthrough
from gptviz.dashboard import layout, pages, widgets
from gptviz.dashboard.classroom.step_url import BLOCK_KEY, STEP_KEY, write_step_url

NUM = st.column_config.NumberColumn(format="%.4f")

v = widgets.require_trace() or st.stop()
t, model = v.trace, v.bundle.model
st.markdown("#### One forward pass, step by step")  # small: on a 720-px projector the step is the slide
layout.room_at_top(4)  # room for the step's table

L = t.n_layer
if not 0 <= st.session_state.get(BLOCK_KEY, v.layer) < L:
    st.session_state[BLOCK_KEY] = 0
st.session_state.setdefault(BLOCK_KEY, v.layer)
back, where, chooser, forward = st.columns([2, 3, 2, 2], vertical_alignment="bottom")
block = chooser.selectbox(
    "Block to open up",
    list(range(L)),
    key=BLOCK_KEY,
    format_func=lambda b: f"open block {b}",
    label_visibility="collapsed",
)
steps = walkthrough.forward_steps(model, t, block)
n = len(steps)
if not 0 <= st.session_state.get(STEP_KEY, 0) < n:
    st.session_state[STEP_KEY] = 0
st.session_state.setdefault(STEP_KEY, 0)


def move(delta: int) -> None:
    st.session_state[STEP_KEY] = min(max(st.session_state.get(STEP_KEY, 0) + delta, 0), n - 1)


i = st.session_state.get(STEP_KEY, 0)
back.button("◀ Back", key="fp_back", on_click=move, args=(-1,), disabled=i == 0, width="stretch")
forward.button("Next ▶", key="fp_next", on_click=move, args=(1,), disabled=i == n - 1, width="stretch", type="primary")
where.progress((i + 1) / n, text=f"Step {i + 1} of {n}")
write_step_url(i, block)

s = steps[i]
sizes = walkthrough.sizes(model, t)
st.subheader(s.title)
st.markdown(f"#### shape {s.notation} = {s.shape} · {walkthrough.spelled(s.notation, sizes)}\n{s.what}")

H = sizes["H"]
head = v.head if s.notation.startswith("(B, H") else None
piece = walkthrough.view_slice(s, head or 0)
labels = v.labels
if s.key == "next":
    p = s.values
    top = np.argsort(-p, kind="stable")[:5]
    df = pd.DataFrame({"token": v.display(top), "id": top, "probability": p[top]})
    st.metric("The next token", v.display([top[0]])[0], f"p = {p[top[0]]:.4f}", delta_color="off", delta_arrow="off")
    st.dataframe(df, hide_index=True, width="content", column_config={"probability": NUM})
else:
    if s.key == "ids":
        df = pd.DataFrame(piece, index=["id"], columns=labels[: piece.shape[1]])
    else:
        rows = labels[: piece.shape[0]]
        prefix = "key " if s.key in ("scores", "mask", "weights") else "d"
        df = pd.DataFrame(piece, index=rows, columns=[f"{prefix}{j}" for j in range(piece.shape[1])])
    full = s.values[head] if head is not None else s.values
    if s.key == "ids":
        shown = f"the first {piece.shape[1]} of {full.shape[0]} tokens"
    else:
        shown = f"{piece.shape[0]} of {full.shape[0]} rows × {piece.shape[1]} of {full.shape[1]} columns"
    where_note = f" of head {head} (of {H}: choose it in the sidebar)" if head is not None else ""
    # a plain table, not the canvas grid: its text grows with presentation mode's root font
    st.table(df.style.format("{:.4f}") if piece.dtype.kind == "f" else df)
    st.caption(f"Showing {shown}{where_note}; the full tensor is {s.shape}.")
st.caption(f"Values: {s.source}.")

st.page_link(
    pages.page_file("forward-pass"),
    label="Link to this step (one link per step, for a slide)",
    query_params={k: st.query_params[k] for k in st.query_params},
)
