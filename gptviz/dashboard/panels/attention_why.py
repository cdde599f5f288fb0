"""The Attention page's "why does this head attend here?" panel: a click on a cell of the head's
heatmap picks the (query, key) cell (the heatmap's invisible cell markers carry it: figures.cell_picker),
and two boxes show it and take it typed (the query starts at the sidebar's position);
attention_attribution splits that pre-softmax score into what each upstream source writes into q and
k (norms frozen), cached per run, head and cell."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd
import streamlit as st

from ...circuits import attention_attribution
from ...names import point
from ..caches import RUN_ENTRIES, RunKey, bundle_for, cached, run_trace

QUERY, KEY, ON = "why_query", "why_key", "attn_why_on"


def clicked_cell(points: list, T: int) -> tuple[int, int] | None:
    """The (query, key) a click on the heatmap picked: the first point's customdata (query, key, value),
    which Streamlit hands over as a list or as {"0": query, "1": key, ...}; None for anything else (a
    point of another trace, a cell outside the run, a key after its query)."""
    data = points[0].get("customdata") if points and isinstance(points[0], dict) else None
    if isinstance(data, dict):
        data = [data.get("0"), data.get("1")]
    if not isinstance(data, (list, tuple)) or len(data) < 2:
        return None
    try:
        query, key = int(data[0]), int(data[1])
    except (TypeError, ValueError, OverflowError):
        return None
    return (query, key) if 0 <= key <= query < T else None


def open_clicked_cell(chart_key: str, T: int) -> Callable[[], None]:
    """An on_select callback for the heatmap: the clicked cell into the boxes, the split shown. Built
    here, not in the page, so the callback Streamlit keeps does not hold the page's Trace."""

    def open_clicked() -> None:
        cell = clicked_cell(st.session_state[chart_key].selection.get("points") or [], T)
        if cell is not None:
            st.session_state[QUERY], st.session_state[KEY] = cell
            st.session_state[ON] = True

    return open_clicked


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
