"""Who is who in a class: a browser, a computer (its network address), and the server's own teacher.

A poll counts one answer per browser and at most VOTES_ENV answers per address (1 on a class
server: one computer, one vote). Why both: a browser is known by the cookie Streamlit itself sets in
it (`_streamlit_xsrf`, the same in every tab: two tabs are one voter), but a script can send a new
cookie with every session, so the address is the bound a script cannot step around from one
computer. A room whose students all reach the server through one address (a NAT, a proxy, a tunnel
that names no client) would then have one vote: its teacher sets GPTVIZ_CLASS_VOTES_PER_ADDRESS to
the room's size, and each browser there still votes once. One address never fills more than half a
poll, whatever the setting (lessons.poll.Tally.vote). A private server (loopback, one person) has no
per-address bound.

The server's teacher key (TEACHER_KEY_ENV; `gptviz dashboard --class` makes one and prints the
teacher's link) starts one class past every bound of the code registry, so students who take every
code cannot lock the teacher out (live.start).
"""

from __future__ import annotations

import hashlib
import os
import secrets

from ..sources.classmode import class_mode

VOTES_ENV = "GPTVIZ_CLASS_VOTES_PER_ADDRESS"  # answers one network address may give to a poll (class server)
TEACHER_KEY_ENV = "GPTVIZ_TEACHER_KEY"  # the server's own teacher key: ?teach=KEY starts its one class
BROWSER_COOKIE = "_streamlit_xsrf"  # set by Streamlit in each browser, sent by every tab of it
MIN_KEY_CHARS = 16


def browser_id() -> str:
    """An id of this session's browser (a hash of Streamlit's cookie; never shown), '' without one."""
    import streamlit as st

    try:
        cookie = st.context.cookies.get(BROWSER_COOKIE)
    except Exception:  # no session: a library caller
        return ""
    return hashlib.sha256(cookie.encode()).hexdigest()[:24] if isinstance(cookie, str) and cookie else ""


def votes_per_address() -> int | None:
    """How many voters one address may be in a poll: None on a private server, else $VOTES_ENV (1)."""
    if not class_mode():
        return None
    raw = os.environ.get(VOTES_ENV, "").strip()
    return max(1, int(raw)) if raw.isascii() and raw.isdigit() else 1


def reserved_key() -> str:
    """The server's own teacher key ($TEACHER_KEY_ENV, at least MIN_KEY_CHARS long), or ''."""
    key = os.environ.get(TEACHER_KEY_ENV, "").strip()
    return key if len(key) >= MIN_KEY_CHARS else ""


def is_reserved(key: str) -> bool:
    reserved = reserved_key()
    return bool(reserved and key) and secrets.compare_digest(key, reserved)


def new_teacher_key() -> str:
    """A key for $TEACHER_KEY_ENV (what `gptviz dashboard --class` makes when none is set)."""
    return secrets.token_urlsafe(18)
