"""Page layout that holds on a projector (1280 × 720 or 1024 × 768 with the sidebar open):
columns that stack in presentation mode, tables that grow with the root font, and the sidebar
folded away when presentation mode is turned on."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from . import keys
from .state import view
from .widgets import plain

MAX_HTML_TABLE_ROWS = 60  # beyond this a static table is too long a page: keep the scrolling grid


def presenting() -> bool:
    """True when this session has presentation mode on."""
    v = view()
    return bool(v and v.presentation)


def room_at_top(rem: float) -> None:
    """Space above the page's first element, in rem (so it grows with presentation mode's root font):
    a slide-sized table at the top would otherwise sit under Streamlit's toolbar. Only a number reaches
    the style."""
    st.html(f"<style>[data-testid=stMainBlockContainer] {{ padding-top: {float(rem):g}rem; }}</style>")


def columns(spec: int | Sequence[float], **kwargs) -> list:
    """st.columns, except in presentation mode, where each column is a full-width container one
    below the other: side by side, a heatmap at 1280 px with the sidebar open is a few dozen
    pixels wide once the fonts are enlarged."""
    if presenting():
        n = spec if isinstance(spec, int) else len(spec)
        return [st.container() for _ in range(n)]
    return st.columns(spec, **kwargs)


def _as_text(df: pd.DataFrame) -> pd.DataFrame:
    """st.table renders each cell as Markdown: every string (a token, a path, a card's text) is
    escaped first, so it shows as typed and never as a link or an image."""

    def text(x):
        return plain(x) if isinstance(x, str) else x

    out = df.copy()
    for c in out.columns:
        if not pd.api.types.is_numeric_dtype(out[c]):  # object or pandas' str dtype
            out[c] = out[c].map(text)
    out.index = out.index.map(text)
    out.columns = out.columns.map(text)
    return out


def table(df: pd.DataFrame, *, hide_index: bool = True, height: int | None = None) -> None:
    """st.dataframe, except in presentation mode: an HTML table, whose text is sized in rem and
    so grows with the presentation root font (the data grid draws on a canvas in fixed pixels).
    hide_index: the first column stands in for the index of the HTML table."""
    if presenting() and len(df) <= MAX_HTML_TABLE_ROWS:
        st.table(_as_text(df.set_index(df.columns[0]) if hide_index and len(df.columns) > 1 else df))
        return
    st.dataframe(df, hide_index=hide_index, width="stretch", height=height or "auto")


def sidebar_for(presentation: bool) -> None:
    """Fold the sidebar away when presentation mode goes on, open it again when it goes off.
    Streamlit applies a new initial_sidebar_state when it changes during a session, unless the
    person has opened or closed the sidebar by hand in this browser (that choice wins)."""
    if st.session_state.get(keys.SIDEBAR_FOR_PRESENTATION) == presentation:
        return
    st.session_state[keys.SIDEBAR_FOR_PRESENTATION] = presentation
    st.set_page_config(initial_sidebar_state="collapsed" if presentation else "auto")
