"""Features: a sparse autoencoder's features on this prompt, one feature's logit effect and its
strongest contexts in the sample corpus, and what the prediction does when it is ablated or clamped."""

import numpy as np
import pandas as pd
import streamlit as st

from gptviz.dashboard import progress, widgets, window
from gptviz.dashboard.panels import features as fc
from gptviz.features.reading import top_features
from gptviz.scanning import queries

CONTEXT = 24  # tokens shown on each side of a context's firing token

v = widgets.require_trace() or st.stop()
st.title("Features")
st.caption(
    "A sparse autoencoder (SAE) rewrites one point of the model (its site) as a sparse sum of learned "
    "directions, its features. Below: which features fire on each token of the prompt, what one feature "
    "writes into the prediction, where it fires most in the sample corpus, and what changes when it is removed."
)
sae = fc.require_sae(v) or st.stop()
k_note = f", k = {sae.k}" if sae.k else ""
st.caption(
    f"{widgets.plain(v.sae_label)}: {sae.architecture} SAE reading {sae.site}, "
    f"{sae.d_in} → {sae.d_sae:,} features{k_note}."
)

acts = fc.activations(v.key, v.sae)  # [T, d_sae]
n = st.slider("Features shown", 4, 40, 12, key="ft_n")
drawn = window.positions(len(acts), "ft_rows", around=v.position)  # a row per token: a long prompt's window
rows = (drawn.start, drawn.stop)
heat = fc.heatmap_figure(v.key, v.sae, n, v.presentation, v.labels, rows)  # built once per process (panels/features.py)
if heat is None:
    st.warning("No feature fires anywhere on this prompt.")
    st.stop()
widgets.figure_chart(heat, key="ft_heatmap")

pos = v.position
on_token = top_features(acts[pos : pos + 1], 10)
st.subheader(f"Features that fire on {v.labels[pos]}")
st.dataframe(
    pd.DataFrame({"feature": on_token, "activation": acts[pos, on_token]}),
    hide_index=True,
    key="ft_on_token",
)
st.caption("The position is chosen in the sidebar.")

st.subheader("One feature")
default = int(on_token[0]) if len(on_token) else int(top_features(acts, 1)[0])
feature = int(st.number_input("Feature", 0, sae.d_sae - 1, default, key="ft_feature"))
left, right = st.columns(2)
with left:
    effect = fc.effect_figure(v.model_key, v.sae, feature, v.presentation)
    if isinstance(effect, str):  # an SAE outside the residual stream's width has no direct logit effect
        st.info(widgets.plain(effect))
    else:
        widgets.figure_chart(effect, key="ft_effect")
with right:
    corpus = None  # the bars are this prompt's; a scan's density is the corpus's, said apart
    if st.toggle("Contexts from the sample corpus", key="ft_scan", help="Scans the sample corpus once per process"):
        s = progress.waited(
            "Scanning the sample corpus with the SAE",
            "ft_sample_scan",
            (v.model_key, v.sae),
            lambda report: fc.sample_scan(v.model_key, v.sae, report),
        )
        dens = s.feature_density.set_index("feature")
        corpus = float(dens.loc[feature, "density"]), f"the sample corpus's {s.summary['tokens']:,} tokens"
    widgets.figure_chart(fc.histogram_figure(v.key, v.sae, feature, corpus, v.presentation), key="ft_hist")

if st.session_state.get("ft_scan"):
    rows = queries.feature_contexts(s, feature)  # the one SAE of the scan
    windows = s.windows.set_index("window")
    shown_rows = []
    for r in rows.itertuples():
        ids = windows.loc[r.window, "token_ids"]
        a, b = max(0, r.position - CONTEXT), r.position + 1
        text = "".join(v.display(ids[a:b][:-1])) + "[[" + v.display([ids[r.position]])[0] + "]]"
        shown_rows.append({"rank": r.rank, "activation": r.value, "context (firing token in [[ ]])": text})
    st.dataframe(pd.DataFrame(shown_rows), hide_index=True, key="ft_contexts")
    if not shown_rows:
        st.caption("It fires nowhere in the sample corpus.")

st.subheader(f"Edit feature {feature} and watch the next token after {v.labels[pos]}")
c1, c2 = st.columns([1, 2])
how = c1.segmented_control("Set it to", ["zero", "a value"], key="ft_how", default="zero", required=True)
value = c2.number_input("Value (clamp)", value=float(np.round(acts[:, feature].max() * 2, 3)), key="ft_value")
before, after = fc.edit_figures(
    v.key, v.sae, feature, "zero" if how == "zero" else float(value), pos, v.presentation, v.labels
)
a, b = st.columns(2)
with a:
    widgets.figure_chart(before, key="ft_before")
with b:
    widgets.figure_chart(after, key="ft_after")
st.caption(
    "The edit keeps the SAE's error term: the site's value x becomes x + decode(f′) − decode(f), so only "
    "this feature's part of the reconstruction changes."
)
