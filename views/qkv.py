"""Q / K / V: the head's matrices, and one query's attention computed step by step."""

import streamlit as st

import gptviz
from gptviz import analysis, figures
from gptviz.dashboard import layout, widgets, window

v = widgets.require_trace() or st.stop()
t = v.trace
L, H, q = v.layer, v.head, v.position
st.title("Q / K / V")
st.caption(f"Layer {L}, head {H}; query {widgets.plain(v.texts[q])}. Change them in the sidebar.")

model = v.bundle.model
kv = H // (model.config.n_head // model.config.kv_heads)  # the key/value head this query head reads
rotary = model.config.pos_encoding == "rotary"
tabs = st.tabs(["q (queries)", "k (keys)", "v (values)"])
for tab, name in zip(tabs, "qkv"):
    with tab:
        h = H if name == "q" else kv
        m = t[gptviz.point(f"attn.{name}", L)][h]
        which = f"head {h}" if name == "q" else f"key/value head {h}"
        after = ", after the rotary positions (what the scores use)" if rotary and name != "v" else ""
        widgets.chart(
            figures.matrix_heatmap(
                m, v.labels, title=f"{name} of layer {L}, {which}{after}: [T, D] = {list(m.shape)}", value_name=name
            ),
            key=f"qkv_{name}",
        )
        before = analysis.before_rotation(model, t, L, name) if rotary and name != "v" else None
        if before is not None:
            widgets.chart(
                figures.matrix_heatmap(
                    before[h],
                    v.labels,
                    title=f"{name} before the rotation (turned back by its angles)",
                    value_name=name,
                ),
                key=f"qkv_{name}_unrotated",
            )
            st.caption(
                f"Rotary positions turn {model.config.rotary_dim} of the D = {model.config.head_dim} dimensions "
                "in pairs by an angle that grows with the position; the rest pass unturned."
            )
widgets.download(
    "q, k, v of this head (.npz)",
    lambda: {n: t[gptviz.point(f"attn.{n}", L)][H if n == "q" else kv] for n in "qkv"} | {"tokens": v.texts},
    f"qkv_L{L}_H{H}.npz",
    key="qkv_dl",
)

st.subheader(f"How query {widgets.plain(v.texts[q])} attends")
work = analysis.query_computation(t, L, H, q)
D = work["head_dim"]
st.markdown(
    f"1. **q·k** for every key (query head {H} reads key/value head {work['kv_head']}) · "
    f"2. **{analysis.scale_step(work['scale'], work['softcap'], D)}** "
    "· 3. **mask**: keys the query may not read are set to −∞ · "
    "4. **softmax** over the keys · 5. **Σ weight · v** = the head's output for this query."
)
shown = window.positions(t.n_tokens, "qkv_keys", around=q, what="keys")  # a bar and a row per key: a window
keys = work["keys"].iloc[shown.start : shown.stop]
widgets.chart(
    figures.query_scores(keys, v.labels, query_label=v.labels[q], head_dim=D, rule=work["rule"]),
    key="qkv_scores",
)
st.caption(
    f"The bars are the Trace's own scores and weights. Recomputed here from q and k in float64, they differ "
    f"by at most {work['max_diff']['scores']:.1e} (scores) and "
    f"{work['max_diff']['weights']:.1e} (weights): float32 rounding."
)
# a table shows text as text: the display strings, not the labels escaped for Plotly ("<s>", not "&lt;s&gt;")
texts = v.display(t.token_ids)
layout.table(keys.assign(token=[texts[k] for k in keys["key"]]), height=260)
widgets.download("this computation (CSV)", lambda: work["keys"], f"query_{q}_L{L}_H{H}.csv", key="qkv_work_dl")
allowed = work["keys"]["allowed"].to_numpy()  # masked keys add nothing: leave their rows out
read = [label for label, ok in zip(v.labels, allowed) if ok]
widgets.chart(
    figures.query_weighted_values(work["weighted_v"][allowed], work["output"], read, query_label=v.labels[q]),
    key="qkv_weighted",
)
widgets.download(
    "weighted v rows and output (.npz)",
    lambda: {"weighted_v": work["weighted_v"], "output": work["output"]},
    f"weighted_v_{q}_L{L}_H{H}.npz",
    key="qkv_out_dl",
)
