"""Output helpers every page uses: a chart with the presentation setting, a download button for
the numbers behind it, the 'nothing to show' message, and the guard that keeps tracebacks out of
the browser."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable

import numpy as np
import pandas as pd
import streamlit as st

from .. import figures
from .state import View, view

log = logging.getLogger("gptviz.dashboard")

CHART_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def require_trace() -> View | None:
    """The current View if it has a Trace; otherwise say why there is nothing to show."""
    v = view()
    if v is None or v.trace is None:
        st.info("Nothing to show yet: fix the message above, or choose a checkpoint and a prompt in the sidebar.")
        return None
    return v


def chart(fig, key: str, **kwargs):
    """Draw a figure with the presentation setting applied; PNG download from the Plotly toolbar."""
    v = view()
    fig = figures.presentation(fig, bool(v and v.presentation))
    return st.plotly_chart(fig, key=key, width="stretch", config=CHART_CONFIG, **kwargs)


def download(label: str, data: Callable[[], pd.DataFrame | dict[str, np.ndarray]], file_name: str, key: str) -> None:
    """A download button for the numbers behind a figure: a DataFrame as CSV, arrays as .npz.
    data is called only when the button is pressed."""

    def payload() -> bytes:
        d = data()
        if isinstance(d, pd.DataFrame):
            return d.to_csv(index=False).encode()
        buf = io.BytesIO()
        np.savez_compressed(buf, **{k: np.asarray(a) for k, a in d.items()})
        return buf.getvalue()

    mime = "text/csv" if file_name.endswith(".csv") else "application/octet-stream"
    st.download_button(f"⬇ {label}", payload, file_name=file_name, mime=mime, key=key, on_click="ignore")


def guard(page: Callable[[], None]) -> None:
    """Run a page; an unexpected error is logged on the server and shown as a message, never as a
    traceback in the browser."""
    try:
        page()
    except Exception as e:  # the last line of defence: expected failures are handled before this
        log.exception("page failed")
        st.error(f"Internal error while drawing this page ({type(e).__name__}: {e}). The server log has the details.")
