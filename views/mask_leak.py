"""The causal mask, switched off: on the loaded model, the weights reach into the future and the
predictions change; on the shipped leaky model, the loss it trained to and the text it writes."""

import numpy as np
import pandas as pd
import streamlit as st

from gptviz import analysis, figures
from gptviz.analysis import leak
from gptviz.dashboard import caches, widgets, window
from gptviz.dashboard.caches import ModelKey
from gptviz.dashboard.panels import edited_runs
from gptviz.dashboard.sources import checkpoints
from gptviz.errors import GptvizError
from gptviz.figures.whatif import loss_before_after
from gptviz.generation import generate
from gptviz.tokenizers import display_token

LEAKY = "shakespeare-char-leaky"
# A few lines of Romeo and Juliet (public domain): the leaky model's losses are measured on them.
PASSAGE = (
    "ROMEO.\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n"
    "Arise, fair sun, and kill the envious moon,\nWho is already sick and pale with grief,\n"
)


@caches.cached(max_entries=2, show_spinner="Measuring the leaky model…")
def leaky_report(key: ModelKey) -> dict:
    """The leaky model on PASSAGE: mean loss with and without the mask, and greedy and sampled text."""
    bundle = caches.bundle_for(key)
    tok, model = bundle.tokenizer, bundle.model
    if tok is None:
        raise GptvizError(f"{LEAKY} has no tokenizer: its passage cannot be encoded")
    ids = tok.encode(PASSAGE, unknown="drop")[: model.config.block_size]
    prompt = tok.encode("ROMEO.\n", unknown="drop")
    with caches.FORWARD:  # one pass at a time (caches.FORWARD says why); the texts take it step by step
        lk = leak.mask_leak(model, ids, tok)
    greedy = generate(model, prompt, 200, temperature=0, step_lock=caches.FORWARD)
    sampled = generate(model, prompt, 200, temperature=0.8, seed=0, step_lock=caches.FORWARD)
    return dict(
        n=len(ids) - 1,
        on=lk.masked.mean_loss,
        off=lk.unmasked.mean_loss,
        greedy=tok.decode(greedy.ids),
        sampled=tok.decode(sampled.ids),
        card=bundle.card,
    )


v = widgets.require_trace() or st.stop()
cfg = v.bundle.model.config
L, H, T = cfg.n_layer, cfg.n_head, v.trace.n_tokens
st.title("The causal mask, switched off")
st.caption(
    "A GPT predicts each next token from the tokens before it; the causal mask is what keeps every "
    "position from reading the ones after it. The switch below removes it in this model (an intervention "
    "that sets every layer's attention mask to all True) and runs the same prompt again."
)

masked = st.toggle("Causal mask on", value=True, key="leak_mask")
lk = edited_runs.leak_run(v.key)
side = lk.masked if masked else lk.unmasked
layer, head = v.layer, v.head
labels = v.labels

st.subheader(f"The weights reach into the future · layer {layer}, head {head}")
c1, c2, c3 = st.columns(3)
c1.metric(
    f"Future attention mass, layer {layer} head {head}",
    f"{side.future_mass[layer, head]:.4f}",
    help="Attention weight on keys after their query (j > i), summed over the queries. Each query's weights "
    f"add up to 1, so it lies between 0 and T − 1 = {T - 1}.",
)
c2.metric("Mean share per query", figures.number(side.future_mass[layer, head] / T, ".1%"))
c3.metric("Mean over every head", figures.number(side.future_mass.mean() / T, ".1%"))
if masked:
    st.caption("With the mask, no weight can land above the diagonal: the future mass is exactly 0.")
else:
    st.warning(
        "Mask off: every position also reads the tokens after it, the very one it is meant to predict "
        "included. Trained like this, a model learns to copy the answer instead of predicting it."
    )

a, b = st.columns(2)
with a:
    w_on = lk.masked.weights(layer, head)
    fig = figures.attention_heatmap(
        w_on, labels, title="With the mask", height=460, mask=np.tril(np.ones((T, T), bool))
    )
    widgets.chart(fig, key="leak_map_on")
with b:
    w_off = lk.unmasked.weights(layer, head)
    fig = figures.attention_heatmap(w_off, labels, title="Without the mask", height=460, mask=np.ones((T, T), bool))
    widgets.chart(fig, key="leak_map_off")
