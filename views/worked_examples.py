"""Worked examples: the teaching material's toy computations with every step computed here, from
inputs the class can edit; mean and std per block on the loaded model; links for a lesson."""

import numpy as np
import streamlit as st

from gptviz.analysis import worked
from gptviz.dashboard import pages
from gptviz.dashboard.classroom.matrices import NUM, edit, mass, qk, reset, show
from gptviz.dashboard.state import link_params, view

head, button = st.columns([5, 1], vertical_alignment="bottom")
head.title("Worked examples")
button.button("↺ Reset every input", key="worked_reset", on_click=reset, help="Back to the teaching text's numbers")
st.caption(
    "Small numbers a class can check by hand. Every number below is computed on this page from the "
    "inputs above it: edit an input cell and every later step follows."
)
tab000, tab004, tab002, tablinks = st.tabs(
    ["Tiny attention head", "“Order shipped from” → hub", "Mean and std per block", "Lesson links"]
)

with tab000:
    st.subheader("One attention head, T = 3 tokens, C = 4, d_k = 2")
    preset = st.segmented_control(
        "Numbers",
        list(worked.TOY_PRESETS),
        default="textbook",
        required=True,
        key="w0_preset",
        format_func=lambda p: {"textbook": "the textbook's", "sharp": "sharper: attention chooses"}[p],
        help="The textbook's weights are small, so every weight is close to 1/3; the sharper ones make "
        "each token pick the one before it",
    )
    d = worked.TOY_PRESETS[preset or "textbook"]  # required: None only in the type
    sfx = "" if preset == "textbook" else f"_{preset}"  # each preset keeps its own edits
    toks = ["t0", "t1", "t2"]
    queries, keys = qk(toks)
    X = edit("X", d["X"], "w0_X" + sfx, rows=toks)
    c1, c2, c3 = st.columns(3)
    with c1:
        Wq = edit("Wq", d["Wq"], "w0_Wq" + sfx)
    with c2:
        Wk = edit("Wk", d["Wk"], "w0_Wk" + sfx)
    with c3:
        Wv = edit("Wv", d["Wv"], "w0_Wv" + sfx)
    causal = st.toggle("Causal mask on", value=True, key="w0_mask")
    r = worked.toy_attention(X, Wq, Wk, Wv, causal=causal)
    c1, c2, c3 = st.columns(3)
    for col, name, m in zip((c1, c2, c3), ("Q = X·Wq", "K = X·Wk", "V = X·Wv"), (r["Q"], r["K"], r["V"])):
        with col:
            show(name, m, rows=toks)
    dk = r["Q"].shape[1]
    show("scores = Q·Kᵀ ÷ √d_k", r["scores"], f"÷ √{dk} = ÷ {np.sqrt(dk):.4f}", rows=queries, columns=keys)
    show("mask", ~worked.future(3) if causal else np.ones((3, 3), bool), "True = may read", queries, keys)
    show(
        "masked scores",
        r["masked"],
        "future keys set to −∞" if causal else "mask OFF: nothing hidden",
        rows=queries,
        columns=keys,
    )
    show(
        "weights = softmax(masked scores)",
        r["weights"],
        "each row sums to 1",
        rows=queries,
        columns=keys,
        heat=toks,
        causal=causal,
    )
    mass("Future attention mass (weights above the diagonal)", r["future_mass"])
    if not causal:
        st.warning("Mask off: earlier tokens read later ones. In training, that is the answer leaking in.")
    show("output = weights·V", r["output"], rows=toks)

