"""Next token: top-k at any position with a temperature, the rank of any token, per-token loss."""

import numpy as np
import streamlit as st

import gptviz
from gptviz import analysis, figures
from gptviz.dashboard import caches, widgets, window
from gptviz.errors import GptvizError

v = widgets.require_trace() or st.stop()
t = v.trace
st.title("Next token")
pos = v.position
logits = t.part("logits", pos)

c1, c2 = st.columns(2)
k = c1.slider("How many tokens (k)", 1, min(50, logits.size), min(10, logits.size), key="topk_k")
temperature = c2.slider(
    "Temperature",
    0.05,
    3.0,
    1.0,
    0.05,
    key="temperature",
    help="Divides the logits before the softmax; the model does not run again",
)
top = analysis.top_k(logits, k, temperature, display=v.display)
widgets.chart(figures.topk_bars(top, position_label=v.labels[pos], temperature=temperature), key="topk_bars")
widgets.download("top-k (CSV)", lambda: top, f"top_k_pos{pos}.csv", key="topk_dl")

st.subheader("Look up a token")
text = st.text_input(
    "Token text", key="lookup_token", help="Its rank and probability as the next token after the chosen position"
)
ids: list[int] = []
if text:
    try:  # typed ids go through the one parser, which refuses -1, 1.5 and ids past the vocabulary
        ids = v.bundle.tokenizer.encode(text) if v.bundle.tokenizer else gptviz.parse_ids(text, logits.size)
    except GptvizError as e:
        st.error(f"Cannot look it up: {widgets.plain(e)}")
    if len(ids) == 1 and not 0 <= ids[0] < logits.size:  # a tokenizer larger than the model's vocabulary
        st.error(f"Cannot look it up: token id {ids[0]} is outside the model's vocabulary [0, {logits.size - 1}]")
    elif len(ids) == 1 and widgets.nan_logits(logits, f"after {v.texts[pos]}"):
        pass  # no rank: the line above says why
    elif len(ids) == 1:
        rank, p = analysis.token_rank(logits, ids[0], temperature)
        a, b, c = st.columns(3)
        a.metric("Token", v.display(ids)[0])
        b.metric("Rank", f"{rank} of {logits.size}")
        c.metric("Probability", f"{p:.4%}")
    elif ids:
        shown = ", ".join(v.display(ids[:20])) + (", …" if len(ids) > 20 else "")
        st.warning(f"That text is {len(ids)} tokens ({widgets.plain(shown)}): type one token.")

st.subheader("How surprised the model is by the prompt")
if t.n_tokens < 2:
    st.info("A prompt of one token has nothing to predict: type a longer one.")
else:
    loss = caches.prompt_loss(v.key)
    values = [None, *loss["loss_nats"].tolist()]  # None: the first token, which nothing predicts
    uniform = float(np.log(logits.size))  # the loss of a uniform guess over the vocabulary
    unit = figures.LOSS_UNIT
    drawn = window.positions(t.n_tokens, "loss", around=pos)  # a chip and a bar per token: a window of them
    lo, hi = drawn.start, drawn.stop
    st.markdown(
        figures.token_chips_html(
            v.display(t.token_ids[lo:hi]), t.token_ids[lo:hi], values[lo:hi], vmax=uniform, unit=unit, first=lo
        ),
        unsafe_allow_html=True,
    )
    nan = int(loss["loss_nats"].isna().sum())
    st.caption(
        f"Each token coloured by its loss −ln p given the tokens before it, in {unit}: white = 0 (certain), "
        f"orange-red = {uniform:.2f} or more (no better than a uniform guess over {logits.size} tokens). "
        "The first token is not predicted (grey)."
        + (f" Bright red = NaN: the logits before {nan} of the tokens are NaN." if nan else "")
    )
    in_window = loss["position"].between(lo, hi - 1)
    widgets.chart(figures.loss_bars(loss[in_window], v.labels), key="loss_bars")
    widgets.download("per-token loss (CSV)", lambda: loss, "per_token_loss.csv", key="loss_dl")

from gptviz.dashboard.panels import steering_panel  # noqa: E402

steering_panel.render(v)
