"""Output helpers every page uses: a chart with the presentation setting, a download button for
the numbers behind it, the 'nothing to show' message, the load banner, the one escape for user
text in Markdown, and the guard that keeps tracebacks out of the browser."""

from __future__ import annotations

import functools
import io
import logging
import re
import string
from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np
import pandas as pd
import streamlit as st

from .. import analysis, figures
from ..figures.style import no_autolink
from ..formats import LoadReport
from .state import Ready, ready, view

log = logging.getLogger("gptviz.dashboard")

CHART_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}
_MARKUP = re.compile("([" + re.escape(string.punctuation) + "])")
EXAMPLES = 3  # keys named in a banner; the rest are counted


def plain(text: object) -> str:
    """User text (a path, prompt, token, file name, or a message quoting one) made safe for every
    Streamlit call that renders Markdown (st.error, st.info, st.warning, st.caption, st.markdown,
    st.subheader): each ASCII punctuation mark is backslash-escaped, so links, images, headings,
    colour directives and HTML reach the page as the characters typed, and a word joiner keeps
    addresses and e-mail addresses from being linked (figures.style.no_autolink)."""
    return _MARKUP.sub(r"\\\1", no_autolink(str(text)))


def require_trace() -> Ready | None:
    """The current View if it holds a run (a Trace, its bundle and keys); otherwise say why there is
    nothing to show."""
    v = view()
    if v is not None and v.cancelled:
        return None  # the cancelled step's place says so, with its button to go on
    run = ready(v)
    if run is None:
        st.info("Nothing to show yet: fix the message above, or choose a checkpoint and a prompt in the sidebar.")
    return run


def chart(fig, key: str, **kwargs):
    """Draw a figure with the presentation setting applied; PNG download from the Plotly toolbar."""
    v = view()
    fig = figures.presentation(fig, bool(v and v.presentation))
    return st.plotly_chart(fig, key=key, width="stretch", config=CHART_CONFIG, **kwargs)


def nan_logits(logits, where: str) -> bool:
    """Say so in one line, in the page, when the logits at a position are NaN (analysis.nan_logits),
    and return True: the caller then shows no ranking, probability or rank computed from them.
    where: "after 12 e" (user text is escaped here)."""
    if not analysis.nan_logits(logits):
        return False
    st.error(plain(analysis.nan_message(where)))
    return True


def figure_chart(fig, key: str, **kwargs):
    """Draw a figure already styled for this session's presentation setting (from the caches)."""
    return st.plotly_chart(fig, key=key, width="stretch", config=CHART_CONFIG, **kwargs)


Offered: TypeAlias = pd.DataFrame | dict[str, np.ndarray]


def _encoded(d: Offered) -> bytes:
    """A DataFrame as CSV, arrays as a compressed .npz."""
    if isinstance(d, pd.DataFrame):
        return d.to_csv(index=False).encode()
    buf = io.BytesIO()
    np.savez_compressed(buf, **d)
    return buf.getvalue()


def _button(label: str, payload: Callable[[], bytes], file_name: str, key: str) -> None:
    mime = "text/csv" if file_name.endswith(".csv") else "application/octet-stream"
    st.download_button(f"⬇ {label}", payload, file_name=file_name, mime=mime, key=key, on_click="ignore")


def download(label: str, data: Callable[[], Offered], file_name: str, key: str) -> None:
    """A download button for the numbers behind a figure: a DataFrame as CSV, arrays as .npz.

    data is called now and what it returns is copied; the file is encoded only when the button is
    pressed. Streamlit keeps the button's callable for as long as the session lives, and a lambda
    written in a page holds that page's globals (the Trace, the View): keeping it would keep a
    whole Trace alive per session, past the cache limits. A copy holds only what is offered.
    Numbers that cost a pass over the run to make (a long prompt's [T, T] map): download_later."""
    d = data()
    d = d.copy() if isinstance(d, pd.DataFrame) else {k: np.array(a) for k, a in d.items()}
    _button(label, lambda: _encoded(d), file_name, key)


def download_later(label: str, build: functools.partial, file_name: str, key: str) -> None:
    """A download button whose numbers are made only when it is pressed (Streamlit calls `build` then,
    on another thread), not on every run of the page: for what costs a pass over the run, such as a
    [T, T] map of a long prompt. build: a functools.partial of a gptviz function over keys and plain
    values (it finds the run in the caches by its key when pressed), never a function written in a page,
    whose globals (the Trace) Streamlit would keep alive for the session's life."""
    if not (isinstance(build, functools.partial) and getattr(build.func, "__module__", "").startswith("gptviz.")):
        raise TypeError(f"download_later({key!r}): build must be a functools.partial of a gptviz function")
    _button(label, lambda: _encoded(build()), file_name, key)


def select_head_on_click(chart_key: str) -> Callable[[], None]:
    """An on_select callback for the layer × head grid: open the clicked tile's layer and head.
    Built here, not in the page, so the callback Streamlit keeps does not hold the page's Trace."""

    def open_clicked() -> None:
        points = st.session_state[chart_key].selection.get("points") or []
        data = points[0].get("customdata") if points else None
        if isinstance(data, dict):  # Streamlit hands a marker's [layer, head] over as {"0": l, "1": h}
            data = [data.get(k) for k in ("0", "1")]
        if data is not None and len(data) >= 2 and None not in data[:2]:  # the tile's marker names it
            st.session_state["layer"], st.session_state["head"] = int(data[0]), int(data[1])
        elif points and "x" in points[0] and "y" in points[0]:
            layer, head = figures.overview_cell(points[0]["x"], points[0]["y"])
            st.session_state["layer"], st.session_state["head"] = layer, head

    return open_clicked


def _some(keys: Sequence[str], what: str) -> str:
    shown = ", ".join(keys[:EXAMPLES])
    more = f", … ({len(keys) - EXAMPLES:,} more)" if len(keys) > EXAMPLES else ""
    return f"{len(keys):,} {what}: {shown}{more}"


def load_banner(report: LoadReport) -> list[str]:
    """Warn at the top of the page when a checkpoint loaded with something wrong: NaN or Inf
    weights, keys missing or left unused (a truncated or mismatched model). Returns the lines."""
    lines = [str(w)[:300] for w in report.warnings]
    if report.missing:
        lines.append(_some(report.missing, "weights missing from the file (left at their initial values)"))
    if report.unexpected:
        lines.append(
            _some(report.unexpected, "weights in the file that the model does not use (is the model truncated?)")
        )
    if lines:
        body = "  \n".join(f"• {plain(x)}" for x in lines)
        st.warning(
            f"**This checkpoint loaded with problems; what you see may not be what it was trained to do.**  \n{body}"
        )
    return lines


def guard(page: Callable[[], None]) -> None:
    """Run a page; an unexpected error is logged on the server and shown as a message, never as a
    traceback in the browser."""
    try:
        page()
    except Exception as e:  # the last line of defence: expected failures are handled before this
        log.exception("page failed")
        st.error(
            f"Internal error while drawing this page ({type(e).__name__}: {plain(str(e)[:300])}). "
            "The server log has the details."
        )
