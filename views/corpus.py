"""Corpus: behaviour across data. Run a corpus through the model (as its own process) or open a scan,
then browse the windows by loss, each head's scores over the windows, and each neuron's top contexts."""

from pathlib import Path

import streamlit as st

from gptviz.dashboard import keys, pages, widgets
from gptviz.dashboard.corpus import scan_form
from gptviz.dashboard.corpus import scans as cp
from gptviz.dashboard.corpus.compare_tab import compare_tab, remember
from gptviz.dashboard.corpus.heads_tab import heads_tab
from gptviz.dashboard.panels import transcoder_card as card
from gptviz.dashboard.panels.circuit import shipped_sets
from gptviz.dashboard.sources.checkpoints import DEMO, checkpoint_path, is_upload, shipped, upload_limit_mb
from gptviz.dashboard.sources.classmode import class_mode, client_address, scans_allowed, uploads_allowed
from gptviz.dashboard.state import switch_page, view
from gptviz.errors import GptvizError
from gptviz.figures import corpus as cfig
from gptviz.scanning import jobs as scan_jobs
from gptviz.scanning import queries
from gptviz.scanning.validate import against_model

PAGES = {"attention": "attention", "next": "next-token"}  # what an "open as prompt" click opens, by page key
target = st.session_state.pop(keys.CORPUS_OPEN, None)
if target in PAGES:  # set by an "open as prompt" click below, with the prompt already chosen
    prompt = st.session_state.pop(keys.CORPUS_PROMPT, "")
    switch_page(pages.page_file(PAGES[target]), leave=("position",), prompt=prompt)

finished = st.session_state.pop(keys.CORPUS_DONE, None)
if finished:  # a scan this page started has ended: open its folder, and offer it as scan B from now on
    remember(finished)
    st.session_state.update(corpus_mode="open a scan folder", corpus_folder=finished, corpus_scan=finished)

v = view()
st.title("Corpus")
st.caption(
    "One prompt is an anecdote. A scan runs a corpus through the model once, in windows, and keeps the loss of "
    "every token, every head's scores in every window, and each neuron's strongest contexts (at most one per "
    "window). It runs as its own process (`gptviz scan`); the page reads the folder it writes."
)
if v is None or v.bundle is None or v.model_key is None:  # the sidebar sets the two together
    st.info("Choose a checkpoint in the sidebar first: a scan is of one model.")
    st.stop()
tok = v.bundle.tokenizer
runnable = v.source != DEMO and not is_upload(v.source)


# --- choose or run a scan --------------------------------------------------------------------------
ship = queries.shipped_scan(v.source) if v.source in shipped() else None
# a class server starts no scan from a page unless its teacher says so (sources/classmode.py)
modes = ["the shipped scan"] if ship else []
modes += [*(["run a new scan"] if scans_allowed() else []), "open a scan folder"]
mode = st.radio("Scan", modes, key="corpus_mode", horizontal=True)
if mode == "the shipped scan":
    st.session_state["corpus_scan"] = str(ship)
