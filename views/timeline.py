"""Timeline: a folder of checkpoints of one training run, on one fixed prompt: the loss and every
head's scores per step, and a step slider with that checkpoint's attention."""

import streamlit as st

from gptviz import analysis, figures
from gptviz.analysis.attention import attention_mask
from gptviz.analysis.heads import SCORES
from gptviz.dashboard import caches, keys, progress, widgets
from gptviz.dashboard.panels import comparisons
from gptviz.dashboard.state import view
from gptviz.errors import GptvizError
from gptviz.figures import compare as cfig
from gptviz.timeline import first_step_above
from gptviz.tokenizers import encode_prompt, parse_ids

st.title("Timeline")
st.caption(
    "A run folder holds checkpoints of one training run: step-NNNNNN/ folders from "
    "`gptviz train --save-every N`, or nanoGPT checkpoints saved at intervals."
)
PATH = "a local path…"
runs = comparisons.run_folders()
pick = st.selectbox("Run folder", [*runs, PATH], key="tl_run")
choice = st.text_input("Path of the run folder", key="tl_path") if pick == PATH else pick
if not choice:
    st.info("Type the path of a folder of checkpoints of one run.")
    st.stop()
try:
    folder = comparisons.folder_path(choice)
except GptvizError as e:
    st.error(widgets.plain(e))
    st.stop()
stamp = comparisons.folder_stamp(folder)
scan = comparisons.scan_of(str(folder), stamp)
if isinstance(scan, str):
    st.error(widgets.plain(scan))
    st.stop()
for note in scan.notes:  # where the steps come from, when not from the checkpoints themselves; a cut listing
    st.warning(widgets.plain(note[0].upper() + note[1:] + "."))
version = comparisons.steps_version(scan.steps)
first = comparisons.first_bundle(str(folder), stamp, version)
if isinstance(first, str):
    st.error(widgets.plain(first))
    st.stop()
tok, cfg = first.tokenizer, first.model.config
probe = comparisons.probe_prompt(tok, cfg.vocab_size)
# a new run folder brings its own default prompt: the old one may hold symbols its tokenizer lacks
if st.session_state.get(keys.TIMELINE_PROMPT_FOR) != str(folder):
    st.session_state[keys.TIMELINE_PROMPT_FOR] = str(folder)
    st.session_state["tl_prompt"] = probe
text = st.text_input(
    "Prompt (fixed for every step)" + ("" if tok is not None else ": token ids"),
    key="tl_prompt",
    help="The default is a random sequence said twice: an induction head predicts its second half.",
)
try:
    ids = parse_ids(text, cfg.vocab_size) if tok is None else encode_prompt(tok, text, cfg.block_size)
except GptvizError as e:
    st.error(f"The prompt cannot be run: {widgets.plain(e)}")
    st.stop()
if len(ids) < 2:
    st.error("The prompt needs at least two tokens.")
    st.stop()
v = view()
device = v.device if v is not None else "cpu"
with progress.step("timeline", f"Running the prompt through {len(scan.steps)} checkpoints") as report:
    if report is None:
        st.stop()
    tl = comparisons.run_timeline(str(folder), stamp, tuple(ids), device, version, report)
if isinstance(tl, str):
    st.error(widgets.plain(tl))
    st.stop()

step_list = [int(s) for s in tl.steps["step"]]
what = "positions in name order" if tl.run[0].source == "order" else "steps"
st.caption(f"{len(step_list)} checkpoints, {what} {step_list[0]} … {step_list[-1]}; {len(ids)} prompt tokens.")
shown = st.select_slider("Step", options=step_list, value=step_list[-1], key="tl_step")

layer = min(v.layer, cfg.n_layer - 1) if v is not None and v.trace is not None else 0
head = min(v.head, cfg.n_head - 1) if v is not None and v.trace is not None else 0
score = st.selectbox("Head score", SCORES, index=SCORES.index("induction"), key="tl_score")
formed = first_step_above(tl, score, 0.4)
if formed is not None:
    st.markdown(f"A head first reaches {score.replace('_', ' ')} ≥ 0.4 at **step {formed}**.")
left, right = st.columns(2)
with left:
    widgets.chart(cfig.timeline_losses(tl.steps, title="Loss per step", marked=shown), key="tl_loss")
with right:
    widgets.chart(
        cfig.head_score_curves(
            tl.heads,
            score,
            title=f"Every head's {score.replace('_', ' ')} score per step",
            marked=shown,
            chosen=(layer, head),
        ),
        key="tl_heads",
    )
widgets.download("loss per step (CSV)", lambda: tl.steps, "timeline_loss.csv", key="tl_dl_loss")
widgets.download("head scores per step (CSV)", lambda: tl.heads, "timeline_heads.csv", key="tl_dl_heads")

step = next(s for s in tl.run if s.step == shown)
try:
    t = caches.run_trace(comparisons.step_run_key(step, device, tuple(ids)))
except GptvizError as e:
    st.error(f"Step {shown} cannot be shown: {widgets.plain(e)}")
    st.stop()
labels = figures.token_labels(tok.display(ids) if tok is not None else [str(i) for i in ids])
here = tl.heads[(tl.heads["step"] == shown) & (tl.heads["layer"] == layer) & (tl.heads["head"] == head)].iloc[0]
widgets.chart(
    figures.attention_heatmap(
        analysis.layer_weights(t, layer)[head],
        labels,
        title=f"Step {shown}: layer {layer}, head {head} ({score.replace('_', ' ')} {here[score]:.2f})",
        mask=attention_mask(t, layer),
        height=600,
    ),
    key="tl_attention",
)
st.caption("Choose the layer and head in the sidebar (kept within this run's layers and heads).")
