"""Interventions: ablate heads and MLPs, and see the next token and the loss move."""

from functools import partial

import numpy as np
import streamlit as st

from gptviz import analysis, figures
from gptviz.analysis.patching import compare_top_k
from gptviz.dashboard import caches, widgets, window
from gptviz.dashboard.panels import edited_runs
from gptviz.figures.whatif import loss_before_after

v = widgets.require_trace() or st.stop()
t = v.trace
cfg = v.bundle.model.config
L, H = cfg.n_layer, cfg.n_head
st.title("Interventions")
st.caption(
    "Take a part of the model out and run the prompt again. A head is ablated on its output before the "
    "heads are merged (attn.z, the input of c_proj), so only that head goes; an MLP on what it adds to the "
    "residual stream (mlp.out). Zero puts 0 there; mean puts its mean over this prompt's positions. "
    "The features of the SAE picked in the sidebar are zeroed or clamped with its error term kept."
)

HEADS = [edited_runs.head_name(l, h) for l in range(L) for h in range(H)]
PRESET = (  # measured on the sidebar's preset prompt by tests/test_app_interventions.py
    "shakespeare-char: layer 0, head 3 attends to the previous character (previous-token score 0.84 on "
    "the preset prompt; see Heads). Ablating it alone about doubles the prompt's mean loss (1.44 → 2.91 "
    "nats per character), while no other single head adds more than 0.4: the model leans on that one "
    "head to know which character came before."
)


c1, c2, c3 = st.columns([3, 2, 1])
picked = c1.multiselect("Heads to ablate", HEADS, key="iv_heads", help="Or click tiles of the grid below")
mlps = c2.multiselect("MLPs to ablate", list(range(L)), key="iv_mlps", format_func=lambda l: f"MLP {l}")
how = c3.segmented_control("Replace with", ["zero", "mean"], key="iv_how", default="zero", required=True)
if v.source == "shakespeare-char":
    preset = dict(iv_heads=["L0H3"], iv_mlps=[], iv_how="zero")
    st.button("Preset: the previous-character head", on_click=edited_runs.set_state, args=(preset,), key="iv_preset")
    if st.session_state.get("iv_heads") == ["L0H3"]:
        st.info(PRESET)

features = edited_runs.feature_pick(v)
heads = tuple(edited_runs.parse_head(n) for n in picked)
if not heads and not mlps and features is None:
    st.info("Choose heads or MLPs to ablate (or click tiles of the grid below) to see what changes.")
    edited = None
else:
    edited = edited_runs.ablated_run(v.key, heads, tuple(mlps), how, features)
    st.caption("Edits: " + "; ".join(widgets.plain(iv.describe()) for iv in edited.interventions))

pos = v.position
if edited is not None:
    st.subheader(f"Next token after {widgets.plain(v.texts[pos])}")
    k = st.slider("How many tokens (k)", 1, min(30, cfg.vocab_size), min(8, cfg.vocab_size), key="iv_k")
    before, after = t.part("logits", pos), edited.part("logits", pos)
    a, b = st.columns(2)
    top0 = analysis.top_k(before, k, display=v.display)
    top1 = analysis.top_k(after, k, display=v.display)
    with a:
        widgets.chart(figures.topk_bars(top0, position_label=f"{v.labels[pos]} (before)"), key="iv_top_before")
    with b:
        widgets.chart(figures.topk_bars(top1, position_label=f"{v.labels[pos]} (after)"), key="iv_top_after")
    change = compare_top_k(before, after, k, display=v.display)
    if top0.attrs.get("nan") or top1.attrs.get("nan"):
        st.caption("A run whose logits are NaN ranks nothing: its columns below are empty.")
    st.dataframe(
        change,
        hide_index=True,
        key="iv_change",
        column_config={c: st.column_config.NumberColumn(c, format="%.4f") for c in ("before", "after", "change")},
    )
    widgets.download("before / after (CSV)", lambda: change, f"intervention_pos{pos}.csv", key="iv_dl")
    if t.n_tokens > 1:
        loss0 = caches.prompt_loss(v.key)
        loss1 = analysis.per_token_loss(edited.tensor("logits"), edited.token_ids)
        # np.mean, not pandas' NaN-skipping mean: one NaN loss makes the mean NaN, and it says so
        m0, m1 = (float(np.mean(df["loss_nats"].to_numpy())) for df in (loss0, loss1))
        delta = f"{m1 - m0:+.3f}" if np.isfinite(m1 - m0) else None
        st.metric(
            f"Mean loss of the prompt ({figures.LOSS_UNIT} per token)", figures.number(m1), delta, delta_color="inverse"
        )
        shown = window.positions(t.n_tokens, "iv_loss", around=pos)  # a bar per token: a window of them
        widgets.chart(loss_before_after(loss0, loss1, v.labels, shown=shown), key="iv_loss")

st.subheader("Every layer × head")
grid = caches.layer_head_grid(v.key)
widgets.chart(
    grid,
    key="iv_grid",
    on_select=partial(edited_runs.toggle_head, "iv_grid", "iv_heads", (grid.layout.meta or {}).get("tile_pitch")),
    selection_mode="points",
)
st.caption("Click a tile to add that head to the ablation, or to take it out again. Position: sidebar.")