elif mode == "run a new scan":
    if not runnable:
        st.info("A scan runs on a shipped checkpoint or a local path; choose one in the sidebar.")
    samples = queries.sample_corpora()
    c1, c2, c3 = st.columns([2, 1, 1])
    kinds = [f"{scan_form.SAMPLE}{s}" for s in samples] + ["a path on this server"]
    kinds += ["upload a .txt or .jsonl"] if upload_limit_mb() and uploads_allowed() else []  # 0: uploads off
    kind = c1.selectbox("Corpus", kinds, key="corpus_source")
    block = v.bundle.model.config.block_size
    window = c2.number_input("Window (tokens)", 2, block, min(128, block), key="corpus_window_size")
    k = c3.number_input("Contexts per neuron (k)", 1, 200, 20, key="corpus_k")
    kept = scan_jobs.MAX_KEPT
    st.caption(f"This server keeps the newest {kept} scans and uploaded corpora; a new one removes the oldest.")
    data = scan_form.corpus_data(kind)
    sets = shipped_sets(v.source)  # shipped transcoders: their features' contexts, for the Graph page
    tc_help = "Also keep each transcoder feature's strongest contexts: the Graph page shows them"
    tc = st.selectbox("Transcoders", ["none", *sets], key="corpus_transcoders", disabled=not sets, help=tc_help)
    busy = scan_jobs.running((st.session_state.get("corpus_job") or {}).get("id"))  # one scan per session at a time
    run = st.button("Run scan", key="corpus_run", type="primary", disabled=not runnable or data is None or busy)
    if run and data is not None:
        try:  # the scans folder may be refused: a symlink, or another user's (private.py)
            client = client_address() if class_mode() else ""  # a class server: one scan per computer
            job = scan_jobs.start_scan(
                checkpoint_path(v.source), data, int(window), int(k), v.device, client, transcoders=sets.get(tc)
            )
            st.session_state["corpus_job"] = job.__dict__
        except GptvizError as e:
            st.error(f"Scan not started: {widgets.plain(e)}")
else:
    folder = st.text_input("Scan folder (what `gptviz scan --out` wrote)", key="corpus_folder")
    if st.button("Open", key="corpus_open_folder") and folder:
        st.session_state["corpus_scan"] = folder


if st.session_state.get("corpus_job"):
    scan_form.running_scan()
if st.session_state.pop(scan_form.CANCELLED, False):
    st.info("Scan cancelled: its process was stopped and its folder is not opened.")
if st.session_state.get("corpus_error"):
    st.error(f"Scan failed: {widgets.plain(st.session_state.pop('corpus_error'))}")
opened = st.session_state.get("corpus_scan")
if not opened or st.session_state.get("corpus_job"):
    st.stop()
try:
    version = queries.scan_version(scan_form.scan_folder(opened))  # a class server: its roots only
    scan = cp.scan_at(*version)
except GptvizError as e:
    st.error(f"Scan not opened: {widgets.plain(e)}")
    st.stop()

# --- what the scan found ---------------------------------------------------------------------------
sm = scan.summary
mismatch = against_model(scan, v.bundle.model.config, cp.max_token_id(*version))
if mismatch:
    st.error(mismatch)
    st.stop()
m = st.columns(5)
m[0].metric("Documents", f"{sm['docs']:,}")
m[1].metric("Windows", f"{sm['windows']:,}")
m[2].metric("Tokens", f"{sm['tokens']:,}")
m[3].metric("Mean loss (nats)", f"{sm['loss']:.3f}")
m[4].metric("Engine", widgets.plain(sm["engine"]))  # from a file: st.metric renders Markdown
st.caption(
    f"Scan of {widgets.plain(sm.get('checkpoint') or 'a model')} on {widgets.plain(sm.get('data', ''))}, "
    f"in {float(sm['seconds']):,.0f} s"
)
if runnable and sm.get("checkpoint") and Path(sm["checkpoint"]).name != checkpoint_path(v.source).name:
    st.warning("This scan was made with another checkpoint than the sidebar's: its tokens are shown with this one's.")
names = ["Windows by loss", "Heads over windows", "Neurons", "Compare two scans"]
has_tc = len(scan.transcoder_features) > 0  # a scan made with transcoders: their features' contexts too
tab_w, tab_h, tab_n, tab_c, *tab_t = st.tabs(names + (["Transcoder features"] if has_tc else []))

