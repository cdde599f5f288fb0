"""Generate: continue the prompt token by token (KV cache), see what each token beat and where it looked."""

from functools import partial

import pandas as pd
import streamlit as st

import gptviz
from gptviz import analysis, figures
from gptviz.analysis.attention import attention_mask
from gptviz.dashboard import caches, keys, progress, widgets
from gptviz.dashboard.panels import generating, steering_panel
from gptviz.dashboard.window import positions as position_window
from gptviz.errors import GptvizError
from gptviz.figures import generation as gfig
from gptviz.figures.attention import MAX_CELLS
from gptviz.steering import steer

v = widgets.require_trace() or st.stop()
st.title("Generate")
if widgets.nan_logits(v.trace.part("logits", -1), f"after {v.texts[-1]}"):
    st.stop()  # no token can be chosen from NaN: greedy would "pick" id 0, sampling would fail
model = v.bundle.model
block = model.config.block_size
prompt_ids = [int(i) for i in v.key.ids]
owner = [v.key.model.source, v.key.model.device, v.key.model.version, prompt_ids]

# Plain lists only (never tensors): the new ids, their probabilities and each step's alternatives.
kept = st.session_state.get("gen")
fresh = {"for": owner, "ids": [], "probs": [], "top_ids": [], "top_probs": []}
gen: dict = kept if isinstance(kept, dict) and kept.get("for") == owner else fresh
st.session_state["gen"] = gen

c1, c2, c3, c4 = st.columns(4)
temperature = c1.slider(
    "Temperature", 0.0, 2.0, 0.8, 0.05, key="gen_temperature", help="0 = greedy: always the most likely token"
)
top_k = c2.number_input(
    "Top-k (0 = off)", 0, model.config.vocab_size, 0, key="gen_top_k", help="Sample among the k most likely tokens"
)
top_p = c3.slider(
    "Top-p (1 = off)", 0.05, 1.0, 1.0, 0.05, key="gen_top_p", help="Sample among the most likely tokens that reach p"
)
seed = c4.number_input("Seed", 0, 2**31 - 1, 0, key="gen_seed", help="The same seed gives the same text")

slide = st.checkbox(
    f"Slide past block_size = {block}",
    value=True,
    key="gen_slide",
    help="As nanoGPT's sample.py: once the text is longer than the model reads, keep its last "
    f"{block} tokens and go on (each step then runs that window afresh). Off: stop at block_size.",
)
with st.expander("Steer the generation", expanded=st.session_state.get(keys.STEER) is not None):
    steered = steering_panel.controls(v)  # the same vector as Next token's panel, kept in the URL
steering = [steer(steered[0].site, steered[1], steered[0].coeff)] if steered else []
all_ids = prompt_ids + gen["ids"]
room = block - len(all_ids)
stuck = room <= 0 and not slide
b1, b2, b3, b4, b5 = st.columns([1.2, 1, 1.2, 1, 1.4])
n = b2.number_input("n", 1, max(1, block), min(20, max(1, block)), key="gen_n", label_visibility="collapsed")
one = b1.button("Next token", key="gen_step", type="primary", disabled=stuck)
many = b3.button(f"Generate {n}", key="gen_run", disabled=stuck)
if b4.button("Clear", key="gen_clear", disabled=not gen["ids"]):
    gen.update(ids=[], probs=[], top_ids=[], top_probs=[])
    all_ids, room = list(prompt_ids), block - len(prompt_ids)
    stuck = room <= 0 and not slide

if one or many:
    try:
        with progress.step("gen", "Generating", fresh=True) as report:  # Cancel stops it between two tokens
            g = gptviz.generate(
                model,
                all_ids,
                1 if one else int(n),
                temperature=float(temperature),
                top_k=int(top_k) or None,
                top_p=float(top_p) if top_p < 1.0 else None,
                seed=int(seed),
                crop_context=slide,
                step_lock=caches.FORWARD,  # one forward pass at a time (caches.FORWARD says why)
                progress=report,
                interventions=steering,
            )
    except GptvizError as e:
        st.error(f"Not generated: {widgets.plain(e)}")
    else:
        generating.record(gen, g)
        all_ids, room = g.ids, block - len(g.ids)
        stuck = room <= 0 and not slide
        st.session_state["gen_view"] = len(gen["ids"])  # show the newest step
        generating.say_why_stopped(g, v.display)

