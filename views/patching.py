"""Patching: run a corrupt prompt with one value from a clean run, for every layer and position
(or head), and see which ones carry what decides the next token."""

import streamlit as st

import gptviz
from gptviz import figures
from gptviz.analysis.patching import SITES, compare_top_k, logit_diff, one_token, sweep_table
from gptviz.dashboard import caches, progress, widgets
from gptviz.dashboard.panels import edited_runs
from gptviz.errors import GptvizError

v = widgets.require_trace() or st.stop()
tok, cfg = v.bundle.tokenizer, v.bundle.model.config
st.title("Patching")
st.caption(
    "Run the **corrupt** prompt, but copy one value from the **clean** run: the residual stream entering a "
    "layer at one position (resid_pre), one head's output (attn.z), or one MLP's output at one position "
    "(mlp.out). Each cell shows (patched − corrupt) / (clean − corrupt) of logit(answer) − logit(wrong) "
    "at the last position: 0 = the patch changed nothing, 1 = it restored the clean run's preference."
)

PRESETS = {  # on shakespeare-char; what each shows is measured by tests/test_app_patching.py
    "thou art / they are": dict(
        clean="I know thou ar",
        corrupt="I know they ar",
        answer="t",
        wrong="e",
        note=(
            "The subject decides the verb: 'thou ar' → t (art), 'they ar' → e (are). In layers 0–2 the "
            "difference lives at the position where the subject differs ('o' of thou); by layer 3 it has moved "
            "to the last position. Among the heads, layer 2 head 0 carries most of it across."
        ),
    ),
    "thou hast / they have": dict(
        clean="I pray thee, thou ha",
        corrupt="I pray thee, they ha",
        answer="s",
        wrong="v",
        note=(
            "The same agreement over a longer prompt: 'thou ha' → s (hast), 'they ha' → v (have). The "
            "subject's differing letter carries it through layer 2; in layer 1 the space after the subject "
            "holds part of it, the last position takes it from layer 2 on, and the MLP of layer 3 at the last "
            "position writes much of the answer."
        ),
    ),
}


def encode(text: str, what: str) -> list[int]:
    if tok is None:
        return gptviz.parse_ids(text, cfg.vocab_size, what=what)
    return gptviz.encode_prompt(tok, text, cfg.block_size)


def token(text: str, what: str) -> int:
    if tok is None:
        ids = gptviz.parse_ids(text, cfg.vocab_size, what=what)
        if len(ids) != 1:
            raise gptviz.PromptError(f"the {what} token is one id")
        return ids[0]
    return one_token(tok, text, what)


if v.source == "shakespeare-char":
    cols = st.columns(len(PRESETS) + 1)
    cols[0].markdown("**Presets**")
    for col, name in zip(cols[1:], PRESETS):
        values: dict[str, object] = {f"pt_{k}": PRESETS[name][k] for k in ("clean", "corrupt", "answer", "wrong")}
        values.update(pt_note=name, pt_cell=None)
        col.button(name, key=f"pt_preset_{name}", on_click=edited_runs.set_state, args=(values,))
    if st.session_state.get("pt_note") in PRESETS:
        st.info(PRESETS[st.session_state["pt_note"]]["note"])

st.session_state.setdefault("pt_clean", v.prompt)
c1, c2 = st.columns(2)
clean_text = c1.text_input("Clean prompt", key="pt_clean")
corrupt_text = c2.text_input("Corrupt prompt (the same number of tokens)", key="pt_corrupt")

try:
    clean = encode(clean_text, "the clean prompt")
except GptvizError as e:
    st.error(f"Clean prompt: {widgets.plain(e)}")
    st.stop()
labels = figures.token_labels(v.display(clean))  # for the figures; texts for the widgets, sentences and files
texts = figures.position_labels(v.display(clean))

with st.expander("Make the corrupt prompt by changing one token of the clean one", expanded=not corrupt_text):
    a, b, c = st.columns([2, 1, 1])
    a.selectbox("Token to change", range(len(clean)), format_func=lambda i: texts[i], key="pt_pos")
    b.text_input("New token", key="pt_new", max_chars=64)
    c.button("Make it", on_click=edited_runs.change_one, args=(tuple(clean), tok, cfg.vocab_size), key="pt_make")
    if st.session_state.get("pt_change_error"):
        st.error(widgets.plain(st.session_state["pt_change_error"]))

if not corrupt_text:
    st.info("Type a corrupt prompt, or make one above by changing one token.")
    st.stop()

try:
    corrupt = edited_runs.same_length(clean, encode(corrupt_text, "the corrupt prompt"))
