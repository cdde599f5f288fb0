"""The Attention page's "why does this head attend here?" panel: two boxes pick the (query, key) cell
(the query starts at the sidebar's position; a Plotly heatmap sends Streamlit no selection on a click,
so the cell is typed, not clicked); attention_attribution splits that pre-softmax score into what each
upstream source writes into q and k (norms frozen), cached per run, head and cell."""

from __future__ import annotations

import dataclasses

import pandas as pd
import streamlit as st

from ...circuits import attention_attribution
from ...names import point
from ..caches import RUN_ENTRIES, RunKey, bundle_for, cached, run_trace

QUERY, KEY = "why_query", "why_key"


@cached(max_entries=4 * RUN_ENTRIES, show_spinner="Splitting the score by source…")
def parts(key: RunKey, layer: int, head: int, query: int, key_pos: int) -> pd.DataFrame:
    """attention_attribution of one cell of one run (read-only, shared: callers copy before changing it)."""
    # what the split reads, at every layer below this one (a page's own run may hold only the maps)
    reads = ("embed", *(point(s, j) for j in range(layer) for s in ("attn.z", "mlp.in", "mlp.out")))
    names = None if key.names is None else tuple(sorted({*key.names, *reads, point("resid_pre", layer)}))
    run = run_trace(dataclasses.replace(key, names=names))
    return attention_attribution(bundle_for(key.model).model, run, layer, head, query, key_pos)


def cell_inputs(T: int, position: int) -> tuple[int, int]:
    """The query and key boxes: (query, key)."""
    state = st.session_state
    if not 0 <= state.get(QUERY, -1) < T:  # a new prompt, shorter: start from the sidebar's position
        state[QUERY] = position
    if not 0 <= state.get(KEY, -1) < T:
        state[KEY] = min(position, state[QUERY])
    q1, q2 = st.columns(2)
    query = int(q1.number_input("Query position", 0, T - 1, key=QUERY))
    key = int(q2.number_input("Key position", 0, T - 1, key=KEY))
    return query, key