tok = v.bundle.tokenizer
text = generating.prompt_text(tok, all_ids)
b5.button(
    "Use as prompt",
    key="gen_use",
    disabled=not gen["ids"],
    # a partial of the session state's setter, not a function of this page: Streamlit keeps the
    # callback, and a page function would keep this page's globals (the Trace) with it
    on_click=partial(st.session_state.__setitem__, "prompt", text),
    help="Continue from here in every page: the prompt becomes the text so far",
)
generating.context_note(stuck, room, block)

steps = len(gen["ids"])
P = len(prompt_ids)
labels = figures.token_labels(v.display(all_ids))
if steps and st.session_state.get("gen_view") not in range(1, steps + 1):
    st.session_state["gen_view"] = steps
shown = st.session_state.get("gen_view", 0) if steps else 0
pieces = generating.text_pieces(tok, v.display, all_ids)
st.markdown(gfig.generated_text_html(pieces, P, P + shown - 1 if steps else None), unsafe_allow_html=True)
st.caption(
    f"Grey: the prompt ({P} tokens). Black: {steps} generated token(s); orange: the step on view. "
    f"{min(len(all_ids), block)} of {block} tokens of context used"
    + (f" (the last {block} of {len(all_ids)})." if len(all_ids) > block else ".")
)
if not steps:
    st.info("Press Next token or Generate to continue the prompt.")
    st.stop()

if steps > 1:
    shown = st.select_slider(
        "Step", options=list(range(1, steps + 1)), key="gen_view", format_func=lambda s: labels[P + s - 1]
    )
s = shown - 1
pos = P + s
chosen, prob = gen["ids"][s], gen["probs"][s]
top_ids, top_probs = gen["top_ids"][s], gen["top_probs"][s]
m1, m2, m3 = st.columns(3)
m1.metric("Step", f"{shown} of {steps}")
m2.metric("Token chosen", v.display([chosen])[0])
m3.metric("Its probability", figures.percent(prob))

left, right = st.columns(2)
with left:
    rank = top_ids.index(chosen) if chosen in top_ids else -1
    widgets.chart(
        gfig.step_alternatives(
            v.display(top_ids), top_probs, rank, title=f"Step {shown}: the {len(top_ids)} most likely tokens"
        ),
        key="gen_alternatives",
    )
    if rank < 0:
        st.caption(f"The token chosen was sampled from outside these {len(top_ids)}.")
# The model reads at most block_size tokens: a step past it was computed on the window that ends with
# it (the tokens before are causal, so one Trace of that window holds its exact row).
start = max(0, pos + 1 - block) if len(all_ids) > block else 0
window = all_ids[start : start + block]
full = caches.run_trace(caches.RunKey(v.key.model, tuple(window)))
layer = analysis.layer_weights(full, v.layer)  # [H, T, T], masked cells NaN
wlabels, row = labels[start : start + len(window)], pos - start
with right:
    read = position_window(row + 1, "gen_keys", around=row, what="keys it reads")  # a bar per key: a window
    widgets.chart(
        gfig.step_attention(
            layer[v.head, row, read.start : read.stop],
            wlabels[read.start : read.stop],
            max(0, P - start),
            title=f"Where {labels[pos]} looks: layer {v.layer}, head {v.head}",
            first=read.start,
            own=row,
        ),
        key="gen_step_attention",
    )
    st.caption(
        "Choose the layer and head in the sidebar."
        + (f" Past block_size the row covers the last {block} tokens, from position {start}." if start else "")
    )

widgets.chart(gfig.generated_probs(v.display(gen["ids"]), gen["probs"], s), key="gen_probs")
heat = figures.attention_heatmap(
    layer[v.head],
    wlabels,
    title=f"Prompt + generated text: layer {v.layer}, head {v.head}"
    + (f", the window of positions {start} … {start + len(window) - 1}" if len(all_ids) > block else ""),
    mask=attention_mask(full, v.layer),
)
if len(window) <= MAX_CELLS:  # one cell per token: the row and the prompt's end can be marked
    gfig.mark_row(heat, row, max(0, P - start))
widgets.chart(heat, key="gen_heatmap")
st.caption("The orange outline is the step on view; the dotted lines mark where the generated text starts.")
widgets.download(
    "steps (CSV)",
    lambda: pd.DataFrame(
        dict(
            step=range(1, steps + 1),
            position=range(P, P + steps),
            id=gen["ids"],
            token=v.display(gen["ids"]),
            probability=gen["probs"],
        )
    ),
    "generation_steps.csv",
    key="gen_dl",
)