st.caption(
    f"Rows are queries, columns keys. Future mass of this head: {lk.masked.future_mass[layer, head]:.4f} with "
    f"the mask, {lk.unmasked.future_mass[layer, head]:.4f} without. Layer, head and position: sidebar."
)
with st.expander("Future mass of every layer and head, without the mask"):
    grid = pd.DataFrame(
        lk.unmasked.future_mass, index=[f"layer {l}" for l in range(L)], columns=[f"head {h}" for h in range(H)]
    )
    st.dataframe(grid, column_config={c: st.column_config.NumberColumn(c, format="%.4f") for c in grid.columns})

st.subheader("What happens to the predictions")
c1, c2 = st.columns(2)
# The last position has no later token to read, so its prediction barely moves: start one before it.
start = v.position if v.position < T - 1 else max(0, T - 2)
pos = c1.slider("Position", 0, max(T - 1, 1), start, key="leak_pos") if T > 1 else 0
k = c2.slider("How many tokens (k)", 1, min(20, cfg.vocab_size), min(5, cfg.vocab_size), key="leak_k")
top = lk.top_k(pos, k, v.bundle.tokenizer)
nxt = (
    f"; the token that really comes next is “{widgets.plain(display_token(lk.tokens[pos + 1]))}”" if pos + 1 < T else ""
)
st.markdown(f"Next token after position {pos} (“{widgets.plain(display_token(lk.tokens[pos]))}”){nxt}.")
st.dataframe(
    top, column_config={c: st.column_config.NumberColumn(c, format="%.4f") for c in top.columns if c.endswith(": p")}
)
if T > 1:
    before = caches.prompt_loss(v.key)
    after = analysis.per_token_loss(lk.unmasked.trace.tensor("logits"), lk.ids)
    c1, c2 = st.columns(2)
    c1.metric(f"Mean loss with the mask ({figures.LOSS_UNIT} per token)", figures.number(lk.masked.mean_loss))
    change = lk.unmasked.mean_loss - lk.masked.mean_loss
    c2.metric(
        "Mean loss without the mask",
        figures.number(lk.unmasked.mean_loss),
        f"{change:+.3f}" if np.isfinite(change) else None,
        delta_color="inverse",
    )
    shown = window.positions(T, "leak_loss", around=pos)  # a bar per token: a window of them
    fig = loss_before_after(
        before,
        after,
        labels,
        shown=shown,
        names=("with the mask", "without the mask"),
        title="Loss of each prompt token, with and without the mask",
    )
    widgets.chart(fig, key="leak_loss")
    st.caption(
        "A model trained with the mask has never seen the future, so reading it mostly confuses it; the model "
        "below learned to use it."
    )

st.subheader("A model trained with the mask off, by mistake")
if LEAKY not in checkpoints.shipped():
    st.info(f"The leaky model ({LEAKY}) is not among the shipped checkpoints here.")
    st.stop()
try:
    report = leaky_report(ModelKey(LEAKY, v.device, checkpoints.version(LEAKY)))
except GptvizError as e:
    st.error(widgets.plain(e))
    st.stop()
st.markdown(
    f"`{LEAKY}` is a small char model trained on Shakespeare with `--no-causal-mask`: in training every "
    "position could read the next character, so it learned to copy it. Its training loss looks wonderful; "
    "used as a language model, with the mask, it must predict without seeing the answer, and falls apart."
)
c1, c2, c3 = st.columns(3)
c1.metric("Loss without the mask (as it trained)", f"{report['off']:.3f}")
c2.metric(
    "Loss with the mask (as it is used)",
    f"{report['on']:.3f}",
    f"{report['on'] - report['off']:+.3f}",
    delta_color="inverse",
)
if isinstance(report["card"].get("val_loss"), (int, float)):
    c3.metric("Card: val loss in training (mask off)", f"{report['card']['val_loss']:.4f}")
st.caption(
    f"Nats per character on {report['n']} characters of Romeo and Juliet. Choose {LEAKY} in the sidebar to "
    "look inside it with the switch above."
)
st.markdown("**What it writes** after “ROMEO.↵” (generation is causal: the next character is not there to copy)")
g1, g2 = st.columns(2)
g1.markdown("Greedy")
g1.code(report["greedy"], language=None)
g2.markdown("Sampled (temperature 0.8, seed 0)")
g2.code(report["sampled"], language=None)
