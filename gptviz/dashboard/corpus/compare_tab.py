"""The Corpus page's comparison tab: the opened scan (A) against another scan of the same corpus (B), such
as two checkpoints of one run, picked from the scans found (shipped, run by the page) or typed. What
each document's loss, each head's score and each neuron's strongest contexts became; the comparison
itself is gptviz.scanning.compare's (a notebook calls it the same way).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import streamlit as st

from ...errors import GptvizError
from ...figures import corpus as cfig
from ...figures import scan_compare as sfig
from ...formats.safe import read_json
from ...scanning import compare
from ...scanning.jobs import scans_path
from ...scanning.queries import context, finished_scans, neuron_contexts, scan_version, shipped_scans, token_texts
from ...scanning.store import MAX_SUMMARY_BYTES
from .. import keys, widgets
from ..caches import ModelKey, bundle_for, cached
from ..sources.classmode import class_mode
from .scan_form import scan_folder
from .scans import scan_at

Version = tuple[str, float]
SHOWN = 5  # a neuron's contexts drawn per scan (whole windows, in half the page's width)
TYPED = "a folder typed below…"


@cached(max_entries=4, show_spinner=False)
def documents(a: Version, b: Version) -> pd.DataFrame:
    return compare.document_losses(scan_at(*a), scan_at(*b))


@cached(max_entries=16, show_spinner=False)
def heads(a: Version, b: Version, score: str) -> pd.DataFrame:
    return compare.head_changes(scan_at(*a), scan_at(*b), score)


@cached(max_entries=4, show_spinner=False)
def neurons(a: Version, b: Version) -> pd.DataFrame | str:
    """The neurons lowest overlap first, or why they cannot be compared (a cached message, not an error)."""
    try:
        return compare.neuron_overlap(scan_at(*a), scan_at(*b))
    except compare.ScanCompareError as e:
        return str(e)


def remember(folder: str) -> None:
    """A scan this session's page ran, offered as scan B from then on."""
    mine = st.session_state.setdefault(keys.CORPUS_MINE, [])
    if folder not in mine:
        mine.append(folder)


def page_scans() -> list[str]:
    """The scans the Corpus page ran that this session may open, newest first: this session's, then (but
    not on a class server: the others' are other students' corpora) every one this server ran."""
    mine = list(reversed(st.session_state.get(keys.CORPUS_MINE, [])))
    return mine if class_mode() else [*mine, *map(str, finished_scans(scans_path()))]


def found_scans() -> dict[str, str]:
    """The scans the tab offers, folder -> how the list names it: the shipped ones, then page_scans."""
    mine = st.session_state.get(keys.CORPUS_MINE, [])
    out = {str(p): f"shipped: {describe(p, when=False)}" for p in shipped_scans()}
    for folder in page_scans():
        out.setdefault(folder, f"{'this session' if folder in mine else 'ran here'}: {describe(Path(folder))}")
    return out


def describe(folder: Path, when: bool = True) -> str:
    """'checkpoint on data, N windows, HH:MM' from a scan's summary; its folder's name if unreadable."""
    try:
        s = read_json(folder / "summary.json", "scan summary", MAX_SUMMARY_BYTES)
        text = f"{Path(str(s['checkpoint'])).name} on {Path(str(s['data'])).name}, {int(s['windows']):,} windows"
        return text + (time.strftime(", %H:%M", time.localtime(scan_version(folder)[1])) if when else "")
    except (GptvizError, KeyError, TypeError, ValueError):
        return folder.name


def pick_b(a_folder: str) -> str:
    """Scan B's folder: one of the scans found (A left out), or typed ("" until one is chosen)."""
    found = {f: label for f, label in found_scans().items() if f != a_folder}
    if found:
        options = [TYPED, *found]
        pick = st.selectbox("Scan B", options, key="corpus_compare_pick", format_func=lambda o: found.get(o, o))
        if pick != TYPED:
            return pick
    return st.text_input("Scan B: the folder of a second scan, same corpus", key="corpus_compare_folder")


def compare_tab(a: Version, model: ModelKey) -> None:
    """Draw the tab for the opened scan at version a, the second scan picked or typed in the tab."""
    st.caption(
        "Scan A is the scan opened above; scan B, another scan that read the same documents (another checkpoint "
        "of the run, or another model). Every change is B minus A."
    )
    chosen = pick_b(a[0])
    if not chosen:
        st.info("Pick a second scan, or type its folder (`gptviz scan --out`), to compare it with this one.")
        return
    try:
        b = scan_version(scan_folder(chosen))  # a class server: its roots only, a picked scan as a typed one
        sa, sb = scan_at(*a), scan_at(*b)
        compare.check_same_corpus(sa, sb)
    except GptvizError as e:
        st.error(f"Scan B not compared: {widgets.plain(e)}")
        return
    m = st.columns([1, 1, 1, 3])
    loss = compare.summary_changes(sa, sb)
    m[0].metric("Mean loss, A (nats)", f"{loss['loss_a']:.3f}")
    m[1].metric("Mean loss, B (nats)", f"{loss['loss_b']:.3f}")
    m[2].metric("Change (B − A)", f"{loss['change']:+.3f}", delta=f"{loss['change']:+.3f}", delta_color="inverse")
    names = (widgets.plain(s.summary.get("checkpoint") or "a model") for s in (sa, sb))
    m[3].caption("A: {}  \nB: {}".format(*names))

    st.subheader("Loss per document")
    docs = documents(a, b)
    widgets.chart(sfig.document_loss_figure(docs), key="corpus_cmp_docs_fig")
    st.dataframe(docs, key="corpus_cmp_docs", hide_index=True, height=220)

    st.subheader("Head scores")
    scores = compare.comparable_scores(sa, sb)
    score = st.selectbox("Score", scores, index=scores.index("induction"), key="corpus_cmp_score",
                         format_func=lambda s: s.replace("_", " "))  # fmt: skip
    changes = heads(a, b, score)
    widgets.chart(sfig.head_change_figure(changes, score), key="corpus_cmp_heads_fig")
    st.caption("Every head, the largest change either way first.")
    st.dataframe(changes, key="corpus_cmp_heads", hide_index=True, height=220)
    neuron_changes(a, b, model)


def neuron_changes(a: Version, b: Version, model: ModelKey) -> None:
    st.subheader("Neurons whose top contexts changed")
    table = neurons(a, b)
    if isinstance(table, str):
        st.info(widgets.plain(table))
        return
    st.caption(
        "overlap: the share of a neuron's top-k windows found in both scans, lowest first; click a row to see "
        "its contexts in each."
    )
    event = st.dataframe(table, key="corpus_cmp_neurons", hide_index=True, height=240, on_select="rerun",
                         selection_mode="single-row")  # fmt: skip
    rows = list(getattr(getattr(event, "selection", None), "rows", None) or [0])
    row = table.iloc[min(rows[0], len(table) - 1)]
    layer, neuron = int(row["layer"]), int(row["neuron"])
    st.markdown(
        f"**Layer {layer}, neuron {neuron}**: {int(row['shared'])} of its top {int(row['k'])} windows shared; "
        f"the {SHOWN} strongest contexts in each scan."
    )
    tok = bundle_for(model).tokenizer
    for col, version, name in zip(st.columns(2), (a, b), ("A", "B")):
        scan = scan_at(*version)
        col.markdown(f"**Scan {name}**")
        for r in neuron_contexts(scan, layer, neuron).head(SHOWN).itertuples():
            ids, at = context(scan, int(r.window), int(r.position))
            col.html(cfig.ranked_context_html(r.rank, r.value, r.window, token_texts(tok, ids), at))
