"""The Corpus page's heads tab: which heads do what across the corpus (HeadVis's questions).

Every head's scores over the windows (quartile boxes, ordered by the chosen score), every head by any
two metrics (a scatter), and one head: its windows sampled by decile of a score, the strongest
windows' attention patterns (rebuilt from the model for those windows only), how far back it looks and
the tokens it reads from and for.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..analysis.attention import layer_weights
from ..analysis.heads import SCORES
from ..figures import attention_heatmap
from ..figures import corpus as cfig
from ..scanning.heads import HEADVIS_METRICS, RANKINGS, NoHeadData, head_metrics, head_samples
from ..scanning.headvis import qk_histogram, sparse_maps, top_tokens
from ..scanning.queries import token_texts, window_ids
from . import widgets
from .caches import FORWARD, ModelKey, RunKey, bundle_for, cached, run_trace
from .corpus import head_scores_figure, scan_at

DECILES = 10
SHOWN_PATTERNS = 3  # the strongest windows whose whole maps are drawn


@cached(max_entries=4, show_spinner=False)
def metrics_table(folder: str, stamp: float) -> pd.DataFrame:
    """Every head: its mean SCORES over the windows and HeadVis's six metrics over the corpus."""
    scan = scan_at(folder, stamp)
    means = scan.heads.copy()
    try:
        return means.merge(head_metrics(scan), on=["layer", "head"])
    except NoHeadData:  # a scan written before head_attention was kept: the means alone
        return means


@cached(max_entries=16, show_spinner=False)
def samples(folder: str, stamp: float, layer: int, head: int, by: str) -> pd.DataFrame:
    return head_samples(scan_at(folder, stamp), layer, head, by, n_intervals=DECILES, per_interval=2, top=5)


@cached(max_entries=16, show_spinner=False)
def head_reads(folder: str, stamp: float, model: ModelKey, layer: int, head: int, by: str) -> dict:
    """The q-k distance histogram and top query / key tokens over a head's sampled windows."""
    scan, bundle = scan_at(folder, stamp), bundle_for(model)
    chosen = samples(folder, stamp, layer, head, by)["window"].tolist()
    ids = {w: window_ids(scan, w) for w in chosen}
    with FORWARD:  # one forward pass at a time in this process (caches.FORWARD says why)
        maps = sparse_maps(bundle.model, ids, {w: {(layer, head)} for w in chosen}, 8, 0.005)
    kept = [(*maps[(w, layer, head)], len(ids[w])) for w in chosen]
    strings = [token_texts(bundle.tokenizer, ids[w]) for w in chosen]
    return {
        "qk": qk_histogram(kept),
        "query": top_tokens(kept, strings, "query"),
        "key": top_tokens(kept, strings, "key"),
    }


def heads_tab(version: tuple[str, float], model: ModelKey) -> None:
    """Draw the tab for the scan at version, with the sidebar's model (its tokens, its maps)."""
    scan = scan_at(*version)
    table = metrics_table(*version)
    has_metrics = all(m in table for m in HEADVIS_METRICS)
    spaced = lambda s: s.replace("_", " ")  # noqa: E731
    score = st.columns([1, 2])[0].selectbox("Score", SCORES, key="corpus_score", format_func=spaced)
    if scan.head_windows.empty:
        st.info("This scan folder has no per-window head scores (head_windows.parquet): only the means.")
    else:
        widgets.chart(head_scores_figure(*version, score), key="corpus_heads_fig")
    ranked = table.sort_values(score, ascending=False).reset_index(drop=True)
    ranked.insert(0, "name", [cfig.head_label(l, h) for l, h in zip(ranked["layer"], ranked["head"])])
    st.caption(f"Every head, highest mean {score.replace('_', ' ')} first (click a column to sort by it).")
    st.dataframe(ranked, key="corpus_heads_table", hide_index=True, height=240)
    widgets.download("heads (CSV)", lambda: ranked, "heads.csv", key="corpus_dl_heads")
    axes = [c for c in (*HEADVIS_METRICS, *SCORES) if c in table]
    c1, c2, c3 = st.columns(3)
    x = c1.selectbox("Scatter: x", axes, index=axes.index("prev_token_score" if has_metrics else SCORES[0]),
                     key="corpus_scatter_x")  # fmt: skip
    y = c2.selectbox("Scatter: y", axes, index=axes.index("induction_score" if has_metrics else "induction"),
                     key="corpus_scatter_y")  # fmt: skip
    names = ranked["name"].tolist()
    pick = c3.selectbox("Head (highest mean score first)", names, key="corpus_head_pick")
    layer, head = (int(ranked.loc[ranked["name"] == pick, c].iloc[0]) for c in ("layer", "head"))
    widgets.chart(cfig.heads_scatter(table, x, y, (layer, head)), key="corpus_heads_scatter")
    head_view(version, model, layer, head, has_metrics)


def head_view(version: tuple[str, float], model: ModelKey, layer: int, head: int, has_metrics: bool) -> None:
    scan = scan_at(*version)
    st.subheader(f"{cfig.head_label(layer, head)} across the corpus")
    if scan.head_windows.empty:  # a scan written before per-window scores were kept: nothing to sample
        st.info("This scan has no per-window head scores (head_windows.parquet), so no windows to show per head.")
        return
    if not has_metrics:
        st.info("This scan predates per-window max attention: rank the windows by a score instead.")
    ranks = [r for r in RANKINGS if has_metrics or r != "max_attention"]
    by = st.selectbox("Rank its windows by", ranks, key="corpus_head_by", format_func=lambda s: s.replace("_", " "))
    picked = samples(*version, layer, head, by)
    tok = bundle_for(model).tokenizer
    picked = picked.assign(text=["".join(token_texts(tok, window_ids(scan, w)))[:80] for w in picked["window"]])
    st.caption(f"Its windows by decile of {by.replace('_', ' ')} (10 = highest: its 5 strongest; 2 from each other).")
    st.dataframe(picked, key="corpus_head_samples", hide_index=True, height=240)
    for w in picked["window"].head(SHOWN_PATTERNS):
        ids = window_ids(scan, int(w)).tolist()
        m = layer_weights(run_trace(RunKey(model, tuple(ids))), layer)[head]  # [T, T], masked cells NaN
        fig = attention_heatmap(
            m, token_texts(tok, ids), title=f"window {int(w)}: {cfig.head_label(layer, head)}", height=480
        )
        widgets.chart(fig, key=f"corpus_head_map_{int(w)}")
    reads = head_reads(*version, model, layer, head, by)
    widgets.chart(cfig.qk_distance_figure(reads["qk"]), key="corpus_head_qk")
    c1, c2 = st.columns(2)
    with c1:
        widgets.chart(cfig.top_tokens_figure(reads["query"], "query"), key="corpus_head_queries")
    with c2:
        widgets.chart(cfig.top_tokens_figure(reads["key"], "key"), key="corpus_head_keys")
