"""Compare: two prompts of the same length on one checkpoint, or one prompt on two checkpoints of the
same shape. A is the sidebar's run; B is chosen here. Every difference is A − B."""

import functools

import numpy as np
import streamlit as st

from gptviz import figures
from gptviz.analysis import compare as cmp
from gptviz.analysis.heads import SCORES
from gptviz.dashboard import caches, progress, widgets, window
from gptviz.dashboard.panels import comparisons, heads_lens
from gptviz.dashboard.sources.checkpoints import checkpoints_dir, shipped, version
from gptviz.errors import GptvizError
from gptviz.figures import compare as cfig
from gptviz.tokenizers import display_token, encode_prompt, parse_ids

v = widgets.require_trace() or st.stop()
st.title("Compare")
a = v.trace
model = v.bundle.model
tok = v.bundle.tokenizer
PROMPTS, CHECKPOINTS = "two prompts, one checkpoint", "one prompt, two checkpoints"
mode = st.radio("Compare", (PROMPTS, CHECKPOINTS), key="cmp_mode", horizontal=True)

if mode == PROMPTS:
    default = v.prompt.replace("further", "farther") if tok is not None else v.prompt
    text_b = st.text_input(
        "Prompt B (the same number of tokens as A)",
        value=default,
        key="cmp_prompt_b",
        help="A is the sidebar's prompt. Change a word and see where the model's reading changes.",
    )
    try:
        if tok is None:
            ids_b = parse_ids(text_b, model.config.vocab_size)
        else:
            ids_b = encode_prompt(tok, text_b, model.config.block_size)
    except GptvizError as e:
        st.error(f"Prompt B cannot be run: {widgets.plain(e)}")
        st.stop()
    key_b = caches.RunKey(v.key.model, tuple(int(i) for i in ids_b))
    name_a, name_b = "A (sidebar prompt)", "B (prompt B)"
else:
    run_steps = []
    for run in comparisons.run_folders():  # every snapshot of a shipped run, e.g. two steps of its training
        steps = comparisons.steps_of(str(checkpoints_dir() / run), comparisons.folder_stamp(checkpoints_dir() / run))
        run_steps += [] if isinstance(steps, str) else [(f"{run} · step {s.step}", str(s.path)) for s in steps]
    candidates = [c for c in [*shipped(), *[p for _, p in run_steps]] if c != v.source]
    names = {p: n for n, p in run_steps}
    # B starts on a checkpoint of A's shape and vocabulary (read from config files, nothing loaded),
    # or on none: never on one that cannot run A's token ids.
    mine = (model.config.n_layer, model.config.n_head, model.config.vocab_size)
    fits = [c for c in candidates if comparisons.shape_of(c) == mine]
    options = [*fits, *[c for c in candidates if c not in fits], "a local path…"]
    pick = st.selectbox(
        "Checkpoint B (the same shape and vocabulary as A)",
        options,
        index=0 if fits else None,
        placeholder="choose checkpoint B",
        key="cmp_ckpt_b",
        format_func=lambda o: str(names.get(o, o)) + (" · same shape as A" if o in fits else ""),
        help="A is the sidebar's checkpoint; B runs the same prompt.",
    )
    source_b = st.text_input("Path of checkpoint B", key="cmp_path_b") if pick == "a local path…" else pick
    if not source_b:
        st.info(
            "Choose checkpoint B: one of the same shape and vocabulary as A, for example another step of its "
            "training run."
            if pick is None
            else "Type the path of a checkpoint folder or file."
        )
        st.stop()
    key_b = caches.RunKey(caches.ModelKey(source_b, v.device, version(source_b), dtype=v.dtype), v.key.ids)
    name_a, name_b = f"A: {v.source_label}", f"B: {names.get(source_b, source_b)}"
    try:  # before B runs A's ids: another vocabulary is said as such, not as an id out of range
        bundle_b = caches.bundle_for(key_b.model)
        cmp.check_models(model.config, tok, bundle_b.model.config, bundle_b.tokenizer, a.n_tokens, (name_a, name_b))
    except GptvizError as e:
        st.error(f"Not compared: {widgets.plain(e)}")
        st.stop()

try:
    b = caches.run_trace(key_b)
    cmp.check_comparable(a, b)
except GptvizError as e:
    st.error(f"Not compared: {widgets.plain(e)}")
    st.stop()