except GptvizError as e:
    st.error(f"Corrupt prompt: {widgets.plain(e)}")
    st.stop()

clean_key = caches.RunKey(v.key.model, tuple(clean))
corrupt_key = caches.RunKey(v.key.model, tuple(corrupt))
clean_run, corrupt_run = caches.run_trace(clean_key), caches.run_trace(corrupt_key)
if widgets.nan_logits(clean_run.part("logits", -1), "of the clean prompt's last position") or widgets.nan_logits(
    corrupt_run.part("logits", -1), "of the corrupt prompt's last position"
):
    st.stop()  # logit(answer) − logit(wrong) is NaN: no sweep can restore anything
best = lambda run: int(run.part("logits", -1).argmax())  # noqa: E731
c1, c2, c3 = st.columns([1, 1, 2])
# An empty box means "the model's own choice": the box shows that choice (its placeholder) and the
# line under it names it, so the page never computes with a token it does not show.
default_answer = best(clean_run)
answer_text = c1.text_input(
    "Answer token",
    key="pt_answer",
    placeholder=v.display([default_answer])[0],
    help="Empty: the clean prompt's top prediction (shown greyed)",
)
try:
    answer = token(answer_text, "answer") if answer_text else default_answer
except GptvizError as e:
    st.error(widgets.plain(e))
    st.stop()
logits = corrupt_run.part("logits", -1).astype("float64")
logits[answer] = float("-inf")
default_wrong = int(logits.argmax())  # the corrupt prompt's favourite that is not the answer
wrong_text = c2.text_input(
    "Wrong token",
    key="pt_wrong",
    placeholder=v.display([default_wrong])[0],
    help="Empty: the corrupt prompt's top prediction other than the answer (shown greyed)",
)
sites = c3.multiselect("Sites", SITES, default=list(SITES), key="pt_sites")
try:
    wrong = token(wrong_text, "wrong") if wrong_text else default_wrong
except GptvizError as e:
    st.error(widgets.plain(e))
    st.stop()


def used(typed: str, tid: int, whose: str) -> str:
    return f"**{widgets.plain(v.display([tid])[0])}** ({'typed' if typed else whose})"


st.caption(
    f"Answer {used(answer_text, answer, 'the clean prompt’s top prediction')} · wrong "
    f"{used(wrong_text, wrong, 'the corrupt prompt’s top prediction other than the answer')}"
)

d_clean = logit_diff(clean_run.part("logits", -1), answer, wrong)
d_corrupt = logit_diff(corrupt_run.part("logits", -1), answer, wrong)
a_name, w_name = v.display([answer])[0], v.display([wrong])[0]
st.markdown(
    f"logit({widgets.plain(a_name)}) − logit({widgets.plain(w_name)}) at the last position: "
    f"**{d_clean:.3f}** on the clean prompt, **{d_corrupt:.3f}** on the corrupt one."
)

layers, positions = edited_runs.sweep_choices(cfg.n_layer, texts)  # a 32-layer sweep limited to what is asked
for site in sites:
    try:
        with progress.step(f"pt_{site}", f"Patching {site}") as report:
            if report is None:
                continue
            cells = None if site == "attn.z" else positions
            s = edited_runs.sweep(clean_key, tuple(corrupt), answer, wrong, site, layers, cells, report)
    except GptvizError as e:
        st.error(widgets.plain(e))
        st.stop()
    edited_runs.sweep_chart(s, site, labels, positions)
    widgets.download(
        f"{site} sweep (CSV)", lambda: sweep_table(s, site, texts), f"patching_{site}.csv", key=f"pt_dl_{site}"
    )

cell = st.session_state.get("pt_cell")
st.subheader("One patched run")
n_of = {"attn.z": cfg.n_head}
if not cell or cell[0] not in sites or cell[1] >= cfg.n_layer or cell[2] >= n_of.get(cell[0], len(clean)):
    st.caption("Click a cell of a heatmap to see the next token of that patched run.")
else:
    site, layer, which = cell
    run = edited_runs.patched(clean_key, tuple(corrupt), site, layer, which)
    where = f"head {which}" if site == "attn.z" else f"position {texts[which]}"
    st.markdown(f"The corrupt prompt with the clean run's **{site}** of layer {layer}, {widgets.plain(where)}:")
    table = compare_top_k(corrupt_run.part("logits", -1), run.part("logits", -1), 8, display=v.display)
    table = table.rename(columns={"before": "corrupt", "after": "patched", "rank_before": "rank_corrupt"})
    table = table.rename(columns={"rank_after": "rank_patched"})
    st.dataframe(table, hide_index=True, key="pt_cell_table")