with tab004:
    st.subheader("A support reply: “Order shipped from” → “hub”")
    st.info(
        "Each step below has **its own inputs**, as the teaching text gives them: step 2's q and k are not "
        "computed from step 1's x, and so on. Each step shows one idea with numbers small enough to check by hand."
    )
    st.markdown("**1. Embedding + positions** (token ids 0, 1, 2)")
    c1, c2 = st.columns(2)
    with c1:
        table = edit("embedding table", worked.SUPPORT_EMBED["table"], "w4_table", rows=worked.SUPPORT_VOCAB)
    with c2:
        positions = edit("positions", worked.SUPPORT_EMBED["positions"], "w4_pos", rows=["p0", "p1", "p2"])
    show("x = table[ids] + positions", worked.embed(table, positions, worked.SUPPORT_IDS), rows=worked.SUPPORT_TOKENS)

    st.markdown("**2. q·kᵀ** (one head, 2 features)")
    c1, c2 = st.columns(2)
    with c1:
        q = edit("q", worked.SUPPORT_QKV["q"], "w4_q", rows=worked.SUPPORT_TOKENS)
    with c2:
        k = edit("k", worked.SUPPORT_QKV["k"], "w4_k", rows=worked.SUPPORT_TOKENS)
    show("q·kᵀ", worked.raw_scores(q, k), "no scaling yet", *qk(worked.SUPPORT_TOKENS))

    st.markdown(f"**3. Why ÷ √d_k**: one query's scores in a head of d_k = {worked.SCALING_HEAD_DIM}")
    s = worked.scaling(edit("raw scores", worked.SCALING_SCORES, "w4_scale")[0], worked.SCALING_HEAD_DIM)
    show(
        "scaling",
        np.stack([s["unscaled_weights"], s["scaled_scores"], s["scaled_weights"]]),
        "unscaled, one key takes nearly everything",
        rows=["softmax(scores)", f"scores ÷ √{worked.SCALING_HEAD_DIM}", "softmax(scores ÷ √d_k)"],
    )

    st.markdown("**4. The causal mask** on “Order shipped from hub”")
    four = [*worked.SUPPORT_TOKENS, "hub"]
    scores = edit("scores before the mask", worked.MASK_SCORES, "w4_mask_scores", *qk(four))
    causal4 = st.toggle("Causal mask on", value=True, key="w4_mask")
    m = worked.masked_softmax(scores, causal=causal4)
    show("masked weights", m["weights"], "" if causal4 else "mask OFF", *qk(four), heat=four, causal=causal4)
    mass("Future attention mass", m["future_mass"])

    st.markdown("**5. A bad mask shows the leak**: large scores on future keys")
    three = worked.SUPPORT_TOKENS
    lk = worked.leak(edit("leak scores", worked.LEAK_SCORES, "w4_leak", *qk(three)))
    show("leak: without mask", lk["unmasked"], "", *qk(three), heat=three, causal=False)
    mass("Future mass without the mask", lk["unmasked_mass"])
    show("leak: with mask", lk["masked"], "", *qk(three), heat=three, causal=True)
    mass("Future mass with the mask", lk["masked_mass"])

    st.markdown("**6. Feed-forward**: widen to 6, ReLU, back to 4")
    x_ff = edit("FFN input x", worked.FFN["x"], "w4_ffn_x", rows=worked.SUPPORT_TOKENS)
    c1, c2 = st.columns(2)
    with c1:
        w1 = edit("w1", worked.FFN["w1"], "w4_w1")
    with c2:
        w2 = edit("w2", worked.FFN["w2"], "w4_w2")
    ff = worked.feed_forward(x_ff, w1, w2)
    show("FFN hidden = ReLU(x·w1)", ff["hidden"], rows=worked.SUPPORT_TOKENS)
    show("FFN output = hidden·w2", ff["output"], rows=worked.SUPPORT_TOKENS)

    st.markdown(f"**7. Layer norm** (ε = 1e-5, no learned scale), then + {worked.NORM_UPDATE_SCALE} × it")
    ln = worked.layer_norm(edit("norm input", worked.NORM_INPUT, "w4_norm"))
    show("layer norm", ln["normed"], "each row: mean 0, variance ≈ 1")
    show(
        "row statistics",
        np.stack([ln["mean"], ln["var"], ln["normed_mean"], ln["normed_var"]], axis=1),
        columns=["mean", "variance", "mean after", "variance after"],
    )
    show("residual = x + 0.1 × norm", ln["residual"])

    st.markdown("**8. Logits**: the last position's normalised vector times the output matrix")
    h = edit("last hidden (normalised)", worked.LOGITS_INPUT["hidden"], "w4_hidden", rows=["from"])
    W = edit("output matrix", worked.LOGITS_INPUT["W"], "w4_W", columns=worked.LOGIT_VOCAB)
    lg = worked.logits(h, W, worked.LOGIT_VOCAB).set_index("token")
    lg.index.name = "logits"
    st.markdown(f"**logits** · shape ({len(lg)},) · best first")
    st.dataframe(lg, column_config={"logit": NUM, "probability": NUM}, width="content")
    top = lg.index[0]
    c1, c2 = st.columns(2)
    c1.metric("Top token", top)
    c2.metric("Top probability", f"{lg['probability'].iloc[0]:.4f}")

with tab002:
    st.subheader("Mean and std of the residual stream before and after each block")
    v = view()
    if v is None or v.trace is None:
        st.info("Choose a checkpoint and a prompt in the sidebar to see this on a real model.")
    else:
        stats = worked.block_stats(v.trace)
        st.caption(
            f"On the loaded model and prompt ({v.trace.n_tokens} tokens): over every position and feature, "
            f"population std. {worked.growth_note(stats)}"
        )
        bs = stats.set_index("where")
        bs.index.name = "block stats"
        st.dataframe(bs, column_config={"mean": NUM, "std": NUM}, width="content")

with tablinks:
    st.subheader("Lesson links")
    st.caption(
        "Each link opens the dashboard on a shipped model with the prompt, layer and head already chosen, "
        "in this tab (presentation mode stays on if it is)."
    )
    for lesson in worked.LESSONS:
        params = link_params(**{k: lesson[k] for k in ("checkpoint", "prompt", "layer", "head")})
        st.page_link(pages.page_file(lesson["page"]), label=lesson["title"], query_params=params)
        st.caption(lesson["what"])
    here = {k: st.query_params[k] for k in ("checkpoint", "prompt") if k in st.query_params}
    st.page_link(
        pages.page_file("forward-pass"),
        label="One forward pass, step by step",
        query_params=link_params(**here, step=1),
    )
    st.caption("On the model and prompt chosen now: every step has its own link (the step number is in the address).")