div, loss = comparisons.token_tables(v.key, key_b)  # once per pair of runs: T × V passes
first = cmp.first_difference(a, b)
m1, m2, m3, m4 = st.columns(4)
m1.metric("Tokens", a.n_tokens)
m2.metric("First differing token", "none" if first is None else f"position {first}")
# np.mean, not pandas' NaN-skipping mean: a NaN anywhere makes the mean NaN, and the page says so
m3.metric("Mean KL(A ‖ B)", f"{figures.number(np.mean(div['kl_ab'].to_numpy()), '.4f')} {figures.LOSS_UNIT}")
loss_a, loss_b = (float(np.mean(loss[c].to_numpy())) for c in ("loss_a", "loss_b"))
# B's value and its change from A: the two values side by side did not fit a quarter of the page (11.910 → 11.9…)
change = f"{loss_b - loss_a:+.3f}" if np.isfinite(loss_b - loss_a) else None
same = change is not None and float(change) == 0  # no arrow, no colour for "no change"
m4.metric(
    f"Mean loss of B ({figures.LOSS_UNIT})",
    figures.number(loss_b),
    None if change is None else f"{change} from A",
    delta_color="off" if same else "inverse",
    delta_arrow="off" if same else "auto",
)
if first is None and mode == PROMPTS:
    st.info("The two prompts are the same: every difference below is 0. Change a word in prompt B.")

labels_a = figures.token_labels(v.display(a.token_ids))
labels_b = figures.token_labels(v.display(b.token_ids))
layer, head = v.layer, v.head
st.subheader(f"Attention: layer {layer}, head {head}")
st.caption("Choose the layer and head in the sidebar. The difference's colour scale is centred on 0.")
# block means made a band of rows at a time, once per pair of runs and head; a bar when that takes a while
fig_a, fig_b, fig_diff = progress.waited(
    "Drawing the attention maps",
    "cmp_maps",
    (v.key, key_b, layer, head),
    lambda report: comparisons.head_figures(
        v.key, key_b, layer, head, (name_a, name_b), v.presentation, (labels_a, labels_b), report
    ),
)
left, right = st.columns(2)
with left:
    widgets.figure_chart(fig_a, key="cmp_att_a")
with right:
    widgets.figure_chart(fig_b, key="cmp_att_b")
widgets.figure_chart(fig_diff, key="cmp_att_diff")
widgets.download_later(  # every head's maps of both runs, a band at a time: only when asked for
    "attention change per head (CSV)",
    functools.partial(comparisons.attention_change, v.key, key_b),
    "attention_change.csv",
    key="cmp_dl_att",
)

st.subheader("Head scores and their change")
score = st.selectbox("Score", SCORES, index=SCORES.index("induction"), key="cmp_score")
# each run's scores, cached with its run (the Heads page shares them)
sa = progress.waited("Scoring every head of A", "cmp_heads_a", v.key, lambda r: heads_lens.head_table(v.key, r))
sb = progress.waited("Scoring every head of B", "cmp_heads_b", key_b, lambda r: heads_lens.head_table(key_b, r))
heads = cmp.score_change(sa, sb)
L, H = model.config.n_layer, model.config.n_head
grid = heads[f"{score}_change"].to_numpy().reshape(L, H)
widgets.chart(
    cfig.head_change_heatmap(grid, title=f"{score.replace('_', ' ')} score: B − A", what="B − A"),
    key="cmp_heads",
)
widgets.download("head scores of A and B (CSV)", lambda: heads, "head_score_change.csv", key="cmp_dl_heads")

st.subheader("Next-token distributions")
shown = window.positions(a.n_tokens, "cmp", around=v.position)  # a bar and a row per position: a window
near = div.iloc[shown.start : shown.stop]
kl = near["kl_ab"].to_numpy()
widgets.chart(cfig.kl_bars(kl, labels_a[shown.start : shown.stop], title="KL(A ‖ B) at each position"), key="cmp_kl")
st.dataframe(  # tokens as the rest of the dashboard shows them: a space is ␣, not a blank cell
    near.assign(
        **{c: near[c].map(display_token) for c in ("token_a", "token_b", "top_a", "top_b")},
        p_top_a=near["p_top_a"].map(lambda p: figures.number(p, ".1%")),
        p_top_b=near["p_top_b"].map(lambda p: figures.number(p, ".1%")),
    ),
    hide_index=True,
    width="stretch",
    key="cmp_next",
)
widgets.download("next-token divergence (CSV)", lambda: div, "next_token_kl.csv", key="cmp_dl_kl")

st.subheader("Per-token loss")
in_window = loss[loss["position"].between(shown.start, shown.stop - 1)]
loss_labels = [labels_a[p] for p in in_window["position"]]
widgets.chart(
    cfig.loss_pair(in_window, loss_labels, title="Loss of each token, A and B", names=(name_a, name_b)),
    key="cmp_loss",
)
widgets.download("per-token loss of A and B (CSV)", lambda: loss, "loss_comparison.csv", key="cmp_dl_loss")
st.caption(f"Largest change of loss: {figures.number(np.max(np.abs(loss['change'].to_numpy())))} {figures.LOSS_UNIT}.")
