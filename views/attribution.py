"""Logit attribution: which components (embedding, heads, MLPs, biases) push one token's logit up or
down at the chosen position, through the final norm with its scale frozen at the real run's."""

import html

import numpy as np
import streamlit as st

import gptviz
from gptviz import analysis, figures
from gptviz.dashboard import progress, widgets
from gptviz.dashboard.panels import heads_lens
from gptviz.errors import GptvizError

TOP = 10  # the choices offered: the model's most likely next tokens at the position

v = widgets.require_trace() or st.stop()
t = v.trace
model = v.bundle.model
pos = v.position
st.title("Logit attribution")
logits = t.part("logits", pos)
V = logits.size
if widgets.nan_logits(logits, f"after {v.texts[pos]}"):
    st.stop()  # every part of a NaN logit is NaN: choose a position before the NaN, or see Health
top = analysis.top_k(logits, TOP, display=v.display)
options = top["id"].astype(int).tolist()
ranked = zip(top["rank"], top["token"], top["probability"])
shown = dict(zip(options, (f"#{r} {tok} · p {figures.percent(p)}" for r, tok, p in ranked)))


def typed(text: str, what: str) -> int | None:
    """A token typed as text (or as an id without a tokenizer) -> its id, or None after saying why not."""
    try:
        tok = v.bundle.tokenizer
        ids = tok.encode(text) if tok is not None else gptviz.parse_ids(text, V)
    except GptvizError as e:
        st.error(f"{what} not used: {widgets.plain(e)}")
        return None
    if len(ids) != 1:
        st.error(
            f"{what} not used: that text is {len(ids)} tokens ({widgets.plain(', '.join(v.display(ids)))}); type one"
        )
        return None
    if not 0 <= ids[0] < V:
        st.error(f"{what} not used: token id {ids[0]} is outside the model's vocabulary [0, {V - 1}]")
        return None
    return ids[0]


for key, allowed in (("attr_target", options), ("attr_baseline", [None, *options])):
    if key in st.session_state and st.session_state[key] not in allowed:  # the position changed
        del st.session_state[key]

here = f"position {pos} ('{v.display([t.token_ids[pos]])[0]}')"
st.caption(f"The next token's logit at {widgets.plain(here)}: choose the position in the sidebar.")
c1, c2 = st.columns(2)
target = c1.selectbox("Target token", options, key="attr_target", format_func=lambda o: shown.get(o, str(o)))
target_text = c1.text_input("…or type any token", key="attr_target_text", help="Replaces the choice above")
baseline = c2.selectbox(
    "Baseline token (optional)",
    [None, *options],
    key="attr_baseline",
    format_func=lambda i: "none: the target's logit alone" if i is None else shown[i],
    help="With a baseline, every part is what it adds to logit(target) − logit(baseline)",
)
baseline_text = c2.text_input("…or type a baseline token", key="attr_baseline_text")
if target_text:
    target = typed(target_text, "Target")
if baseline_text:
    baseline = typed(baseline_text, "Baseline")
if target is None or (baseline_text and baseline is None):
    st.stop()

with progress.step("attr", "Adding up what every component writes") as report:
    if report is None:
        st.stop()
    df = heads_lens.attribution(v.key, target, pos, baseline, report)
name = v.display([target])[0]
what = f"logit('{name}')" + (f" − logit('{v.display([baseline])[0]}')" if baseline is not None else "")
real, total, sigma = df.attrs["logit"], float(df["value"].sum()), df.attrs["sigma"]

if not np.isfinite(real) or not np.isfinite(df["value"]).all():
    st.warning(
        f"The model computed NaN or Inf here (its logit is {real:.4g}), so there are no parts to add up: "
        "the Health page says where it starts."
    )
    st.stop()
a, b, c = st.columns(3)
a.metric("The model's logit" + (" difference" if baseline is not None else ""), f"{real:.4f}")
b.metric("Sum of the parts", f"{total:.4f}")
c.metric("Frozen scale σ of the final norm", f"{sigma:.4g}")
centring = "" if model.config.norm == "rmsnorm" else "minus its own mean over C, "
st.info(
    f"**The parts sum to the logit, with the final norm's scale frozen.** The final norm divides the whole "
    f"residual stream by one number, σ = {sigma:.4g} here (the real run's value at this position). Holding σ "
    f"fixed makes the norm linear, so each part — {centring}times γ / σ, through the LM head — adds its own "
    f"share, and the shares add up to the model's {what} ({total:.4f} against {real:.4f}: float rounding). "
    "Frozen means: this is what each part contributes given the scale the whole stream had. Remove a part and "
    "σ would change too, moving every other part: to see that, ablate the part and re-run."
)

label = html.escape(f"{what} at {here}")  # Plotly titles read HTML: tokens stay text
widgets.chart(figures.attribution_bars(df, analysis.component_labels(df), what=label), key="attr_bars")
L, H = model.config.n_layer, model.config.n_head
widgets.chart(figures.attribution_heads(analysis.head_matrix(df, L, H), what=label), key="attr_heads")
st.caption(
    "Red pushes the logit up, blue pushes it down, in the bars and in the head grid (a scale centred at 0). "
    "'attn bias' is a layer's c_proj bias (added once, not per head); 'MLP' is what its neurons write "
    "(mlp.out without c_proj's bias, which is 'MLP bias'); 'embed' is the token plus position embedding."
)
widgets.download(
    "attribution (CSV)",
    lambda: df.assign(label=analysis.component_labels(df)),
    f"attribution_pos{pos}.csv",
    key="attr_dl",
)
