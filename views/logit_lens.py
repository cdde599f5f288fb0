"""Logit lens: the final norm and LM head applied to the residual stream at every site, as if the
model stopped there; and one token's rank through depth."""

import numpy as np
import pandas as pd
import streamlit as st

import gptviz
from gptviz import figures
from gptviz.dashboard import progress, widgets
from gptviz.dashboard.panels import heads_lens
from gptviz.errors import GptvizError
from gptviz.figures.lens import LENS_TITLE, MAX_TEXT_COLUMNS

K = 5  # tokens listed in each cell's hover

v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Logit lens")
st.markdown(f"**{LENS_TITLE[0].upper() + LENS_TITLE[1:]}.**")
st.caption(
    "Each row is a point in the residual stream (the embedding, then each block after its attention and after its "
    "MLP). The model's final norm and LM head are applied there, as if the model stopped at that point and "
    "predicted. Each point is normalised with its own mean and spread, as the final norm treats the real last "
    "one; the top row is the model's real output. Early rows are a guess at what the residual already encodes, "
    "not what the model computes next: the later layers were never trained to be read this way."
)

T = t.n_tokens
W = min(T, MAX_TEXT_COLUMNS)
start = int(np.clip(v.position - W // 2, 0, T - W))  # a window around the chosen position
window = tuple(range(start, start + W))
with progress.step("lens", "Applying the final norm and LM head at every site") as report:
    if report is None:
        st.stop()
    lens = heads_lens.lens(v.key, window, K, None, report)
S = len(lens.sites)
tokens = np.array(v.display(lens.top_ids.ravel().tolist()), dtype=object).reshape(lens.top_ids.shape)
widgets.chart(
    figures.lens_grid(lens.sites, v.texts[start : start + W], tokens, lens.top_probs, first_position=start, n_tokens=T),
    key="lens_grid",
)
if W < T:
    st.caption(f"Showing positions {start}–{start + W - 1} of {T}, around the position chosen in the sidebar.")
widgets.download(
    "lens (.npz)",
    lambda: {
        "sites": np.array(lens.sites),
        "positions": np.asarray(window),
        "top_ids": lens.top_ids,
        "top_probs": lens.top_probs,
    },
    f"logit_lens_{start}_{start + W - 1}.npz",
    key="lens_dl",
)

pos = v.position
st.subheader(f"One token through depth, after {widgets.plain(v.texts[pos])}")
text = st.text_input(
    "Target token",
    key="lens_target",
    help="Empty: the token the model itself ranks first at this position",
)
target = int(lens.top_ids[-1, pos - start, 0])  # the model's own top prediction (the last site is exact)
if text:
    try:  # typed ids go through the one parser, which refuses -1, 1.5 and ids past the vocabulary
        vocab = v.bundle.model.config.vocab_size
        ids = v.bundle.tokenizer.encode(text) if v.bundle.tokenizer else gptviz.parse_ids(text, vocab)
    except GptvizError as e:
        st.error(f"Cannot follow that token: {widgets.plain(e)}")
        st.stop()
    if len(ids) != 1:
        shown = ", ".join(v.display(ids[:20])) + (", …" if len(ids) > 20 else "")
        st.warning(f"That text is {len(ids)} tokens ({widgets.plain(shown)}): type one token.")
        st.stop()
    if not 0 <= ids[0] < v.bundle.model.config.vocab_size:
        st.error(f"Cannot follow that token: id {ids[0]} is outside the model's vocabulary")
        st.stop()
    target = ids[0]
one = heads_lens.lens(v.key, (pos,), 1, target)
rank, prob = one.target_rank[:, 0], one.target_prob[:, 0]
name = v.display([target])[0]
a, b, c = st.columns(3)
a.metric("Token", name)
b.metric("Rank at the output", f"{int(rank[-1]) + 1} of {v.bundle.model.config.vocab_size}")
first_top = next((i for i in range(S) if rank[i] == 0), None)
c.metric(
    "First site where it is the top token",
    figures.site_label(lens.sites[first_top]) if first_top is not None else "never",
)
widgets.chart(
    figures.target_depth(lens.sites, rank, prob, token=name, position_label=v.texts[pos]), key="lens_target_chart"
)
widgets.download(
    "rank through depth (CSV)",
    lambda: pd.DataFrame({"site": lens.sites, "rank": rank, "probability": prob, "target_id": target, "position": pos}),
    f"lens_rank_pos{pos}_id{target}.csv",
    key="lens_rank_dl",
)
