"""The Attention page's "why does this head attend here?" panel: a click on the heatmap picks the
(query, key) cell; attention_attribution splits that pre-softmax score into what each upstream source
writes into q and k (norms frozen), cached per run, head and cell."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..circuits import attention_attribution
from .caches import RUN_ENTRIES, RunKey, bundle_for, cached, run_trace

QUERY, KEY = "why_query", "why_key"


def pick_cell_on_click(chart_key: str, labels: list[str]):
    """An on_select callback for the heatmap: the clicked cell's row (query) and column (key), read
    from its axis labels (one per position; a heatmap averaged into blocks names none)."""
    where = {label: i for i, label in enumerate(labels)}
    n_tokens = len(labels)

    def pick() -> None:
        points = st.session_state[chart_key].selection.get("points") or []
        if not points:
            return
        p = points[0]
        index = p.get("point_index")
        if isinstance(index, (list, tuple)) and len(index) == 2:
            q, k = int(index[0]), int(index[1])
        elif p.get("y") in where and p.get("x") in where:
            q, k = where[p["y"]], where[p["x"]]
        else:
            return
        if 0 <= k <= q < n_tokens:
            st.session_state[QUERY], st.session_state[KEY] = q, k

    return pick


@cached(max_entries=4 * RUN_ENTRIES, show_spinner="Splitting the score by source…")
def parts(key: RunKey, layer: int, head: int, query: int, key_pos: int) -> pd.DataFrame:
    """attention_attribution of one cell of one run (read-only, shared: callers copy before changing it)."""
    return attention_attribution(bundle_for(key.model).model, run_trace(key), layer, head, query, key_pos)


def cell_inputs(T: int, position: int) -> tuple[int, int]:
    """The query and key boxes (a click on the heatmap fills them): (query, key)."""
    state = st.session_state
    if not 0 <= state.get(QUERY, -1) < T:  # a new prompt, shorter: start from the sidebar's position
        state[QUERY] = position
    if not 0 <= state.get(KEY, -1) < T:
        state[KEY] = min(position, state[QUERY])
    q1, q2 = st.columns(2)
    query = int(q1.number_input("Query position", 0, T - 1, key=QUERY))
    key = int(q2.number_input("Key position", 0, T - 1, key=KEY))
    return query, key