with tab_w:
    ranked = cp.ranked_windows(*version, v.model_key)
    short = queries.short_length(scan)
    if st.checkbox(f"Hide short windows (under {short} tokens: a document's tail)", True, key="corpus_hide_short"):
        ranked = ranked[~ranked["short"]].reset_index(drop=True) if (~ranked["short"]).any() else ranked
    chosen = st.number_input(
        "Window", 0, int(scan.windows["window"].max()), int(ranked["window"].iloc[0]), key="corpus_window"
    )
    ids = queries.window_ids(scan, chosen)
    losses = queries.window_losses(scan, chosen, len(ids))
    widgets.chart(cp.loss_histogram(*version, chosen), key="corpus_loss_hist")
    st.markdown(
        f"**Window {chosen}**: each token's loss in nats (position 0 is not predicted: nothing comes before it)."
    )
    st.html(cfig.window_chips_html(v.display(ids), ids, losses))
    st.dataframe(ranked, key="corpus_windows_table", hide_index=True, height=260)
    widgets.download("windows (CSV)", lambda: scan.windows, "windows.csv", key="corpus_dl_windows")
    widgets.download("tokens (CSV)", lambda: scan.tokens, "tokens.csv", key="corpus_dl_tokens")

with tab_h:
    heads_tab(version, v.model_key)


def open_as_prompt(page: str, ids: list[int]) -> None:
    st.session_state[keys.CORPUS_OPEN] = page
    st.session_state[keys.CORPUS_PROMPT] = tok.decode(ids) if tok is not None else ", ".join(map(str, ids))


with tab_n:
    L = int(scan.neurons["layer"].max()) + 1
    F = int(scan.neurons["neuron"].max()) + 1
    cp.take_neuron_pick(st.session_state, scan, tok)  # a row clicked in the table below, last run
    c1, c2, c3 = st.columns([1, 1, 2])
    layer = c1.number_input("Layer", 0, L - 1, 0, key="corpus_layer")
    neuron = c2.number_input(f"Neuron (0–{F - 1})", 0, F - 1, 0, key="corpus_neuron")
    token = c3.text_input("…or the neurons that fire most on this token", key="corpus_token")
    if token:
        tid = tok.encode(token, unknown="drop") if tok is not None else []
        if len(tid) != 1:
            st.warning("Type exactly one token of this model's vocabulary (one character for a character model).")
        else:
            found = queries.neurons_for_token(scan, tid[0])
            st.caption("Neurons whose strongest contexts peak on this token (how many of their top k do); click one.")
            st.dataframe(found, key="corpus_token_neurons", hide_index=True, height=220, on_select="rerun",
                         selection_mode="single-row")  # fmt: skip
    top = queries.neuron_contexts(scan, layer, neuron)
    st.markdown(f"**Layer {layer}, neuron {neuron}**: its {len(top)} strongest contexts, the peak token highlighted.")
    for r in top.itertuples():
        ctx, at = queries.context(scan, int(r.window), int(r.position))
        prefix = queries.window_ids(scan, int(r.window))[: int(r.position) + 1].tolist()
        c1, c2, c3 = st.columns([6, 1.3, 1.5], vertical_alignment="center")
        c1.html(cfig.ranked_context_html(r.rank, r.value, r.window, queries.token_texts(tok, ctx), at))
        c2.button("Attention", key=f"corpus_attn_{r.rank}", on_click=open_as_prompt, args=("attention", prefix))
        c3.button("Next token", key=f"corpus_next_{r.rank}", on_click=open_as_prompt, args=("next", prefix))
    widgets.download("neurons (CSV)", lambda: scan.neurons, "neurons.csv", key="corpus_dl_neurons")

with tab_c:
    compare_tab(version, v.model_key)

if tab_t:
    with tab_t[0]:
        tf = scan.transcoder_density
        c1, c2 = st.columns(2)
        layers = sorted(int(x) for x in tf["layer"].unique())
        tc_layer = c1.selectbox("Layer", layers, key="corpus_tc_layer")
        width = int(tf.loc[tf["layer"] == tc_layer, "feature"].max()) + 1
        tc_feature = int(c2.number_input(f"Feature (0–{width - 1})", 0, width - 1, 0, key="corpus_tc_feature"))
        card.show_contexts(version, v.model_key, tc_layer, tc_feature, tok)
