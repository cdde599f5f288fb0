"""Follow the teacher: the lessons being taught right now, in this server process.

A teacher's session publishes (lesson, slide) under a short code; a student's page opened with
?follow=CODE reads it. When the teacher moves, the server asks every follower's session to rerun
(slides.nudge); each follower also polls from a tiny fragment every few seconds, a safety net for a
nudge that did not arrive. Polling alone (every follower rerunning a fragment twice a second) was
measured to swamp two cores with 30 followers. The registry is process-wide (one Streamlit server
serves the whole class), bounded in size (a new lesson waits for a place; none is pushed out), and
forgets a lesson nobody has moved for a few hours.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from ..lessons import Lesson

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud or off a projector
CODE_LENGTH = 4
MAX_LIVE = 64  # lessons taught at once on one server
IDLE_S = 6 * 3600  # a lesson unchanged this long is forgotten


@dataclass(frozen=True)
class Live:
    code: str
    lesson: Lesson
    slide: int  # 0-based
    version: int  # grows with every change: what a follower compares
    updated: float


MAX_FOLLOWERS = 500  # sessions nudged per code
_lock = threading.Lock()
_live: dict[str, Live] = {}
_followers: dict[str, dict[str, None]] = {}  # code -> follower session ids, in the order they came
_counter = 0


def new_code() -> str:
    """A fresh code not in use."""
    with _lock:
        while True:
            code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
            if code not in _live:
                return code


def normal(code: str) -> str:
    """A code as typed (any case, spaces) in its canonical form; '' if it cannot be one."""
    c = "".join(code.split()).upper()[: CODE_LENGTH + 1]
    return c if len(c) == CODE_LENGTH and all(ch in ALPHABET for ch in c) else ""


def publish(code: str, lesson: Lesson, slide: int) -> Live | None:
    """Make (lesson, slide) what code's followers see; a no-op when it already is. None when MAX_LIVE
    other lessons are live: a new code waits for a place rather than push out a class being taught
    (a neighbour opening 64 lessons could otherwise end any teacher's)."""
    global _counter
    now = time.monotonic()
    with _lock:
        for c in [c for c, v in _live.items() if now - v.updated > IDLE_S]:
            del _live[c]
            _followers.pop(c, None)
        old = _live.get(code)
        if old is not None and old.lesson == lesson and old.slide == slide:
            if now - old.updated > 60:  # keep a lesson in use from looking idle
                _live[code] = Live(code, lesson, slide, old.version, now)
            return _live[code]
        if old is None and len(_live) >= MAX_LIVE:
            return None
        _counter += 1
        _live[code] = Live(code, lesson, slide, _counter, now)
        return _live[code]


def lookup(code: str) -> Live | None:
    """What the followers of code see now, or None if no lesson is live under it."""
    with _lock:
        return _live.get(code)


def end(code: str) -> None:
    with _lock:
        _live.pop(code, None)
        _followers.pop(code, None)


def follow(code: str, session_id: str) -> None:
    """Remember a follower's session, to nudge it when the teacher moves. Only for a live lesson: a
    follower of a code nobody teaches (yet) polls, and is remembered on its first run after the
    lesson starts, so made-up codes cannot fill the registry."""
    with _lock:
        if code not in _live:
            return
        ids = _followers.setdefault(code, {})
        ids[session_id] = None
        while len(ids) > MAX_FOLLOWERS:
            del ids[next(iter(ids))]


def followers(code: str) -> list[str]:
    with _lock:
        return list(_followers.get(code, ()))


def unfollow(code: str, session_id: str) -> None:
    with _lock:
        _followers.get(code, {}).pop(session_id, None)
