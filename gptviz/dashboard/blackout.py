"""A black screen as a class state: the teacher's `b` (or `.`, a clicker's "blank" key) blacks out the
projector and every follower's page with it; the same key, Escape, or Next brings the slide back (Next
only un-blanks: the class does not move on behind a black screen).

The keys press a hidden button (slide_style.CLICKER_JS), so the state lives on the server: per class
code here (every follower reads it), per session for a teacher without a class. Bounded: a code's
entry goes when its class ends, and at most MAX_CODES are kept."""

from __future__ import annotations

import threading
from collections import OrderedDict

import streamlit as st

MAX_CODES = 256  # classes with a black screen remembered at once (a server teaches at most 64)
DARK = "_slide_dark"  # session key: a teacher without a class has blacked out their own screen
BUTTON = "slide_blackout"  # the hidden button the keys press

# Over everything on the page, as the clicker's black screen always was; the keys still reach the page.
BLANK_HTML = (
    '<div id="gptviz-blank" style="position:fixed;inset:0;background:#000;z-index:2147483647;cursor:none"></div>'
)

_lock = threading.Lock()
_dark: OrderedDict[str, None] = OrderedDict()


def is_dark(code: str | None) -> bool:
    """Whether a class's screens are black now (a teacher without a class: their own session's)."""
    if not code:
        return bool(st.session_state.get(DARK))
    with _lock:
        return code in _dark


def set_dark(code: str | None, on: bool) -> None:
    if not code:
        st.session_state[DARK] = on
        return
    with _lock:
        if on:
            _dark[code] = None
            _dark.move_to_end(code)
            while len(_dark) > MAX_CODES:
                _dark.popitem(last=False)
        else:
            _dark.pop(code, None)


def forget(code: str) -> None:
    """The class ended: its black screen goes with it."""
    with _lock:
        _dark.pop(code, None)


def blank() -> None:
    """Draw the black screen over the page."""
    st.html(BLANK_HTML)
